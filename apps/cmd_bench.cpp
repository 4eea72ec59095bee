// `vkllm bench`: prompt processing (pp) and text generation (tg) speed, load time, time to first
// token with a cold and a warm pipeline cache, peak device memory, every figure also as a fraction
// of what the device measurably can do (read bandwidth and FMA probes), and with --profile the GPU
// time per op type. With --mmproj and --image, the vision encoder's time per image too (bench_vision.h).
#include "apps/bench_vision.h"
#include "apps/bench_speculation.h"
#include "apps/commands.h"
#include "apps/load_model.h"
#include "model/arch/tensor_schema.h"
#include "model/grammar/json_schema.h"
#include "runtime/kernel_tuning.h"
#include "runtime/probes.h"
#include "serving/engine/generate.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <numeric>
#include <random>

#include <unistd.h>

namespace vkllm::apps {

namespace {

using clock_type = std::chrono::steady_clock;
double ms_since(clock_type::time_point t) {
    return std::chrono::duration<double, std::milli>(clock_type::now() - t).count();
}

struct BenchOptions {
    std::vector<std::string> models;
    uint32_t n_prompt = 512;
    uint32_t n_gen = 128;
    int reps = 5;
    uint32_t ubatch = 64;
    ops::KvType kv_type = ops::KvType::F16;
    bool json = false;
    bool profile = false;
    bool no_probes = false;
    std::string json_schema_file;  // also measure sampled decode with and without this schema
    VisionOptions vision;  // --mmproj and --image: also the vision encoder's speed on each image
    SpeculationOptions speculation;  // --draft or --lookup: also speculative decoding's figures
    std::string spec_prompt;  // its generation's prompt ("": BOS only)
    DeviceOptions device;
};

struct Stat {
    double mean = 0, stddev = 0;
};
Stat stat(const std::vector<double>& v) {
    Stat s;
    if (v.empty()) return s;
    s.mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
    double var = 0;
    for (double x : v) var += (x - s.mean) * (x - s.mean);
    s.stddev = v.size() > 1 ? std::sqrt(var / double(v.size() - 1)) : 0;
    return s;
}

// Op type of a pipeline key such as "matvec_q4_0_subgroup:64:2:1".
std::string op_type(const std::string& pipeline) {
    static const char* kinds[] = {"matvec", "matmul", "attention_merge", "attention", "rms_norm", "rope", "kv_store",
                                  "swiglu", "add",    "argmax",          "get_rows",  "softmax",  "topk"};
    for (const char* k : kinds)
        if (pipeline.rfind(k, 0) == 0) return k;
    return pipeline.substr(0, pipeline.find(':'));
}

struct ProfileRow {
    std::string op;
    int calls = 0;
    double ms = 0;
};

std::vector<ProfileRow> aggregate(const std::vector<DispatchTiming>& t) {
    std::map<std::string, ProfileRow> rows;
    for (auto& d : t) {
        auto& r = rows[op_type(d.pipeline)];
        r.op = op_type(d.pipeline);
        ++r.calls;
        r.ms += d.ns * 1e-6;
    }
    std::vector<ProfileRow> out;
    for (auto& [k, r] : rows) out.push_back(r);
    std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.ms > b.ms; });
    return out;
}

std::vector<int32_t> random_tokens(uint32_t n, uint32_t vocab, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> t(n);
    for (auto& x : t) x = int32_t(3 + rng() % (vocab - 3));
    return t;
}

// The share of each file tensor a token uses: 1, but experts_used / experts for the tensors of an
// expert stack (stacked, or one per expert), whose experts a token reads only the chosen ones of.
std::map<const GgufTensorInfo*, double> active_share(const LoadedModel& m) {
    const ModelConfig& c = m.cfg;
    std::map<const GgufTensorInfo*, double> share;
    if (c.n_expert == 0) return share;
    const double k = double(c.n_expert_used) / double(c.n_expert);
    // A split model's layers are in its stages' layouts.
    for (const ModelGpu::StageInfo& st : m.model->stages())
        for (const LayerPlaces& L : st.weights->layers)
            for (const TensorSpec& spec : layer_schema(*c.arch)) {
                if (spec.ne[2] != Dim::Experts) continue;  // the expert stacks
                const TensorPlace& p = L[spec.role];
                if (!p.present()) continue;
                if (p.source)
                    share[p.source] = k;
                else
                    for (const GgufTensorInfo* t : st.weights->buffers[p.buffer].tensors) share[t] = k;
            }
    return share;
}

// Bytes one decode step reads: every weight matrix once (the embedding only one row, a mixture's
// experts only the chosen ones) plus the KV cache up to the average position of the generated tokens.
double decode_bytes(const LoadedModel& m, double avg_kv_len, ops::KvType kv) {
    const ModelConfig& c = m.cfg;
    const auto share = active_share(m);
    double bytes = 0;
    for (auto& t : m.file->tensors()) {
        const auto it = share.find(&t);
        if (t.name == "token_embd.weight" && !c.tied_embeddings)
            bytes += double(t.n_bytes) / double(c.n_vocab);
        else
            bytes += double(t.n_bytes) * (it == share.end() ? 1.0 : it->second);
    }
    return bytes + 2.0 * c.n_layers * avg_kv_len * double(ops::kv_row_bytes(kv, c.kv_dim()));
}

// FLOPs per prompt token: 2 per weight of every matrix a token uses (not the embedding lookup; a
// mixture's chosen experts) plus attention.
double prefill_flops(const LoadedModel& m, double avg_kv_len) {
    const ModelConfig& c = m.cfg;
    const auto share = active_share(m);
    double params = 0;
    for (auto& t : m.file->tensors()) {
        const auto it = share.find(&t);
        const bool matrix = t.n_dims == 2 || it != share.end();  // expert stacks have three dims
        if (matrix && (t.name != "token_embd.weight" || c.tied_embeddings))
            params += double(t.n_elements) * (it == share.end() ? 1.0 : it->second);
    }
    return 2.0 * params + 4.0 * c.n_layers * avg_kv_len * c.n_heads * c.head_dim;
}

// The probes a run measured (null where it measured none): bandwidth for decode; for prefill f32
// FMA, or the packed 8-bit dot where the model's chunk projections take the integer-dot matmul.
struct Rooflines {
    const ProbeResult* bw = nullptr;
    const ProbeResult* fma = nullptr;
    const ProbeResult* int_dot = nullptr;
};

nlohmann::json bench_model(const std::string& path, const BenchOptions& o, const Rooflines& roof) {
    nlohmann::json j;
    j["model"] = path;
    ModelOptions lo;
    lo.ubatch = o.ubatch;
    lo.n_ctx = o.n_prompt + o.n_gen + 8;
    lo.kv_type = o.kv_type;
    o.speculation.fit_model(lo);
    if (o.speculation.on())  // bench_speculation's 64-token context with its drafts, its prompt and generation
        lo.n_ctx = std::max<uint32_t>(
            {lo.n_ctx, 64 + o.speculation.params.draft_max + 1, uint32_t(o.spec_prompt.size()) + 2 + o.n_gen});

    // --- start-up: a fresh pipeline cache directory, then the same one again
    auto cache_dir = std::filesystem::temp_directory_path() / fmt::format("vkllm-bench-cache-{}", ::getpid());
    std::filesystem::remove_all(cache_dir);
    DeviceOptions dev = o.device;
    dev.cache_dir = cache_dir.string();
    dev.no_cache = false;
    double ttft[2] = {0, 0};
    for (int warm = 0; warm < 2; ++warm) {
        auto t0 = clock_type::now();
        LoadedModel m = load_model(path, dev, lo, true);
        int32_t bos = m.tokenizer->bos_id() >= 0 ? m.tokenizer->bos_id() : 1;
        m.model->eval(std::span<const int32_t>(&bos, 1));
        (void)m.model->argmax();
        ttft[warm] = ms_since(t0);
    }
    std::filesystem::remove_all(cache_dir);
    j["ttft_cold_pipeline_cache_ms"] = ttft[0];
    j["ttft_warm_pipeline_cache_ms"] = ttft[1];

    LoadedModel m = load_model(path, o.device, lo, true);
    j["load_ms"] = m.load_ms;
    // The kernel tuning file the planners read (`vkllm tune`), or "none".
    j["tuning"] = m.ctx->caps().tuning ? m.ctx->caps().tuning->file.string() : "none";
    // The type of layer 0's query projection (a fused attn_qkv where the file has one).
    // The first attention projection the file has (latent attention with q_lora has no wq).
    const LayerPlaces& l0 = m.model->weight_layout().layers[0];
    TensorType wt = TensorType::F32;
    for (Role r : {Role::Wq, Role::Wqkv, Role::WqA, Role::WkvA})
        if (l0[r].present()) {
            wt = l0[r].type;
            break;
        }
    j["weight_type"] = std::string(type_traits(wt).name);
    j["n_params_matrices"] = prefill_flops(m, 0) / 2;  // a token's: a mixture's chosen experts only
    ModelGpu& g = *m.model;
    const uint32_t vocab = m.cfg.n_vocab;

    // --- prompt processing
    std::vector<double> pp;
    auto prompt = random_tokens(o.n_prompt, vocab, 1);
    for (int r = -1; r < o.reps; ++r) {  // r = -1: warm-up
        g.reset();
        auto t0 = clock_type::now();
        if (o.n_prompt) g.eval(prompt);
        double ms = ms_since(t0);
        if (r >= 0 && o.n_prompt) pp.push_back(o.n_prompt * 1000.0 / ms);
    }
    // --- text generation: one token at a time after a 1-token prompt, greedy on the device
    std::vector<double> tg;
    for (int r = -1; r < o.reps; ++r) {
        g.reset();
        int32_t tok = m.tokenizer->bos_id() >= 0 ? m.tokenizer->bos_id() : 1;
        g.eval(std::span<const int32_t>(&tok, 1));
        auto t0 = clock_type::now();
        for (uint32_t i = 0; i < o.n_gen; ++i) {
            tok = g.argmax();
            g.eval(std::span<const int32_t>(&tok, 1));
        }
        double ms = ms_since(t0);
        if (r >= 0 && o.n_gen) tg.push_back(o.n_gen * 1000.0 / ms);
    }
    // --- constrained decode: the serving loop (host sampling, temperature 0.8, top-k 40) with and
    // without the schema's grammar, after a 1-token prompt; tokens/s over the decode steps.
    if (!o.json_schema_file.empty() && o.n_gen > 0) {
        const std::optional<std::string> schema = read_whole_file(o.json_schema_file);
        if (!schema)
            throw std::invalid_argument(fmt::format("--json-schema-file {}: cannot open the file", o.json_schema_file));
        auto grammar = std::make_shared<const grammar::Grammar>(grammar::json_schema_grammar(*schema));
        std::vector<double> free_tps, schema_tps;
        uint64_t schema_tokens = 0, free_tokens = 0;
        double free_sample_ms = 0, schema_sample_ms = 0;  // host time choosing the tokens
        const int32_t bos = m.tokenizer->bos_id() >= 0 ? m.tokenizer->bos_id() : 1;
        for (int r = -1; r < o.reps; ++r) {
            for (const bool constrained : {false, true}) {
                engine::GenerateParams gp;
                gp.n_predict = int32_t(o.n_gen);
                gp.sampler.seed = uint64_t(r + 2);
                if (constrained) gp.grammar = grammar;
                g.reset();
                const engine::GenerateStats st =
                    engine::generate(g, *m.tokenizer, std::span<const int32_t>(&bos, 1), gp, [](std::string_view) {});
                if (r < 0 || st.decode_steps == 0) continue;
                (constrained ? schema_tps : free_tps).push_back(st.generate_tps());
                (constrained ? schema_tokens : free_tokens) += st.generated_tokens;
                (constrained ? schema_sample_ms : free_sample_ms) += st.sample_ms;
            }
        }
        const Stat fs = stat(free_tps), ss = stat(schema_tps);
        j["json_schema_file"] = o.json_schema_file;
        j["tg_sampled_tps_mean"] = fs.mean;
        j["tg_sampled_tps_stddev"] = fs.stddev;
        j["tg_schema_tps_mean"] = ss.mean;
        j["tg_schema_tps_stddev"] = ss.stddev;
        j["tg_schema_tokens_mean"] = o.reps ? double(schema_tokens) / o.reps : 0;
        if (fs.mean > 0) j["tg_schema_ratio"] = ss.mean / fs.mean;
        j["tg_sampled_sample_ms_per_token"] = free_tokens ? free_sample_ms / double(free_tokens) : 0.0;
        j["tg_schema_sample_ms_per_token"] = schema_tokens ? schema_sample_ms / double(schema_tokens) : 0.0;
    }
    Stat pps = stat(pp), tgs = stat(tg);
    j["pp_tokens"] = o.n_prompt;
    j["tg_tokens"] = o.n_gen;
    j["pp_tps_mean"] = pps.mean;
    j["pp_tps_stddev"] = pps.stddev;
    j["tg_tps_mean"] = tgs.mean;
    j["tg_tps_stddev"] = tgs.stddev;
    double dbytes = decode_bytes(m, 1.0 + o.n_gen / 2.0, lo.kv_type);
    double pflops = prefill_flops(m, o.n_prompt / 2.0);
    j["decode_bytes_per_token"] = dbytes;
    j["prefill_flops_per_token"] = pflops;
    if (roof.bw) j["decode_roofline_pct"] = 100.0 * tgs.mean * dbytes / (roof.bw->value * 1e9);
    // The chunk's plans say which arithmetic its projections run on; a model whose types mix both
    // (F16 beside Q4_K) is counted against the faster one's rate, an upper bound.
    const bool dot = g.int_dot_matmuls();
    if (const ProbeResult* rate = dot ? roof.int_dot : roof.fma) {
        j["prefill_roofline"] = arithmetic_peak_name(dot);
        j["prefill_roofline_pct"] = 100.0 * pps.mean * pflops / (rate->value * 1e9);
    }
    // A split model: the sums over its devices, and each device's part.
    MemoryPlan plan;
    for (const ModelGpu::StageInfo& st : g.stages()) {
        plan.weights += st.memory->weights;
        plan.kv_cache += st.memory->kv_cache;
        plan.kv_cache_full += st.memory->kv_cache_full;
        plan.scratch += st.memory->scratch;
    }
    j["weights_bytes"] = plan.weights;
    j["kv_type"] = ops::kv_type_name(lo.kv_type);
    j["kv_cache_bytes"] = plan.kv_cache;
    j["kv_cache_full_bytes"] = plan.kv_cache_full;
    j["scratch_bytes"] = plan.scratch;
    uint64_t peak = m.ctx->allocator().stats().peak_device_used_bytes;
    for (const auto& c : m.split_ctx) peak += c->allocator().stats().peak_device_used_bytes;
    j["peak_device_bytes"] = peak;
    if (g.stages().size() > 1) {
        nlohmann::json parts = nlohmann::json::array();
        for (const ModelGpu::StageInfo& st : g.stages())
            parts.push_back({{"name", st.caps->name},
                             {"layers", {st.layers.first, st.layers.end()}},
                             {"weights_bytes", st.memory->weights},
                             {"kv_cache_bytes", st.memory->kv_cache}});
        j["split"] = parts;
    }
    if (!o.vision.mmproj.empty()) j["vision"] = bench_vision(*m.ctx, m.cfg.dim, o.vision, o.reps, o.profile);
    if (o.speculation.on())
        j["speculation"] = bench_speculation(m, o.speculation, o.device, o.spec_prompt, o.n_gen, o.reps);

    if (o.profile) {
        g.set_profiling(true);
        nlohmann::json prof;
        double layer_params = 0;
        for (auto& t : m.file->tensors())
            if (t.n_dims == 2 && t.name.rfind("blk.", 0) == 0) layer_params += double(t.n_elements);
        auto run_phase = [&](const char* name, std::span<const int32_t> tokens, double tokens_count) {
            g.reset();
            int32_t bos = 1;
            if (tokens.size() == 1) g.eval(std::span<const int32_t>(&bos, 1));  // decode at position 1
            auto t0 = clock_type::now();
            g.eval(tokens);
            double host_ms = ms_since(t0);
            auto rows = aggregate(g.last_timings());
            double gpu_ms = 0;
            for (auto& r : rows) gpu_ms += r.ms;
            nlohmann::json ph;
            ph["wall_ms"] = host_ms;
            ph["gpu_ms"] = gpu_ms;
            ph["host_ms_per_token"] = std::max(0.0, host_ms - gpu_ms) / tokens_count;
            for (auto& r : rows) {
                nlohmann::json e = {
                    {"op", r.op}, {"calls", r.calls}, {"ms", r.ms}, {"share_pct", 100.0 * r.ms / gpu_ms}};
                // Decode: matvec streams every weight once. Prefill: matmul does 2 FLOP per weight
                // of the layer matrices per token (the head is a matvec of the last token only).
                if (r.op == "matvec" && tokens.size() == 1) e["gb_per_s"] = dbytes / (r.ms * 1e-3) * 1e-9;
                if (r.op == "matmul") e["gflop_per_s"] = 2.0 * layer_params * tokens_count / (r.ms * 1e-3) * 1e-9;
                ph["ops"].push_back(e);
            }
            prof[name] = ph;
        };
        int32_t tok = 5;
        run_phase("decode", std::span<const int32_t>(&tok, 1), 1);
        std::vector<int32_t> chunk(prompt.begin(), prompt.begin() + std::min<size_t>(o.ubatch, prompt.size()));
        if (!chunk.empty()) run_phase("prefill_chunk", chunk, double(chunk.size()));
        g.set_profiling(false);
        j["profile"] = prof;
    }
    return j;
}

std::string mib(double b) { return fmt::format("{:.1f}", b / 1048576.0); }

void print_markdown(const nlohmann::json& out) {
    if (!out.contains("device")) {
        for (const auto& r : out["results"])
            if (r.contains("split"))
                for (const auto& part : r["split"])
                    fmt::print("layers {}-{} on {}\n", part["layers"][0].get<uint32_t>(),
                               part["layers"][1].get<uint32_t>() - 1, part["name"].get<std::string>());
        fmt::print("\n");
    } else {
        const auto& dev = out["device"];
        fmt::print("device: {} ({}), read bandwidth {:.2f} GB/s, f32 FMA {:.1f} GFLOP/s{} (measured probes)\n\n",
                   dev["name"].get<std::string>(), dev["driver"].get<std::string>(), dev.value("bandwidth_gb_s", 0.0),
                   dev.value("fma_gflop_s", 0.0),
                   dev.contains("int_dot_gop_s")
                       ? fmt::format(", int8 packed dot {:.1f} GOP/s", dev["int_dot_gop_s"].get<double>())
                       : std::string());
    }
    fmt::print(
        "| model | type | pp t/s | tg t/s | tg % of BW roofline | pp % of FMA or int8 dot | load ms | TTFT cold cache "
        "ms | "
        "TTFT warm cache ms | peak device MiB (weights + KV + scratch) |\n");
    fmt::print("|---|---|---|---|---|---|---|---|---|---|\n");
    for (auto& r : out["results"]) {
        fmt::print(
            "| {} | {} | {:.1f} ± {:.1f} | {:.1f} ± {:.1f} | {} | {} | {:.0f} | {:.0f} | {:.0f} | {} ({} + {} + {}) "
            "|\n",
            std::filesystem::path(r["model"].get<std::string>()).filename().string(),
            r["weight_type"].get<std::string>(), r["pp_tps_mean"].get<double>(), r["pp_tps_stddev"].get<double>(),
            r["tg_tps_mean"].get<double>(), r["tg_tps_stddev"].get<double>(),
            r.contains("decode_roofline_pct") ? fmt::format("{:.0f}%", r["decode_roofline_pct"].get<double>()) : "-",
            r.contains("prefill_roofline_pct") ? fmt::format("{:.0f}% {}", r["prefill_roofline_pct"].get<double>(),
                                                             r["prefill_roofline"].get<std::string>())
                                               : "-",
            r["load_ms"].get<double>(), r["ttft_cold_pipeline_cache_ms"].get<double>(),
            r["ttft_warm_pipeline_cache_ms"].get<double>(), mib(r["peak_device_bytes"].get<double>()),
            mib(r["weights_bytes"].get<double>()), mib(r["kv_cache_bytes"].get<double>()),
            mib(r["scratch_bytes"].get<double>()));
    }
    for (auto& r : out["results"]) {
        if (!r.contains("tg_schema_tps_mean")) continue;
        fmt::print(
            "\nconstrained decode, {}: sampled {:.3f} ± {:.3f} t/s, with the JSON schema {} {:.3f} ± {:.3f} t/s "
            "({:.1f} tokens per answer): ratio {:.3f}; choosing a token on the host {:.3f} ms sampled, {:.3f} ms "
            "with the schema\n",
            std::filesystem::path(r["model"].get<std::string>()).filename().string(),
            r["tg_sampled_tps_mean"].get<double>(), r["tg_sampled_tps_stddev"].get<double>(),
            r["json_schema_file"].get<std::string>(), r["tg_schema_tps_mean"].get<double>(),
            r["tg_schema_tps_stddev"].get<double>(), r["tg_schema_tokens_mean"].get<double>(),
            r.value("tg_schema_ratio", 0.0), r["tg_sampled_sample_ms_per_token"].get<double>(),
            r["tg_schema_sample_ms_per_token"].get<double>());
    }
    print_vision_markdown(out["results"]);
    print_speculation_markdown(out["results"]);
    for (auto& r : out["results"]) {
        if (!r.contains("profile")) continue;
        for (auto& [phase, ph] : r["profile"].items()) {
            fmt::print("\nprofile: {} — {} (GPU {:.2f} ms, wall {:.2f} ms, host {:.3f} ms/token)\n\n",
                       std::filesystem::path(r["model"].get<std::string>()).filename().string(), phase,
                       ph["gpu_ms"].get<double>(), ph["wall_ms"].get<double>(), ph["host_ms_per_token"].get<double>());
            fmt::print("| op | calls | GPU ms | share | GB/s | GFLOP/s |\n|---|---|---|---|---|---|\n");
            for (auto& e : ph["ops"])
                fmt::print("| {} | {} | {:.3f} | {:.1f}% | {} | {} |\n", e["op"].get<std::string>(),
                           e["calls"].get<int>(), e["ms"].get<double>(), e["share_pct"].get<double>(),
                           e.contains("gb_per_s") ? fmt::format("{:.2f}", e["gb_per_s"].get<double>()) : "",
                           e.contains("gflop_per_s") ? fmt::format("{:.2f}", e["gflop_per_s"].get<double>()) : "");
        }
    }
}

void bench(const BenchOptions& o) {
    if (o.reps < 1) throw std::invalid_argument("-r must be >= 1");
    if (o.vision.mmproj.empty() && !o.vision.images.empty())
        throw std::invalid_argument("--image needs a vision encoder for the model: give its mmproj file (--mmproj)");
    if (!o.vision.mmproj.empty() && o.vision.images.empty())
        throw std::invalid_argument("--mmproj needs --image: the pictures whose encoding is timed");
    std::vector<std::string> paths;
    for (auto& m : (o.models.empty() ? std::vector<std::string>{""} : o.models)) paths.push_back(resolve_model_path(m));
    nlohmann::json out;
    ProbeResult bw, fma, int_dot;
    // A split model runs on several devices at once: one device's bandwidth and FMA rate are no
    // roofline for it, so there are no probes (each part's device is named in "split").
    const bool split = o.device.split_devices().size() > 1;
    const bool no_probes = o.no_probes || split;
    if (split && !o.no_probes)
        fmt::print(stderr, "bench: a model split over devices has no roofline figures: no probes\n");
    if (!split) {
        Context ctx(o.device.context_options());
        out["device"] = {{"name", ctx.caps().name}, {"driver", ctx.caps().driver_name + " " + ctx.caps().driver_info}};
        if (!no_probes) {
            fmt::print(stderr, "bench: measuring device bandwidth and FMA rate...\n");
            bw = probe_bandwidth(ctx);
            fma = probe_fma(ctx);
            out["device"]["bandwidth_gb_s"] = bw.value;
            out["device"]["fma_gflop_s"] = fma.value;
            // The integer-dot kernels' arithmetic ceiling.
            if (ctx.caps().int_dot_product) {
                int_dot = probe_int_dot(ctx);
                out["device"]["int_dot_gop_s"] = int_dot.value;
            }
        }
    }
    for (auto& p : paths) {
        fmt::print(stderr, "bench: {} (pp {}, tg {}, {} reps)...\n", p, o.n_prompt, o.n_gen, o.reps);
        Rooflines roof;
        if (!no_probes) roof = {&bw, &fma, int_dot.value > 0 ? &int_dot : nullptr};
        out["results"].push_back(bench_model(p, o, roof));
    }
    if (o.json)
        fmt::print("{}\n", out.dump(2));
    else
        print_markdown(out);
}

}  // namespace

void register_bench(CLI::App& app) {
    auto o = std::make_shared<BenchOptions>();
    auto* cmd = app.add_subcommand("bench", "Measure prompt and generation speed, start-up time and memory");
    cmd->add_option("-m,--model", o->models, "GGUF model(s); repeat -m to compare (default: stories260K)");
    cmd->add_option("-p,--n-prompt", o->n_prompt, "Prompt tokens for pp")
        ->check(CLI::Range(0, 65536))
        ->capture_default_str();
    cmd->add_option("-n,--n-gen", o->n_gen, "Generated tokens for tg")
        ->check(CLI::Range(0, 65536))
        ->capture_default_str();
    cmd->add_option("-r,--reps", o->reps, "Repetitions after one warm-up")
        ->check(CLI::Range(1, 1000))
        ->capture_default_str();
    cmd->add_option("--ubatch", o->ubatch, "Prompt tokens per forward chunk")
        ->check(CLI::Range(1, 4096))
        ->capture_default_str();
    add_kv_type_option(cmd, o->kv_type);
    cmd->add_flag("--json", o->json, "Print JSON instead of Markdown");
    cmd->add_flag("--profile", o->profile,
                  "GPU time per op type for one decode step and one prefill chunk (and per kernel of an image encode)");
    cmd->add_flag("--no-probes", o->no_probes, "Skip the bandwidth / FMA probes (no roofline figures)");
    cmd->add_option(
        "--json-schema-file", o->json_schema_file,
        "Also measure sampled decode (temperature 0.8, top-k 40) with and without this JSON schema's grammar");
    o->vision.add_to(cmd, true);
    o->speculation.add_to(cmd);
    cmd->add_option("--spec-prompt", o->spec_prompt,
                    "With --draft or --lookup: the prompt of the generations compared (default: BOS only)");
    o->device.add_to(cmd);
    o->device.add_split_to(cmd);
    o->device.add_tune_to(cmd);
    cmd->callback([o] { bench(*o); });
}

}  // namespace vkllm::apps
