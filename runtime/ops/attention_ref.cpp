#include "runtime/ops/attention.h"

#include "runtime/ops/kv_store.h"
#include "runtime/quant/tensor_types.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

namespace vkllm::ref {

namespace {

// ALiBi slopes as the paper's reference code builds them: for a power of two n, the geometric
// sequence 2^(-b/n), 2^(-2b/n), ... (b = max bias, 8 in the paper); for other counts, the sequence of
// the largest power of two below n, then every other slope of the sequence for twice that many.
std::vector<double> alibi_slopes(uint32_t n_heads, double max_bias) {
    auto power_of_two = [&](uint32_t n) {
        std::vector<double> s(n);
        for (uint32_t i = 0; i < n; ++i) s[i] = std::pow(2.0, -max_bias * (i + 1) / n);
        return s;
    };
    uint32_t closest = 1;
    while (closest * 2 <= n_heads) closest *= 2;
    std::vector<double> s = power_of_two(closest);
    const std::vector<double> twice = power_of_two(2 * closest);
    for (uint32_t i = 0; s.size() < n_heads; i += 2) s.push_back(twice[i]);
    return s;
}

}  // namespace

void attention(const ops::AttentionParams& p, const float* q, const void* k, const void* v, const int32_t* positions,
               float* out, const float* pos_bias, const int32_t* segments, const float* sinks) {
    if (p.pos_bias_range > 0 && !pos_bias)
        throw std::invalid_argument("ref::attention: pos_bias_range without a table");
    if (p.sinks && !sinks) throw std::invalid_argument("ref::attention: sinks without their logits");
    if (p.segmented && !segments) throw std::invalid_argument("ref::attention: segmented without segments");
    // D: the width of q and K (the scores); DV: of V and of the output. With v_in_k, V of a head is
    // the last DV elements of its K row (DeepSeek's MLA in absorbed form) and v is not read.
    const uint32_t D = p.head_dim, DV = p.v_dim(), group = p.n_heads / p.n_kv_heads;
    if (DV > D || (!p.v_in_k && !v))
        throw std::invalid_argument("ref::attention: bad V (v_head_dim > head_dim, or no v)");
    const std::vector<double> slopes =
        p.max_alibi_bias > 0 ? alibi_slopes(p.n_heads, p.max_alibi_bias) : std::vector<double>(p.n_heads, 0.0);
    // Query t sees positions [lo, end): the window's, or 0..p clamped to the cache without one.
    auto range = [&](uint32_t t, uint32_t& lo, uint32_t& end) {
        if (p.segmented) {  // packed inputs: the query's own input
            lo = uint32_t(std::max(segments[2 * t], 0));
            end = std::min(uint32_t(std::max(segments[2 * t + 1], 0)), p.n_ctx);
            return;
        }
        // Not causal: up to the call's last position; the window still ends at the query's own.
        const uint32_t own = uint32_t(std::max(positions[t], 0));
        const uint32_t last = p.causal ? own : uint32_t(std::max(positions[p.n_tokens - 1], 0));
        lo = p.window > 0 && own >= p.window ? own - p.window + 1 : 0;
        end = p.window > 0 ? last + 1 : std::min(last + 1, p.n_ctx);
    };
    // The cache rows any query can see, as the device reads them (f16 widening is exact): the whole
    // ring with a window, else the rows below the longest KV length.
    uint32_t rows = 0;
    for (uint32_t t = 0; t < p.n_tokens; ++t) {
        uint32_t lo = 0, end = 0;
        range(t, lo, end);
        rows = std::max(rows, p.window > 0 ? p.n_ctx : end);
    }
    auto widen = [&](const void* src, size_t n) {
        std::vector<float> f(n);
        if (p.kv_type == ops::KvType::Q8_0)
            ref::kv_dequantize_q8_0(static_cast<const uint32_t*>(src), f.data(), uint32_t(n));
        else if (p.kv_type == ops::KvType::F16)
            for (size_t i = 0; i < n; ++i) f[i] = f16_to_f32(static_cast<const uint16_t*>(src)[i]);
        else
            std::copy_n(static_cast<const float*>(src), n, f.begin());
        return f;
    };
    const std::vector<float> kf = widen(k, size_t(rows) * p.n_kv_heads * D);
    const std::vector<float> vf = p.v_in_k ? std::vector<float>() : widen(v, size_t(rows) * p.n_kv_heads * DV);
    // Head g's V in cache row r: its own row of the V cache, or the tail of its K row.
    auto v_row = [&](size_t r, size_t g) {
        return p.v_in_k ? kf.data() + (r * p.n_kv_heads + g) * D + (D - DV) : vf.data() + (r * p.n_kv_heads + g) * DV;
    };

    std::vector<double> w, o(DV);
    for (uint32_t t = 0; t < p.n_tokens; ++t) {
        uint32_t lo = 0, end = 0;
        range(t, lo, end);
        if (end <= lo) {  // no keys (an empty segment): zeros, as the kernel writes
            std::fill(out + size_t(t) * p.n_heads * DV, out + size_t(t + 1) * p.n_heads * DV, 0.0f);
            continue;
        }
        w.assign(end - lo, 0.0);
        auto row = [&](uint32_t j) { return size_t(j % p.n_ctx) * p.n_kv_heads; };
        for (uint32_t h = 0; h < p.n_heads; ++h) {
            const float* qh = q + (size_t(t) * p.n_heads + h) * D;
            const size_t kv_head = h / group;
            double mx = -INFINITY;
            for (uint32_t j = lo; j < end; ++j) {
                const float* kr = kf.data() + (row(j) + kv_head) * D;
                double s = 0;
                for (uint32_t d = 0; d < D; ++d) s += double(qh[d]) * kr[d];
                s *= p.scale;
                if (p.softcap > 0.0f) s = p.softcap * std::tanh(s / p.softcap);
                const int64_t i = std::max(positions[t], 0), R = p.pos_bias_range;
                s -= slopes[h] * std::abs(double(i) - double(j));
                if (R > 0) s += pos_bias[size_t(h) * size_t(2 * R + 1) + size_t(std::clamp(int64_t(j) - i, -R, R) + R)];
                w[j - lo] = s;
                mx = std::max(mx, s);
            }
            // A sink is one more logit in the softmax, with no value (gpt-oss).
            const double sink = p.sinks ? double(sinks[h]) : -INFINITY;
            mx = std::max(mx, sink);
            double sum = p.sinks ? std::exp(sink - mx) : 0.0;
            for (double& x : w) sum += (x = std::exp(x - mx));
            std::fill(o.begin(), o.end(), 0.0);
            for (uint32_t j = lo; j < end; ++j) {
                const float* vr = v_row(j % p.n_ctx, kv_head);
                for (uint32_t d = 0; d < DV; ++d) o[d] += w[j - lo] * vr[d];
            }
            float* oh = out + (size_t(t) * p.n_heads + h) * DV;
            for (uint32_t d = 0; d < DV; ++d) oh[d] = float(o[d] / sum);
        }
    }
}

}  // namespace vkllm::ref
