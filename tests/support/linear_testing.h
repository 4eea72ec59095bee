// Shared by the matmul and matvec tests: the weight types, one linear-layer problem (GGUF weight
// bytes, inputs, optional residual and bias and the CPU reference result) and its tolerance and label.
#pragma once

#include "support/test_context.h"

#include "runtime/ops/linear.h"
#include "runtime/quant/random_blocks.h"

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <functional>
#include <utility>
#include <string>
#include <vector>

namespace vkllm::test::linear {

// Every weight type vkllm reads.
inline constexpr auto& kTypes = kAllTensorTypes;

// A row length of `blocks32` 32-element blocks for the 32-block and per-element types, and of the
// same number of 256-element super-blocks for the K-quants / IQ4_XS, so that every shape class
// (one block, three blocks with alternating row alignment, ...) exists for every type.
inline uint32_t blocks_k(TensorType t, uint32_t blocks32) {
    return blocks32 * uint32_t(type_traits(t).block_elems > 32 ? type_traits(t).block_elems : 32);
}

inline bool is_float_type(TensorType t) { return type_traits(t).block_elems == 1; }

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
    std::vector<float> b;  // bias [n]; empty: none
};

// Random valid weight rows (runtime/quant/random_blocks.h: every quant and scale bit random).
inline std::vector<uint8_t> make_weights(TensorType t, uint32_t n, uint32_t k, uint32_t seed) {
    return quant::random_rows(t, seed, n, k);
}

// bias: add a random bias row (GPT-2 / Qwen2 projections), fused into the op's epilogue.
inline Problem make_problem(TensorType t, uint32_t m, uint32_t n, uint32_t k, Res res, uint32_t seed, bool bias = false) {
    Problem p{t, m, n, k, res, make_weights(t, n, k, seed), test::random_floats(size_t(m) * k, seed + 1), {}, {}, {}};
    if (res != Res::None) p.r = test::random_floats(size_t(m) * n, seed + 2, -4.0f, 4.0f);
    if (bias) p.b = test::random_floats(n, seed + 3, -3.0f, 3.0f);
    p.ref.resize(size_t(m) * n);
    ref::linear(t, p.w.data(), p.x.data(), p.ref.data(), m, n, k, res == Res::None ? nullptr : p.r.data(),
                bias ? p.b.data() : nullptr);
    double norm = 0;
    for (float v : p.ref) norm += double(v) * v;
    REQUIRE(norm > 0);  // a zero reference would let a kernel that writes nothing pass
    return p;
}

inline test::Tolerance tolerance(uint32_t k) { return {kNmse, 2e-6 * std::sqrt(double(k)), 1e-4}; }

inline std::string label(const Problem& p, const std::string& spec) {
    return fmt::format("y {} m={} n={} k={}{}{} [{}]", type_traits(p.t).name, p.m, p.n, p.k, p.b.empty() ? "" : " +bias",
                       p.res == Res::None ? "" : p.res == Res::InPlace ? " +R in place" : " +R", spec);
}

// Records an op for `p` through `record` (W, X, Y and the optional residual and bias as bound slices)
// into a fresh stream, runs it, and checks Y against the reference, the bytes before a misaligned Y
// and the guards. `misalign` shifts W by 2 (4 for F32) bytes and X / Y / R / bias by 1..3 floats
// from the aligned offsets. Returns the comparison and the stream's dispatch count.
using BiasRecordFn = std::function<void(CommandStream& s, const BufferSlice& w, const BufferSlice& x,
                                        const BufferSlice& y, const BufferSlice* residual, const BufferSlice* bias)>;
inline std::pair<test::Compare, uint32_t> run_problem(Context& ctx, const std::string& spec, const Problem& p,
                                                      bool misalign, const BiasRecordFn& record) {
    const uint64_t wb = p.w.size(), xb = p.x.size() * 4, yb = p.ref.size() * 4;
    const uint64_t w_off = misalign ? (p.t == TensorType::F32 ? 4 : 2) : 0;
    const uint64_t x_off = misalign ? 4 : 0, y_off = misalign ? 12 : 0, r_off = misalign ? 8 : 0;
    Buffer dw = ctx.create_buffer(wb + w_off, MemoryUsage::Device, "w");
    ctx.upload(dw, p.w.data(), wb, w_off);
    Buffer dx = ctx.create_buffer(xb + x_off, MemoryUsage::Device, "x");
    ctx.upload(dx, p.x.data(), xb, x_off);
    test::GuardedBuffer dy(ctx, yb + y_off, "y");
    BufferSlice ys = dy.slice();
    ys.offset += y_off;
    ys.size = yb;
    Buffer dr;
    BufferSlice rs{};
    const BufferSlice* residual = nullptr;
    if (p.res == Res::Separate) {
        dr = ctx.create_buffer(yb + r_off, MemoryUsage::Device, "r");
        ctx.upload(dr, p.r.data(), yb, r_off);
        rs = dr.slice(r_off, yb);
        residual = &rs;
    } else if (p.res == Res::InPlace) {
        ctx.upload(dy.buffer(), p.r.data(), yb, dy.payload_offset() + y_off);
        residual = &ys;
    }
    const uint64_t b_off = misalign ? 4 : 0, bb = p.b.size() * 4;
    Buffer dbias;
    BufferSlice bs{};
    if (!p.b.empty()) {
        dbias = ctx.create_buffer(bb + b_off, MemoryUsage::Device, "bias");
        ctx.upload(dbias, p.b.data(), bb, b_off);
        bs = dbias.slice(b_off, bb);
    }
    CommandStream s(ctx);
    s.begin();
    record(s, dw.slice(w_off, wb), dx.slice(x_off, xb), ys, residual, p.b.empty() ? nullptr : &bs);
    s.end();
    s.submit_and_wait();

    std::vector<float> got(p.ref.size() + y_off / 4);
    dy.download(got.data(), got.size() * 4);
    for (uint64_t i = 0; i < y_off / 4; ++i)
        CHECK_MESSAGE(std::bit_cast<uint32_t>(got[i]) == 0xA5C3E1F7u, "written before the misaligned Y slice");
    auto c = test::validate_result(label(p, spec), got.data() + y_off / 4, p.ref.data(), p.ref.size(), tolerance(p.k));
    dy.check_guards();
    return {c, s.stats().dispatches};
}

// The same for ops recorded without a bias (p.b must be empty).
using RecordFn = std::function<void(CommandStream& s, const BufferSlice& w, const BufferSlice& x, const BufferSlice& y,
                                    const BufferSlice* residual)>;
inline std::pair<test::Compare, uint32_t> run_problem(Context& ctx, const std::string& spec, const Problem& p,
                                                      bool misalign, const RecordFn& record) {
    REQUIRE(p.b.empty());
    return run_problem(ctx, spec, p, misalign,
                       BiasRecordFn([&](CommandStream& s, const BufferSlice& w, const BufferSlice& x, const BufferSlice& y,
                                        const BufferSlice* residual, const BufferSlice*) { record(s, w, x, y, residual); }));
}

}  // namespace vkllm::test::linear
