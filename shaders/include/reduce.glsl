// Workgroup-wide reductions over a 1-D workgroup of WG invocations (WG: a specialization
// constant declared by the including shader, a power of two).
//
// Compiled two ways, chosen per device at runtime:
//   USE_SUBGROUP defined: subgroup arithmetic, then one shared slot per subgroup. Works for any
//                         subgroup size (gl_SubgroupSize / gl_NumSubgroups are read, never assumed).
//   otherwise:            a shared-memory tree; for devices without subgroup arithmetic.
// Every invocation of the workgroup must call these (they contain barriers) and gets the result.

#ifdef USE_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif

shared float reduce_sh_[WG];

#ifdef USE_SUBGROUP
float wg_sum(float v) {
    v = subgroupAdd(v);
    if (subgroupElect()) reduce_sh_[gl_SubgroupID] = v;
    barrier();
    float r = 0.0;
    for (uint i = 0; i < gl_NumSubgroups; ++i) r += reduce_sh_[i];
    barrier();
    return r;
}
float wg_max(float v) {
    v = subgroupMax(v);
    if (subgroupElect()) reduce_sh_[gl_SubgroupID] = v;
    barrier();
    float r = reduce_sh_[0];
    for (uint i = 1; i < gl_NumSubgroups; ++i) r = max(r, reduce_sh_[i]);
    barrier();
    return r;
}
#else
float wg_sum(float v) {
    uint lid = gl_LocalInvocationIndex;
    reduce_sh_[lid] = v;
    barrier();
    for (uint s = WG / 2; s > 0; s >>= 1) {
        if (lid < s) reduce_sh_[lid] += reduce_sh_[lid + s];
        barrier();
    }
    float r = reduce_sh_[0];
    barrier();
    return r;
}
float wg_max(float v) {
    uint lid = gl_LocalInvocationIndex;
    reduce_sh_[lid] = v;
    barrier();
    for (uint s = WG / 2; s > 0; s >>= 1) {
        if (lid < s) reduce_sh_[lid] = max(reduce_sh_[lid], reduce_sh_[lid + s]);
        barrier();
    }
    float r = reduce_sh_[0];
    barrier();
    return r;
}
#endif
