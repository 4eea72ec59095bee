// `vkllm perplexity`: perplexity of a model over a text, chunked and scored exactly as llama.cpp's
// llama-perplexity (see model/perplexity.h), and the KL divergence of a second model against the
// log-probabilities a first one saved. Per-chunk progress and timing go to stderr, results to stdout.
#include "apps/commands.h"
#include "apps/load_model.h"
#include "model/perplexity.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

namespace vkllm::apps {

namespace {

struct PerplexityArgs {
    std::string model, text_file, base_file;
    uint32_t n_ctx = 512;
    int32_t n_chunks = -1;
    uint32_t ubatch = 0;  // 0: min(-c, 512), fewer for vocabularies too large for one binding
    ops::KvType kv_type = ops::KvType::F16;
    bool kl = false;
    CLI::Option* ctx_opt = nullptr;
    DeviceOptions device;
};

// Every Vulkan device binds at least 2^27 bytes (the spec's minimum maxStorageBufferRange), so a
// default ubatch whose logits fit that works everywhere; a larger --ubatch is checked against the
// actual device by plan_memory.
uint32_t default_ubatch(uint32_t n_ctx, uint32_t n_vocab) {
    const uint64_t fit = (1ull << 27) / (4ull * n_vocab);
    return uint32_t(std::max<uint64_t>(1, std::min<uint64_t>({n_ctx, 512, fit})));
}

// The tokenizer and vocab size without touching the device, so that bad input fails before the upload.
struct ModelInfo {
    GgufFile file;
    ModelConfig cfg;
    std::unique_ptr<Tokenizer> tok;
};
ModelInfo model_info(const std::string& path) {
    GgufFile f = GgufFile::open(path);
    ModelConfig cfg = ModelConfig::from_gguf(f);
    auto tok = make_tokenizer(f);
    return {std::move(f), cfg, std::move(tok)};
}

LoadedModel load(const PerplexityArgs& a, const std::string& path, uint32_t n_ctx, uint32_t n_vocab) {
    ModelOptions lo;
    lo.n_ctx = n_ctx;
    lo.ubatch = a.ubatch ? a.ubatch : default_ubatch(n_ctx, n_vocab);
    lo.kv_type = a.kv_type;
    lo.all_logits = true;
    return load_model(path, a.device, lo, false);
}

void print_progress(const ChunkProgress& p, bool kl) {
    if (kl)
        fmt::print(stderr, "[{}/{}] PPL {:.4f}  KLD {:.6f}  same top {:.2f}%  ({:.2f} s)\n", p.chunk, p.n_chunks, p.ppl,
                   p.kld, 100 * p.same_top, p.seconds);
    else
        fmt::print(stderr, "[{}/{}] PPL {:.4f}  ({:.2f} s)\n", p.chunk, p.n_chunks, p.ppl, p.seconds);
}

void run_perplexity(const PerplexityArgs& a, const std::string& path) {
    if (a.text_file.empty()) throw std::invalid_argument("-f TEXT is required: the text to compute perplexity over");
    const std::string text = read_perplexity_text(a.text_file);
    ModelInfo info = model_info(path);
    PerplexityOptions po;
    po.n_ctx = a.n_ctx;
    po.n_chunks = a.n_chunks;
    po.bos_id = chunk_bos(*info.tok);
    const std::vector<int32_t> tokens = perplexity_tokens(*info.tok, text);
    const KlBaseHeader h = kl_base_header(info.cfg.n_vocab, tokens.size(), po);  // checks the length first
    fmt::print(stderr,
               "perplexity: {} tokens{}, {} chunks of {} (of {} that fit), scoring the last {} tokens of "
               "each, as llama-perplexity does\n",
               tokens.size(), po.bos_id >= 0 ? " (BOS first)" : "", h.n_chunks, h.n_ctx, tokens.size() / h.n_ctx,
               h.rows_per_chunk());
    std::unique_ptr<KlBaseWriter> writer;
    if (!a.base_file.empty())
        writer = std::make_unique<KlBaseWriter>(a.base_file, h, std::span(tokens).first(size_t(h.n_chunks) * h.n_ctx));
    LoadedModel m = load(a, path, a.n_ctx, info.cfg.n_vocab);
    PerplexityResult r = compute_perplexity(
        device_evaluator(*m.model), tokens, po, [](const ChunkProgress& p) { print_progress(p, false); }, writer.get());
    const uint64_t evaluated = uint64_t(r.n_chunks) * r.n_ctx;
    fmt::print(stderr, "perplexity: {} chunks of {} tokens in {:.2f} s ({:.1f} tokens/s), {} tokens scored\n",
               r.n_chunks, r.n_ctx, r.seconds, r.seconds > 0 ? double(evaluated) / r.seconds : 0.0, r.nll.count);
    if (writer)
        fmt::print(stderr, "perplexity: saved the log-probabilities of {} positions to {}\n", r.nll.count, a.base_file);
    fmt::print("Final estimate: PPL = {:.4f} +/- {:.5f}\n", r.nll.ppl(), r.nll.ppl_uncertainty());
}

// llama.cpp's percentile: linear interpolation between the sorted values.
float percentile(const std::vector<float>& sorted, double fraction) {
    if (fraction <= 0) return sorted.front();
    if (fraction >= 1) return sorted.back();
    const double p = fraction * double(sorted.size() - 1);
    const size_t i = size_t(p);
    const double f = p - double(i);
    return float((1 - f) * sorted[i] + f * sorted[std::min(i + 1, sorted.size() - 1)]);
}

void run_kl_divergence(const PerplexityArgs& a, const std::string& path) {
    if (a.base_file.empty())
        throw std::invalid_argument(
            "--kl-divergence needs --kl-divergence-base FILE: the log-probabilities a "
            "perplexity run of the base model saved");
    KlBaseReader base(a.base_file);
    const KlBaseHeader& h = base.header();
    if (a.ctx_opt->count() && a.n_ctx != h.n_ctx)
        throw KlBaseError(
            fmt::format("-c {} does not match the context of the KL-divergence base '{}' ({} tokens per "
                        "chunk); omit -c or pass -c {}",
                        a.n_ctx, a.base_file, h.n_ctx, h.n_ctx));
    ModelInfo info = model_info(path);
    if (info.cfg.n_vocab != h.n_vocab)
        throw KlBaseError(
            fmt::format("KL-divergence base '{}' was computed with a vocab of {} tokens, but {} has {}: "
                        "the two models must share their vocabulary",
                        a.base_file, h.n_vocab, path, info.cfg.n_vocab));
    if (!a.text_file.empty()) {
        // Optional: the base stores its tokens; a text given too must be the one they came from.
        const std::vector<int32_t> tokens = perplexity_tokens(*info.tok, read_perplexity_text(a.text_file));
        const std::vector<int32_t>& stored = base.tokens();
        auto diff = std::mismatch(stored.begin(), stored.end(), tokens.begin(), tokens.end());
        if (diff.first != stored.end())
            throw KlBaseError(
                diff.second == tokens.end()
                    ? fmt::format("'{}' tokenizes to {} tokens, fewer than the {} stored in the KL-divergence base "
                                  "'{}': it is not the text the base was computed on",
                                  a.text_file, tokens.size(), stored.size(), a.base_file)
                    : fmt::format("'{}' is not the text the KL-divergence base '{}' was computed on: token {} is {} "
                                  "here and {} in the base",
                                  a.text_file, a.base_file, diff.first - stored.begin(), *diff.second, *diff.first));
    }
    fmt::print(stderr, "kl-divergence: {} chunks of {} tokens from {}\n",
               a.n_chunks > 0 ? std::min<uint32_t>(h.n_chunks, uint32_t(a.n_chunks)) : h.n_chunks, h.n_ctx,
               a.base_file);
    LoadedModel m = load(a, path, h.n_ctx, h.n_vocab);
    KlResult r = compute_kl_divergence(device_evaluator(*m.model), base, a.n_chunks, chunk_bos(*m.tokenizer),
                                       [](const ChunkProgress& p) { print_progress(p, true); });
    fmt::print(stderr, "kl-divergence: {} chunks of {} tokens in {:.2f} s, {} positions compared\n", r.n_chunks,
               r.n_ctx, r.seconds, r.count());

    auto pm = [](std::pair<double, double> v, double scale = 1) {
        return std::pair{v.first * scale, v.second * scale};
    };
    const double ppl = r.nll.ppl(), ppl_base = r.nll_base.ppl();
    const auto ratio = r.log_ppl_ratio();
    const auto kld = r.kld();
    const auto rms = pm(r.rms_p_diff(), 100);
    const auto top = pm(r.same_top_p(), 100);
    std::vector<float> sorted = r.kld_values;
    std::sort(sorted.begin(), sorted.end());
    fmt::print("Mean PPL(Q)                   : {:10.6f} ± {:10.6f}\n", ppl, r.nll.ppl_uncertainty());
    fmt::print("Mean PPL(base)                : {:10.6f} ± {:10.6f}\n", ppl_base, r.nll_base.ppl_uncertainty());
    fmt::print("Mean ln(PPL(Q)/PPL(base))     : {:10.6f} ± {:10.6f}\n", ratio.first, ratio.second);
    fmt::print("Mean    KLD: {:10.6f} ± {:10.6f}\n", kld.first, kld.second);
    fmt::print("Maximum KLD: {:10.6f}\n", sorted.back());
    fmt::print("99.0%   KLD: {:10.6f}\n", percentile(sorted, 0.99));
    fmt::print("Median  KLD: {:10.6f}\n", percentile(sorted, 0.5));
    fmt::print("RMS Δp    : {:6.3f} ± {:5.3f} %\n", rms.first, rms.second);
    fmt::print("Same top p: {:6.3f} ± {:5.3f} %\n", top.first, top.second);
}

}  // namespace

void register_perplexity(CLI::App& app) {
    auto a = std::make_shared<PerplexityArgs>();
    auto* cmd = app.add_subcommand(
        "perplexity",
        "Perplexity over a text, computed as llama.cpp's llama-perplexity does (the numbers compare directly):\n"
        "the file minus one trailing newline is tokenized once (BOS first when the vocab adds BOS), cut into\n"
        "non-overlapping chunks of -c tokens (all whole chunks; at least 2 needed), each evaluated from an empty\n"
        "cache with BOS in place of its first token; the logits at positions c/2 .. c-2 score the tokens that\n"
        "follow them. Prints PPL after each chunk (stderr) and 'Final estimate: PPL = X +/- Y' (stdout).\n"
        "--kl-divergence-base FILE saves the log-probabilities (llama.cpp's file layout); adding --kl-divergence\n"
        "runs another model over the stored tokens and reports KL divergence, top-token agreement and both PPLs.");
    cmd->add_option("-m,--model", a->model, "GGUF model file (default: ../shared/models/stories260K.gguf)");
    cmd->add_option("-f,--file", a->text_file, "Text file (required, except with --kl-divergence)");
    a->ctx_opt = cmd->add_option("-c,--ctx", a->n_ctx, "Tokens per chunk (the context of each evaluation)")
                     ->check(positive_number())
                     ->capture_default_str();
    cmd->add_option("--chunks", a->n_chunks, "Evaluate only the first N chunks (default: all that fit)")
        ->check(positive_number());
    cmd->add_option("--ubatch", a->ubatch, "Tokens per forward pass (default: min(-c, 512))")
        ->check(CLI::Range(1, 4096));
    add_kv_type_option(cmd, a->kv_type);
    cmd->add_option("--kl-divergence-base", a->base_file,
                    "Without --kl-divergence: save the log-probabilities of the scored positions to FILE; with it: "
                    "read them from FILE");
    cmd->add_flag("--kl-divergence", a->kl, "Compare the model with the base saved in --kl-divergence-base");
    a->device.add_to(cmd);
    a->device.add_split_to(cmd);
    cmd->callback([a] {
        const std::string path = resolve_model_path(a->model);
        if (a->kl)
            run_kl_divergence(*a, path);
        else
            run_perplexity(*a, path);
    });
}

}  // namespace vkllm::apps
