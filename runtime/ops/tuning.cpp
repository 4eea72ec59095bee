#include "runtime/ops/tuning.h"

#include "runtime/ops/kernel_table.h"

#include "runtime/quant/random_blocks.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>

namespace vkllm::ops {

namespace {

using MK = MatmulPlan::Kernel;

LinearShape linear_shape(const TuneShape& s) { return {s.wtype, s.m, s.n, s.k, true, MatvecInput::Kind::Plain, true}; }
bool is_matvec(const TuneShape& s) { return s.m <= 8; }

// The numbers a plan's tuned entry would hold (what configure() reads back).
TunedConfig config_of(const LinearPlan& p, uint32_t m) {
    TunedConfig c;
    if (p.kernel == LinearPlan::Kernel::Matvec) {
        if (m == 1 && p.matvec.kernel != MatvecPlan::Kernel::Rows) c.wg = p.matvec.wg;
        c.rows = p.matvec.rows;
        return c;
    }
    const MatmulPlan& mm = p.matmul;
    if (mm.kernel == MK::Broadcast) return c;
    c.bm = mm.bm, c.bn = mm.bn, c.bk = mm.bk;
    if (mm.kernel == MK::Coopmat)
        c.sgm = mm.sgm, c.sgn = mm.sgn;
    else
        c.tm = mm.tm, c.tn = mm.tn;
    return c;
}

std::shared_ptr<const KernelTuning> with_entry(const KernelTuning& table, const TuningKey& key, const TunedConfig& c) {
    auto t = std::make_shared<KernelTuning>(table);
    t->entries[key] = c;
    return t;
}

LinearPlan plan_for(const DeviceCaps& caps, const TuneShape& s) {
    return plan_linear(caps, s.wtype, s.m, s.n, s.k, true, MatvecInput::Kind::Plain, false, true);
}

// The weights, X and the outputs of one shape on the device; the weights are 256 distinct random rows
// repeated (timing needs every byte at its own address, not distinct values).
struct Operands {
    Buffer w, x, y, q8;
    Operands(Context& ctx, const TuneShape& s) {
        const size_t rb = row_bytes(s.wtype, s.k);
        const uint32_t distinct = std::min<uint32_t>(s.n, 256);
        std::vector<uint8_t> rows(size_t(distinct) * rb);
        for (uint32_t j = 0; j < distinct; ++j) quant::random_blocks(s.wtype, 0x7E57 + j, rows.data() + j * rb, s.k);
        w = ctx.create_buffer(uint64_t(s.n) * rb, MemoryUsage::Device, "tune_w");
        for (uint32_t j0 = 0; j0 < s.n; j0 += distinct) {
            const uint32_t count = std::min(distinct, s.n - j0);
            ctx.upload(w, rows.data(), size_t(count) * rb, size_t(j0) * rb);
        }
        std::mt19937 rng(0x5EED);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        std::vector<float> xs(size_t(s.m) * s.k);
        for (float& v : xs) v = u(rng);
        x = ctx.create_buffer(xs.size() * 4, MemoryUsage::Device, "tune_x");
        ctx.upload(x, xs.data(), xs.size() * 4);
        y = ctx.create_buffer(uint64_t(s.m) * s.n * 4, MemoryUsage::Device, "tune_y");
        q8 = ctx.create_buffer(uint64_t(s.m) * q8_1_row_bytes(s.k), MemoryUsage::Device, "tune_q8");
    }
};

// Runs `plan` once (its output returned for the check), then `reps` more times: the median in ms.
std::pair<std::vector<float>, double> run(Context& ctx, const LinearPlan& plan, const TuneShape& s, Operands& o,
                                          int reps) {
    CommandStream st(ctx);
    st.begin(true);
    MatvecInput input;
    if (plan.int_dot()) input.q8 = o.q8.slice();
    linear(ctx, st, plan, o.w.slice(), o.x.slice(), o.y.slice(), nullptr, nullptr, input);
    st.end();
    st.submit_and_wait();
    std::vector<float> y(size_t(s.m) * s.n);
    ctx.download(o.y, y.data(), y.size() * 4);
    std::vector<double> ms;
    for (int r = 0; r < std::max(reps, 1); ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        st.submit_and_wait();
        const double host = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        double ns = 0;
        for (const DispatchTiming& d : st.timings()) ns += d.ns;
        ms.push_back(ns > 0 ? ns / 1e6 : host);
    }
    std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
    return {std::move(y), ms[ms.size() / 2]};
}

double nmse(const std::vector<float>& got, const std::vector<float>& want) {
    double err = 0, ref = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        if (!std::isfinite(got[i])) return INFINITY;
        err += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
        ref += double(want[i]) * want[i];
    }
    return ref > 0 ? err / ref : err;
}

}  // namespace

std::vector<TunedConfig> matvec_candidates(const DeviceCaps& caps, const MatvecPlan& plan, uint32_t m) {
    std::vector<TunedConfig> out;
    if (plan.kernel == MatvecPlan::Kernel::Rows) {
        // One SIMD chunk per workgroup by design: only the rows each lane owns.
        for (uint32_t r : {2u, 4u, 8u, 16u})
            if (r != plan.rows) out.push_back({.rows = r});
        return out;
    }
    const std::vector<uint32_t> wgs =
        caps.cpu_tuning ? std::vector<uint32_t>{8, 16, 32, 64} : std::vector<uint32_t>{64, 128, 256};
    for (uint32_t wg : m == 1 ? wgs : std::vector<uint32_t>{0})
        for (uint32_t r : {1u, 2u, 4u}) {
            if (wg && wg < caps.subgroup_size) continue;
            if ((wg == 0 || wg == plan.wg) && r == plan.rows) continue;
            out.push_back({.wg = wg, .rows = r});
        }
    return out;
}

std::vector<TunedConfig> matmul_candidates(const DeviceCaps&, const MatmulPlan& plan) {
    std::vector<TunedConfig> out;
    if (plan.kernel == MK::Broadcast) return out;  // registers, not tiles: nothing here to tune
    if (plan.kernel == MK::Coopmat) {
        for (uint32_t tile : {64u, 128u})
            for (uint32_t sgm : {1u, 2u, 4u})
                for (uint32_t sgn : {1u, 2u, 4u}) {
                    const TunedConfig c{.bm = tile, .bn = tile, .bk = plan.bk, .sgm = sgm, .sgn = sgn};
                    if (c.bm != plan.bm || c.bn != plan.bn || sgm != plan.sgm || sgn != plan.sgn) out.push_back(c);
                }
        return out;
    }
    // tm x tn per invocation grows with the tile, so that every tile takes 16 x 16 invocations.
    const std::vector<uint32_t> bks =
        plan.kernel == MK::Dot ? std::vector<uint32_t>{64, 128} : std::vector<uint32_t>{16, 32};
    for (uint32_t bm : {32u, 64u, 128u})
        for (uint32_t bn : {32u, 64u, 128u})
            for (uint32_t bk : bks) {
                const TunedConfig c{
                    .bm = bm, .bn = bn, .bk = bk, .tm = std::max(2u, bm / 16), .tn = std::max(2u, bn / 16)};
                if (c.bm != plan.bm || c.bn != plan.bn || c.bk != plan.bk || c.tm != plan.tm || c.tn != plan.tn)
                    out.push_back(c);
            }
    return out;
}

TuneResult tune_shape(Context& ctx, const TuneShape& shape, KernelTuning& table, const TuneOptions& opts) {
    TuneResult r;
    r.shape = shape;
    DeviceCaps caps = ctx.caps();
    caps.tuning = std::make_shared<KernelTuning>(table);
    const LinearPlan base = plan_for(caps, shape);
    const LinearShape ls = linear_shape(shape);
    r.row = pick_kernel(caps, is_matvec(shape) ? LinearProblem::DenseMatvec : LinearProblem::DenseMatmul, ls).name;
    r.base = r.best = config_of(base, shape.m);
    const TuningKey key{r.row, uint32_t(shape.wtype), shape.n, shape.k, tuning_bucket(shape.m)};

    // Each candidate planned as the planner will plan it from the file; one that does not fit comes
    // back as something else and is left out.
    std::vector<std::pair<TunedConfig, LinearPlan>> trials;
    const std::vector<TunedConfig> cands = base.kernel == LinearPlan::Kernel::Matvec
                                               ? matvec_candidates(caps, base.matvec, shape.m)
                                               : matmul_candidates(caps, base.matmul);
    std::vector<PipelineDesc> descs = base.pipelines();
    for (const TunedConfig& c : cands) {
        DeviceCaps trial = ctx.caps();
        trial.tuning = with_entry(table, key, c);
        LinearPlan p = plan_for(trial, shape);
        TunedConfig got = config_of(p, shape.m), want = c;
        if (!want.wg) got.wg = 0;  // a batch bucket's workgroup size is the decode one's
        if (got != want || got == config_of(base, shape.m)) continue;
        for (PipelineDesc& d : p.pipelines()) descs.push_back(std::move(d));
        trials.emplace_back(c, std::move(p));
    }
    ctx.prepare_pipelines(descs);  // compiled in parallel before anything is timed

    Operands o(ctx, shape);
    const auto [want, base_ms] = run(ctx, base, shape, o, opts.reps);
    r.base_ms = r.best_ms = base_ms;
    TunedConfig best{};
    for (const auto& [c, p] : trials) {
        const auto [got, ms] = run(ctx, p, shape, o, opts.reps);
        ++r.tried;
        if (const double e = nmse(got, want); !(e <= opts.nmse_limit)) {
            r.notes.push_back(
                fmt::format("{} discarded: nmse {:.3g} against the row's own configuration", describe(c), e));
            continue;
        }
        if (ms < r.best_ms) r.best_ms = ms, best = c, r.best = config_of(p, shape.m);
    }
    if (best != TunedConfig{} && r.best_ms < r.base_ms * (1 - opts.min_gain)) {
        r.improved = true;
        table.entries[key] = best;
    } else {
        r.best = r.base, r.best_ms = r.base_ms;
    }
    return r;
}

}  // namespace vkllm::ops
