#include "model/forward/position_bias.h"

#include "model/arch/tensor_schema.h"
#include "runtime/quant/tensor_types.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace vkllm {

uint32_t t5_relative_bucket(int32_t d, uint32_t n_buckets, bool bidirectional) {
    int64_t buckets = n_buckets;  // of one direction
    if (bidirectional) buckets /= 2;
    const int64_t max_exact = buckets / 2;
    int64_t bucket = 0, r = d;
    if (bidirectional) {
        if (r > 0) bucket += buckets;
        r = std::abs(r);
    } else {
        r = -std::min<int64_t>(r, 0);
    }
    if (r < max_exact) return uint32_t(bucket + r);
    // llama.cpp: floorf(max_exact + logf(r / max_exact) * (buckets - max_exact) / log(max_distance / max_exact))
    const float log_ratio = std::log(float(double(r) / double(max_exact)));
    const double scaled =
        double(log_ratio * float(buckets - max_exact)) / std::log(double(kT5MaxDistance) / double(max_exact));
    const int64_t large = int64_t(std::floor(float(double(max_exact) + scaled)));
    return uint32_t(bucket + std::min<int64_t>(large, buckets - 1));
}

bool has_own_position_bias(const GgufFile& file, const ModelConfig& cfg, uint32_t layer) {
    return file.find_tensor(layer_tensor_name(*cfg.arch, Role::AttnRelB, layer)) != nullptr;
}

std::vector<float> t5_position_bias(const GgufFile& file, const ModelConfig& cfg, uint32_t layer) {
    const uint32_t source = has_own_position_bias(file, cfg, layer) ? layer : 0;
    const GgufTensorInfo& t = file.tensor(layer_tensor_name(*cfg.arch, Role::AttnRelB, source));
    // ModelConfig checked the shape: n_rel_buckets rows of n_heads.
    std::vector<float> rel(size_t(cfg.n_heads) * cfg.n_rel_buckets);
    dequantize_row(t.type, file.tensor_data(t).data(), rel.data(), rel.size());
    const int32_t R = int32_t(kT5MaxDistance);
    const size_t width = 2 * size_t(R) + 1;
    std::vector<float> table(cfg.n_heads * width);
    for (int32_t d = -R; d <= R; ++d) {
        const uint32_t b = t5_relative_bucket(d, cfg.n_rel_buckets, !cfg.causal);
        for (uint32_t h = 0; h < cfg.n_heads; ++h) table[h * width + size_t(d + R)] = rel[size_t(b) * cfg.n_heads + h];
    }
    return table;
}

}  // namespace vkllm
