#include "serving/engine/engine.h"

#include "serving/engine/drafter.h"
#include "serving/engine/text_stream.h"

#include "model/grammar/token_constraint.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <exception>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>

namespace vkllm::engine {

using Clock = std::chrono::steady_clock;

namespace {
double ms_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}
}  // namespace

const char* finish_reason_name(FinishReason r) {
    switch (r) {
        case FinishReason::Stop: return "stop";
        case FinishReason::Length: return "length";
        case FinishReason::Cancelled: return "cancelled";
        case FinishReason::Timeout: return "timeout";
        case FinishReason::Error: return "error";
    }
    return "error";
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

Ticket::Ticket(std::shared_ptr<State> s) : s_(std::move(s)) {}
Ticket::~Ticket() { cancel(); }

std::optional<Event> Ticket::next(std::chrono::milliseconds wait) {
    std::unique_lock lock(s_->m);
    if (s_->delivered) return std::nullopt;
    if (!s_->cv.wait_for(lock, wait, [&] { return !s_->events.empty(); })) return std::nullopt;
    Event e = std::move(s_->events.front());
    s_->events.pop_front();
    if (e.kind == Event::Kind::Done) s_->delivered = true;
    return e;
}

void Ticket::cancel() { s_->cancelled = true; }
uint64_t Ticket::id() const { return s_->id; }

// --- the scheduler ------------------------------------------------------------------------------

namespace {

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
    std::string free_text;  // the text generated while awaiting_trigger
    std::unique_ptr<TextStream> text;
    Clock::time_point started, first_token;
};

// The image of `req` whose placeholder tokens cover prompt position `pos`, or null.
const PromptEmbeddings* image_at(const CompletionRequest& req, size_t pos) {
    for (const PromptEmbeddings& im : req.images)
        if (pos >= im.first && pos < size_t(im.first) + im.n_rows) return &im;
    return nullptr;
}

// A prefix of `keep` prompt tokens to reuse, moved back to the start of an image it would cut: an
// image's rows are evaluated together (a bidirectional image's see each other).
size_t whole_images(const CompletionRequest& req, size_t keep) {
    if (keep == 0) return 0;
    const PromptEmbeddings* im = image_at(req, keep);
    return im && im->first < keep ? im->first : keep;
}

// The last text token of prompt[0, end), for decode_piece's spacing: an image's placeholders are
// skipped (text after a picture is not the start of the text); -1 when there is none.
int32_t last_text_token(const std::vector<int32_t>& prompt, size_t end) {
    for (size_t i = end; i > 0; --i)
        if (prompt[i - 1] >= 0) return prompt[i - 1];
    return -1;
}

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
    size_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
    return n;
}

}  // namespace

struct Engine::Impl {
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

    Impl(SequenceModel& mdl, const Tokenizer& t, const EngineOptions& o) : model(mdl), tok(t), opts(o) {
        if (opts.n_slots == 0) throw std::invalid_argument("the engine needs at least one slot (--parallel >= 1)");
        if (opts.n_slots > model.n_seq())
            throw std::invalid_argument(
                fmt::format("{} slots, but the model was loaded with {} sequences", opts.n_slots, model.n_seq()));
        if (opts.drafter && opts.draft_max > model.draft_rows())
            throw std::invalid_argument(fmt::format("{} drafted tokens per step, but the model was loaded for {}",
                                                    opts.draft_max, model.draft_rows()));
        slots.resize(opts.n_slots);
        for (uint32_t i = 0; i < opts.n_slots; ++i) {
            slots[i].index = i;
            model.reset(i);
        }
        const KvUsage kv = model.kv_usage();
        kv_block_rows = kv.block_rows;
        kv_blocks_total = kv.blocks_total;
        note_kv_usage();
        metrics.slots = opts.n_slots;
        metrics.busy.assign(opts.n_slots, false);
        worker = std::thread([this] { run(); });
    }

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

void Engine::Impl::run() {
    for (;;) {
        std::vector<std::shared_ptr<Ticket::State>> waiting, expired;
        {
            std::unique_lock lock(m);
            // Idle (no slot busy, nothing queued): sleep until a request arrives.
            while (!stopping && queue.empty() && !busy()) wake.wait(lock);
            if (stopping) break;
            // Queued requests whose client left or whose deadline passed end here, without
            // waiting for a slot (and without counting against the queue limit any longer).
            const Clock::time_point now = Clock::now();
            for (auto it = queue.begin(); it != queue.end();) {
                if ((*it)->cancelled || now >= (*it)->deadline) {
                    expired.push_back(std::move(*it));
                    it = queue.erase(it);
                } else {
                    ++it;
                }
            }
            // Hand queued requests to free slots (the rest stay queued, in order) while their KV
            // needs fit the pool beside the running requests' (with the default pool they always do).
            const size_t free_slots =
                size_t(std::count_if(slots.begin(), slots.end(), [](const Slot& s) { return !s.req; }));
            uint64_t reserved = kv_reserved();
            while (!queue.empty() && waiting.size() < free_slots) {
                const uint32_t need = kv_need(queue.front()->req);
                if (reserved + need > kv_blocks_total) break;
                reserved += need;
                waiting.push_back(std::move(queue.front()));
                queue.pop_front();
            }
            metrics.queued = uint32_t(queue.size());
        }
        for (auto& r : expired) end_unstarted(*r, r->cancelled ? FinishReason::Cancelled : FinishReason::Timeout);
        try {
            admit(waiting);
            // Cancellations and deadlines take effect before any more work is spent on them.
            const Clock::time_point now = Clock::now();
            for (Slot& s : slots) {
                if (!s.req) continue;
                if (s.req->cancelled)
                    finish(s, FinishReason::Cancelled);
                else if (now >= s.req->deadline)
                    finish(s, FinishReason::Timeout);
            }
            prompt_step();
            decode_step();
            note_kv_usage();
        } catch (const std::exception& e) {
            // A device or model failure (or running out of memory) ends the requests it touched;
            // their slots start over. The scheduler itself keeps running.
            for (auto& r : waiting)
                if (r) end_unstarted(*r, FinishReason::Error, e.what(), std::current_exception());
            for (Slot& s : slots)
                if (s.req) {
                    finish(s, FinishReason::Error, e.what(), std::current_exception());
                    s.history.clear();
                    model.reset(s.index);
                }
            note_kv_usage();
        }
    }
    // Shutdown: everything queued or running ends as cancelled.
    std::deque<std::shared_ptr<Ticket::State>> rest;
    {
        std::lock_guard lock(m);
        rest.swap(queue);
        metrics.queued = 0;
    }
    for (Slot& s : slots)
        if (s.req) finish(s, FinishReason::Cancelled);
    for (auto& r : rest) end_unstarted(*r, FinishReason::Cancelled);
}

void Engine::Impl::end_unstarted(Ticket::State& r, FinishReason why, const std::string& error, std::exception_ptr ex) {
    Event e;
    e.kind = Event::Kind::Done;
    e.finish = why;
    e.error = error;
    e.exception = std::move(ex);
    e.prompt_tokens = uint32_t(r.req.prompt.size());
    e.queue_ms = ms_between(r.submitted, Clock::now());
    {
        std::lock_guard lock(m);
        ++metrics.requests_total;
        if (why == FinishReason::Cancelled) ++metrics.requests_cancelled;
        if (why == FinishReason::Error || why == FinishReason::Timeout) ++metrics.requests_failed;
    }
    r.push(std::move(e));
}

void Engine::Impl::admit(std::vector<std::shared_ptr<Ticket::State>>& waiting) {
    for (auto& r : waiting) {
        if (r->cancelled) {
            end_unstarted(*r, FinishReason::Cancelled);
            r.reset();
            continue;
        }
        if (r->req.slot >= 0) {
            Slot& pinned = slots[size_t(r->req.slot)];
            if (pinned.req) {
                end_unstarted(*r, FinishReason::Error, fmt::format("slot {} is busy", r->req.slot));
                r.reset();
            } else {
                start(pinned, std::move(r));
            }
            continue;
        }
        // The free slot whose cache shares the longest prefix with the prompt; among equals the
        // one unused for longest, so that recent conversations keep their cache.
        Slot* best = nullptr;
        size_t best_lcp = 0;
        for (Slot& s : slots) {
            if (s.req) continue;
            const size_t lcp = common_prefix(s.history, r->req.prompt);
            if (!best || lcp > best_lcp || (lcp == best_lcp && s.last_used < best->last_used)) {
                best = &s;
                best_lcp = lcp;
            }
        }
        start(*best, std::move(r));  // r is empty afterwards: the slot owns the request
    }
}

void Engine::Impl::start(Slot& s, std::shared_ptr<Ticket::State> r) {
    const std::vector<int32_t>& prompt = r->req.prompt;
    // At least the last prompt token is evaluated: its logits give the first generated token.
    const size_t limit = prompt.size() - 1;
    size_t keep = whole_images(r->req, std::min(common_prefix(s.history, prompt), limit));
    // Another slot, serving or idle, may hold a longer prefix of the prompt (a system prompt every
    // conversation starts with): this slot then shares its KV blocks instead of evaluating them.
    const Slot* donor = nullptr;
    size_t donor_keep = keep;
    for (const Slot& o : slots)
        if (&o != &s)
            if (const size_t l = whole_images(r->req, std::min(common_prefix(o.history, prompt), limit));
                l > donor_keep) {
                donor = &o;
                donor_keep = l;
            }
    if (donor && model.share_prefix(s.index, donor->index, uint32_t(donor_keep))) {
        keep = donor_keep;
        s.history.assign(prompt.begin(), prompt.begin() + long(keep));
    } else if (!model.truncate(s.index, uint32_t(keep))) {
        keep = 0;
        model.reset(s.index);
    }
    s.history.resize(keep);
    s.req = std::move(r);
    s.phase = Slot::Phase::Prompt;
    s.prompt_done = keep;
    s.cached = uint32_t(keep);
    s.pending = -1;
    s.prev = last_text_token(prompt, keep);
    s.generated = 0;
    s.decode_steps = 0;
    s.drafted = s.accepted = 0;
    s.sample_ms = 0;
    s.kv_reserved = kv_need(s.req->req);
    s.sampler = std::make_unique<Sampler>(s.req->req.sampler);
    for (int32_t t : prompt)
        if (t >= 0) s.sampler->accept(t);  // an image's placeholders are no text to penalize
    s.constraint.reset();
    s.free_text.clear();
    s.awaiting_trigger = s.req->req.grammar && s.req->req.grammar_start.lazy();
    if (s.req->req.grammar && !s.awaiting_trigger) hold_grammar(s);
    s.text = std::make_unique<TextStream>(s.req->req.stop);
    s.started = Clock::now();
    s.last_used = ++use_clock;
    std::lock_guard lock(m);
    ++metrics.slots_busy;
    metrics.busy[s.index] = true;
}

void Engine::Impl::prompt_step() {
    // One chunk of one slot's prompt per step, round-robin, so that a long prompt delays the
    // running generations by one chunk per step rather than by its whole length.
    const uint32_t n = uint32_t(slots.size());
    for (uint32_t i = 0; i < n; ++i) {
        Slot& s = slots[(prompt_turn + i) % n];
        if (!s.req || s.phase != Slot::Phase::Prompt) continue;
        prompt_turn = (s.index + 1) % n;
        const CompletionRequest& req = s.req->req;
        const std::vector<int32_t>& prompt = req.prompt;
        // Text up to the next image, or an image's rows: all of them when they see each other.
        size_t chunk = std::min<size_t>(model.ubatch(), prompt.size() - s.prompt_done);
        const PromptEmbeddings* image = image_at(req, s.prompt_done);
        if (image) {
            const size_t done = s.prompt_done - image->first;
            // An image whose rows take its grid's positions (M-RoPE) goes in whole, as one that sees itself;
            // others go in chunks, round-robin with the other slots' prompts.
            const bool whole = image->bidirectional || (model.config().places_images_by_grid() && !image->grid.empty());
            chunk = whole ? image->n_rows : std::min<size_t>(chunk, image->n_rows - done);
            make_room(model.kv_blocks_needed(s.index, uint32_t(chunk)));
            const uint32_t dim = model.config().dim;
            model.eval_embeddings(s.index, std::span<const float>(*image->rows).subspan(done * dim, chunk * dim),
                                  image->bidirectional, image->grid);
        } else {
            for (const PromptEmbeddings& im : req.images)
                if (im.first > s.prompt_done) chunk = std::min<size_t>(chunk, im.first - s.prompt_done);
            make_room(model.kv_blocks_needed(s.index, uint32_t(chunk)));
            model.eval(s.index, std::span<const int32_t>(prompt.data() + s.prompt_done, chunk));
        }
        s.history.insert(s.history.end(), prompt.begin() + long(s.prompt_done),
                         prompt.begin() + long(s.prompt_done + chunk));
        s.prompt_done += chunk;
        if (s.prompt_done == prompt.size()) {
            s.phase = Slot::Phase::Generate;
            s.prev = last_text_token(prompt, prompt.size());
            if (s.req->req.max_tokens == 0) {  // the prompt only (e.g. to warm the cache)
                finish(s, FinishReason::Length);
                return;
            }
            if (needs_logits(s)) {
                std::vector<float> logits(model.config().n_vocab);
                model.read_logits(1, logits.data());
                after_logits(s, logits.data(), -1, model.n_past(s.index));
            } else {
                after_logits(s, nullptr, model.argmax_rows(1)[0], model.n_past(s.index));
            }
        }
        return;
    }
}

std::vector<std::vector<int32_t>> Engine::Impl::drafts(const std::vector<Slot*>& gen) {
    std::vector<std::vector<int32_t>> out(gen.size());
    if (!opts.drafter) return out;
    std::vector<std::vector<int32_t>> contexts;
    std::vector<DraftRequest> reqs;
    std::vector<size_t> of;  // reqs[i] is gen[of[i]]'s
    for (size_t i = 0; i < gen.size(); ++i) {
        const Slot& s = *gen[i];
        const CompletionRequest& rq = s.req->req;
        // A step emits a token after each draft it keeps, the last from the last draft's row: no
        // more drafts than the request may still take tokens after the next, and each needs a cache
        // row besides the pending token's.
        uint64_t max = opts.draft_max;
        if (rq.max_tokens >= 0) max = std::min<uint64_t>(max, uint64_t(rq.max_tokens) - s.generated - 1);
        max = std::min<uint64_t>(max, model.n_ctx() - model.n_past(s.index) - 1);
        if (max < std::max(opts.draft_min, 1u)) continue;
        contexts.push_back(s.history);
        contexts.back().push_back(s.pending);
        reqs.push_back({.slot = s.index, .context = {}, .max = uint32_t(max), .draft = {}});
        of.push_back(i);
    }
    for (size_t i = 0; i < reqs.size(); ++i) reqs[i].context = contexts[i];
    opts.drafter->propose(reqs);
    const int32_t n_vocab = int32_t(model.config().n_vocab);
    for (size_t i = 0; i < reqs.size(); ++i) {
        std::vector<int32_t>& d = reqs[i].draft;
        // Only ids the model has (a draft model's vocabulary may be a little larger), at most max.
        const auto bad = std::find_if(d.begin(), d.end(), [&](int32_t t) { return t < 0 || t >= n_vocab; });
        d.erase(bad, d.end());
        if (d.size() > reqs[i].max) d.resize(reqs[i].max);
        if (d.size() >= opts.draft_min) out[of[i]] = std::move(d);
    }
    return out;
}

void Engine::Impl::decode_step() {
    std::vector<Slot*> gen;
    for (Slot& s : slots)
        if (s.req && s.phase == Slot::Phase::Generate && s.pending >= 0) gen.push_back(&s);
    if (gen.empty()) return;
    const Clock::time_point t0 = Clock::now();
    // Each slot's rows: its pending token, then its drafts (speculative decoding).
    const std::vector<std::vector<int32_t>> draft = drafts(gen);
    std::vector<SeqToken> batch;
    std::vector<uint32_t> first_row, n_past;
    uint32_t blocks = 0;
    for (size_t i = 0; i < gen.size(); ++i) {
        Slot& s = *gen[i];
        first_row.push_back(uint32_t(batch.size()));
        n_past.push_back(model.n_past(s.index));
        batch.push_back({s.index, s.pending});
        for (int32_t t : draft[i]) batch.push_back({s.index, t});
        blocks += model.kv_blocks_needed(s.index, uint32_t(1 + draft[i].size()));
    }
    make_room(blocks);
    model.decode(batch);
    const uint32_t rows = uint32_t(batch.size());
    // Plain greedy slots take the device's argmax, as a lone request would; the others sample on
    // the host from the logits, read back once for the whole batch.
    bool any_host = false, any_device = false;
    for (const Slot* s : gen) (needs_logits(*s) ? any_host : any_device) = true;
    const uint32_t n_vocab = model.config().n_vocab;
    std::vector<float> logits;
    if (any_host) {
        logits.resize(size_t(rows) * n_vocab);
        model.read_logits(rows, logits.data());
    }
    std::vector<int32_t> am(rows, -1);
    if (any_device) am = model.argmax_rows(rows);
    for (size_t i = 0; i < gen.size(); ++i) {
        Slot& s = *gen[i];
        const bool host = needs_logits(s);
        ++s.decode_steps;
        s.drafted += uint32_t(draft[i].size());
        // Row j holds the logits after the pending token and drafts 1..j: the model's choice there
        // is emitted; while it is the next draft, that draft is already in the cache and row j + 1
        // is valid too.
        for (uint32_t j = 0;; ++j) {
            const int32_t evaluated = j == 0 ? s.pending : draft[i][j - 1];
            s.history.push_back(evaluated);
            s.prev = evaluated;
            s.pending = -1;
            const uint32_t r = first_row[i] + j;
            after_logits(s, host ? logits.data() + size_t(r) * n_vocab : nullptr, am[r], n_past[i] + j + 1);
            if (!s.req || j == draft[i].size() || s.pending != draft[i][j]) break;
            ++s.accepted;
        }
        // Rejected drafts leave the cache (and never entered the history).
        if (model.n_past(s.index) > s.history.size() && !model.truncate(s.index, uint32_t(s.history.size())))
            throw std::logic_error("speculative decoding: the cache could not roll rejected drafts back");
    }
    std::lock_guard lock(m);
    ++metrics.steps_total;
    metrics.batch_size_sum += gen.size();
    metrics.decode_seconds_total += ms_between(t0, Clock::now()) / 1000.0;
}

void Engine::Impl::after_logits(Slot& s, const float* logits, int32_t device_argmax, uint32_t n_past) {
    const CompletionRequest& rq = s.req->req;
    const uint32_t n_vocab = model.config().n_vocab;
    Event ev;
    int32_t next;
    // NaN or Inf logits (NaN weights, an overflow) end this request alone, whichever sampler it uses.
    const uint32_t position = n_past;
    if (!logits && device_argmax < 0) {
        const std::string msg = non_finite_message(std::numeric_limits<float>::quiet_NaN(), -1, position);
        finish(s, FinishReason::Error, msg, std::make_exception_ptr(NonFiniteError(msg)));
        return;
    }
    if (logits) {
        std::vector<float> row(logits, logits + n_vocab);
        if (auto bad = std::find_if(row.begin(), row.end(), [](float v) { return !std::isfinite(v); });
            bad != row.end()) {
            const std::string msg = non_finite_message(*bad, bad - row.begin(), position);
            finish(s, FinishReason::Error, msg, std::make_exception_ptr(NonFiniteError(msg)));
            return;
        }
        if (rq.logprobs) {
            // log softmax of the raw logits, before penalties and temperature (what OpenAI reports).
            const float mx = *std::max_element(row.begin(), row.end());
            double sum = 0;
            for (float v : row) sum += std::exp(double(v) - mx);
            const double lse = mx + std::log(sum);
            next = sample(s, row);  // penalties modify `row`: logprobs use `logits`
            if (next < 0) return;
            TokenLogprob lp;
            lp.token = next;
            lp.text = tok.token_to_piece(next, false);
            lp.logprob = float(double(logits[next]) - lse);
            std::vector<int32_t> idx(n_vocab);
            std::iota(idx.begin(), idx.end(), 0);
            const size_t k = std::min<size_t>(rq.top_logprobs, n_vocab);
            std::partial_sort(idx.begin(), idx.begin() + long(k), idx.end(), [&](int32_t a, int32_t b) {
                return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
            });
            for (size_t j = 0; j < k; ++j) {
                lp.top.emplace_back(tok.token_to_piece(idx[j], false), float(double(logits[idx[j]]) - lse));
                lp.top_ids.push_back(idx[j]);
            }
            ev.logprobs.push_back(std::move(lp));
        } else {
            next = sample(s, row);
            if (next < 0) return;
        }
    } else {
        next = device_argmax;
    }
    if (s.generated == 0) s.first_token = Clock::now();
    const bool end_token = (tok.is_eog(next) || next == tok.bos_id()) && !rq.ignore_eos;
    if (end_token) {
        finish(s, FinishReason::Stop);
        return;
    }
    if (s.constraint) {
        try {
            const Clock::time_point t0 = Clock::now();
            s.constraint->accept(next);
            s.sample_ms += ms_between(t0, Clock::now());
        } catch (const grammar::GrammarError& e) {
            finish(s, FinishReason::Error, e.what(), std::current_exception());
            return;
        }
    }
    s.sampler->accept(next, /*generated=*/true);
    ++s.generated;
    std::string piece = tok.decode_piece(next, s.prev);
    if (piece.empty() &&
        std::binary_search(s.req->req.shown_control_tokens.begin(), s.req->req.shown_control_tokens.end(), next))
        piece = tok.token_to_piece(next, true);
    if (s.awaiting_trigger) watch_trigger(s, piece);
    ev.text = s.text->push(piece);
    ev.tokens.push_back(next);
    s.pending = next;
    s.req->push(std::move(ev));
    if (s.text->stopped() || (s.constraint && s.constraint->complete())) {
        finish(s, FinishReason::Stop);
        return;
    }
    const bool max_reached = rq.max_tokens >= 0 && s.generated >= uint32_t(rq.max_tokens);
    // The pending token needs a cache row to be evaluated before the next one can be sampled.
    const bool full = n_past + 1 > model.n_ctx();
    if (max_reached || full) finish(s, FinishReason::Length);
}

int32_t Engine::Impl::sample(Slot& s, std::span<float> row) {
    int32_t next = -1;
    try {
        const Clock::time_point t0 = Clock::now();
        next = s.sampler->sample(row, s.constraint.get());
        s.sample_ms += ms_between(t0, Clock::now());
    } catch (const grammar::GrammarError& e) {
        finish(s, FinishReason::Error, e.what(), std::current_exception());
        return -1;
    }
    if (next >= 0) return next;
    if (!s.constraint) {
        const std::string msg = "the sampler found no token to pick (every logit was masked or not finite)";
        finish(s, FinishReason::Error, msg, std::make_exception_ptr(std::runtime_error(msg)));
        return -1;
    }
    if (s.constraint->can_end()) {
        finish(s, FinishReason::Stop);
    } else {
        const std::string msg = "the grammar allows no token of this vocabulary here (it needs text no token spells)";
        finish(s, FinishReason::Error, msg, std::make_exception_ptr(grammar::GrammarError(msg)));
    }
    return -1;
}

void Engine::Impl::finish(Slot& s, FinishReason why, const std::string& error, std::exception_ptr ex) {
    const Clock::time_point now = Clock::now();
    Event done;
    done.kind = Event::Kind::Done;
    done.finish = why;
    done.error = error;
    done.exception = std::move(ex);
    done.slot = int32_t(s.index);
    if (why == FinishReason::Stop && s.text && s.text->stopped()) done.stop_word = s.text->matched();
    done.prompt_tokens = uint32_t(s.req->req.prompt.size());
    done.cached_tokens = s.cached;
    done.completion_tokens = s.generated;
    done.decode_steps = s.decode_steps;
    done.draft_tokens = s.drafted;
    done.accepted_tokens = s.accepted;
    done.sample_ms = s.sample_ms;
    done.queue_ms = ms_between(s.req->submitted, s.started);
    const Clock::time_point first = s.generated > 0 ? s.first_token : now;
    done.prompt_ms = ms_between(s.started, first);
    done.generate_ms = ms_between(first, now);
    if (s.text) {
        std::string rest = s.text->flush();
        if (!rest.empty()) {
            Event tail;
            tail.text = std::move(rest);
            s.req->push(std::move(tail));
        }
    }
    {
        std::lock_guard lock(m);
        ++metrics.requests_total;
        if (why == FinishReason::Cancelled) ++metrics.requests_cancelled;
        if (why == FinishReason::Error || why == FinishReason::Timeout) ++metrics.requests_failed;
        metrics.prompt_tokens_total += done.prompt_tokens;
        metrics.cached_tokens_total += s.cached;
        metrics.generated_tokens_total += s.generated;
        metrics.draft_tokens_total += s.drafted;
        metrics.accepted_tokens_total += s.accepted;
        metrics.prompt_seconds_total += done.prompt_ms / 1000.0;
        --metrics.slots_busy;  // before Done is pushed: a caller that saw Done sees the slot free
        metrics.busy[s.index] = false;
    }
    note_kv_usage();  // likewise the KV cache the request left in its slot
    s.req->push(std::move(done));
    s.req.reset();
    s.kv_reserved = 0;
    s.phase = Slot::Phase::Idle;
    s.pending = -1;
    s.sampler.reset();
    s.constraint.reset();
    s.awaiting_trigger = false;
    s.free_text.clear();
    s.text.reset();
    s.last_used = ++use_clock;
}

// --- the public face ----------------------------------------------------------------------------

namespace {
SequenceModel& generating_model(SequenceModel& m) {
    if (!m.config().arch->stack.lm_head)
        throw std::invalid_argument(fmt::format(
            "a {} model has no language-model head: the engine cannot generate with it", m.config().arch->name));
    return m;
}

// A request's images: in order, apart, inside the prompt, each over placeholder tokens with whole
// rows of the model's width, a grid (when given) of as many; a bidirectional one within a chunk.
void check_images(const CompletionRequest& req, const SequenceModel& model) {
    size_t end = 0;
    for (const PromptEmbeddings& im : req.images) {
        if (im.n_rows == 0 || !im.rows || im.rows->size() != size_t(im.n_rows) * model.config().dim)
            throw std::invalid_argument(
                fmt::format("an image's embeddings are not {} rows of {}", im.n_rows, model.config().dim));
        if (im.first < end || size_t(im.first) + im.n_rows > req.prompt.size())
            throw std::invalid_argument("images overlap or lie outside the prompt");
        for (size_t i = im.first; i < size_t(im.first) + im.n_rows; ++i)
            if (req.prompt[i] >= 0) throw std::invalid_argument("an image's tokens must be its placeholders");
        check_image_grid(im.grid, im.n_rows);  // the image's own, whole
        if (im.bidirectional && im.n_rows > model.ubatch())
            throw std::invalid_argument(
                fmt::format("an image of {} tokens does not fit one batch of {} tokens "
                            "(raise --ubatch)",
                            im.n_rows, model.ubatch()));
        end = size_t(im.first) + im.n_rows;
    }
}

}  // namespace

Engine::Engine(SequenceModel& model, const Tokenizer& tok, const EngineOptions& opts)
    : impl_(std::make_unique<Impl>(generating_model(model), tok, opts)) {}

Engine::~Engine() { shutdown(); }

std::unique_ptr<Ticket> Engine::submit(CompletionRequest req) {
    Impl& im = *impl_;
    if (req.prompt.empty()) throw std::invalid_argument("the prompt has no tokens");
    const uint32_t n_ctx = im.model.n_ctx();
    if (req.prompt.size() >= n_ctx)
        throw std::invalid_argument(
            fmt::format("the prompt has {} tokens, but a slot's context holds {} (prompt and "
                        "at least one generated token must fit)",
                        req.prompt.size(), n_ctx));
    check_images(req, im.model);
    for (size_t i = 0; i < req.prompt.size(); ++i) {
        const int32_t t = req.prompt[i];
        if ((t < 0 && !image_at(req, i)) || (t >= 0 && uint32_t(t) >= im.model.config().n_vocab))
            throw std::invalid_argument(
                fmt::format("token id {} outside the vocabulary (0..{})", t, im.model.config().n_vocab - 1));
    }
    if (req.max_tokens < -1) throw std::invalid_argument(fmt::format("max_tokens {} must be >= 0", req.max_tokens));
    if (req.slot < -1 || req.slot >= int32_t(im.opts.n_slots))
        throw std::invalid_argument(
            fmt::format("slot {} does not exist (the engine has {})", req.slot, im.opts.n_slots));
    if (req.top_logprobs > 20)
        throw std::invalid_argument(fmt::format("top_logprobs {} must be in 0..20", req.top_logprobs));
    req.sampler.validate();
    if (req.grammar) {
        grammar::Matcher{*req.grammar};  // throws GrammarError when it cannot even start
        if (!req.stop.empty() && !req.grammar_start.lazy())
            throw std::invalid_argument(
                "stop strings cannot be combined with a grammar (they could cut the structured text)");
    }
    auto st = std::make_shared<Ticket::State>();
    st->submitted = Clock::now();
    st->deadline = st->submitted + (req.timeout.count() > 0 ? req.timeout : im.opts.default_timeout);
    st->req = std::move(req);
    {
        std::lock_guard lock(im.m);
        if (im.stopping) throw EngineStoppedError("the server is shutting down");
        if (im.queue.size() >= im.opts.queue_limit)
            throw QueueFullError(fmt::format("all {} slots are busy and {} requests are waiting; try again shortly",
                                             im.opts.n_slots, im.queue.size()));
        st->id = im.next_id++;
        im.queue.push_back(st);
        im.metrics.queued = uint32_t(im.queue.size());
    }
    im.wake.notify_all();
    return std::make_unique<Ticket>(st);
}

EngineMetrics Engine::metrics() const {
    std::lock_guard lock(impl_->m);
    return impl_->metrics;
}

uint32_t Engine::n_ctx_per_slot() const { return impl_->model.n_ctx(); }

void Engine::shutdown() {
    if (!impl_) return;
    {
        std::lock_guard lock(impl_->m);
        impl_->stopping = true;
    }
    impl_->wake.notify_all();
    // Several threads may ask at once (a signal handler thread and a destructor): one joins.
    std::call_once(impl_->joined, [&] { impl_->worker.join(); });
}

}  // namespace vkllm::engine
