// The engine's insides, shared by its two source files: engine.cpp (requests, the scheduler's
// loop, admission and finishing) and engine_step.cpp (the work of one step: a prompt chunk, the
// drafts, the decode pass and choosing each slot's tokens). Not part of the engine's interface.
#pragma once

#include "serving/engine/engine.h"

#include "serving/engine/text_stream.h"

#include "model/grammar/token_constraint.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <span>
#include <thread>

namespace vkllm::engine {

using Clock = std::chrono::steady_clock;

inline double ms_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

// --- the request's shared state: the engine pushes events, the caller pulls them ----------------

struct Ticket::State {
    uint64_t id = 0;
    CompletionRequest req;
    Clock::time_point submitted, deadline;
    std::atomic<bool> cancelled{false};
    std::mutex m;
    std::condition_variable cv;
    std::deque<Event> events;
    bool finished = false;  // Done was pushed
    bool delivered = false;  // Done was handed to the caller

    void push(Event e) {
        {
            std::lock_guard lock(m);
            if (finished) return;
            finished = e.kind == Event::Kind::Done;
            events.push_back(std::move(e));
        }
        cv.notify_all();
    }
};

namespace detail {

struct Slot {
    uint32_t index = 0;
    std::vector<int32_t> history;  // tokens whose K/V are in the slot's cache
    uint64_t last_used = 0;
    // The request being served, or null.
    std::shared_ptr<Ticket::State> req;
    enum class Phase { Idle, Prompt, Generate } phase = Phase::Idle;
    size_t prompt_done = 0;  // prompt tokens in the cache
    uint32_t cached = 0;  // of which reused from the previous request
    int32_t pending = -1;  // sampled, emitted, not yet evaluated
    int32_t prev = -1;  // the token before `pending`, for decode_piece
    uint32_t generated = 0;
    uint32_t decode_steps = 0;
    uint32_t drafted = 0, accepted = 0;  // speculative decoding's verified and kept drafts
    double sample_ms = 0;  // host time in the sampler and the grammar
    uint32_t kv_reserved = 0;  // KV blocks the request may come to hold (kv_need), while it runs
    std::unique_ptr<Sampler> sampler;
    std::unique_ptr<grammar::TokenConstraint> constraint;  // the request's grammar while it holds, or null
    bool awaiting_trigger = false;  // a lazy grammar not holding yet
    bool blend_off = false;  // a blend of this request failed: its documents are evaluated as text
    uint32_t blended_documents = 0, stored_documents = 0;  // CacheBlend, of this request (Event's)
    uint32_t blended_tokens = 0, recomputed_tokens = 0;
    std::string free_text;  // the text generated while awaiting_trigger
    std::unique_ptr<TextStream> text;
    Clock::time_point started, first_token;
};

// The image of `req` whose placeholder tokens cover prompt position `pos`, or null.
const PromptEmbeddings* image_at(const CompletionRequest& req, size_t pos);

// A prefix of `keep` prompt tokens to reuse, moved back to the start of an image it would cut: an
// image's rows are evaluated together (a bidirectional image's see each other).
size_t whole_images(const CompletionRequest& req, size_t keep);
// A prefix that reaches less than halfway into a document (CompletionRequest::documents) stops at its
// start, so that the document is blended whole; one that reaches further is kept, and the rest of
// that document is evaluated as text (prompt_step blends only documents that start at or after it):
// two documents that begin alike do not cost a blend, and a chat's cached turn is not thrown away.
size_t mostly_whole_documents(const CompletionRequest& req, size_t keep);

// The last text token of prompt[0, end), for decode_piece's spacing: an image's placeholders are
// skipped (text after a picture is not the start of the text); -1 when there is none.
int32_t last_text_token(const std::vector<int32_t>& prompt, size_t end);

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b);

}  // namespace detail

struct Engine::Impl {
    using Slot = detail::Slot;
    SequenceModel& model;
    const Tokenizer& tok;
    EngineOptions opts;
    std::vector<Slot> slots;
    // The vocabulary as grammars see it, per set of control tokens the requests show (and so speak):
    // built with the first grammar request of each. The server's sets come from the chat format,
    // so there are few (none shown, and the tool markers').
    std::map<std::vector<int32_t>, std::shared_ptr<const grammar::TokenPieces>> pieces;

    mutable std::mutex m;  // guards queue, stopping, metrics
    std::condition_variable wake;
    std::deque<std::shared_ptr<Ticket::State>> queue;
    bool stopping = false;
    uint64_t next_id = 1, use_clock = 0;
    EngineMetrics metrics;
    uint32_t prompt_turn = 0;  // round-robin among slots reading their prompt
    std::thread worker;
    std::once_flag joined;

    // Checks the options against the model, resets its sequences and starts the scheduler thread.
    Impl(SequenceModel& mdl, const Tokenizer& t, const EngineOptions& o);

    void run();
    void admit(std::vector<std::shared_ptr<Ticket::State>>& waiting);
    // KV blocks a request may come to hold: its prompt and max_tokens (the context when unbounded).
    // A slot holds at most that many (a copy on write replaces a block), so requests whose needs
    // add up to the pool never run out of blocks once idle slots' caches are let go (make_room).
    uint32_t kv_need(const CompletionRequest& r) const {
        const uint64_t n_ctx = model.n_ctx();
        const uint64_t rows =
            std::min<uint64_t>(r.prompt.size() + (r.max_tokens < 0 ? n_ctx : uint64_t(r.max_tokens)), n_ctx);
        return uint32_t((rows + kv_block_rows - 1) / kv_block_rows);
    }
    // The pool's shape, fixed at load.
    uint32_t kv_block_rows = 1, kv_blocks_total = 0;
    uint32_t kv_reserved() const {
        uint32_t n = 0;
        for (const Slot& s : slots) n += s.kv_reserved;
        return n;
    }
    // Forgets idle slots' cached conversations, least recently used first, until `blocks` are free.
    void make_room(uint32_t blocks) {
        for (;;) {
            const KvUsage u = model.kv_usage();
            if (u.blocks_total - u.blocks_used >= blocks) return;
            Slot* lru = nullptr;
            for (Slot& s : slots)
                if (!s.req && !s.history.empty() && (!lru || s.last_used < lru->last_used)) lru = &s;
            if (!lru) return;  // every block is held by running requests, within their reservations
            lru->history.clear();
            model.reset(lru->index);
        }
    }
    void start(Slot& s, std::shared_ptr<Ticket::State> r);
    void prompt_step();
    // Blends the run of adjacent documents starting at s.prompt_done with the prompt tokens after it
    // (CompletionRequest::documents); returns the prompt tokens it put into the cache, 0 when it did
    // not blend (no tokens follow the run, or the blend failed: the slot's blend_off is then set).
    size_t blend_step(Slot& s);
    void decode_step();
    // The request's grammar starts to hold.
    void hold_grammar(Slot& s) {
        const std::vector<int32_t>& spoken = s.req->req.shown_control_tokens;
        auto& p = pieces[spoken];
        if (!p) p = std::make_shared<const grammar::TokenPieces>(tok, spoken);
        s.constraint = std::make_unique<grammar::TokenConstraint>(s.req->req.grammar, p);  // submit() checked it starts
    }
    // A lazy grammar follows the text generated so far: it holds from a trigger on, or is dropped
    // when the text at the trigger does not follow it.
    void watch_trigger(Slot& s, const std::string& piece) {
        s.free_text += piece;
        const size_t at = grammar::find_trigger(s.free_text, s.req->req.grammar_start);
        if (at == std::string::npos) return;
        s.awaiting_trigger = false;
        hold_grammar(s);
        try {
            if (!s.constraint->accept_text(std::string_view(s.free_text).substr(at))) s.constraint.reset();
        } catch (const grammar::GrammarError&) {
            s.constraint.reset();  // too ambiguous to follow from here: the rest stays free, as when refused
        }
        s.free_text.clear();
    }
    // Picks the next token from logits row `row` (or the device argmax, -1 when its row is not
    // finite), emits it, and finishes the request when it ends there.
    void note_kv_usage() {
        const KvUsage u = model.kv_usage();
        std::lock_guard lock(m);
        metrics.kv_blocks_used = u.blocks_used;
        metrics.kv_blocks_total = u.blocks_total;
        metrics.kv_block_bytes = u.block_bytes;
    }
    // n_past: the slot's tokens in the cache up to the row the logits are of (a verified draft's
    // row is not the model's last).
    void after_logits(Slot& s, const float* logits, int32_t device_argmax, uint32_t n_past);
    // Speculative decoding: up to draft_max tokens to verify after each generating slot's pending
    // token (none without a drafter), in the order of `gen`.
    std::vector<std::vector<int32_t>> drafts(const std::vector<Slot*>& gen);
    // The sampler's pick under the request's grammar; -1 when the request has finished instead (the
    // grammar allows no token: Stop where it may end, else Error; a grammar that fails to follow).
    int32_t sample(Slot& s, std::span<float> row);
    // error: what went wrong (FinishReason::Error); ex: the failure itself, for callers that rethrow it.
    void finish(Slot& s, FinishReason why, const std::string& error = {}, std::exception_ptr ex = nullptr);
    // Done for a request that never reached a slot.
    void end_unstarted(Ticket::State& r, FinishReason why, const std::string& error = {},
                       std::exception_ptr ex = nullptr);
    static bool needs_logits(const Slot& s) {
        return !s.sampler->params().greedy() || s.sampler->params().adjusts_logits() || s.req->req.logprobs ||
               s.constraint;
    }
    bool busy() const {
        return std::any_of(slots.begin(), slots.end(), [](const Slot& s) { return s.req != nullptr; });
    }
};

}  // namespace vkllm::engine
