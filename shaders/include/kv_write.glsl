// Converting f32 values to what a KV cache stores, shared by kv_store.comp and the STORE variants of
// attention_decode.comp so that both write (and read back) the same bits.
//   f32_to_f16: round-to-nearest-even f32 -> f16 with integer operations, bit-identical to
//       vkllm::f32_to_f16 (packHalf2x16 leaves the rounding mode to the driver, and some round toward
//       zero); overflow to inf, NaN stays a quiet NaN, f16 subnormals rounded correctly. Needs no
//       16-bit storage or arithmetic feature.
//   Q8_0 blocks of 32 (layout in runtime/ops/op_types.h): q8_finite maps NaN to 0 and +-inf to
//       +-FLT_MAX (finite_block of the weight quantizer does the same); q8_scale gives d = max|x| / 127
//       and its inverse, both 0 when d would be below FLT_MIN (1 / d would overflow, and drivers may
//       flush it to 0 anyway; such values are below 1.5e-36); q8_round rounds x / d half away from
//       zero (lround, as ggml's reference quantizer).

uint f32_to_f16(uint x) {
    uint sign = (x >> 16) & 0x8000u;
    uint ex = (x >> 23) & 0xffu;
    uint mant = x & 0x7fffffu;
    if (ex == 0xffu) return sign | 0x7c00u | (mant != 0u ? 0x200u : 0u);
    int e = int(ex) - 127 + 15;
    if (e >= 31) return sign | 0x7c00u;
    if (e <= 0) {
        if (e < -10) return sign;
        mant |= 0x800000u;
        uint shift = uint(14 - e);
        uint h = mant >> shift;
        uint rem = mant & ((1u << shift) - 1u), mid = 1u << (shift - 1u);
        if (rem > mid || (rem == mid && (h & 1u) != 0u)) ++h;
        return sign | h;
    }
    uint h = sign | (uint(e) << 10) | (mant >> 13);
    uint rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) != 0u)) ++h;  // a carry into the exponent is right
    return h;
}

float q8_finite(float v) { return isnan(v) ? 0.0 : clamp(v, -3.4028235e38, 3.4028235e38); }

// (d, 1 / d) for a block whose largest magnitude is amax. NVIDIA's compiler rewrites
// 1 / (amax / 127) as 127 * (1 / amax), whose 1 / amax is subnormal, and flushed to 0, above
// 2^126: there 1 / d comes from d scaled down by 2^-64, and back (the same value, exactly).
vec2 q8_scale(float amax) {
    const float d_raw = amax / 127.0;
    const bool zero = !(d_raw >= 1.17549435e-38);
    const float s = amax >= 8.5070592e37 ? 5.421011e-20 : 1.0;  // 2^126, 2^-64
    return zero ? vec2(0.0) : vec2(d_raw, (1.0 / (d_raw * s)) * s);
}

int q8_round(float v) {
    const float t = trunc(v);  // v - t is exact below 2^23, and |v| <= 127 here
    return int(abs(v - t) >= 0.5 ? t + sign(v) : t);
}
