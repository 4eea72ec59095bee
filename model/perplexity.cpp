#include "model/perplexity.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace vkllm {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Chunk `c` of the text as it is fed to the model: its first token becomes BOS when the vocab adds
// one (the chunk then reads like the start of a document to the model).
std::vector<int32_t> chunk_input(std::span<const int32_t> tokens, uint32_t n_ctx, uint32_t c, int32_t bos_id) {
    std::vector<int32_t> in(tokens.begin() + size_t(c) * n_ctx, tokens.begin() + size_t(c + 1) * n_ctx);
    if (bos_id >= 0) in[0] = bos_id;
    return in;
}

// Runs one chunk and calls score(j, logits) for j = n_ctx/2 .. n_ctx-2 in order, where the logits
// at position j predict the chunk's token j + 1.
void eval_scored_rows(const ChunkEvaluator& model, std::span<const int32_t> input,
                      const std::function<void(uint32_t j, std::span<const float> logits)>& score) {
    const uint32_t n_ctx = uint32_t(input.size()), first = n_ctx / 2, nv = model.n_vocab;
    uint32_t next = first;  // the next row expected: rows must come in order, each once
    model.eval(input, [&](uint32_t row0, std::span<const float> rows) {
        const uint32_t n = uint32_t(rows.size() / nv);
        for (uint32_t r = 0; r < n; ++r) {
            const uint32_t j = row0 + r;
            if (j < first || j > n_ctx - 2) continue;
            if (j != next)
                throw std::logic_error(fmt::format("perplexity: logits of row {} came before row {}", j, next));
            score(j, rows.subspan(size_t(r) * nv, nv));
            ++next;
        }
    });
    if (next != n_ctx - 1)
        throw std::logic_error(
            fmt::format("perplexity: the model returned the logits of rows {}..{} of {}", first, next, n_ctx - 2));
}

// NaN or Inf weights (or an overflow) would turn the estimate into NaN: name the place instead.
double checked(double nll, uint32_t chunk, uint32_t j) {
    if (!std::isfinite(nll))
        throw NonFiniteError(
            fmt::format("the model produced non-finite logits in chunk {} at position {}: its weights "
                        "hold NaN or Inf values, or the computation overflowed",
                        chunk + 1, j));
    return nll;
}

uint32_t chunks_to_run(uint32_t available, int32_t requested) {
    return requested > 0 ? std::min(available, uint32_t(requested)) : available;
}

}  // namespace

std::string read_perplexity_text(const std::string& path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::exists(path, ec)) throw PerplexityError(fmt::format("text file '{}' does not exist", path));
    if (!fs::is_regular_file(path, ec))
        throw PerplexityError(fmt::format("text path '{}' is not a regular file", path));
    std::ifstream in(path, std::ios::binary);
    if (!in) throw PerplexityError(fmt::format("cannot read the text file '{}'", path));
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // llama.cpp's -f drops one trailing newline: a file ending in "\n" tokenizes the same in both.
    if (!text.empty() && text.back() == '\n') text.pop_back();
    if (text.empty()) throw PerplexityError(fmt::format("text file '{}' is empty: there is nothing to score", path));
    return text;
}

std::vector<int32_t> perplexity_tokens(const Tokenizer& tok, std::string_view text) {
    if (text.empty()) throw PerplexityError("the text is empty: there is nothing to score");
    return tok.encode(text, true);
}

ChunkEvaluator device_evaluator(ModelGpu& model) {
    ChunkEvaluator e;
    e.n_vocab = model.config().n_vocab;
    e.eval = [&model](std::span<const int32_t> chunk, const ModelGpu::LogitsSink& sink) {
        if (chunk.size() > model.n_ctx())
            throw PerplexityError(fmt::format("chunks of {} tokens do not fit the model's context of {} tokens",
                                              chunk.size(), model.n_ctx()));
        model.reset();  // every chunk starts from an empty cache
        model.eval_all_logits(chunk, sink);
    };
    return e;
}

double NllStats::ppl() const { return count ? std::exp(sum / double(count)) : 0.0; }

double NllStats::ppl_uncertainty() const {
    if (count < 2) return 0;
    const double mean = sum / double(count), var = sum2 / double(count) - mean * mean;
    return var > 0 ? std::sqrt(var / double(count - 1)) * ppl() : 0.0;
}

double token_nll(std::span<const float> logits, int32_t token) {
    const float max_logit = *std::max_element(logits.begin(), logits.end());
    double sum_exp = 0;
    for (float v : logits) sum_exp += std::exp(double(v) - max_logit);
    return double(max_logit) + std::log(sum_exp) - double(logits[size_t(token)]);
}

KlBaseHeader kl_base_header(uint32_t n_vocab, size_t n_tokens, const PerplexityOptions& opts) {
    if (opts.n_ctx < 4)
        throw PerplexityError(
            fmt::format("-c {}: perplexity needs chunks of at least 4 tokens (the second half of "
                        "each chunk is scored)",
                        opts.n_ctx));
    if (n_tokens < 2ull * opts.n_ctx)
        throw PerplexityError(fmt::format(
            "the text tokenizes to only {} tokens, but perplexity with -c {} needs at least 2 x {} = {} tokens (two "
            "chunks, as llama-perplexity requires): use a longer text or a smaller -c",
            n_tokens, opts.n_ctx, opts.n_ctx, 2ull * opts.n_ctx));
    return {opts.n_ctx, n_vocab, chunks_to_run(uint32_t(n_tokens / opts.n_ctx), opts.n_chunks)};
}

PerplexityResult compute_perplexity(const ChunkEvaluator& model, std::span<const int32_t> tokens,
                                    const PerplexityOptions& opts, const ChunkCallback& on_chunk, KlBaseWriter* base) {
    const KlBaseHeader h = kl_base_header(model.n_vocab, tokens.size(), opts);
    if (base && (base->header().n_ctx != h.n_ctx || base->header().n_vocab != h.n_vocab ||
                 base->header().n_chunks != h.n_chunks))
        throw std::logic_error("compute_perplexity: the KL base writer's header does not match the run");
    PerplexityResult res;
    res.n_ctx = h.n_ctx;
    res.n_chunks = h.n_chunks;
    res.n_text_tokens = tokens.size();
    const auto t_start = Clock::now();
    for (uint32_t c = 0; c < h.n_chunks; ++c) {
        const auto t0 = Clock::now();
        std::span<const int32_t> text = tokens.subspan(size_t(c) * h.n_ctx, h.n_ctx);
        eval_scored_rows(model, chunk_input(tokens, h.n_ctx, c, opts.bos_id),
                         [&](uint32_t j, std::span<const float> l) {
                             res.nll.add(checked(token_nll(l, text[j + 1]), c, j));
                             if (base) base->add_row(l);
                         });
        if (on_chunk) on_chunk({c + 1, h.n_chunks, res.nll.ppl(), 0, 0, seconds_since(t0)});
    }
    if (base) base->finish();
    res.seconds = seconds_since(t_start);
    return res;
}

// --- KL divergence ---------------------------------------------------------------------------------

std::pair<double, double> KlResult::mean_and_uncertainty(double sum, double sum2, uint64_t count) {
    if (count < 1) return {0.0, 0.0};
    const double mean = sum / double(count), var = sum2 / double(count) - mean * mean;
    return {mean, var > 0 && count > 10 ? std::sqrt(var / double(count - 1)) : 0.0};
}

std::pair<double, double> KlResult::same_top_p() const {
    if (count() < 2) return {count() ? double(same_top) / double(count()) : 0.0, 0.0};
    const double p = double(same_top) / double(count());
    return {p, std::sqrt(p * (1 - p) / double(count() - 1))};
}

std::pair<double, double> KlResult::log_ppl_ratio() const {
    const auto a = mean_and_uncertainty(nll.sum, nll.sum2, count());
    const auto b = mean_and_uncertainty(nll_base.sum, nll_base.sum2, count());
    double cov = 0;
    if (count() >= 10) {
        const double n = double(count());
        cov = (sum_nll_nll_base / n - (nll.sum / n) * (nll_base.sum / n)) / (n - 1);
    }
    return {a.first - b.first, std::sqrt(std::max(0.0, a.second * a.second + b.second * b.second - 2 * cov))};
}

std::pair<double, double> KlResult::rms_p_diff() const {
    const auto mse = mean_and_uncertainty(sum_p_diff2, sum_p_diff4, count());
    const double rms = std::sqrt(mse.first);
    return {rms, rms > 0 ? 0.5 / rms * mse.second : 0.0};
}

KlResult compute_kl_divergence(const ChunkEvaluator& model, KlBaseReader& base, int32_t n_chunks, int32_t bos_id,
                               const ChunkCallback& on_chunk) {
    const KlBaseHeader& h = base.header();
    if (h.n_vocab != model.n_vocab)
        throw KlBaseError(
            fmt::format("KL-divergence base '{}' was computed with a vocab of {} tokens, but this model's "
                        "has {}: the two models must share their vocabulary",
                        base.path(), h.n_vocab, model.n_vocab));
    KlResult res;
    res.n_ctx = h.n_ctx;
    res.n_chunks = chunks_to_run(h.n_chunks, n_chunks);
    const uint32_t words = kl_row_words(h.n_vocab), first = h.n_ctx / 2, nv = h.n_vocab;
    const std::span<const int32_t> tokens = base.tokens();
    const auto t_start = Clock::now();
    for (uint32_t c = 0; c < res.n_chunks; ++c) {
        const auto t0 = Clock::now();
        const std::vector<uint16_t> rows = base.read_chunk(c);
        std::span<const int32_t> text = tokens.subspan(size_t(c) * h.n_ctx, h.n_ctx);
        eval_scored_rows(model, chunk_input(tokens, h.n_ctx, c, bos_id), [&](uint32_t j, std::span<const float> l) {
            const LogProbRow b(rows.data() + size_t(j - first) * words);
            const int32_t tok = text[j + 1];
            // This model's log-softmax, and its most likely token (the first of equal maxima).
            uint32_t top = 0;
            for (uint32_t i = 1; i < nv; ++i)
                if (l[i] > l[top]) top = i;
            double sum_exp = 0;
            for (float v : l) sum_exp += std::exp(double(v) - l[top]);
            const double log_norm = double(l[top]) + std::log(sum_exp);  // log q(i) = l[i] - log_norm
            const double nll = checked(log_norm - l[size_t(tok)], c, j);
            const double nll_base = -double(b.log_prob(uint32_t(tok)));
            // KL(base || model) over the tokens the base stored as likely enough (log p > -16).
            double kld = 0;
            uint32_t top_base = 0;
            for (uint32_t i = 0; i < nv; ++i) {
                const double lp = b.log_prob(i);
                if (lp > b.log_prob(top_base)) top_base = i;
                if (lp > -16.0) kld += std::exp(lp) * (lp - (double(l[i]) - log_norm));
            }
            res.nll.add(nll);
            res.nll_base.add(nll_base);
            res.sum_nll_nll_base += nll * nll_base;
            res.sum_kld += kld;
            res.sum_kld2 += kld * kld;
            res.kld_values.push_back(float(kld));
            const double p_diff = std::exp(-nll) - std::exp(-nll_base);
            res.sum_p_diff += p_diff;
            res.sum_p_diff2 += p_diff * p_diff;
            res.sum_p_diff4 += p_diff * p_diff * p_diff * p_diff;
            res.same_top += top == top_base;
        });
        if (on_chunk)
            on_chunk({c + 1, res.n_chunks, res.nll.ppl(), res.kld().first, res.same_top_p().first, seconds_since(t0)});
    }
    res.seconds = seconds_since(t_start);
    return res;
}

}  // namespace vkllm
