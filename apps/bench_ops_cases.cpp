// `vkllm bench-ops`: one benchmark case per op, each checked against its vkllm::ref function before
// it is timed. Inputs are seeded random data; big references are computed on a sample of the outputs
// so that the host side stays quick on a small machine.
#include "apps/bench_ops.h"

#include "runtime/ops/attention.h"
#include "runtime/quant/random_blocks.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/get_rows.h"
#include "runtime/ops/kv_store.h"
#include "runtime/ops/kernel_table.h"
#include "runtime/ops/linear.h"
#include "runtime/ops/rope.h"
#include "runtime/ops/sampling_ops.h"
#include "runtime/vk_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <thread>

namespace vkllm::apps::bench_ops {

namespace {

// A reference costing more multiply-adds than this is computed on every kStride-th output row only
// (plus the last row, where tail handling lives): a full reference of a 32000 x 2048 matvec or a
// 512-token prefill takes seconds on a 2-core host, the sample milliseconds.
constexpr uint64_t kFullCheckMacs = 1ull << 25;
constexpr uint32_t kStride = 17;

// f32 results: the kernels differ from the double references only by f32 rounding.
constexpr double kNmseF32 = 1e-6;
// Attention with an f16 cache: the project's budget for f16 KV (see tests/runtime/ops/test_attention.cpp).
constexpr double kNmseAttentionF16 = 5e-4;

using clock_type = std::chrono::steady_clock;
double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

// splitmix64: fast enough to fill a 128256 x 4096 table in seconds; std::mt19937 + a distribution
// is several times slower.
class Rng {
public:
    explicit Rng(uint64_t seed) : s_(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}
    uint64_t next() {
        uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    float uniform(float lo, float hi) { return lo + (hi - lo) * float(next() >> 40) * (1.0f / float(1 << 24)); }

private:
    uint64_t s_;
};

std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
    Rng r(seed);
    std::vector<float> v(n);
    for (float& x : v) x = r.uniform(lo, hi);
    return v;
}

// Seeds depend on the case's name only, so a row sees the same data whatever else is selected.
uint64_t seed_of(const Row& row) {
    uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a
    for (const std::string* s : {&row.op, &row.shape, &row.type})
        for (char c : *s) h = (h ^ uint8_t(c)) * 0x100000001B3ull;
    return h;
}

// Calls fn(begin, end) over [0, n) split across the host's cores (weight tables are the slow part of
// setting a case up).
void parallel_for(size_t n, const std::function<void(size_t, size_t)>& fn) {
    const size_t threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 8);
    if (threads == 1 || n < 64) return fn(0, n);
    std::vector<std::thread> pool;
    for (size_t t = 0; t < threads; ++t) pool.emplace_back(fn, n * t / threads, n * (t + 1) / threads);
    for (auto& th : pool) th.join();
}

// n rows of k random valid weights of type t (GGUF bytes; runtime/quant/random_blocks.h: every
// quant and scale bit random). Each row has its own seed, so the result does not depend on the
// thread count.
std::vector<uint8_t> random_weights(TensorType t, uint32_t n, uint32_t k, uint64_t seed) {
    const size_t rb = row_bytes(t, k);
    std::vector<uint8_t> w(size_t(n) * rb);
    parallel_for(n, [&](size_t b, size_t e) {
        for (size_t j = b; j < e; ++j) quant::random_blocks(t, seed + j, w.data() + j * rb, k);
    });
    return w;
}

// 0, stride, 2 * stride, ... and n - 1.
std::vector<uint32_t> sample(uint32_t n, uint32_t stride) {
    std::vector<uint32_t> v;
    for (uint32_t i = 0; i < n; i += stride) v.push_back(i);
    if (v.back() != n - 1) v.push_back(n - 1);
    return v;
}

Buffer device_buffer(Context& ctx, size_t bytes, const char* name) {
    return ctx.create_buffer(std::max<size_t>(bytes, 4), MemoryUsage::Device, name);
}

template <typename T>
Buffer upload(Context& ctx, const std::vector<T>& v, const char* name) {
    Buffer b = device_buffer(ctx, v.size() * sizeof(T), name);
    if (!v.empty()) ctx.upload(b, v.data(), v.size() * sizeof(T));
    return b;
}

std::vector<float> download_floats(Context& ctx, const Buffer& b, size_t n) {
    std::vector<float> v(n);
    ctx.download(b, v.data(), n * 4);
    return v;
}

CheckResult compare_all(const std::vector<float>& gpu, const std::vector<float>& ref) {
    if (gpu.size() != ref.size()) throw std::logic_error("bench-ops: result and reference sizes differ");
    return compare(gpu.data(), ref.data(), gpu.size());
}

std::vector<uint32_t> token_counts(uint32_t prompt) {
    return prompt == 1 ? std::vector<uint32_t>{1} : std::vector<uint32_t>{1, prompt};
}

std::vector<int32_t> consecutive(uint32_t first, uint32_t n) {
    std::vector<int32_t> p(n);
    for (uint32_t i = 0; i < n; ++i) p[i] = int32_t(first + i);
    return p;
}

const char* kv_name(ops::KvType t) { return ops::kv_type_name(t); }

// A whole cache of one KV type as floats: f16 widened, q8_0 dequantized.
std::vector<float> kv_floats(ops::KvType t, const uint8_t* bytes, size_t n) {
    std::vector<float> f(n);
    if (t == ops::KvType::Q8_0)
        ref::kv_dequantize_q8_0(reinterpret_cast<const uint32_t*>(bytes), f.data(), uint32_t(n));
    else if (t == ops::KvType::F16)
        for (size_t i = 0; i < n; ++i) f[i] = f16_to_f32(reinterpret_cast<const uint16_t*>(bytes)[i]);
    else
        std::memcpy(f.data(), bytes, n * 4);
    return f;
}

struct LinearShape {
    std::string name;
    uint32_t n, k;
};

// The distinct weight matrices of one LLaMA block (and the output head), n x k = out x in.
std::vector<LinearShape> linear_shapes(const ModelShapes& m, bool with_output) {
    std::vector<LinearShape> v;
    if (m.kv_dim() == m.dim) {
        v.push_back({"attn_qkvo", m.dim, m.dim});
    } else {
        v.push_back({"attn_q/o", m.dim, m.dim});
        v.push_back({"attn_k/v", m.kv_dim(), m.dim});
    }
    v.push_back({"ffn_gate/up", m.ffn, m.dim});
    v.push_back({"ffn_down", m.dim, m.ffn});
    if (with_output) v.push_back({"output", m.vocab, m.dim});
    return v;
}

}  // namespace

const std::vector<ModelShapes>& shape_sets() {
    static const std::vector<ModelShapes> sets = {
        {"tinyllama", 2048, 32, 4, 64, 5632, 32000, 10000.0f, 512, 2048},
        {"llama2-7b", 4096, 32, 32, 128, 11008, 32000, 10000.0f, 512, 2048},
        {"llama3-8b", 4096, 32, 8, 128, 14336, 128256, 500000.0f, 512, 2048},
        // Every code path (GQA, split-K decode, tiled prefill, multi-tile matmul) in a few seconds.
        {"small", 256, 8, 2, 32, 768, 4096, 10000.0f, 64, 256},
    };
    return sets;
}

const ModelShapes& find_shapes(std::string_view name) {
    for (const ModelShapes& s : shape_sets())
        if (s.name == name) return s;
    throw std::invalid_argument(fmt::format("unknown shape set '{}'", name));
}

const std::vector<std::string>& op_names() {
    static const std::vector<std::string> names = {"matvec", "matmul",   "get_rows",         "rms_norm",
                                                   "rope",   "kv_store", "attention_decode", "attention_prefill",
                                                   "swiglu", "add",      "argmax",           "softmax"};
    return names;
}

TensorType parse_type(std::string_view name) { return parse_tensor_type(name); }

std::string type_name(TensorType t) { return std::string(type_traits(t).lower); }

CheckResult compare(const float* gpu, const float* ref, size_t n) {
    CheckResult r;
    double err = 0, norm = 0;
    for (size_t i = 0; i < n; ++i) {
        if (!std::isfinite(gpu[i])) {
            ++r.non_finite;
            continue;
        }
        const double d = double(gpu[i]) - double(ref[i]);
        err += d * d;
        norm += double(ref[i]) * double(ref[i]);
    }
    r.nmse = norm > 0 ? err / norm : err;
    return r;
}

void Bench::run() {
    using Fn = void (Bench::*)();
    static const std::pair<const char*, Fn> table[] = {
        {"matvec", &Bench::matvec},
        {"matmul", &Bench::matmul},
        {"get_rows", &Bench::get_rows},
        {"rms_norm", &Bench::rms_norm},
        {"rope", &Bench::rope},
        {"kv_store", &Bench::kv_store},
        {"attention_decode", &Bench::attention_decode},
        {"attention_prefill", &Bench::attention_prefill},
        {"swiglu", &Bench::swiglu},
        {"add", &Bench::add},
        {"argmax", &Bench::argmax},
        {"softmax", &Bench::softmax},
    };
    for (const auto& [name, fn] : table)
        if (std::find(cfg_.ops.begin(), cfg_.ops.end(), name) != cfg_.ops.end()) (this->*fn)();
}

void Bench::push(Row row) {
    rows_.push_back(std::move(row));
    if (progress_) progress_(rows_.back(), rows_.size());
}

void Bench::guarded(const Row& row, const std::function<void()>& body) {
    const size_t before = rows_.size();
    try {
        body();
    } catch (const DeviceLimitError& e) {
        if (rows_.size() != before) throw;
        Row r = row;
        r.status = Status::Skipped;
        r.note = e.what();
        push(std::move(r));
    } catch (const std::exception& e) {
        if (rows_.size() != before) throw;
        Row r = row;
        r.status = Status::Failed;
        r.note = e.what();
        push(std::move(r));
    }
}

void Bench::measure(Row row, CommandStream& s, double nmse_limit, const std::function<CheckResult()>& check) {
    row.nmse_limit = nmse_limit;
    auto t0 = clock_type::now();
    s.submit_and_wait();
    const double first_s = seconds_since(t0);
    const CheckResult c = check();
    row.nmse = c.nmse;
    if (!c.detail.empty() || c.non_finite || !(c.nmse <= nmse_limit)) {
        row.status = Status::Failed;
        row.note = !c.detail.empty() ? c.detail
                   : c.non_finite    ? fmt::format("{} NaN/Inf outputs", c.non_finite)
                                     : fmt::format("nmse {:.3g} above the limit {:.0e}", c.nmse, nmse_limit);
        return push(std::move(row));
    }
    std::vector<double> ns;
    auto record = [&](double host_s) {
        double gpu_ns = 0;
        for (const DispatchTiming& d : s.timings()) gpu_ns += d.ns;
        row.host_timer = row.host_timer || gpu_ns <= 0;
        ns.push_back(gpu_ns > 0 ? gpu_ns : host_s * 1e9);
    };
    if (first_s > cfg_.row_budget_s) {
        // One run takes seconds (a prefill matmul on a software rasterizer): warm-up effects are
        // noise at that length, and running it again would double the whole benchmark's time.
        record(first_s);
        row.timed_check = true;
    } else {
        // The check run already warmed caches and the driver; one more untimed run is cheap
        // insurance unless a single run is itself a sizeable part of the row's time budget.
        if (first_s < cfg_.row_budget_s / 4) s.submit_and_wait();
        const auto start = clock_type::now();
        for (int r = 0; r < cfg_.reps; ++r) {
            const auto t = clock_type::now();
            s.submit_and_wait();
            record(seconds_since(t));
            if (seconds_since(start) > cfg_.row_budget_s) break;
        }
    }
    row.reps = int(ns.size());
    row.best_ns = *std::min_element(ns.begin(), ns.end());
    double sum = 0;
    for (double x : ns) sum += x;
    row.mean_ns = sum / double(ns.size());
    push(std::move(row));
}

// --- linear -----------------------------------------------------------------------------------

void Bench::matvec() {
    for (const LinearShape& sh : linear_shapes(cfg_.shapes, true))
        for (TensorType t : cfg_.types) {
            Row row{"matvec", fmt::format("{} n={} k={}", sh.name, sh.n, sh.k), type_name(t)};
            linear_rows(row, t, 1, sh.n, sh.k, false);
        }
}

void Bench::matmul() {
    // Prefill computes logits for the last token only: the output head is a matvec there.
    for (const LinearShape& sh : linear_shapes(cfg_.shapes, false))
        for (TensorType t : cfg_.types) {
            Row row{"matmul", fmt::format("{} m={} n={} k={}", sh.name, cfg_.prompt, sh.n, sh.k), type_name(t)};
            linear_rows(row, t, cfg_.prompt, sh.n, sh.k, true);
        }
}

void Bench::linear_rows(const Row& row, TensorType t, uint32_t m, uint32_t n, uint32_t k, bool as_matmul) {
    if (!cfg_.all_kernels) {
        guarded(row, [&] { linear_case(row, t, m, n, k, as_matmul); });
        return;
    }
    const ops::LinearProblem problem = as_matmul ? ops::LinearProblem::DenseMatmul : ops::LinearProblem::DenseMatvec;
    const ops::LinearShape shape{t, m, n, k, true, ops::MatvecInput::Kind::Plain, true};
    for (const ops::KernelRow& kr : ops::kernel_table()) {
        if (kr.problem != problem || !kr.runs_on(ctx_.caps()) || !kr.serves(ctx_.caps(), shape)) continue;
        Row r = row;
        r.type += fmt::format(" [{}]", kr.name);
        guarded(r, [&] { linear_case(r, t, m, n, k, as_matmul, kr.name); });
    }
}

void Bench::linear_case(Row row, TensorType t, uint32_t m, uint32_t n, uint32_t k, bool as_matmul,
                        std::string_view kernel) {
    const uint64_t seed = seed_of(row);
    const size_t rb = row_bytes(t, k);
    const std::vector<uint8_t> w = random_weights(t, n, k, seed);
    const std::vector<float> x = random_floats(size_t(m) * k, seed + 0x5EED);
    Buffer wb = upload(ctx_, w, "bench_w"), xb = upload(ctx_, x, "bench_x");
    Buffer yb = device_buffer(ctx_, size_t(m) * n * 4, "bench_y");
    // The kernel a model records for this shape on this device: the integer-dot matvec (its
    // activation quantization timed with it) where the device takes it.
    // Planning is a pure function of the caps: a forced row is planned from a copy that names it.
    DeviceCaps caps = ctx_.caps();
    if (!kernel.empty()) caps.forced_kernels = {std::string(kernel)};
    const ops::LinearPlan plan = ops::plan_linear(caps, t, m, n, k);
    if (as_matmul != (plan.kernel == ops::LinearPlan::Kernel::Matmul))
        throw std::logic_error(fmt::format("bench-ops: m={} plans a {}", m, as_matmul ? "matvec" : "matmul"));
    const bool dot = plan.int_dot();
    const bool coopmat =
        plan.kernel == ops::LinearPlan::Kernel::Matmul && plan.matmul.kernel == ops::MatmulPlan::Kernel::Coopmat;
    row.int_dot = dot;
    if (dot) row.type += " int-dot";
    if (coopmat) row.type += " coopmat";
    Buffer qb;
    ops::MatvecInput input;
    if (dot) {
        qb = device_buffer(ctx_, size_t(m) * ops::q8_1_row_bytes(k), "bench_xq");
        input.q8 = qb.slice();
    }
    CommandStream s(ctx_);
    s.begin(true);
    ops::linear(ctx_, s, plan, wb.slice(), xb.slice(), yb.slice(), nullptr, nullptr, input);
    s.end();
    row.bytes = ops::linear_bytes_read(t, m, n, k);
    row.flops = 2.0 * m * n * k;

    uint32_t stride_n = 1, stride_m = 1;
    if (uint64_t(m) * n * k > kFullCheckMacs) {
        stride_n = kStride;
        if (uint64_t(m) * (n / kStride) * k > kFullCheckMacs) stride_m = kStride;
    }
    const std::vector<uint32_t> rows_n = sample(n, stride_n), rows_m = sample(m, stride_m);
    row.subset = stride_n > 1 || stride_m > 1;
    if (row.subset)
        row.checked = stride_m > 1 ? fmt::format("every {}th row of X and of W", kStride)
                                   : fmt::format("every {}th row of W", kStride);
    measure(std::move(row), s, kNmseF32, [&] {
        const std::vector<float> y = download_floats(ctx_, yb, size_t(m) * n);
        const uint32_t sm = uint32_t(rows_m.size()), sn = uint32_t(rows_n.size());
        std::vector<uint8_t> ws(size_t(sn) * rb);
        for (uint32_t j = 0; j < sn; ++j) std::memcpy(ws.data() + j * rb, w.data() + size_t(rows_n[j]) * rb, rb);
        std::vector<float> xs(size_t(sm) * k), ref(size_t(sm) * sn), got(ref.size());
        for (uint32_t i = 0; i < sm; ++i) std::copy_n(x.data() + size_t(rows_m[i]) * k, k, xs.data() + size_t(i) * k);
        if (dot)  // the same math: X as its Q8_1 blocks
            for (uint32_t i = 0; i < sm; ++i)
                ref::quantize_q8_1(xs.data() + size_t(i) * k, xs.data() + size_t(i) * k, k);
        // The matrix units multiply X and W rounded to half: their reference rounds them too.
        (coopmat ? ref::linear_f16 : ref::linear)(t, ws.data(), xs.data(), ref.data(), sm, sn, k, nullptr, nullptr);
        for (uint32_t i = 0; i < sm; ++i)
            for (uint32_t j = 0; j < sn; ++j) got[size_t(i) * sn + j] = y[size_t(rows_m[i]) * n + rows_n[j]];
        return compare_all(got, ref);
    });
}

// --- embedding lookup -------------------------------------------------------------------------

void Bench::get_rows() {
    const ModelShapes& m = cfg_.shapes;
    for (TensorType t : cfg_.types) {
        const uint64_t table_bytes = uint64_t(m.vocab) * row_bytes(t, m.dim);
        std::vector<uint8_t> table;  // generated once per type, for both token counts
        for (uint32_t n_ids : token_counts(cfg_.prompt)) {
            Row row{"get_rows", fmt::format("ids={} of {}x{}", n_ids, m.vocab, m.dim), type_name(t)};
            if (table_bytes > ctx_.caps().max_storage_buffer_range) {
                // get_rows() would refuse too; no point generating a table of this size first.
                row.status = Status::Skipped;
                row.note = fmt::format("table of {} MiB exceeds maxStorageBufferRange ({} MiB)", table_bytes >> 20,
                                       ctx_.caps().max_storage_buffer_range >> 20);
                push(std::move(row));
                continue;
            }
            guarded(row, [&] {
                if (table.empty()) table = random_weights(t, m.vocab, m.dim, seed_of(row));
                std::vector<int32_t> ids(n_ids);
                Rng r(seed_of(row) + 1);
                for (int32_t& id : ids) id = int32_t(r.next() % m.vocab);
                Buffer tb = upload(ctx_, table, "bench_table"), ib = upload(ctx_, ids, "bench_ids");
                Buffer ob = device_buffer(ctx_, size_t(n_ids) * m.dim * 4, "bench_out");
                CommandStream s(ctx_);
                s.begin(true);
                ops::get_rows(ctx_, s, t, tb.slice(), m.vocab, m.dim, ib.slice(), n_ids, ob.slice());
                s.end();
                Row rr = row;
                rr.bytes = uint64_t(n_ids) * (row_bytes(t, m.dim) + 4 + uint64_t(m.dim) * 4);
                measure(std::move(rr), s, kNmseF32, [&] {
                    std::vector<float> ref(size_t(n_ids) * m.dim);
                    ref::get_rows(t, table.data(), m.vocab, m.dim, ids.data(), n_ids, ref.data());
                    return compare_all(download_floats(ctx_, ob, ref.size()), ref);
                });
            });
        }
    }
}

// --- per-row and element-wise ops -------------------------------------------------------------

void Bench::rms_norm() {
    const uint32_t dim = cfg_.shapes.dim;
    for (uint32_t rows : token_counts(cfg_.prompt)) {
        Row row{"rms_norm", fmt::format("rows={} dim={}", rows, dim), "f32"};
        guarded(row, [&] {
            const size_t n = size_t(rows) * dim;
            const auto x = random_floats(n, seed_of(row)), w = random_floats(dim, seed_of(row) + 1, 0.5f, 1.5f);
            Buffer xb = upload(ctx_, x, "bench_x"), wb = upload(ctx_, w, "bench_w");
            Buffer yb = device_buffer(ctx_, n * 4, "bench_y");
            CommandStream s(ctx_);
            s.begin(true);
            ops::rms_norm(ctx_, s, xb.slice(), wb.slice(), yb.slice(), rows, dim, 1e-5f);
            s.end();
            Row rr = row;
            rr.bytes = (2 * n + dim) * 4;
            rr.flops = 4.0 * double(n);  // square + sum, then scale and weight
            measure(std::move(rr), s, kNmseF32, [&] {
                std::vector<float> ref(n);
                ref::rms_norm(x.data(), w.data(), ref.data(), rows, dim, 1e-5f);
                return compare_all(download_floats(ctx_, yb, n), ref);
            });
        });
    }
}

void Bench::rope() {
    const ModelShapes& m = cfg_.shapes;
    for (uint32_t tokens : token_counts(cfg_.prompt)) {
        // Decode rotates the newest position of a full context, prefill a prompt from position 0.
        const uint32_t first = tokens == 1 ? cfg_.ctx - 1 : 0;
        const std::string at =
            tokens == 1 ? fmt::format("{}", first) : fmt::format("{}..{}", first, first + tokens - 1);
        Row row{"rope", fmt::format("q t={} {}x{} pos={}", tokens, m.n_heads, m.head_dim, at), "f32"};
        guarded(row, [&] {
            const size_t n = size_t(tokens) * m.n_heads * m.head_dim;
            const auto x = random_floats(n, seed_of(row));
            const auto pos = consecutive(first, tokens);
            Buffer xb = upload(ctx_, x, "bench_x"), pb = upload(ctx_, pos, "bench_pos");
            CommandStream s(ctx_);
            s.begin(true);
            ops::rope(ctx_, s, xb.slice(), pb.slice(), tokens, m.n_heads, m.head_dim, m.head_dim, m.rope_base,
                      ops::RopeLayout::Adjacent);
            s.end();
            Row rr = row;
            rr.bytes = 2 * n * 4 + tokens * 4;
            rr.flops = 3.0 * double(n);  // per pair: 4 multiplies, 2 adds (the angle's sin/cos not counted)
            // In place: the timed runs rotate further, which costs the same.
            measure(std::move(rr), s, kNmseF32, [&] {
                std::vector<float> ref = x;
                ref::rope(ref.data(), pos.data(), tokens, m.n_heads, m.head_dim, m.head_dim, m.rope_base,
                          ops::RopeLayout::Adjacent);
                return compare_all(download_floats(ctx_, xb, n), ref);
            });
        });
    }
}

void Bench::kv_store() {
    const ModelShapes& m = cfg_.shapes;
    const uint32_t row_elems = m.kv_dim(), n_ctx = std::max(cfg_.ctx, cfg_.prompt);
    for (ops::KvType kt : cfg_.kv_types)
        for (uint32_t tokens : token_counts(cfg_.prompt)) {
            const uint32_t first = tokens == 1 ? n_ctx - 1 : 0;
            Row row{"kv_store", fmt::format("t={} row={} ctx={}", tokens, row_elems, n_ctx), kv_name(kt)};
            guarded(row, [&] {
                const auto src = random_floats(size_t(tokens) * row_elems, seed_of(row));
                const auto pos = consecutive(first, tokens);
                const size_t cache_bytes = n_ctx * ops::kv_row_bytes(kt, row_elems);
                std::vector<uint8_t> cache(cache_bytes, 0);
                Buffer sb = upload(ctx_, src, "bench_src"), pb = upload(ctx_, pos, "bench_pos");
                Buffer cb = upload(ctx_, cache, "bench_cache");
                CommandStream s(ctx_);
                s.begin(true);
                ops::kv_store(ctx_, s, sb.slice(), cb.slice(), pb.slice(), tokens, row_elems, n_ctx, kt);
                s.end();
                Row rr = row;
                rr.bytes = uint64_t(tokens) * (row_elems * 4 + ops::kv_row_bytes(kt, row_elems)) + tokens * 4;
                measure(std::move(rr), s, kNmseF32, [&] {
                    std::vector<uint8_t> got(cache_bytes);
                    ctx_.download(cb, got.data(), cache_bytes);
                    ref::kv_store(src.data(), cache.data(), pos.data(), tokens, row_elems, n_ctx, kt);
                    // Compared over the whole cache: a write to a wrong row shows up too.
                    const size_t n = size_t(n_ctx) * row_elems;
                    return compare_all(kv_floats(kt, got.data(), n), kv_floats(kt, cache.data(), n));
                });
            });
        }
}

void Bench::swiglu() {
    const uint32_t ffn = cfg_.shapes.ffn;
    for (uint32_t tokens : token_counts(cfg_.prompt)) {
        Row row{"swiglu", fmt::format("t={} n={}", tokens, ffn), "f32"};
        guarded(row, [&] {
            const uint32_t n = tokens * ffn;
            const auto g = random_floats(n, seed_of(row), -4.0f, 4.0f), u = random_floats(n, seed_of(row) + 1);
            Buffer gb = upload(ctx_, g, "bench_gate"), ub = upload(ctx_, u, "bench_up");
            Buffer ob = device_buffer(ctx_, size_t(n) * 4, "bench_out");
            CommandStream s(ctx_);
            s.begin(true);
            ops::swiglu(ctx_, s, gb.slice(), ub.slice(), ob.slice(), n);
            s.end();
            Row rr = row;
            rr.bytes = 12ull * n;
            rr.flops = 5.0 * n;  // negate, exp, add, divide, multiply
            measure(std::move(rr), s, kNmseF32, [&] {
                std::vector<float> ref(n);
                ref::swiglu(g.data(), u.data(), ref.data(), n);
                return compare_all(download_floats(ctx_, ob, n), ref);
            });
        });
    }
}

void Bench::add() {
    const uint32_t dim = cfg_.shapes.dim;
    for (uint32_t tokens : token_counts(cfg_.prompt)) {
        Row row{"add", fmt::format("t={} n={}", tokens, dim), "f32"};
        guarded(row, [&] {
            const uint32_t n = tokens * dim;
            const auto a = random_floats(n, seed_of(row)), b = random_floats(n, seed_of(row) + 1);
            Buffer ab = upload(ctx_, a, "bench_a"), bb = upload(ctx_, b, "bench_b");
            Buffer ob = device_buffer(ctx_, size_t(n) * 4, "bench_out");
            CommandStream s(ctx_);
            s.begin(true);
            ops::add(ctx_, s, ab.slice(), bb.slice(), ob.slice(), n);
            s.end();
            Row rr = row;
            rr.bytes = 12ull * n;
            rr.flops = n;
            measure(std::move(rr), s, kNmseF32, [&] {
                std::vector<float> ref(n);
                ref::add(a.data(), b.data(), ref.data(), n);
                return compare_all(download_floats(ctx_, ob, n), ref);
            });
        });
    }
}

// --- logits -----------------------------------------------------------------------------------

void Bench::argmax() {
    const uint32_t n = cfg_.shapes.vocab;
    Row row{"argmax", fmt::format("rows=1 n={}", n), "f32"};
    guarded(row, [&] {
        const auto x = random_floats(n, seed_of(row), -10.0f, 10.0f);
        Buffer xb = upload(ctx_, x, "bench_logits"), ob = device_buffer(ctx_, 4, "bench_argmax");
        CommandStream s(ctx_);
        s.begin(true);
        ops::argmax(ctx_, s, xb.slice(), ob.slice(0, 4), 1, n);
        s.end();
        Row rr = row;
        rr.bytes = 4ull * n + 4;
        rr.flops = n;  // one comparison per element
        measure(std::move(rr), s, kNmseF32, [&] {
            uint32_t got = 0, ref = 0;
            ctx_.download(ob, &got, 4);
            ref::argmax(x.data(), &ref, 1, n);
            CheckResult c;
            if (got != ref) c.detail = fmt::format("argmax {} where the reference says {}", got, ref);
            return c;
        });
    });
}

void Bench::softmax() {
    const uint32_t n = cfg_.shapes.vocab;
    Row row{"softmax", fmt::format("rows=1 n={} temp=0.8", n), "f32"};
    guarded(row, [&] {
        const auto x = random_floats(n, seed_of(row), -10.0f, 10.0f);
        Buffer xb = upload(ctx_, x, "bench_logits"), yb = device_buffer(ctx_, size_t(n) * 4, "bench_probs");
        CommandStream s(ctx_);
        s.begin(true);
        ops::softmax(ctx_, s, xb.slice(), yb.slice(), 1, n, 0.8f);
        s.end();
        Row rr = row;
        rr.bytes = 8ull * n;
        rr.flops = 5.0 * n;  // max, scale, exp, sum, normalise
        measure(std::move(rr), s, kNmseF32, [&] {
            std::vector<float> ref(n);
            ref::softmax(x.data(), ref.data(), 1, n, 0.8f);
            return compare_all(download_floats(ctx_, yb, n), ref);
        });
    });
}

// --- attention --------------------------------------------------------------------------------

void Bench::attention_decode() {
    for (ops::KvType kt : cfg_.kv_types) {
        const ModelShapes& m = cfg_.shapes;
        Row row{"attention_decode",
                fmt::format("{}/{} heads hd={} kv={}", m.n_heads, m.n_kv_heads, m.head_dim, cfg_.ctx), kv_name(kt)};
        guarded(row, [&] { attention_case(row, 1, cfg_.ctx, kt); });
    }
}

void Bench::attention_prefill() {
    for (ops::KvType kt : cfg_.kv_types) {
        const ModelShapes& m = cfg_.shapes;
        Row row{
            "attention_prefill",
            fmt::format("t={} {}/{} heads hd={} kv={}", cfg_.prompt, m.n_heads, m.n_kv_heads, m.head_dim, cfg_.prompt),
            kv_name(kt)};
        guarded(row, [&] { attention_case(row, cfg_.prompt, cfg_.prompt, kt); });
    }
}

// Decode: one query at the last of kv_len positions. Prefill: n_tokens queries at positions
// 0..n_tokens-1 (a prompt from scratch, causal). The cache holds max(ctx, kv_len) rows; rows past
// kv_len are NaN, so a kernel that reads past the KV length fails the check.
void Bench::attention_case(Row row, uint32_t n_tokens, uint32_t kv_len, ops::KvType kv_type) {
    const ModelShapes& m = cfg_.shapes;
    const uint32_t n_ctx = std::max(cfg_.ctx, kv_len);
    const ops::AttentionParams p{
        n_tokens, m.n_heads, m.n_kv_heads, m.head_dim, n_ctx, 1.0f / std::sqrt(float(m.head_dim)), kv_type};
    const uint64_t seed = seed_of(row);
    const size_t row_elems = m.kv_dim(), valid = size_t(kv_len) * row_elems, total = size_t(n_ctx) * row_elems;
    auto make_cache = [&](uint64_t s) {
        const auto v = random_floats(valid, s);
        std::vector<uint8_t> bytes(n_ctx * ops::kv_row_bytes(kv_type, row_elems));
        if (kv_type == ops::KvType::Q8_0) {
            // Rows past kv_len: NaN scales.
            std::vector<float> x(total, std::numeric_limits<float>::quiet_NaN());
            std::copy(v.begin(), v.end(), x.begin());
            auto* w = reinterpret_cast<uint32_t*>(bytes.data());
            ref::kv_quantize_q8_0(x.data(), w, uint32_t(valid));
            for (size_t b = valid / ops::kKvQ8Block; b < total / ops::kKvQ8Block; ++b)
                w[b * ops::kKvQ8BlockWords] = 0x7FC00000u;
        } else if (kv_type == ops::KvType::F16) {
            auto* h = reinterpret_cast<uint16_t*>(bytes.data());
            for (size_t i = 0; i < total; ++i) h[i] = i < valid ? f32_to_f16(v[i]) : uint16_t(0x7E00);
        } else {
            auto* f = reinterpret_cast<float*>(bytes.data());
            for (size_t i = 0; i < total; ++i) f[i] = i < valid ? v[i] : std::numeric_limits<float>::quiet_NaN();
        }
        return bytes;
    };
    const auto k = make_cache(seed + 1), v = make_cache(seed + 2);
    const size_t act = size_t(n_tokens) * m.n_heads * m.head_dim;
    const auto q = random_floats(act, seed + 3, -2.0f, 2.0f);
    const auto pos = consecutive(kv_len - n_tokens, n_tokens);
    Buffer kb = upload(ctx_, k, "bench_k"), vb = upload(ctx_, v, "bench_v");
    Buffer qb = upload(ctx_, q, "bench_q"), pb = upload(ctx_, pos, "bench_pos");
    Buffer ob = device_buffer(ctx_, act * 4, "bench_out");
    Buffer sb = device_buffer(ctx_, ops::attention_scratch_bytes(ctx_, p), "bench_scratch");
    CommandStream s(ctx_);
    s.begin(true);
    ops::attention(ctx_, s, p, qb.slice(), kb.slice(), vb.slice(), pb.slice(), ob.slice(), sb.slice());
    s.end();

    // Each query attends positions 0..pos inclusive.
    uint64_t attended = 0;
    for (int32_t x : pos) attended += uint64_t(x) + 1;
    const uint64_t head_bytes = uint64_t(m.head_dim) * 4;
    row.bytes = 2ull * kv_len * ops::kv_row_bytes(kv_type, row_elems) + 2ull * n_tokens * m.n_heads * head_bytes +
                n_tokens * 4ull;
    row.flops = 4.0 * m.n_heads * m.head_dim * double(attended);

    const bool subset = 2ull * m.n_heads * m.head_dim * attended > kFullCheckMacs;
    const std::vector<uint32_t> tokens = sample(n_tokens, subset ? kStride : 1);
    row.subset = tokens.size() < n_tokens;
    if (row.subset) row.checked = fmt::format("every {}th query token", kStride);
    const double limit = kv_type == ops::KvType::F32 ? kNmseF32 : kNmseAttentionF16;
    measure(std::move(row), s, limit, [&] {
        const std::vector<float> out = download_floats(ctx_, ob, act);
        const size_t per_token = size_t(m.n_heads) * m.head_dim;
        std::vector<float> qs, got;
        std::vector<int32_t> ps;
        for (uint32_t t : tokens) {
            qs.insert(qs.end(), q.begin() + t * per_token, q.begin() + (t + 1) * per_token);
            got.insert(got.end(), out.begin() + t * per_token, out.begin() + (t + 1) * per_token);
            ps.push_back(pos[t]);
        }
        ops::AttentionParams ps_params = p;
        ps_params.n_tokens = uint32_t(tokens.size());
        std::vector<float> ref(got.size());
        ref::attention(ps_params, qs.data(), k.data(), v.data(), ps.data(), ref.data());
        return compare_all(got, ref);
    });
}

}  // namespace vkllm::apps::bench_ops
