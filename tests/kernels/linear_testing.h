// Shared by the matmul and matvec tests: the weight types, one linear-layer problem (GGUF weight
// bytes, inputs, optional residual and the CPU reference result) and its tolerance and label.
#pragma once

#include "support/test_context.h"

#include "runtime/ops/linear.h"

#include <fmt/format.h>

#include <cmath>
#include <string>
#include <vector>

namespace vkllm::test::linear {

constexpr TensorType kTypes[] = {TensorType::F32, TensorType::F16, TensorType::Q8_0, TensorType::Q4_0};

// Both sides sum the same decoded weights; only fp32 vs double accumulation differs, so the bound
// is far below the project's 1e-7 / 5e-4 budgets (observed ~1e-14).
constexpr double kNmse = 1e-10;

enum class Res { None, Separate, InPlace };

struct Problem {
    TensorType t;
    uint32_t m, n, k;
    Res res;
    std::vector<uint8_t> w;  // GGUF bytes
    std::vector<float> x, r, ref;
};

inline std::vector<uint8_t> make_weights(TensorType t, uint32_t n, uint32_t k, uint32_t seed) {
    const size_t rb = row_bytes(t, k);
    std::vector<uint8_t> w(n * rb);
    for (uint32_t j = 0; j < n; ++j) {
        auto row = test::random_floats(k, seed * 100003u + j);
        quantize_row(t, row.data(), w.data() + j * rb, k);
    }
    return w;
}

inline Problem make_problem(TensorType t, uint32_t m, uint32_t n, uint32_t k, Res res, uint32_t seed) {
    Problem p{t, m, n, k, res, make_weights(t, n, k, seed), test::random_floats(size_t(m) * k, seed + 1), {}, {}};
    if (res != Res::None) p.r = test::random_floats(size_t(m) * n, seed + 2, -4.0f, 4.0f);
    p.ref.resize(size_t(m) * n);
    ref::linear(t, p.w.data(), p.x.data(), p.ref.data(), m, n, k, res == Res::None ? nullptr : p.r.data());
    double norm = 0;
    for (float v : p.ref) norm += double(v) * v;
    REQUIRE(norm > 0);  // a zero reference would let a kernel that writes nothing pass
    return p;
}

inline test::Tolerance tolerance(uint32_t k) { return {kNmse, 2e-6 * std::sqrt(double(k)), 1e-4}; }

inline std::string label(const Problem& p, const std::string& spec) {
    return fmt::format("y {} m={} n={} k={}{} [{}]", type_traits(p.t).name, p.m, p.n, p.k,
                       p.res == Res::None ? "" : p.res == Res::InPlace ? " +R in place" : " +R", spec);
}

}  // namespace vkllm::test::linear
