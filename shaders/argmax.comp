#version 450
// argmax: greedy sampling, the index of the largest logit of each row.
//
// Input:   x[rows][n] f32, read as raw bits (bound from word x_first)
// Output:  out[rows] uint32 (from out_first)
// Math:    out[r] = the lowest i with x[r, i] = max_j x[r, j], NaN ignored (never wins); 0 when the
//          whole row is NaN. Values are compared as order-preserving uint keys built from their bits
//          (sign-magnitude -> biased; -0 folded onto +0; NaN -> key 0, below every number), so the
//          result does not depend on how a driver compares NaN or denormals.
// One workgroup reduces one row: each invocation scans elements lid, lid + WG, ... keeping its first
// best (ascending indices, so ties keep the lowest), then the workgroup reduces (key, index) pairs:
// USE_SUBGROUP: subgroupMax of the key, subgroupMin of the indices holding it, then one shared slot per
// subgroup; otherwise a shared-memory tree. Rows are flattened from a 2-D grid.
// Workgroup size: specialization constant 0, a power of two.

#ifdef USE_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256;

layout(std430, binding = 0) readonly buffer X { uint x[]; };
layout(std430, binding = 1) writeonly buffer O { uint outv[]; };
layout(push_constant) uniform Push {
    uint rows;
    uint n;
    uint x_first;
    uint out_first;
} pc;

const uint NONE = 0xffffffffu;
shared uint sh_key[WG];
shared uint sh_idx[WG];

uint order_key(uint bits) {
    if ((bits & 0x7fffffffu) > 0x7f800000u) return 0u;  // NaN
    if (bits == 0x80000000u) bits = 0u;                  // -0 ties with +0
    return (bits & 0x80000000u) != 0u ? ~bits : (bits | 0x80000000u);
}

// (k2, i2) beats (k1, i1): larger key, or the same key at a lower index.
bool better(uint k2, uint i2, uint k1, uint i1) { return k2 > k1 || (k2 == k1 && i2 < i1); }

void main() {
    uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (row >= pc.rows) return;  // uniform over the workgroup
    uint lid = gl_LocalInvocationIndex;
    uint xb = pc.x_first + row * pc.n;

    uint best_key = 0u, best_idx = NONE;
    for (uint i = lid; i < pc.n; i += WG) {
        uint k = order_key(x[xb + i]);
        if (k > best_key) {
            best_key = k;
            best_idx = i;
        }
    }

#ifdef USE_SUBGROUP
    uint m = subgroupMax(best_key);
    uint mi = subgroupMin(best_key == m ? best_idx : NONE);
    if (subgroupElect()) {
        sh_key[gl_SubgroupID] = m;
        sh_idx[gl_SubgroupID] = mi;
    }
    barrier();
    if (lid == 0u) {
        uint k = sh_key[0], idx = sh_idx[0];
        for (uint s = 1u; s < gl_NumSubgroups; ++s)
            if (better(sh_key[s], sh_idx[s], k, idx)) {
                k = sh_key[s];
                idx = sh_idx[s];
            }
        outv[pc.out_first + row] = idx == NONE ? 0u : idx;
    }
#else
    sh_key[lid] = best_key;
    sh_idx[lid] = best_idx;
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1) {
        if (lid < s && better(sh_key[lid + s], sh_idx[lid + s], sh_key[lid], sh_idx[lid])) {
            sh_key[lid] = sh_key[lid + s];
            sh_idx[lid] = sh_idx[lid + s];
        }
        barrier();
    }
    if (lid == 0u) outv[pc.out_first + row] = sh_idx[0] == NONE ? 0u : sh_idx[0];
#endif
}
