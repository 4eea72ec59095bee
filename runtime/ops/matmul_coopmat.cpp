#include "runtime/ops/matmul_coopmat.h"

#include <algorithm>

namespace vkllm::ops {

uint64_t matmul_coopmat_shared_bytes(uint32_t bm, uint32_t bn, uint32_t bk, uint32_t subgroups, uint32_t cm,
                                     uint32_t cn, bool experts) {
    return 2ull * 2 * (uint64_t(bm) + bn) * (bk + 8) + 4ull * subgroups * cm * cn + (experts ? 4ull * bm : 0);
}

std::optional<MatmulPlan> plan_matmul_coopmat(const DeviceCaps& caps, TensorType wtype, uint32_t m, bool w_aligned,
                                              bool experts) {
    const CoopMatShape* shape = coopmat_f16_shape(caps);
    if (!shape) return std::nullopt;
    const uint32_t sg = caps.subgroup_size;
    if (sg < caps.min_subgroup_size || sg > caps.max_subgroup_size) return std::nullopt;
    MatmulPlan p;
    p.kernel = MatmulPlan::Kernel::Coopmat;
    p.wtype = wtype;
    p.w_aligned = w_aligned;
    p.cm = shape->m, p.cn = shape->n, p.ck = shape->k;
    p.sg = sg;
    // A k slice: whole multiply steps (ck) and whole groups of 8 (the weight decoder's unit); 32
    // columns halve the barriers of 16 and keep two slices of a 128 x 128 tile in 40 KiB.
    p.bk = std::max<uint32_t>(32, p.ck);
    if (p.bk % 8 != 0 || p.bk % p.ck != 0) return std::nullopt;
    // Tiles from large to small, 2 x 2 subgroups each: 128 x 128 (a 64 x 64 block per subgroup, 16
    // accumulators of 16 x 16: the reuse of each loaded slice that keeps matrix units fed), then 64 x
    // 64 for short prompts (<= 64 rows: less of the tile spent on rows that do not exist) and for
    // devices whose shared memory does not hold two slices of the large tile. Split-K for grids
    // smaller than the device is not done yet.
    for (uint32_t tile : {128u, 64u, 32u}) {
        if (tile == 128 && m <= 64) continue;
        p.bm = p.bn = tile;
        p.sgm = p.sgn = 2;
        const uint32_t wm = p.bm / p.sgm, wn = p.bn / p.sgn;
        if (wm % p.cm != 0 || wn % p.cn != 0) continue;
        const uint64_t wg = uint64_t(p.sgm) * p.sgn * sg;
        if (wg > caps.max_workgroup_invocations || wg > caps.max_workgroup_size[0]) continue;
        if (matmul_coopmat_shared_bytes(p.bm, p.bn, p.bk, p.sgm * p.sgn, p.cm, p.cn, experts) > caps.max_shared_memory)
            continue;
        return p;
    }
    return std::nullopt;
}

}  // namespace vkllm::ops
