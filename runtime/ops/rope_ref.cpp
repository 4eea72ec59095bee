#include "runtime/ops/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace vkllm::ref {

namespace {

struct Angle {
    int32_t pos;
    double exponent;  // of base: the pair's rate
};

// Pair i of token t: its position and rate, from the definitions in rope.h (RopeSections).
Angle angle_of(const ops::RopeParams& p, const int32_t* positions, uint32_t t, uint32_t i) {
    const ops::RopeSections& sec = p.sections;
    if (!sec.multi()) return {positions[t], -2.0 * i / p.rot_dim};
    const uint32_t dims = sec.n[0] + sec.n[1] + sec.n[2] + sec.n[3], j = i % dims;
    uint32_t c = 0, start = 0;
    while (c < 3 && j >= start + sec.n[c]) start += sec.n[c++];
    const int32_t pos = positions[4 * size_t(t) + c];
    if (sec.vision) return {pos, -4.0 * (j - start) / p.rot_dim};
    return {pos, -2.0 * i / p.rot_dim};
}

}  // namespace

void rope(float* x, const int32_t* positions, uint32_t n_tokens, const ops::RopeParams& p, const float* freq_factors) {
    const uint32_t half = p.rot_dim / 2;
    const bool yarn = p.ext_factor != 0.0f;
    // YaRN's ramp bounds, straight from the definition in rope.h.
    auto corr_dim = [&](double n_rot) {
        return p.rot_dim * std::log(p.n_ctx_orig / (n_rot * 2.0 * std::numbers::pi)) / (2.0 * std::log(double(p.base)));
    };
    const double low = yarn ? std::max(0.0, std::floor(corr_dim(p.beta_fast))) : 0.0;
    const double high = yarn ? std::min(double(p.rot_dim) - 1.0, std::ceil(corr_dim(p.beta_slow))) : 0.0;
    const double mscale = yarn ? p.attn_factor * (1.0 + 0.1 * std::log(1.0 / double(p.freq_scale))) : p.attn_factor;
    for (uint32_t t = 0; t < n_tokens; ++t)
        for (uint32_t h = 0; h < p.n_heads; ++h) {
            float* head = x + (size_t(t) * p.n_heads + h) * p.head_dim;
            for (uint32_t i = 0; i < half; ++i) {
                const double ff = freq_factors ? double(freq_factors[i]) : 1.0;
                const Angle at = angle_of(p, positions, t, i);
                const double extrap = double(at.pos) * std::pow(double(p.base), at.exponent) / ff;
                const double interp = double(p.freq_scale) * extrap;
                double theta = interp;
                if (yarn) {
                    const double ramp = 1.0 - std::clamp((i - low) / std::max(0.001, high - low), 0.0, 1.0);
                    const double mix = ramp * p.ext_factor;
                    theta = interp * (1.0 - mix) + extrap * mix;
                }
                const double c = std::cos(theta) * mscale, s = std::sin(theta) * mscale;
                float& a = p.layout == ops::RopeLayout::Adjacent ? head[2 * i] : head[i];
                float& b = p.layout == ops::RopeLayout::Adjacent ? head[2 * i + 1] : head[i + half];
                const double x0 = a, x1 = b;
                a = float(x0 * c - x1 * s);
                b = float(x0 * s + x1 * c);
            }
        }
}

void rope(float* x, const int32_t* positions, uint32_t n_tokens, uint32_t n_heads, uint32_t head_dim, uint32_t rot_dim,
          float base, ops::RopeLayout layout) {
    rope(x, positions, n_tokens, ops::RopeParams{n_heads, head_dim, rot_dim, base, layout});
}

}  // namespace vkllm::ref
