#include "runtime/ops/rope.h"

#include <cmath>

namespace vkllm::ref {

void rope(float* x, const int32_t* positions, uint32_t n_tokens, uint32_t n_heads, uint32_t head_dim, uint32_t rot_dim,
          float base, ops::RopeLayout layout) {
    const uint32_t half = rot_dim / 2;
    for (uint32_t t = 0; t < n_tokens; ++t)
        for (uint32_t h = 0; h < n_heads; ++h) {
            float* head = x + (size_t(t) * n_heads + h) * head_dim;
            for (uint32_t i = 0; i < half; ++i) {
                const double theta = double(positions[t]) * std::pow(double(base), -2.0 * i / rot_dim);
                const double c = std::cos(theta), s = std::sin(theta);
                float& a = layout == ops::RopeLayout::Adjacent ? head[2 * i] : head[i];
                float& b = layout == ops::RopeLayout::Adjacent ? head[2 * i + 1] : head[i + half];
                const double x0 = a, x1 = b;
                a = float(x0 * c - x1 * s);
                b = float(x0 * s + x1 * c);
            }
        }
}

}  // namespace vkllm::ref
