#version 450
// moe_group: a mixture of experts' slots sorted by expert, once per layer of a prefill chunk, so that
// the expert projections run as matmul tiles per expert (matmul.comp / matmul_broadcast.comp
// EXPERT_GROUPS) instead of a matvec per slot.
//
// Inputs:  ids[slots]  u32 expert of each slot (moe_route's, from pc.ids_base), each < n_expert
// Output:  G  u32, from pc.g_base: offsets[n_expert + 1] (offsets[e] = slots of experts below e),
//          then order[slots]: the slots of expert 0 in increasing slot order, then expert 1's, ...
// Math:    a counting sort; stable, so the result never depends on how the work is spread.
// One workgroup: invocation e (and e + WG, ...) counts expert e's slots, invocation 0 sums the
// counts, then each expert's slots are written in slot order by the invocation that owns it. Every
// invocation reads the whole id list, the same address at the same time (one load for all lanes on
// CPU drivers, a broadcast from cache on GPUs): n_expert * slots comparisons per layer.
// Workgroup size: specialization constant 0.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;

#define MAX_EXPERTS 1024

layout(std430, binding = 0) readonly buffer Ids { uint ids[]; };
layout(std430, binding = 1) writeonly buffer G { uint grp[]; };
layout(push_constant) uniform Push {
    uint slots;
    uint n_expert;  // <= MAX_EXPERTS
    uint ids_base;
    uint g_base;
} pc;

shared uint off_sh[MAX_EXPERTS + 1];

void main() {
    const uint tid = gl_LocalInvocationID.x;
    for (uint e = tid; e < pc.n_expert; e += WG) {
        uint c = 0;
        for (uint s = 0; s < pc.slots; ++s) c += ids[pc.ids_base + s] == e ? 1u : 0u;
        off_sh[e + 1u] = c;
    }
    barrier();
    if (tid == 0u) {
        off_sh[0] = 0u;
        for (uint e = 1; e <= pc.n_expert; ++e) off_sh[e] += off_sh[e - 1u];
    }
    barrier();
    for (uint e = tid; e <= pc.n_expert; e += WG) grp[pc.g_base + e] = off_sh[e];
    const uint order = pc.g_base + pc.n_expert + 1u;
    for (uint e = tid; e < pc.n_expert; e += WG) {
        uint at = off_sh[e];
        for (uint s = 0; s < pc.slots; ++s)
            if (ids[pc.ids_base + s] == e) grp[order + at++] = s;
    }
}
