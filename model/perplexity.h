// Perplexity and KL divergence over a text, computed the way llama.cpp's `llama-perplexity` does,
// so the numbers of the two programs can be compared directly:
//
// - the text (one trailing '\n' of the file dropped by the caller: see read_perplexity_text) is
//   tokenized once, with BOS in front when the vocab adds BOS;
// - it needs at least 2 * n_ctx tokens; it is cut into floor(tokens / n_ctx) non-overlapping chunks
//   of n_ctx tokens (the first n_chunks of them when n_chunks > 0); the tail is unused;
// - each chunk is evaluated from an empty KV cache at positions 0..n_ctx-1, with its first token
//   replaced by BOS when the vocab adds BOS;
// - with first = n_ctx / 2, the logits at positions first .. n_ctx-2 score tokens first+1 .. n_ctx-1
//   of the chunk (n_ctx - 1 - first tokens per chunk): the first half only gives context;
// - nll = -log softmax(logits)[token]; PPL = exp(mean nll), and its uncertainty is
//   PPL * sqrt((mean nll^2 - mean nll ^ 2) / (count - 1)), llama.cpp's "Final estimate".
//
// The log-softmax is computed on the host (double sums) from the logits the model hands over.
#pragma once

#include "model/kl_base_file.h"
#include "model/forward/model_gpu.h"
#include "model/tokenizer/tokenizer.h"

#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace vkllm {

// Bad input for a perplexity run (text too short, missing or empty file, mismatching base file);
// the message says what is wrong and what would fix it.
class PerplexityError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// The file's text with one trailing '\n' dropped, as llama.cpp's -f reads it. PerplexityError
// when the file is missing, unreadable or empty.
std::string read_perplexity_text(const std::string& path);
// The text tokenized once, BOS in front when the vocab adds BOS. PerplexityError when empty.
std::vector<int32_t> perplexity_tokens(const Tokenizer& tok, std::string_view text);

// Evaluates one chunk from an empty cache at positions 0.. and hands the logits of its tokens to
// the sink by rows (first = index of the first row's token within the chunk). The device version
// is device_evaluator(); tests plug in the host reference forward pass.
struct ChunkEvaluator {
    uint32_t n_vocab = 0;
    std::function<void(std::span<const int32_t> chunk, const ModelGpu::LogitsSink& sink)> eval;
};
// The model must be loaded with ModelOptions::all_logits and a context of at least the chunk size.
ChunkEvaluator device_evaluator(ModelGpu& model);

struct PerplexityOptions {
    uint32_t n_ctx = 512;  // tokens per chunk
    int32_t n_chunks = -1;  // <= 0: every whole chunk of the text
    int32_t bos_id = -1;  // put in place of each chunk's first token; -1: keep it (vocab adds no BOS)
};
// BOS id to put at the start of every chunk, or -1 when the vocab does not add BOS.
inline int32_t chunk_bos(const Tokenizer& tok) { return tok.add_bos() ? tok.bos_id() : -1; }

// Running sums of negative log-likelihoods.
struct NllStats {
    uint64_t count = 0;
    double sum = 0, sum2 = 0;
    void add(double nll) {
        ++count;
        sum += nll;
        sum2 += nll * nll;
    }
    double ppl() const;
    double ppl_uncertainty() const;  // 0 when undefined (fewer than 2 values)
};

// -log softmax(logits)[token], with double sums.
double token_nll(std::span<const float> logits, int32_t token);

struct ChunkProgress {
    uint32_t chunk = 0, n_chunks = 0;  // 1-based index of the chunk just scored
    double ppl = 0;  // running estimate after it
    double kld = 0, same_top = 0;  // KL runs: running mean KL divergence and top-1 agreement
    double seconds = 0;  // evaluation of this chunk
};
using ChunkCallback = std::function<void(const ChunkProgress&)>;

struct PerplexityResult {
    uint32_t n_ctx = 0, n_chunks = 0;
    uint64_t n_text_tokens = 0;  // tokens of the whole text (BOS included)
    NllStats nll;
    double seconds = 0;
};

// Throws PerplexityError when the text has fewer than 2 * n_ctx tokens. With `base`, writes the
// log-probabilities of every scored position to it (the writer's header must be kl_base_header()).
PerplexityResult compute_perplexity(const ChunkEvaluator& model, std::span<const int32_t> tokens,
                                    const PerplexityOptions& opts, const ChunkCallback& on_chunk = {},
                                    KlBaseWriter* base = nullptr);
// Checks the text and options as compute_perplexity does; the header a base file for them needs.
KlBaseHeader kl_base_header(uint32_t n_vocab, size_t n_tokens, const PerplexityOptions& opts);

// --- KL divergence against a base file -------------------------------------------------------------

struct KlResult {
    uint32_t n_ctx = 0, n_chunks = 0;
    NllStats nll, nll_base;  // this model's and the base's (from the stored log-probs)
    double sum_nll_nll_base = 0;  // for the covariance of the two log-PPLs
    double sum_kld = 0, sum_kld2 = 0;
    double sum_p_diff = 0, sum_p_diff2 = 0, sum_p_diff4 = 0;
    uint64_t same_top = 0;  // positions where both models' most likely token agree
    std::vector<float> kld_values;  // per scored position, in order
    double seconds = 0;

    uint64_t count() const { return nll.count; }
    // llama.cpp's statistics: mean and its standard error (0 with 10 values or fewer).
    static std::pair<double, double> mean_and_uncertainty(double sum, double sum2, uint64_t count);
    std::pair<double, double> kld() const { return mean_and_uncertainty(sum_kld, sum_kld2, count()); }
    std::pair<double, double> same_top_p() const;  // fraction and its binomial standard error
    std::pair<double, double> log_ppl_ratio() const;  // ln(PPL / PPL(base)), with the covariance
    std::pair<double, double> rms_p_diff() const;  // RMS of p(token) - p_base(token)
};

// Runs `model` over the tokens stored in `base` (its first n_chunks chunks when n_chunks > 0) and
// compares with the stored log-probabilities. KlBaseError when the vocab sizes differ.
KlResult compute_kl_divergence(const ChunkEvaluator& model, KlBaseReader& base, int32_t n_chunks, int32_t bos_id,
                               const ChunkCallback& on_chunk = {});

}  // namespace vkllm
