#include "runtime/ops/rope.h"

#include "runtime/ops/elementwise.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>

namespace vkllm::ops {

namespace {

void check_params(const RopeParams& p) {
    if (p.n_heads == 0 || p.rot_dim == 0 || p.rot_dim % 2 != 0 || p.rot_dim > p.head_dim)
        throw std::invalid_argument(
            fmt::format("rope: n_heads {}, head_dim {}, rot_dim {}: rot_dim must be even, "
                        "> 0 and <= head_dim",
                        p.n_heads, p.head_dim, p.rot_dim));
    if (!(p.base > 0.0f) || !std::isfinite(p.base))
        throw std::invalid_argument(fmt::format("rope: base {} must be positive", p.base));
    if (!(p.freq_scale > 0.0f) || !std::isfinite(p.freq_scale))
        throw std::invalid_argument(fmt::format("rope: freq_scale {} must be positive", p.freq_scale));
    if (!std::isfinite(p.ext_factor) || !std::isfinite(p.attn_factor))
        throw std::invalid_argument(
            fmt::format("rope: ext_factor {} and attn_factor {} must be finite", p.ext_factor, p.attn_factor));
    // The YaRN ramp divides by ln(base) and takes ln(n_ctx_orig / beta): without these it is
    // infinite or NaN rather than merely unusual.
    if (p.ext_factor != 0.0f && (p.n_ctx_orig == 0 || !(p.base > 1.0f) || !(p.beta_fast > 0.0f) ||
                                 !(p.beta_slow > 0.0f) || !std::isfinite(p.beta_fast) || !std::isfinite(p.beta_slow)))
        throw std::invalid_argument(fmt::format(
            "rope: YaRN (ext_factor {}) needs n_ctx_orig > 0 (got {}), base > 1 (got {}) and positive finite "
            "beta_fast, beta_slow (got {}, {})",
            p.ext_factor, p.n_ctx_orig, p.base, p.beta_fast, p.beta_slow));
    const RopeSections& sec = p.sections;
    if (sec.multi() && uint64_t(sec.n[0]) + sec.n[1] + sec.n[2] + sec.n[3] > p.rot_dim / 2)
        throw std::invalid_argument(fmt::format("rope: sections {} + {} + {} + {} exceed the {} rotated pairs",
                                                sec.n[0], sec.n[1], sec.n[2], sec.n[3], p.rot_dim / 2));
    if (sec.vision && (!sec.multi() || p.ext_factor != 0.0f || p.freq_scale != 1.0f))
        throw std::invalid_argument("rope: the vision mode needs sections and takes no YaRN or frequency scaling");
}

// log2 of the frequency ratio between neighbouring pairs, in double: the shader's only fp32 rounding
// of the exponent is then the product with the pair index. The vision mode's sections each span
// half the pairs' frequency range, so its step is twice as steep.
float rope_log2_step(const RopeParams& p) {
    return float(-2.0 * std::log2(double(p.base)) / (p.sections.vision ? p.rot_dim / 2 : p.rot_dim));
}

}  // namespace

RopeCorrDims rope_corr_dims(const RopeParams& p) {
    auto corr_dim = [&](double n_rot) {
        return p.rot_dim * std::log(double(p.n_ctx_orig) / (n_rot * 2.0 * std::numbers::pi)) /
               (2.0 * std::log(double(p.base)));
    };
    return {float(std::max(0.0, std::floor(corr_dim(p.beta_fast)))),
            float(std::min(double(p.rot_dim - 1), std::ceil(corr_dim(p.beta_slow))))};
}

namespace {
detail::RopeShaderParams shader_params(const RopeParams& rp) {
    check_params(rp);
    const float log2_step = rope_log2_step(rp);
    const bool yarn = rp.ext_factor != 0.0f;
    const RopeCorrDims corr = yarn ? rope_corr_dims(rp) : RopeCorrDims{};
    const float mscale =
        yarn ? float(double(rp.attn_factor) * (1.0 + 0.1 * std::log(1.0 / double(rp.freq_scale)))) : rp.attn_factor;
    return {rp.rot_dim / 2, rp.layout == RopeLayout::Adjacent ? 0u : 1u,
            log2_step,      rp.freq_scale,
            rp.ext_factor,  mscale,
            corr.low,       corr.high};
}
}  // namespace

namespace detail {
RopeShaderParams rope_shader_params(const RopeParams& rp) {
    if (rp.sections.multi())
        throw std::invalid_argument("rope: the fused kernels take one position per token, not sections");
    return shader_params(rp);
}
}  // namespace detail

void rope(Context& ctx, CommandStream& s, const BufferSlice& x, const BufferSlice& positions, uint32_t n_tokens,
          const RopeParams& rp, const BufferSlice* freq_factors) {
    const detail::RopeShaderParams sp = shader_params(rp);
    const RopeSections& sec = rp.sections;
    if (sec.vision && freq_factors) throw std::invalid_argument("rope: the vision mode takes no frequency factors");
    if (n_tokens == 0) return;
    const uint32_t pos_per_token = sec.multi() ? 4 : 1;
    const DeviceCaps& caps = ctx.caps();
    const uint64_t token_elems = uint64_t(rp.n_heads) * rp.head_dim;
    const uint32_t rot_half = rp.rot_dim / 2;
    detail::require_bytes(x, n_tokens * token_elems * 4, "rope", "x");
    detail::require_bytes(positions, uint64_t(n_tokens) * pos_per_token * 4, "rope", "positions");
    if (freq_factors) detail::require_bytes(*freq_factors, uint64_t(rot_half) * 4, "rope", "freq_factors");
    const Pipeline& p = ctx.pipeline(detail::small_op_desc(caps, detail::SmallOp::Rope));
    const uint32_t wg = p.local_size()[0];
    // Without factors the shader never reads binding 2, but a binding must be there: positions stands in.
    const detail::Window fw =
        freq_factors ? detail::window(caps, *freq_factors, 0, rot_half, 4) : detail::window(caps, positions, 0, 1, 4);
    const uint64_t per =
        std::min(detail::items_per_window(caps, token_elems * 4, "rope"), detail::items_per_window(caps, 16, "rope"));
    for (uint64_t t0 = 0; t0 < n_tokens; t0 += per) {
        const uint32_t nt = uint32_t(std::min<uint64_t>(per, n_tokens - t0));
        const detail::Window xw = detail::window(caps, x, t0 * token_elems, nt * token_elems, 4);
        const detail::Window pw = detail::window(caps, positions, t0 * pos_per_token, uint64_t(nt) * pos_per_token, 4);
        const uint64_t pairs = uint64_t(nt) * rp.n_heads * rot_half;
        struct {
            uint32_t n_pairs, n_heads, head_dim, rot_half, layout_id, x_first, pos_first;
            float log2_step;
            uint32_t ff_first, has_ff;
            float freq_scale, ext_factor, mscale, corr_low, corr_high;
            uint32_t sect_dims, sect_end0, sect_end1, sect_end2, vision;
        } pc{uint32_t(pairs),
             rp.n_heads,
             rp.head_dim,
             rot_half,
             sp.layout_id,
             xw.first,
             pw.first,
             sp.log2_step,
             fw.first,
             freq_factors ? 1u : 0u,
             sp.freq_scale,
             sp.ext_factor,
             sp.mscale,
             sp.corr_low,
             sp.corr_high,
             sec.n[0] + sec.n[1] + sec.n[2] + sec.n[3],
             sec.n[0],
             sec.n[0] + sec.n[1],
             sec.n[0] + sec.n[1] + sec.n[2],
             sec.vision ? 1u : 0u};
        s.dispatch(p, {xw.slice, pw.slice, fw.slice}, pc, detail::grid(caps, (pairs + wg - 1) / wg, "rope"), "rope");
    }
}

void rope(Context& ctx, CommandStream& s, const BufferSlice& x, const BufferSlice& positions, uint32_t n_tokens,
          uint32_t n_heads, uint32_t head_dim, uint32_t rot_dim, float base, RopeLayout layout) {
    rope(ctx, s, x, positions, n_tokens, RopeParams{n_heads, head_dim, rot_dim, base, layout});
}

}  // namespace vkllm::ops
