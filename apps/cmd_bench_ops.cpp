// `vkllm bench-ops`: every kernel at LLaMA shapes, checked against its C++ reference, then timed with
// timestamp queries; GB/s and GFLOP/s, each also as a fraction of what the device probes measured.
#include "apps/app_options.h"
#include "apps/bench_ops.h"
#include "apps/commands.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <stdexcept>

namespace vkllm::apps {

namespace {

using bench_ops::Row;
using bench_ops::Status;

struct BenchOpsOptions {
    std::string shapes = "tinyllama";
    std::vector<std::string> types = {"q4_0", "q8_0", "f16"};
    std::vector<std::string> ops;  // empty: all
    int reps = 5;
    uint32_t prompt = 512, ctx = 2048;
    bool json = false;
    std::string kernels = "default";
    DeviceOptions device;
    CLI::Option* prompt_opt = nullptr;
    CLI::Option* ctx_opt = nullptr;
};

struct Probes {
    ProbeResult bandwidth, fma;
    ProbeResult int_dot;  // value 0: the device has no integer dot product
};
std::string int_dot_text(const Probes& pr) {
    return pr.int_dot.value > 0 ? fmt::format(", int8 packed dot {:.1f} GOP/s", pr.int_dot.value) : "";
}

bench_ops::Config make_config(const BenchOpsOptions& o) {
    bench_ops::Config c;
    c.shapes = bench_ops::find_shapes(o.shapes);
    std::vector<std::string> names = o.types;
    if (std::find(names.begin(), names.end(), "all") != names.end()) {
        names.clear();
        for (TensorType t : kAllTensorTypes) names.emplace_back(type_traits(t).lower);
    }
    for (const std::string& t : names) {
        const TensorType tt = bench_ops::parse_type(t);
        if (std::find(c.types.begin(), c.types.end(), tt) == c.types.end()) c.types.push_back(tt);
        // A KV cache is f16, f32 or q8_0: those of --types also select the cache types.
        const auto kv = ops::parse_kv_type(type_traits(tt).lower);
        if (kv && std::find(c.kv_types.begin(), c.kv_types.end(), *kv) == c.kv_types.end()) c.kv_types.push_back(*kv);
    }
    if (c.kv_types.empty()) c.kv_types.push_back(ops::KvType::F16);
    for (const std::string& op : bench_ops::op_names())
        if (o.ops.empty() || std::find(o.ops.begin(), o.ops.end(), op) != o.ops.end()) c.ops.push_back(op);
    c.reps = o.reps;
    c.all_kernels = o.kernels == "all";
    c.prompt = o.prompt_opt->count() ? o.prompt : c.shapes.default_prompt;
    c.ctx = o.ctx_opt->count() ? o.ctx : c.shapes.default_ctx;
    return c;
}

const char* status_name(Status s) {
    switch (s) {
        case Status::Ok: return "ok";
        case Status::Failed: return "FAILED";
        case Status::Skipped: return "skipped";
    }
    return "?";
}

double pct(double value, double of) { return of > 0 ? 100.0 * value / of : 0; }
// A row's arithmetic peak: f32 FMA, or the int8 packed dot for the integer-dot kernels.
double peak(const Row& r, const Probes& pr) { return r.int_dot ? pr.int_dot.value : pr.fma.value; }

nlohmann::json row_json(const Row& r, const Probes& pr) {
    nlohmann::json j = {
        {"op", r.op},
        {"shape", r.shape},
        {"type", r.type},
        {"status", status_name(r.status)},
        {"check",
         {{"passed", r.status == Status::Ok},
          {"nmse", r.nmse},
          {"limit", r.nmse_limit},
          {"checked", r.checked},
          {"subset", r.subset}}},
        {"bytes", r.bytes},
        {"flops", r.flops},
    };
    if (!r.note.empty()) j["note"] = r.note;
    if (r.status != Status::Ok) return j;
    j["reps"] = r.reps;
    j["timer"] = r.host_timer ? "host" : "timestamps";
    j["timed_check_run"] = r.timed_check;
    j["best_us"] = r.best_ns * 1e-3;
    j["mean_us"] = r.mean_ns * 1e-3;
    j["gbs"] = r.gbs();
    j["bw_pct"] = pct(r.gbs(), pr.bandwidth.value);
    if (r.flops > 0) {
        j["gflops"] = r.gflops();
        j["peak_pct"] = pct(r.gflops(), peak(r, pr));
        j["peak"] = arithmetic_peak_name(r.int_dot);
    }
    return j;
}

std::string shapes_line(const bench_ops::Config& c) {
    const auto& s = c.shapes;
    return fmt::format("{} (dim {}, heads {}/{}, head_dim {}, ffn {}, vocab {}), prompt {}, ctx {}", s.name, s.dim,
                       s.n_heads, s.n_kv_heads, s.head_dim, s.ffn, s.vocab, c.prompt, c.ctx);
}

// Display width: µ, — and † are one column each, but several bytes.
size_t display_width(const std::string& s) {
    size_t w = 0;
    for (unsigned char c : s) w += (c & 0xC0) != 0x80;
    return w;
}

void print_markdown(const std::vector<Row>& rows, const bench_ops::Config& cfg, const Context& ctx, const Probes& pr) {
    fmt::print("## vkllm bench-ops: {}\n\n", shapes_line(cfg));
    fmt::print("Device: {} ({} {}). Measured probes: read bandwidth {:.1f} GB/s, f32 FMA {:.1f} GFLOP/s{}.\n",
               ctx.caps().name, ctx.caps().driver_name, ctx.caps().driver_info, pr.bandwidth.value, pr.fma.value,
               int_dot_text(pr));
    fmt::print(
        "Each row was checked against its C++ reference first, then timed: best and mean of the timed runs, {}; "
        "GB/s and GFLOP/s from the best time.\n\n",
        ctx.caps().timestamps ? "GPU timestamps summed over the op's dispatches"
                              : "host time around each submission (the device has no timestamps)");

    std::vector<std::vector<std::string>> cells = {
        {"op", "shape", "type", "best µs", "mean µs", "reps", "GB/s", "%BW", "GFLOP/s", "%peak", "check NMSE"}};
    bool any_subset = false, any_host = false, any_check_timed = false;
    for (const Row& r : rows) {
        std::vector<std::string> c = {r.op, r.shape, r.type};
        if (r.status == Status::Ok) {
            const std::string h = r.host_timer ? " h" : "";
            any_host = any_host || r.host_timer;
            c.push_back(fmt::format("{:.1f}{}", r.best_ns * 1e-3, h));
            c.push_back(fmt::format("{:.1f}", r.mean_ns * 1e-3));
            c.push_back(fmt::format("{}{}", r.reps, r.timed_check ? " c" : ""));
            any_check_timed = any_check_timed || r.timed_check;
            c.push_back(fmt::format("{:.3g}", r.gbs()));
            c.push_back(fmt::format("{:.3g}", pct(r.gbs(), pr.bandwidth.value)));
            c.push_back(r.flops > 0 ? fmt::format("{:.3g}", r.gflops()) : "—");
            c.push_back(r.flops > 0 ? fmt::format("{:.3g}", pct(r.gflops(), peak(r, pr))) : "—");
            c.push_back(fmt::format("{:.2g}{}", r.nmse, r.subset ? " †" : ""));
            any_subset = any_subset || r.subset;
        } else {
            c.push_back(r.status == Status::Failed ? "**FAILED**" : "skipped");
            for (int i = 0; i < 6; ++i) c.push_back("");
            c.push_back(r.note);
        }
        cells.push_back(std::move(c));
    }
    std::vector<size_t> width(cells[0].size(), 0);
    for (auto& row : cells)
        for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], display_width(row[i]));
    // Text columns left-aligned, numbers right-aligned; the last column also carries the reason a
    // row failed or was skipped, which reads better on the left.
    const size_t last = width.size() - 1;
    auto left = [&](size_t i) { return i < 3 || i == last; };
    auto print_row = [&](const std::vector<std::string>& row) {
        std::string line = "|";
        for (size_t i = 0; i < row.size(); ++i) {
            const std::string pad(width[i] - display_width(row[i]), ' ');
            line += " " + (left(i) ? row[i] + pad : pad + row[i]) + " |";
        }
        fmt::print("{}\n", line);
    };
    print_row(cells[0]);
    std::string rule = "|";
    for (size_t i = 0; i < width.size(); ++i)
        rule += (left(i) ? ":" + std::string(width[i] + 1, '-') : std::string(width[i] + 1, '-') + ":") + "|";
    fmt::print("{}\n", rule);
    for (size_t i = 1; i < cells.size(); ++i) print_row(cells[i]);

    fmt::print(
        "\n%BW and %peak: of the measured probes above (%peak: of f32 FMA, or of the int8 packed dot for the "
        "int-dot rows). GFLOP/s: 2mnk for linear, 4 * heads * head_dim per "
        "attended key, a rough per-element count for the small ops (— for pure data movement).\n");
    if (any_subset)
        fmt::print(
            "†: the reference was computed for a sample of the outputs (every 17th row, plus the last) to keep "
            "the host side quick; `--json` names the sample per row.\n");
    if (any_host) fmt::print("h: host time around the submission (no timestamps on this device).\n");
    if (any_check_timed)
        fmt::print("c: one run took longer than the {:.0f} s row budget, so the checked run is the only timed one.\n",
                   cfg.row_budget_s);
}

void bench_ops_main(const BenchOpsOptions& o) {
    const bench_ops::Config cfg = make_config(o);
    Context ctx(o.device.context_options());
    fmt::print(stderr, "bench-ops: {} on {}\n", shapes_line(cfg), ctx.caps().name);
    fmt::print(stderr, "bench-ops: probing read bandwidth and FMA rate...\n");
    Probes pr{probe_bandwidth(ctx), probe_fma(ctx), {}};
    if (ctx.caps().int_dot_product) pr.int_dot = probe_int_dot(ctx);
    fmt::print(stderr, "bench-ops: measured {:.1f} GB/s read, {:.1f} GFLOP/s f32 FMA{}\n", pr.bandwidth.value,
               pr.fma.value, int_dot_text(pr));

    bench_ops::Bench bench(ctx, cfg, [](const Row& r, size_t i) {
        if (r.status == Status::Ok)
            fmt::print(stderr, "[{:3}] {} {} {}: {:.1f} µs, {:.3g} GB/s, nmse {:.2g}\n", i, r.op, r.shape, r.type,
                       r.best_ns * 1e-3, r.gbs(), r.nmse);
        else
            fmt::print(stderr, "[{:3}] {} {} {}: {}: {}\n", i, r.op, r.shape, r.type, status_name(r.status), r.note);
    });
    bench.run();
    const std::vector<Row>& rows = bench.rows();

    if (o.json) {
        nlohmann::json out;
        out["device"] = {{"name", ctx.caps().name},
                         {"driver", ctx.caps().driver_name + " " + ctx.caps().driver_info},
                         {"timestamps", ctx.caps().timestamps}};
        const auto& s = cfg.shapes;
        out["shapes"] = {{"name", s.name},         {"dim", s.dim}, {"n_heads", s.n_heads}, {"n_kv_heads", s.n_kv_heads},
                         {"head_dim", s.head_dim}, {"ffn", s.ffn}, {"vocab", s.vocab},     {"prompt", cfg.prompt},
                         {"ctx", cfg.ctx}};
        out["probes"] = {{"bandwidth_gbs", pr.bandwidth.value}, {"fma_gflops", pr.fma.value}};
        if (pr.int_dot.value > 0) out["probes"]["int_dot_gops"] = pr.int_dot.value;
        out["reps"] = cfg.reps;
        out["results"] = nlohmann::json::array();
        for (const Row& r : rows) out["results"].push_back(row_json(r, pr));
        out["failed"] =
            std::count_if(rows.begin(), rows.end(), [](const Row& r) { return r.status == Status::Failed; });
        fmt::print("{}\n", out.dump(2));
    } else {
        print_markdown(rows, cfg, ctx, pr);
    }
    std::fflush(stdout);

    std::string failed;
    size_t n_failed = 0;
    for (const Row& r : rows)
        if (r.status == Status::Failed) {
            failed += fmt::format("\n  FAILED {} {} {}: {}", r.op, r.shape, r.type, r.note);
            ++n_failed;
        }
    if (n_failed)
        throw std::runtime_error(fmt::format("{} of {} benchmark rows failed:{}", n_failed, rows.size(), failed));
}

}  // namespace

void register_bench_ops(CLI::App& app) {
    auto* cmd =
        app.add_subcommand("bench-ops", "Check each kernel against its C++ reference, then time it at LLaMA shapes");
    auto o = std::make_shared<BenchOpsOptions>();
    std::vector<std::string> shape_names;
    for (const auto& s : bench_ops::shape_sets()) shape_names.push_back(s.name);
    cmd->add_option("--shapes", o->shapes,
                    "Shape set: tinyllama, llama2-7b, llama3-8b, or small (a quick set for tests)")
        ->check(CLI::IsMember(shape_names))
        ->capture_default_str();
    std::vector<std::string> type_names;
    for (TensorType t : kAllTensorTypes) type_names.emplace_back(type_traits(t).lower);
    cmd->add_option("--types", o->types,
                    "Weight types, comma-separated, or all (" + fmt::format("{}", fmt::join(type_names, ", ")) +
                        "); f16/f32/q8_0 among them also select the KV cache types (default f16)")
        ->delimiter(',')
        ->transform([type_names](std::string v) {
            if (v != "all" && std::find(type_names.begin(), type_names.end(), v) == type_names.end())
                throw CLI::ValidationError("--types", "unknown weight type '" + v + "'");
            return v;
        })
        ->capture_default_str();
    cmd->add_option(
           "--ops", o->ops,
           "Ops to run, comma-separated (default all): " + fmt::format("{}", fmt::join(bench_ops::op_names(), ", ")))
        ->delimiter(',')
        ->check(CLI::IsMember(bench_ops::op_names()));
    cmd->add_option("-r,--reps", o->reps, "Timed repetitions per row (fewer when a row runs past ~2 s)")
        ->check(CLI::Range(1, 100000))
        ->capture_default_str();
    o->prompt_opt = cmd->add_option("--prompt", o->prompt,
                                    "Prompt tokens for the matmul and prefill shapes (default 512; 64 for small)")
                        ->check(CLI::Range(1, 65536));
    o->ctx_opt = cmd->add_option("--ctx", o->ctx, "KV length for decode attention (default 2048; 256 for small)")
                     ->check(CLI::Range(1, 1 << 20));
    cmd->add_option("--kernels", o->kernels,
                    "matvec and matmul: default (the kernel the planner picks here) or all (every row of the "
                    "linear-kernel table the device runs and that serves the shape, each forced in turn)")
        ->check(CLI::IsMember({"default", "all"}))
        ->capture_default_str();
    cmd->add_flag("--json", o->json, "Print JSON instead of a Markdown table");
    o->device.add_to(cmd);
    cmd->callback([o] { bench_ops_main(*o); });
}

}  // namespace vkllm::apps
