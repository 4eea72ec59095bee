// Half-precision bits to f32, for every shader that reads f16 data (weights, block scales, the KV
// cache). unpackHalf2x16 is a single instruction on GPUs, but Mesa 22.3's llvmpipe on aarch64
// (Debian 12's arm64 lavapipe, which has no native half conversion there) aborts the whole process
// in LLVM's instruction selection ("Cannot select ... fp_extend") on any shader that uses it. With
// the specialization constant SOFT_HALF (set by the runtime where DeviceCaps::soft_half) the
// conversion is integer and f32 arithmetic instead; it is a constant, so drivers drop the unused
// branch and every other device keeps the single instruction.
#ifndef VKLLM_HALF_GLSL
#define VKLLM_HALF_GLSL

// Must equal vkllm::kSoftHalfSpecId (runtime/pipeline.h); far above the ids the kernels use.
layout(constant_id = 100) const bool SOFT_HALF = false;

// Exact for every half: normals rebias the exponent, subnormals are m * 2^-24 (a normal f32, so
// flush-to-zero cannot touch it), Inf stays Inf, and a NaN keeps its payload and comes out quiet
// (bit 22 set), as IEEE conversion, F16C and GPUs give it.
float half_bits_to_float(uint h) {
    uint e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    uint mag = e == 0u    ? floatBitsToUint(float(m) * uintBitsToFloat(0x33800000u))  // 2^-24
               : e == 31u ? 0x7f800000u | (m << 13) | (m != 0u ? 0x00400000u : 0u)
                          : ((e + 112u) << 23) | (m << 13);
    return uintBitsToFloat(mag | ((h & 0x8000u) << 16));
}

// unpackHalf2x16: .x from the low 16 bits, .y from the high 16 bits.
vec2 unpack_half2(uint w) {
    if (SOFT_HALF) return vec2(half_bits_to_float(w & 0xffffu), half_bits_to_float(w >> 16));
    return unpackHalf2x16(w);
}

#endif
