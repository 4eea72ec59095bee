// `vkllm embed`: embeddings of texts with an encoder model (BERT, bge, all-MiniLM, e5), pooled and
// normalised as llama.cpp's llama-embedding does (model/embedding.h). Vectors go to stdout, one line
// per input (or per token with --pooling none), or as OpenAI-shaped JSON with --json; the model
// banner and timing go to stderr. With --rerank QUERY and a reranker (pooling rank), each input is a
// document scored against the query instead: one "index score" line per document in input order, or
// llama-server's /v1/rerank JSON (results by descending score) with --json.
#include "apps/commands.h"
#include "apps/load_model.h"
#include "model/embedding.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <cstdio>
#include <sstream>

namespace vkllm::apps {

namespace {

struct EmbedArgs {
    std::string model, prompt, file, pooling, rerank;
    bool batch_lines = false, json = false, profile = false;
    int normalize = 2;
    uint32_t ubatch = 0, n_ctx = 0;
    CLI::Option *prompt_opt = nullptr, *file_opt = nullptr, *rerank_opt = nullptr;
    DeviceOptions device;
};

std::vector<std::string> inputs(const EmbedArgs& a) {
    if (a.prompt_opt->count() && a.file_opt->count())
        throw std::invalid_argument("give the text either with -p or with -f, not both");
    if (!a.prompt_opt->count() && !a.file_opt->count()) throw std::invalid_argument("no text: give -p TEXT or -f FILE");
    std::string text = a.prompt;
    if (a.file_opt->count()) {
        std::optional<std::string> t = read_whole_file(a.file);
        if (!t) throw std::invalid_argument(fmt::format("cannot read the text file '{}'", a.file));
        text = std::move(*t);
    }
    if (!a.batch_lines) return {text};
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
        if (!line.empty()) lines.push_back(line);
    if (lines.empty()) throw std::invalid_argument("--batch-lines: the text has no non-empty line");
    return lines;
}

// Scores each text as a document against the query; input order on stdout, or /v1/rerank's JSON.
std::string run_rerank(const EmbedArgs& a, LoadedModel& m, const std::vector<std::string>& docs, uint64_t& n_tokens) {
    nlohmann::json results = nlohmann::json::array();
    std::string out;
    const std::vector<RerankScore> scored = rerank(*m.model, *m.tokenizer, a.rerank, docs);
    for (size_t i = 0; i < docs.size(); ++i) {
        const float score = scored[i].score;
        n_tokens += scored[i].n_tokens;
        results.push_back({{"index", i}, {"relevance_score", score}});
        out += fmt::format("{} {:.6g}\n", i, score);
    }
    if (!a.json) return out;
    std::stable_sort(results.begin(), results.end(), [](const nlohmann::json& x, const nlohmann::json& y) {
        return x["relevance_score"].get<double>() > y["relevance_score"].get<double>();
    });
    return nlohmann::json({{"object", "list"},
                           {"results", results},
                           {"model", m.file->find_string("general.name").value_or("")},
                           {"usage", {{"prompt_tokens", n_tokens}, {"total_tokens", n_tokens}}}})
               .dump() +
           "\n";
}

void run_embed(const EmbedArgs& a) {
    const std::vector<std::string> texts = inputs(a);
    const bool reranking = a.rerank_opt->count() > 0;
    if (reranking && a.rerank.empty()) throw std::invalid_argument("--rerank: the query is empty");
    if (reranking && !a.pooling.empty())
        throw std::invalid_argument("--rerank scores with the model's rank pooling: no --pooling");
    EmbedOptions eo;
    eo.normalize = a.normalize;
    if (!a.pooling.empty()) {
        eo.pooling = parse_pooling(a.pooling);
        if (!eo.pooling || *eo.pooling == Pooling::Rank)
            throw std::invalid_argument(
                fmt::format("--pooling '{}': expected none, mean, cls or last{}", a.pooling,
                            eo.pooling ? " (reranking is --rerank QUERY with a reranker)" : ""));
    }
    if (a.normalize < -1) normalize_embedding({}, a.normalize);  // the error, before the model loads
    const std::string path = resolve_model_path(a.model);
    const GgufFile peek = GgufFile::open(path);
    const ModelConfig cfg = ModelConfig::from_gguf(peek);
    // Said before the upload: a reranker scores pairs, anything else embeds.
    const Pooling pooling = eo.pooling.value_or(cfg.pooling);
    if (reranking) {
        try {
            require_reranker(cfg);
        } catch (const std::invalid_argument& e) {
            throw std::invalid_argument(std::string("--rerank: ") + e.what());
        }
    }
    if (!reranking && model_role(cfg) == ModelRole::Rerank)
        throw std::invalid_argument(
            "this model is a reranker (pooling rank): its head scores a query and a document "
            "together; give --rerank QUERY to score each input as a document");
    ModelOptions mo;
    const EmbedSizes sizes = embedding_sizes(cfg, a.n_ctx, a.ubatch);
    mo.n_ctx = sizes.n_ctx;
    mo.ubatch = sizes.ubatch;
    LoadedModel m = load_model(path, a.device, mo, a.json, ModelUse::Any);
    if (a.profile) m.model->set_profiling(true);
    const auto start = std::chrono::steady_clock::now();
    nlohmann::json data = nlohmann::json::array();
    uint64_t n_tokens = 0;
    std::string out;
    if (reranking) out = run_rerank(a, m, texts, n_tokens);
    std::vector<std::vector<int32_t>> tokenized;
    for (size_t i = 0; i < texts.size() && !reranking; ++i) {
        if (texts[i].empty()) throw std::invalid_argument("embed: the text is empty");
        tokenized.push_back(m.tokenizer->encode(texts[i], true));
    }
    const std::vector<Embedding> embedded = reranking ? std::vector<Embedding>() : embed_batch(*m.model, tokenized, eo);
    for (const Embedding& e : embedded) {
        n_tokens += e.n_tokens;
        for (size_t j = 0; j < e.vectors.size(); ++j) {
            if (a.json) {
                data.push_back({{"object", "embedding"}, {"index", data.size()}, {"embedding", e.vectors[j]}});
                continue;
            }
            for (size_t d = 0; d < e.vectors[j].size(); ++d)
                out += fmt::format("{}{:.6g}", d ? " " : "", e.vectors[j][d]);
            out += '\n';
        }
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (a.profile) {  // the last forward pass's dispatches, by pipeline
        std::map<std::string, std::pair<double, int>> by;
        double total = 0;
        for (const DispatchTiming& t : m.model->last_timings()) {
            by[t.pipeline].first += t.ns * 1e-6;
            ++by[t.pipeline].second;
            total += t.ns * 1e-6;
        }
        std::vector<std::pair<std::string, std::pair<double, int>>> rows(by.begin(), by.end());
        std::sort(rows.begin(), rows.end(),
                  [](const auto& x, const auto& y) { return x.second.first > y.second.first; });
        fmt::print(stderr, "profile of the last forward pass: GPU {:.2f} ms\n", total);
        for (const auto& [name, v] : rows)
            fmt::print(stderr, "  {:>9.3f} ms {:>5.1f}%  {:>4} x  {}\n", v.first, 100 * v.first / total, v.second,
                       name);
    }
    if (a.json && !reranking) {
        const nlohmann::json doc = {{"object", "list"},
                                    {"data", data},
                                    {"model", m.file->find_string("general.name").value_or("")},
                                    {"usage", {{"prompt_tokens", n_tokens}, {"total_tokens", n_tokens}}}};
        out = doc.dump() + "\n";
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    fmt::print(
        stderr, "{}: {} input{}, {} tokens, pooling {}, normalize {}: {:.1f} ms ({:.1f} inputs/s, {:.0f} tokens/s)\n",
        reranking ? "rerank" : "embed", texts.size(), texts.size() == 1 ? "" : "s", n_tokens, pooling_name(pooling),
        reranking ? "none" : std::to_string(a.normalize), ms, texts.size() * 1000.0 / ms, n_tokens * 1000.0 / ms);
}

}  // namespace

void register_embed(CLI::App& app) {
    auto a = std::make_shared<EmbedArgs>();
    auto* cmd = app.add_subcommand(
        "embed", "Embeddings of texts with an encoder (bert) or a decoder embedding model, as llama-embedding");
    cmd->add_option("-m,--model", a->model, "GGUF embedding model")->required();
    a->prompt_opt = cmd->add_option("-p,--prompt", a->prompt, "Text to embed");
    a->file_opt = cmd->add_option("-f,--file", a->file, "File whose text to embed");
    cmd->add_flag("--batch-lines", a->batch_lines, "One input per non-empty line of the text");
    cmd->add_option("--pooling", a->pooling, "none (a vector per token), mean, cls or last; default: the model's");
    a->rerank_opt = cmd->add_option("--rerank", a->rerank,
                                    "A reranker scores each input (with --batch-lines each line) as a document against "
                                    "this query: 'index score' lines, or /v1/rerank's JSON with --json");
    cmd->add_option(
           "--normalize", a->normalize,
           "-1 none, 0 max-abs (int16 range), 1 taxicab, 2 Euclidean, p > 2 p-norm (llama.cpp's --embd-normalize)")
        ->capture_default_str();
    cmd->add_flag("--profile", a->profile, "GPU time per kernel of the last input (timestamp queries) on stderr");
    cmd->add_flag("--json", a->json, "OpenAI-shaped JSON: {data: [{index, embedding}], usage}");
    cmd->add_option("--ctx", a->n_ctx,
                    "Longest input in tokens (default: the model's context, at most 8192; a decoder's at most 2048)");
    cmd->add_option("--ubatch", a->ubatch,
                    "Tokens evaluated at once (default: an encoder's --ctx, as an input must fit; a decoder's 512)");
    a->device.add_to(cmd);
    cmd->callback([a] { run_embed(*a); });
}

}  // namespace vkllm::apps
