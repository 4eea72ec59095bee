// The serving engine: N slots (independent conversations, each a sequence of one SequenceModel,
// model/forward/sequence_model.h: ModelGpu), a queue of requests, and one scheduler thread that runs continuous batching:
//
//   every step  1. (optional) one prefill chunk of up to ubatch prompt tokens for one slot,
//                  round-robin among slots still reading their prompt, as its own pass;
//               2. one forward pass and one submission that decodes one token for every slot
//                  that is generating (batched matvec, <= 8 rows per weight pass).
//
// A request's text is identical whatever else runs beside it (batch invariance: every slot's
// rows go through the same kernels with the same reduction order, whatever the batch), which the
// engine tests check. A new request takes the free slot whose previous tokens share the longest
// prefix with its prompt and evaluates only the rest (prefix reuse: the next chat turn costs only
// its new tokens).
//
// Threads: submit(), Ticket::next(), Ticket::cancel(), metrics() and shutdown() may be called
// from any thread. Events are produced by the scheduler thread.
#pragma once

#include "model/forward/sequence_model.h"
#include "model/grammar/grammar.h"
#include "model/sampler.h"
#include "model/tokenizer/tokenizer.h"

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace vkllm::engine {

class Drafter;  // serving/engine/drafter.h
class Blender;  // serving/engine/blender.h

struct EngineOptions {
    uint32_t n_slots = 4;  // concurrent conversations (--parallel)
    // Speculative decoding (null: none): each decode step asks the drafter for up to draft_max
    // tokens per generating slot and verifies them in the same pass (the model must have been
    // loaded with ModelOptions::draft_rows >= draft_max). A proposal shorter than draft_min is
    // not verified. The output is plain decoding's whatever the drafts (drafter.h).
    std::shared_ptr<Drafter> drafter;
    uint32_t draft_max = 8, draft_min = 1;
    // CacheBlend (null: none): a request's documents are blended from the store instead of
    // evaluated (CompletionRequest::documents). Its scratch sequence must be none of the slots'.
    std::shared_ptr<Blender> blender;
    uint32_t queue_limit = 64;  // requests waiting for a slot; beyond it submit() throws QueueFullError
    std::chrono::milliseconds default_timeout{600000};  // per request, when the request gives none
};

// Tokens [first, first + n) of a prompt: a document (a RAG prompt's retrieved passage).
struct DocumentSpan {
    size_t first = 0, n = 0;
    bool operator==(const DocumentSpan&) const = default;
};

struct CompletionRequest {
    std::vector<int32_t> prompt;  // token ids, BOS included when wanted; must not be empty
    // Images in the prompt, in order, each over its placeholder tokens (PromptEmbeddings): their rows
    // are evaluated in place of those tokens' embeddings, a bidirectional image in one chunk.
    std::vector<PromptEmbeddings> images;
    // The prompt's documents, ascending, apart from each other and from the images. With
    // EngineOptions::blender, a run of adjacent documents followed by other prompt tokens is blended
    // (their K/V from the document store, a share of their tokens evaluated again with the tokens
    // that follow): the output is then close to, not the same as, a plain prefill's. Without one, or
    // where the model refuses, they are evaluated as the rest of the prompt.
    std::vector<DocumentSpan> documents;
    int32_t max_tokens = -1;  // -1: until an end-of-generation token or the slot's context is full
    SamplerParams sampler;  // temperature 0 = greedy; seed; top_k/top_p/min_p; the penalties
    std::vector<std::string> stop;  // stop strings (not included in the text)
    bool ignore_eos = false;
    // The generated text must be a sentence of this grammar (GBNF, a compiled JSON schema): the
    // sampler picks only tokens it allows, and generation ends when the grammar is complete (Stop),
    // may end and the model chose to, or at max_tokens (Length). Null: free text. Not with `stop`
    // unless the grammar is lazy.
    std::shared_ptr<const grammar::Grammar> grammar;
    // With triggers, the grammar is lazy: the text is free until grammar::find_trigger() finds where
    // it starts to hold (control tokens count as their shown text); from there on it must be a
    // sentence of `grammar`. Text at the trigger that the grammar refuses drops it: the rest stays free.
    grammar::LazyStart grammar_start;
    // Control tokens whose text the Text events carry (sorted ids; others print nothing): tool-call
    // markers such as Mistral's [TOOL_CALLS] are control tokens, and the server parses them.
    std::vector<int32_t> shown_control_tokens;
    uint32_t top_logprobs = 0;  // with logprobs: alternatives per token (0..20)
    bool logprobs = false;
    std::chrono::milliseconds timeout{0};  // 0: EngineOptions::default_timeout
    // -1: the engine picks the free slot whose cache shares the longest prefix with the prompt.
    // Else this slot: for callers that give each conversation a slot of its own (the C API's
    // sessions), so conversations never evict each other. A request for a busy slot ends with
    // FinishReason::Error.
    int32_t slot = -1;
};

enum class FinishReason { Stop, Length, Cancelled, Timeout, Error };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "cancelled", "timeout", "error"
// The output was cut by a limit (max_tokens, the time limit) rather than ended by the model.
inline bool cut_short(FinishReason r) { return r == FinishReason::Length || r == FinishReason::Timeout; }

struct TokenLogprob {
    int32_t token = -1;
    std::string text;  // the token's bytes (may be part of a UTF-8 character)
    float logprob = 0.0f;  // log softmax of the raw logits (before penalties and temperature)
    std::vector<std::pair<std::string, float>> top;  // top_logprobs alternatives, best first
    std::vector<int32_t> top_ids;  // their token ids, in the same order
};

struct Event {
    enum class Kind { Text, Done } kind = Kind::Text;
    // Kind::Text: the next piece of generated text: whole UTF-8 characters only, never any part of
    // a stop string (text that might begin one is held back until it is decided). May be empty
    // when the event only carries logprobs.
    std::string text;
    std::vector<TokenLogprob> logprobs;  // tokens this event completes, when the request asked
    // The tokens sampled since the previous event, in order (their text may still be held back): what
    // a caller that continues the conversation appends to its prompt.
    std::vector<int32_t> tokens;
    // Kind::Done (always the last event of a request):
    FinishReason finish = FinishReason::Stop;
    std::string error;  // FinishReason::Error: what went wrong
    std::string stop_word;  // FinishReason::Stop at a stop string: that string ("" at an end token or grammar's end)
    int32_t slot = -1;  // the slot that ran the request (-1: it never got one)
    // FinishReason::Error: the failure itself (NonFiniteError for NaN or Inf logits, a device error,
    // ...) for callers that rethrow it; null for a refused request (busy slot).
    std::exception_ptr exception;
    uint32_t prompt_tokens = 0;  // tokens of the prompt
    uint32_t cached_tokens = 0;  // of which reused from the slot's previous conversation
    uint32_t completion_tokens = 0;
    uint32_t decode_steps = 0;  // decode forward passes this request took part in
    // Speculative decoding: tokens drafted for the request and verified, and how many of them the
    // model kept (each kept one is a token generated without a pass of its own).
    uint32_t draft_tokens = 0, accepted_tokens = 0;
    // CacheBlend (EngineOptions::blender): documents blended into the prompt, of which the document
    // store held, and their tokens, of which evaluated again; 0 where nothing was blended.
    uint32_t blended_documents = 0, stored_documents = 0, blended_tokens = 0, recomputed_tokens = 0;
    double queue_ms = 0, prompt_ms = 0, generate_ms = 0;  // waiting, prefill (to first token), the rest
    // Host time choosing the tokens: the sampler (with the grammar's mask) and following the grammar.
    double sample_ms = 0;
};

// The caller's end of one request. Dropping it cancels the request.
class Ticket {
public:
    struct State;
    explicit Ticket(std::shared_ptr<State> s);
    ~Ticket();
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    // The next event, waiting at most `wait`; nullopt when none arrived in time. After Done, nullopt.
    std::optional<Event> next(std::chrono::milliseconds wait);
    // Stops the request within one engine step; its Done event has FinishReason::Cancelled.
    void cancel();
    uint64_t id() const;

private:
    std::shared_ptr<State> s_;
};

class QueueFullError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};
class EngineStoppedError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct EngineMetrics {
    uint32_t slots = 0, slots_busy = 0, queued = 0;
    std::vector<bool> busy;  // per slot: running a request (reading its prompt or generating)
    uint64_t requests_total = 0, requests_cancelled = 0, requests_failed = 0;
    uint64_t prompt_tokens_total = 0, cached_tokens_total = 0, generated_tokens_total = 0;
    uint64_t steps_total = 0;  // decode passes
    uint64_t draft_tokens_total = 0, accepted_tokens_total = 0;  // speculative decoding, of finished requests
    // CacheBlend (EngineOptions::blender; BlendStats): documents blended, of which the store had,
    // their tokens and those evaluated again, blends that fell back to plain prefill, the store's bytes.
    bool blending = false;
    uint64_t blend_documents_total = 0, blend_documents_stored_total = 0;
    uint64_t blend_tokens_total = 0, blend_recomputed_tokens_total = 0, blend_fallbacks_total = 0;
    uint64_t blend_store_bytes = 0, blend_store_disk_bytes = 0;
    double prompt_seconds_total = 0, decode_seconds_total = 0;
    uint64_t batch_size_sum = 0;  // sum over decode passes of their slot count
    // The paged KV cache (SequenceModel::kv_usage): blocks held (a block shared by slots once), of the
    // pool, and the bytes one block takes over all layers.
    uint32_t kv_blocks_used = 0, kv_blocks_total = 0;
    uint64_t kv_block_bytes = 0;
};

class Engine {
public:
    // `model` must have been built with ModelOptions::n_seq >= opts.n_slots; the engine owns the
    // scheduling of all its sequences from here on (nobody else may call eval on it).
    Engine(SequenceModel& model, const Tokenizer& tok, const EngineOptions& opts);
    ~Engine();  // shutdown()
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    // Queues a request. Throws std::invalid_argument for a bad request (empty prompt, a prompt
    // that does not fit one slot's context: the message says both sizes, bad sampler values),
    // QueueFullError when queue_limit requests already wait, EngineStoppedError after shutdown().
    std::unique_ptr<Ticket> submit(CompletionRequest req);

    EngineMetrics metrics() const;
    uint32_t n_ctx_per_slot() const;
    // Stops accepting, ends every queued and running request (Done, Cancelled) and joins the
    // scheduler thread. Idempotent.
    void shutdown();

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace vkllm::engine
