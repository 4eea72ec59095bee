#include "runtime/ops/rope.h"

#include "runtime/ops/elementwise.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace vkllm::ops {

void rope(Context& ctx, CommandStream& s, const BufferSlice& x, const BufferSlice& positions, uint32_t n_tokens,
          uint32_t n_heads, uint32_t head_dim, uint32_t rot_dim, float base, RopeLayout layout) {
    if (n_tokens == 0) return;
    if (n_heads == 0 || rot_dim == 0 || rot_dim % 2 != 0 || rot_dim > head_dim)
        throw std::invalid_argument(fmt::format("rope: n_heads {}, head_dim {}, rot_dim {}: rot_dim must be even, "
                                                "> 0 and <= head_dim", n_heads, head_dim, rot_dim));
    if (!(base > 0.0f)) throw std::invalid_argument(fmt::format("rope: base {} must be positive", base));
    const DeviceCaps& caps = ctx.caps();
    const uint64_t token_elems = uint64_t(n_heads) * head_dim;
    detail::require_bytes(x, n_tokens * token_elems * 4, "rope", "x");
    detail::require_bytes(positions, uint64_t(n_tokens) * 4, "rope", "positions");
    const Pipeline& p = ctx.pipeline(detail::small_op_desc(caps, detail::SmallOp::Rope));
    const uint32_t wg = p.local_size()[0];
    const uint32_t rot_half = rot_dim / 2;
    // log2 of the frequency ratio between neighbouring pairs, in double: the shader's only fp32
    // rounding of the exponent is then the product with the pair index.
    const float log2_step = float(-2.0 * std::log2(double(base)) / rot_dim);
    const uint64_t per = std::min(detail::items_per_window(caps, token_elems * 4, "rope"),
                                  detail::items_per_window(caps, 4, "rope"));
    for (uint64_t t0 = 0; t0 < n_tokens; t0 += per) {
        const uint32_t nt = uint32_t(std::min<uint64_t>(per, n_tokens - t0));
        const detail::Window xw = detail::window(caps, x, t0 * token_elems, nt * token_elems, 4);
        const detail::Window pw = detail::window(caps, positions, t0, nt, 4);
        const uint64_t pairs = uint64_t(nt) * n_heads * rot_half;
        struct {
            uint32_t n_pairs, n_heads, head_dim, rot_half, layout_id, x_first, pos_first;
            float log2_step;
        } pc{uint32_t(pairs), n_heads, head_dim, rot_half, layout == RopeLayout::Adjacent ? 0u : 1u,
             xw.first, pw.first, log2_step};
        s.dispatch(p, {xw.slice, pw.slice}, pc, detail::grid(caps, (pairs + wg - 1) / wg, "rope"), "rope");
    }
}

}  // namespace vkllm::ops
