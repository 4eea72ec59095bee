#version 450
// matmul_coopmat: the prefill-time linear layer on the device's matrix units (tensor cores),
// Y = X · W^T (+ B) (+ R), through GL_KHR_cooperative_matrix. Same bindings, push constants and
// dispatch grid as matmul.comp (the recorder is shared), so it replaces that kernel where the device
// reports a subgroup-scope f16 x f16 -> f32 shape.
//
// Inputs:  W   rows of k elements of the weight type (weights.glsl), from byte pc.w_base, pc.row_bytes apart
//          X   f32 [m][k] row-major from float pc.x_base
//          R   f32, same layout as Y (read only when pc.has_res != 0; may alias Y)
//          B   f32 [n] bias from float pc.b_base (read only when pc.has_bias != 0)
// Output:  Y   f32 [m][y_stride] from float pc.y_base; this dispatch writes columns 0 .. pc.n.
// Math:    Y[i][j] = sum_c f16(X[i][c]) * f16(W[j][c]), f32 accumulation (+ B[j]) (+ R[i][j]).
//          X and the dequantized weights are rounded to f16 (relative error 2^-11 each) because the
//          matrix units multiply f16; an activation beyond f16's range (65504) becomes infinite.
//
// Tiling. A workgroup computes a BM x BN tile of Y with SGM x SGN subgroups, each a (BM/SGM) x
// (BN/SGN) block of CM x CN accumulators (the device's reported shape: 8x8x8 on lavapipe, 16x16x16
// or 16x8x16 on GPUs; specialization constants, never vendor names). k runs in slices of BK: X's
// slice (BM x BK) and W's (BN x BK, dequantized 8 elements at a time) are stored in shared memory as
// f16, row-major with a pad of 8 halves against bank conflicts; A = X's slice (row-major), B = W's
// slice read column-major (B[c][j] = W[j][c]).
// Two-stage pipeline: shared memory holds two slices; while the subgroups multiply slice s, every
// invocation has already issued the global loads of slice s + 1 into registers, and stores them
// into the other half after its multiplies, so one barrier per slice separates the stages (the
// classic form loads, waits, multiplies and waits again, with the loads exposed).
// Epilogue: each accumulator goes through a per-subgroup CM x CN staging area in shared memory, from
// which the subgroup's lanes add bias and residual and write the in-range elements of Y.
// Out-of-range rows, columns and the k tail (F32/F16 with k % 8 != 0) are loaded as zeros.
// EXPERT_GROUPS (matmul_coopmat_id_*): as matmul.comp's (slots grouped per expert by moe_group;
// workgroup x = expert, y = slot tile, z = row tile).
// Specialization constants: 0 WG = SGM*SGN*SG, 1 BM, 2 BN, 3 BK (multiple of CK and of 8),
// 4 SGM, 5 SGN, 6 CM, 7 CN, 8 CK, 9 SG (the subgroup size the pipeline requires), 10 W_ALIGNED.
// Shared memory: 2 * (BM + BN) * (BK + 8) halves + SGM*SGN*CM*CN floats (+ BM uints for experts).
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 128;
layout(constant_id = 1) const uint BM = 64;
layout(constant_id = 2) const uint BN = 64;
layout(constant_id = 3) const uint BK = 32;
layout(constant_id = 4) const uint SGM = 2;
layout(constant_id = 5) const uint SGN = 2;
layout(constant_id = 6) const uint CM = 16;
layout(constant_id = 7) const uint CN = 16;
layout(constant_id = 8) const uint CK = 16;
layout(constant_id = 9) const uint SG = 32;
const uint WM = BM / SGM, WN = BN / SGN;  // one subgroup's block of Y
const uint FM = WM / CM, FN = WN / CN;    // its accumulators
const uint KS = BK + 8u;                  // row pitch (halves) of both shared slices
const uint X_SLICE = BM * KS, W_SLICE = BN * KS;
// Loads per invocation and slice: X as vec4s, W as groups of 8 (weights.glsl's w_dequant8).
const uint XL = (BM * BK / 4u + WG - 1u) / WG;
const uint WL = (BN * BK / 8u + WG - 1u) / WG;

#define W_BINDING 0
#define W_ALIGNED_ID 10
#include "weights.glsl"

// X as vec4s (the host rounds its window to 16 bytes); a lone float is picked out of its vec4.
layout(std430, binding = 1) readonly buffer X { vec4 x4[]; };
layout(std430, binding = 2) readonly buffer R { float res[]; };
layout(std430, binding = 3) writeonly buffer Y { float y[]; };
layout(std430, binding = 4) readonly buffer B { float bias[]; };

layout(push_constant) uniform Push {
    uint m;
    uint n;
    uint k;
    uint row_bytes;
    uint w_base;
    uint x_base;
    uint y_base;
    uint r_base;
    uint y_stride;
    uint has_res;
    uint b_base;
    uint has_bias;
    uint x_vec4;  // 1: X rows start on 16 bytes and k % 4 == 0, so X is read as vec4s
#ifdef EXPERT_GROUPS
    uint g_base;
    uint n_expert;
    uint e_first;
    uint expert_bytes;
    uint x_div;
#endif
} pc;

#ifdef EXPERT_GROUPS
layout(std430, binding = 5) readonly buffer G { uint grp[]; };
shared uint slot_sh[BM];
#endif

shared float16_t xs[2u * X_SLICE];  // xs[stage][i][c] = X[m0 + i][k0 + c]
shared float16_t ws[2u * W_SLICE];  // ws[stage][j][c] = W[n0 + j][k0 + c]
shared float stage_out[SGM * SGN * CM * CN];

// Registers between the global loads of a slice and its stores into shared memory.
vec4 xr[XL];
vec4 wr[2u * WL];

uint m0, n0, m_rows, w_row0;

#ifdef EXPERT_GROUPS
#define X_ROW(gm) (slot_sh[(gm) - m0] / pc.x_div)
#define Y_ROW(gm) slot_sh[(gm) - m0]
#else
#define X_ROW(gm) (gm)
#define Y_ROW(gm) (gm)
#endif

void load_slice(uint k0) {
    const uint tid = gl_LocalInvocationID.x;
    for (uint l = 0; l < XL; ++l) {
        const uint e = tid + l * WG;
        const uint i = e / (BK / 4u), c = (e % (BK / 4u)) * 4u;
        const uint gm = m0 + i, gk = k0 + c;
        vec4 v = vec4(0.0);
        if (e < BM * BK / 4u && gm < m_rows && gk < pc.k) {
            const uint at = pc.x_base + X_ROW(gm) * pc.k + gk;
            if (pc.x_vec4 != 0u) {
                v = x4[at / 4u];
            } else {
                for (uint q = 0; q < 4u; ++q) v[q] = gk + q < pc.k ? x4[(at + q) >> 2][(at + q) & 3u] : 0.0;
            }
        }
        xr[l] = v;
    }
    for (uint l = 0; l < WL; ++l) {
        const uint e = tid + l * WG;
        const uint j = e / (BK / 8u), c = (e % (BK / 8u)) * 8u;
        const uint gn = n0 + j, gk = k0 + c;
        vec4 v0 = vec4(0.0), v1 = vec4(0.0);
        if (e < BN * BK / 8u && gn < pc.n && gk < pc.k) {
            const uint row_byte = w_row0 + gn * pc.row_bytes;
            if (gk + 8u <= pc.k) {
                w_dequant8(row_byte, gk, v0, v1);
            } else {  // F32/F16 tail only: block types have k % 32 == 0
                float t[8];
                for (uint q = 0; q < 8u; ++q) t[q] = gk + q < pc.k ? w_get(row_byte, gk + q) : 0.0;
                v0 = vec4(t[0], t[1], t[2], t[3]);
                v1 = vec4(t[4], t[5], t[6], t[7]);
            }
        }
        wr[2u * l] = v0;
        wr[2u * l + 1u] = v1;
    }
}

void store_slice(uint stage) {
    const uint tid = gl_LocalInvocationID.x;
    for (uint l = 0; l < XL; ++l) {
        const uint e = tid + l * WG;
        if (e >= BM * BK / 4u) break;
        const uint i = e / (BK / 4u), c = (e % (BK / 4u)) * 4u;
        const uint at = stage * X_SLICE + i * KS + c;
        for (uint q = 0; q < 4u; ++q) xs[at + q] = float16_t(xr[l][q]);
    }
    for (uint l = 0; l < WL; ++l) {
        const uint e = tid + l * WG;
        if (e >= BN * BK / 8u) break;
        const uint j = e / (BK / 8u), c = (e % (BK / 8u)) * 8u;
        const uint at = stage * W_SLICE + j * KS + c;
        for (uint q = 0; q < 4u; ++q) {
            ws[at + q] = float16_t(wr[2u * l][q]);
            ws[at + 4u + q] = float16_t(wr[2u * l + 1u][q]);
        }
    }
}

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
    const uint sg_m = sg / SGN, sg_n = sg % SGN;
#ifdef EXPERT_GROUPS
    const uint n_tile = gl_WorkGroupID.z, e_off = gl_WorkGroupID.x;
#else
    const uint n_tile = gl_WorkGroupID.x;
#endif
    m0 = gl_WorkGroupID.y * BM;
    n0 = n_tile * BN;
#ifdef EXPERT_GROUPS
    const uint e = pc.e_first + e_off;
    const uint first = grp[pc.g_base + e];
    m_rows = grp[pc.g_base + e + 1u] - first;
    if (m0 >= m_rows) return;  // uniform: the expert has fewer slots
    w_row0 = pc.w_base + e_off * pc.expert_bytes;
    const uint b_row = e * pc.n;
    for (uint i = tid; i < BM; i += WG) slot_sh[i] = m0 + i < m_rows ? grp[pc.g_base + pc.n_expert + 1u + first + m0 + i] : 0u;
    barrier();
#else
    m_rows = pc.m;
    w_row0 = pc.w_base;
    const uint b_row = 0u;
#endif

    coopmat<float, gl_ScopeSubgroup, CM, CN, gl_MatrixUseAccumulator> acc[FM * FN];
    for (uint f = 0; f < FM * FN; ++f) acc[f] = coopmat<float, gl_ScopeSubgroup, CM, CN, gl_MatrixUseAccumulator>(0.0);

    const uint slices = (pc.k + BK - 1u) / BK;
    load_slice(0u);
    store_slice(0u);
    barrier();
    for (uint s = 0; s < slices; ++s) {
        const uint cur = s & 1u;
        const bool more = s + 1u < slices;
        if (more) load_slice((s + 1u) * BK);  // in flight while this slice multiplies
        for (uint kk = 0; kk < BK; kk += CK) {
            coopmat<float16_t, gl_ScopeSubgroup, CM, CK, gl_MatrixUseA> a[FM];
            for (uint fm = 0; fm < FM; ++fm)
                coopMatLoad(a[fm], xs, cur * X_SLICE + (sg_m * WM + fm * CM) * KS + kk, KS,
                            gl_CooperativeMatrixLayoutRowMajor);
            for (uint fn = 0; fn < FN; ++fn) {
                coopmat<float16_t, gl_ScopeSubgroup, CK, CN, gl_MatrixUseB> b;
                coopMatLoad(b, ws, cur * W_SLICE + (sg_n * WN + fn * CN) * KS + kk, KS,
                            gl_CooperativeMatrixLayoutColumnMajor);
                for (uint fm = 0; fm < FM; ++fm) acc[fm * FN + fn] = coopMatMulAdd(a[fm], b, acc[fm * FN + fn]);
            }
        }
        if (more) store_slice(cur ^ 1u);
        barrier();
    }

    const uint so = sg * CM * CN;
    for (uint fm = 0; fm < FM; ++fm)
        for (uint fn = 0; fn < FN; ++fn) {
            coopMatStore(acc[fm * FN + fn], stage_out, so, CN, gl_CooperativeMatrixLayoutRowMajor);
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            const uint r0 = m0 + sg_m * WM + fm * CM, c0 = n0 + sg_n * WN + fn * CN;
            for (uint q = lane; q < CM * CN; q += SG) {
                const uint gm = r0 + q / CN, gn = c0 + q % CN;
                if (gm >= m_rows || gn >= pc.n) continue;
                float v = stage_out[so + q];
                if (pc.has_bias != 0u) v += bias[pc.b_base + b_row + gn];
                if (pc.has_res != 0u) v += res[pc.r_base + gm * pc.y_stride + gn];
                y[pc.y_base + Y_ROW(gm) * pc.y_stride + gn] = v;
            }
            subgroupMemoryBarrierShared();
            subgroupBarrier();
        }
}
