#version 450
// attention_prefill_coopmat: attention_prefill.comp (same inputs, outputs, push constants, grid and
// masking; its header says what is computed) with its two products on the device's matrix units
// through GL_KHR_cooperative_matrix: the scores S = Q K^T of a tile and the weighted values P V.
//
// Per KV tile of BK keys:
//   1. the K tile is converted to f16 into kh (key-major rows, padded by 8 halves);
//   2. each subgroup takes CM x CN blocks of S = Q (M x D, f16, pre-scaled) x K^T (D x BK): the
//      accumulators are stored to p_sh (f32);
//   3. the scores are shaped (soft cap, ALiBi, position bias) and, while that happens, the V tile
//      replaces K in kh (with V inside K, MLA, the K tile already holds it);
//   4. each row's online-softmax step (attention_prefill_rows.glsl) writes its weights as f16 into
//      ph and rescales its row of the output accumulator o_sh (f32, in shared memory: a matrix
//      unit's accumulator cannot be scaled row by row);
//   5. each subgroup takes CM x CN blocks of O: O += P (M x BK) x V (BK x DV), loaded from and stored
//      back to o_sh.
// At the end O / l per row is written. Q, the K and V values and the weights are rounded to f16
// (relative error 2^-11 each); the sums are f32.
// Specialization constants: 0 WG (a multiple of SG), 1 D, 2 GW, 3 BT, 4 BK, 5 DV (0: D), 6 CM,
// 7 CN, 8 CK (the device's f16 shape), 9 SG (the subgroup size the pipeline requires). The host
// takes M = BT * GW a multiple of CM, BK a multiple of CN and CK, D of CK and 8, DV of CN and 8.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#define KV_TABLE_BINDING 8
#include "kv_read.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 128;
layout(constant_id = 1) const uint D = 128;
layout(constant_id = 2) const uint GW = 1;
layout(constant_id = 3) const uint BT = 16;
layout(constant_id = 4) const uint BK = 32;
layout(constant_id = 5) const uint DV_SPEC = 0;
layout(constant_id = 6) const uint CM = 16;
layout(constant_id = 7) const uint CN = 16;
layout(constant_id = 8) const uint CK = 16;
layout(constant_id = 9) const uint SG = 32;

const uint D4 = D / 4;
const uint DV = DV_SPEC == 0u ? D : DV_SPEC;
const uint DV4 = DV / 4;
const uint M = BT * GW;
const uint NSG = WG / SG;
const uint QS = D + 8u;                         // row pitch (halves) of qh
const uint KHS = (D > DV ? D : DV) + 8u;        // row pitch (halves) of the K / V tile
const uint PS = BK + 8u;                        // row pitch (halves) of ph
const uint OS = DV + 4u;                        // row pitch (floats) of o_sh

#include "attention_prefill_rows.glsl"

shared float16_t qh[M * QS];
shared float16_t kh[BK * KHS];
shared float16_t ph[M * PS];
shared float o_sh[M * OS];

void main() {
    const uint tid = gl_LocalInvocationID.x, sg = gl_SubgroupID;
    const uint tok0 = gl_WorkGroupID.x * BT, kvh = gl_WorkGroupID.y;
    const uint h0 = kvh * pc.group + gl_WorkGroupID.z * GW;

    init_rows(tid, tok0, h0);
    for (uint i = tid; i < M * D4; i += WG) {
        const uint r = i / D4, j = i % D4, t = tok0 + r / GW;
        const vec4 v = t < pc.n_tokens ? q[pc.q_first + (t * pc.n_heads + h0 + r % GW) * D4 + j] * pc.scale : vec4(0.0);
        for (uint e = 0; e < 4u; ++e) qh[r * QS + 4u * j + e] = float16_t(v[e]);
    }
    for (uint i = tid; i < M * DV; i += WG) o_sh[(i / DV) * OS + i % DV] = 0.0;
    barrier();
    uint kv_begin = 0xffffffffu, kv_end = 0;
    for (uint r = 0; r < M; ++r) {
        kv_begin = min(kv_begin, lo_sh[r]);
        kv_end = max(kv_end, lim_sh[r]);
    }
    const uint row_stride4 = pc.n_kv_heads * D4;
    const bool v_in_k = pc.v_in_k != 0u;
    const uint v_col = kvh * pc.v_head4 + pc.v_off4;
    const uint v_at = v_in_k ? 4u * pc.v_off4 : 0u;  // where V starts in a tile row (halves)

    for (uint t0 = kv_begin; t0 < kv_end; t0 += BK) {
        const uint n = min(BK, kv_end - t0);
        const uint r0 = t0 % pc.n_ctx;
        // 1. K tile; keys past the range are zeros, never read from memory.
        for (uint i = tid; i < BK * D4; i += WG) {
            const uint c = i / D4, j = i % D4;
            uint row = r0 + c;
            if (row >= pc.n_ctx) row %= pc.n_ctx;
            const vec4 v = c < n ? load_k4(paged_row(row, pc.table_first, pc.block_shift) * row_stride4 + kvh * D4 + j) : vec4(0.0);
            for (uint e = 0; e < 4u; ++e) kh[c * KHS + 4u * j + e] = float16_t(v[e]);
        }
        barrier();
        // 2. S = Q K^T, block by block.
        for (uint b = sg; b < (M / CM) * (BK / CN); b += NSG) {
            const uint bm = b / (BK / CN), bn = b % (BK / CN);
            coopmat<float, gl_ScopeSubgroup, CM, CN, gl_MatrixUseAccumulator> s =
                coopmat<float, gl_ScopeSubgroup, CM, CN, gl_MatrixUseAccumulator>(0.0);
            for (uint k = 0; k < D; k += CK) {
                coopmat<float16_t, gl_ScopeSubgroup, CM, CK, gl_MatrixUseA> a;
                coopmat<float16_t, gl_ScopeSubgroup, CK, CN, gl_MatrixUseB> kt;
                coopMatLoad(a, qh, bm * CM * QS + k, QS, gl_CooperativeMatrixLayoutRowMajor);
                coopMatLoad(kt, kh, bn * CN * KHS + k, KHS, gl_CooperativeMatrixLayoutColumnMajor);
                s = coopMatMulAdd(a, kt, s);
            }
            coopMatStore(s, p_sh, bm * CM * BK + bn * CN, BK, gl_CooperativeMatrixLayoutRowMajor);
        }
        barrier();
        // 3. Shaped scores; the V tile replaces K (unless V is part of K).
        for (uint i = tid; i < M * BK; i += WG) p_sh[i] = shaped_score(i / BK, t0 + i % BK, p_sh[i]);
        if (!v_in_k) {
            for (uint i = tid; i < BK * DV4; i += WG) {
                const uint c = i / DV4, j = i % DV4;
                uint row = r0 + c;
                if (row >= pc.n_ctx) row %= pc.n_ctx;
                const vec4 v = c < n ? load_v4(paged_row(row, pc.table_first, pc.block_shift) * pc.v_row4 + v_col + j) : vec4(0.0);
                for (uint e = 0; e < 4u; ++e) kh[c * KHS + 4u * j + e] = float16_t(v[e]);
            }
        }
        barrier();
        // 4. Online softmax per row: weights to ph, the row's output rescaled.
        for (uint r = tid; r < M; r += WG) {
            online_softmax_row(r, t0, n);
            for (uint c = 0; c < BK; ++c) ph[r * PS + c] = float16_t(p_sh[r * BK + c]);
            const float a = alpha_sh[r];
            for (uint j = 0; j < DV; ++j) o_sh[r * OS + j] *= a;
        }
        barrier();
        // 5. O += P V, block by block.
        for (uint b = sg; b < (M / CM) * (DV / CN); b += NSG) {
            const uint bm = b / (DV / CN), bn = b % (DV / CN);
            coopmat<float, gl_ScopeSubgroup, CM, CN, gl_MatrixUseAccumulator> o;
            coopMatLoad(o, o_sh, bm * CM * OS + bn * CN, OS, gl_CooperativeMatrixLayoutRowMajor);
            for (uint k = 0; k < BK; k += CK) {
                coopmat<float16_t, gl_ScopeSubgroup, CM, CK, gl_MatrixUseA> p;
                coopmat<float16_t, gl_ScopeSubgroup, CK, CN, gl_MatrixUseB> v;
                coopMatLoad(p, ph, bm * CM * PS + k, PS, gl_CooperativeMatrixLayoutRowMajor);
                coopMatLoad(v, kh, k * KHS + v_at + bn * CN, KHS, gl_CooperativeMatrixLayoutRowMajor);
                o = coopMatMulAdd(p, v, o);
            }
            coopMatStore(o, o_sh, bm * CM * OS + bn * CN, OS, gl_CooperativeMatrixLayoutRowMajor);
        }
        barrier();
    }

    for (uint i = tid; i < M * DV4; i += WG) {
        const uint r = i / DV4, j = i % DV4, t = tok0 + r / GW;
        if (t >= pc.n_tokens) continue;
        const float l = l_sh[r];
        const vec4 o = vec4(o_sh[r * OS + 4u * j], o_sh[r * OS + 4u * j + 1u], o_sh[r * OS + 4u * j + 2u],
                            o_sh[r * OS + 4u * j + 3u]);
        out_[pc.out_first + (t * pc.n_heads + h0 + r % GW) * DV4 + j] = l > 0.0 ? o / l : vec4(0.0);
    }
}
