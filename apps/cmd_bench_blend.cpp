// `vkllm bench-blend`: what CacheBlend (model/forward/blend.h) buys and costs. TEXT is cut into
// documents that are cached on their own; a prompt then puts them in another order after a new
// prefix, and a question follows. Time to first token of that prompt with a full prefill and with
// the documents blended from the cache, and how close the blended run's next-token distributions
// stay to the full prefill's over the question and 32 tokens of its greedy continuation
// (teacher-forced): top-1 agreement and mean KL divergence, with the recompute and without.
#include "apps/bench_stats.h"
#include "apps/blend_options.h"
#include "apps/commands.h"
#include "apps/load_model.h"
#include "model/forward/blend.h"
#include "model/tokenizer/tokenizer.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <filesystem>

namespace vkllm::apps {

namespace {

using clock_type = std::chrono::steady_clock;

struct BlendBenchOptions {
    std::string model, text_file;
    uint32_t chunks = 4, chunk_tokens = 96;
    float ratio = 0.15f;
    std::string prefix = "Read the passages below, then answer.";
    std::string question = " Question: what happened at the end? Answer:";
    uint32_t n_cont = 32;
    int reps = 5;
    uint32_t ubatch = 64;
    ops::KvType kv_type = ops::KvType::F16;
    bool json = false;
    DeviceOptions device;
};

// The prompt's parts as token ids: documents in their cached order, and the order they are used in.
struct BlendPrompt {
    std::vector<int32_t> prefix, question;
    std::vector<std::vector<int32_t>> docs;
    std::vector<size_t> order;  // docs[order[i]] is the i-th in the prompt
    std::vector<int32_t> full() const {
        std::vector<int32_t> t = prefix;
        for (size_t d : order) t.insert(t.end(), docs[d].begin(), docs[d].end());
        t.insert(t.end(), question.begin(), question.end());
        return t;
    }
};

BlendPrompt make_prompt(const BlendBenchOptions& o, const Tokenizer& tok) {
    if (o.text_file.empty()) throw std::invalid_argument("-f TEXT is required: the text cut into documents");
    const std::optional<std::string> text = read_whole_file(o.text_file);
    if (!text) throw std::invalid_argument(fmt::format("-f {}: cannot open the file", o.text_file));
    const std::vector<int32_t> ids = tok.encode(*text, false);
    const uint64_t need = uint64_t(o.chunks) * o.chunk_tokens;
    if (ids.size() < need)
        throw std::invalid_argument(fmt::format("-f {}: {} tokens, fewer than --chunks {} x --chunk-tokens {} = {}",
                                                o.text_file, ids.size(), o.chunks, o.chunk_tokens, need));
    BlendPrompt p;
    p.prefix = tok.encode(o.prefix, true);
    p.question = tok.encode(o.question, false);
    if (p.question.empty()) throw std::invalid_argument("--question must have at least one token");
    for (uint32_t c = 0; c < o.chunks; ++c)
        p.docs.emplace_back(ids.begin() + long(c) * o.chunk_tokens, ids.begin() + long(c + 1) * o.chunk_tokens);
    for (size_t d = p.docs.size(); d-- > 0;) p.order.push_back(d);  // the reverse of the text's order
    return p;
}

// Each document evaluated alone from position 0 (in sequence 1), as a document store keeps it.
std::vector<KvRows> cache_documents(ModelGpu& g, const BlendPrompt& p) {
    std::vector<KvRows> out;
    for (const auto& d : p.docs) {
        g.reset(1);
        g.eval(1, d);
        out.push_back(g.export_kv(1, 0, uint32_t(d.size())));
    }
    g.reset(1);
    return out;
}

std::vector<BlendDoc> blend_docs(const BlendPrompt& p, const std::vector<KvRows>& cached) {
    std::vector<BlendDoc> bd;
    for (size_t d : p.order) bd.push_back({p.docs[d], &cached[d]});
    return bd;
}

double ms_since(clock_type::time_point t) {
    return std::chrono::duration<double, std::milli>(clock_type::now() - t).count();
}

// Median ms from an empty sequence 0 to the first token's argmax, full prefill and blended.
std::pair<double, double> time_to_first_token(ModelGpu& g, const BlendPrompt& p, const std::vector<KvRows>& cached,
                                              float ratio, int reps) {
    const std::vector<int32_t> full = p.full();
    const std::vector<BlendDoc> bd = blend_docs(p, cached);
    std::vector<double> full_ms, blend_ms;
    for (int r = -1; r < reps; ++r) {  // r = -1: warm-up (recordings, pipelines)
        g.reset(0);
        auto t0 = clock_type::now();
        g.eval(0, full);
        (void)g.argmax();
        if (r >= 0) full_ms.push_back(ms_since(t0));
        g.reset(0);
        t0 = clock_type::now();
        g.eval(0, p.prefix);
        blend_documents(g, 0, bd, ratio, p.question);
        (void)g.argmax();
        if (r >= 0) blend_ms.push_back(ms_since(t0));
    }
    return {median(full_ms), median(blend_ms)};
}

struct Agreement {
    double top1 = 0, kl = 0;
};

// Top-1 agreement and mean KL(want || got) over rows of n_vocab logits.
Agreement compare(const std::vector<float>& want, const std::vector<float>& got, uint32_t n_vocab) {
    const size_t rows = want.size() / n_vocab;
    Agreement a;
    for (size_t r = 0; r < rows; ++r) {
        const float* x = want.data() + r * n_vocab;
        const float* y = got.data() + r * n_vocab;
        const size_t ax = size_t(std::max_element(x, x + n_vocab) - x),
                     ay = size_t(std::max_element(y, y + n_vocab) - y);
        a.top1 += ax == ay;
        double zx = 0, zy = 0;
        for (uint32_t i = 0; i < n_vocab; ++i)
            zx += std::exp(double(x[i]) - x[ax]), zy += std::exp(double(y[i]) - y[ay]);
        double kl = 0;
        for (uint32_t i = 0; i < n_vocab; ++i) {
            const double lp = double(x[i]) - x[ax] - std::log(zx), lq = double(y[i]) - y[ay] - std::log(zy);
            kl += std::exp(lp) * (lp - lq);
        }
        a.kl += kl;
    }
    a.top1 /= double(rows);
    a.kl /= double(rows);
    return a;
}

struct Quality {
    Agreement blend, no_recompute;
    uint32_t recomputed = 0, blended_tokens = 0;
};

// The full prefill's logits over the question and its greedy continuation, against the blended
// run's and the import-only run's, all teacher-forced with the same tokens.
Quality measure_quality(ModelGpu& g, const BlendPrompt& p, const std::vector<KvRows>& cached, float ratio,
                        uint32_t n_cont) {
    const uint32_t n_vocab = g.config().n_vocab;
    std::vector<int32_t> full = p.full();
    g.reset(0);
    g.eval(0, full);
    std::vector<int32_t> tail = p.question;  // the rows compared: question, then continuation
    for (uint32_t i = 0; i < n_cont; ++i) {
        const int32_t t = g.argmax();
        tail.push_back(t);
        g.eval(0, std::span(&t, 1));
    }
    tail.pop_back();  // its logits are not compared: the rows are those predicting the tail's next tokens
    full.resize(full.size() - p.question.size());
    const auto rows_of = [&](std::span<const int32_t> tokens) {
        std::vector<float> out;
        g.eval_all_logits(tokens,
                          [&](uint32_t, std::span<const float> r) { out.insert(out.end(), r.begin(), r.end()); });
        return out;
    };
    g.reset(0);
    g.eval(0, full);
    const std::vector<float> want = rows_of(tail);
    const std::vector<BlendDoc> bd = blend_docs(p, cached);
    Quality q;
    g.reset(0);
    g.eval(0, p.prefix);
    const BlendResult br = blend_documents(g, 0, bd, ratio);
    q.recomputed = uint32_t(br.recomputed.size());
    q.blended_tokens = br.tokens;
    q.blend = compare(want, rows_of(tail), n_vocab);
    g.reset(0);
    g.eval(0, p.prefix);
    for (const BlendDoc& d : bd) g.import_kv(0, *d.kv);
    q.no_recompute = compare(want, rows_of(tail), n_vocab);
    return q;
}

void bench_blend(const BlendBenchOptions& o) {
    const std::string path = resolve_model_path(o.model.empty() ? default_model_path() : o.model);
    ModelOptions mo;
    mo.n_seq = 2;
    mo.ubatch = o.ubatch;
    mo.kv_type = o.kv_type;
    // The prompt before anything is uploaded: a short text fails first.
    const BlendPrompt p = make_prompt(o, *make_tokenizer(GgufFile::open(path)));
    const uint64_t prompt_tokens = p.full().size();
    mo.n_ctx = uint32_t(prompt_tokens + o.n_cont + 1);
    nlohmann::json j;
    {
        // Two loads: every-token logits (the quality figures) would slow the timed prefill.
        LoadedModel m = load_model(path, o.device, mo, o.json);
        const std::vector<KvRows> cached = cache_documents(*m.model, p);
        const auto [full_ms, blend_ms] = time_to_first_token(*m.model, p, cached, o.ratio, o.reps);
        j["ttft_full_ms"] = full_ms;
        j["ttft_blend_ms"] = blend_ms;
        j["speedup"] = blend_ms > 0 ? full_ms / blend_ms : 0.0;
        uint64_t bytes = 0;
        for (const KvRows& k : cached) bytes += k.bytes();
        j["document_kv_bytes"] = bytes;
    }
    mo.all_logits = true;
    LoadedModel m = load_model(path, o.device, mo, true);
    const std::vector<KvRows> cached = cache_documents(*m.model, p);
    const Quality q = measure_quality(*m.model, p, cached, o.ratio, o.n_cont);
    j["model"] = path;
    j["chunks"] = o.chunks;
    j["chunk_tokens"] = o.chunk_tokens;
    j["prompt_tokens"] = prompt_tokens;
    j["blend_ratio"] = o.ratio;
    j["recompute_ratio"] = q.blended_tokens ? double(q.recomputed) / q.blended_tokens : 0.0;
    j["compared_rows"] = p.question.size() + o.n_cont;
    j["top1_agreement"] = q.blend.top1;
    j["kl_divergence"] = q.blend.kl;
    j["top1_agreement_no_recompute"] = q.no_recompute.top1;
    j["kl_divergence_no_recompute"] = q.no_recompute.kl;
    if (o.json) {
        fmt::print("{}\n", j.dump(2));
        return;
    }
    fmt::print(
        "| model | documents | prompt | ttft full ms | ttft blend ms | speed-up | recompute | top-1 | KL | KL no "
        "recompute |\n");
    fmt::print("|---|---|---|---|---|---|---|---|---|---|\n");
    fmt::print("| {} | {} x {} | {} | {:.2f} | {:.2f} | {:.2f}x | {:.3f} | {:.3f} | {:.5f} | {:.5f} |\n",
               std::filesystem::path(path).filename().string(), o.chunks, o.chunk_tokens, prompt_tokens,
               j["ttft_full_ms"].get<double>(), j["ttft_blend_ms"].get<double>(), j["speedup"].get<double>(),
               j["recompute_ratio"].get<double>(), q.blend.top1, q.blend.kl, q.no_recompute.kl);
}

}  // namespace

void register_bench_blend(CLI::App& app) {
    auto o = std::make_shared<BlendBenchOptions>();
    auto* cmd = app.add_subcommand("bench-blend",
                                   "Measure CacheBlend: time to first token and answer quality with documents reused "
                                   "from a cache at new positions");
    cmd->add_option("-m,--model", o->model, "GGUF model (default: stories260K)");
    cmd->add_option("-f,--file", o->text_file, "Text cut into the documents")->required();
    cmd->add_option("--chunks", o->chunks, "Documents")->check(CLI::Range(1, 64))->capture_default_str();
    cmd->add_option("--chunk-tokens", o->chunk_tokens, "Tokens per document")
        ->check(CLI::Range(1, 65536))
        ->capture_default_str();
    add_blend_ratio_option(cmd, o->ratio);
    cmd->add_option("--prefix", o->prefix, "Text before the documents (after BOS)")->capture_default_str();
    cmd->add_option("--question", o->question, "Text after the documents")->capture_default_str();
    cmd->add_option("-r,--reps", o->reps, "Timed repetitions after one warm-up")
        ->check(CLI::Range(1, 1000))
        ->capture_default_str();
    cmd->add_option("--ubatch", o->ubatch, "Prompt tokens per forward chunk")
        ->check(CLI::Range(1, 4096))
        ->capture_default_str();
    add_kv_type_option(cmd, o->kv_type);
    cmd->add_flag("--json", o->json, "Print JSON instead of Markdown");
    o->device.add_to(cmd);
    cmd->callback([o] { bench_blend(*o); });
}

}  // namespace vkllm::apps
