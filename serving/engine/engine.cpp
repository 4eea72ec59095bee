#include "serving/engine/engine_impl.h"

#include "serving/engine/blender.h"
#include "serving/engine/drafter.h"

#include <fmt/format.h>

#include <algorithm>
#include <exception>

namespace vkllm::engine {

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

namespace detail {

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

size_t mostly_whole_documents(const CompletionRequest& req, size_t keep) {
    for (const DocumentSpan& d : req.documents)
        if (d.first < keep && keep < d.first + d.n && 2 * (keep - d.first) < d.n) return d.first;
    return keep;
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

}  // namespace detail

using namespace detail;

Engine::Impl::Impl(SequenceModel& mdl, const Tokenizer& t, const EngineOptions& o) : model(mdl), tok(t), opts(o) {
    if (opts.n_slots == 0) throw std::invalid_argument("the engine needs at least one slot (--parallel >= 1)");
    if (opts.n_slots > model.n_seq())
        throw std::invalid_argument(
            fmt::format("{} slots, but the model was loaded with {} sequences", opts.n_slots, model.n_seq()));
    if (opts.drafter && opts.draft_max > model.draft_rows())
        throw std::invalid_argument(fmt::format("{} drafted tokens per step, but the model was loaded for {}",
                                                opts.draft_max, model.draft_rows()));
    if (opts.blender &&
        (static_cast<SequenceModel*>(&opts.blender->model()) != &model || opts.blender->scratch() < opts.n_slots))
        throw std::invalid_argument("the blender must work on the engine's model, in a sequence after the slots'");
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
    auto whole = [&](size_t keep) {
        return whole_images(r->req, opts.blender ? mostly_whole_documents(r->req, keep) : keep);
    };
    size_t keep = whole(std::min(common_prefix(s.history, prompt), limit));
    // Another slot, serving or idle, may hold a longer prefix of the prompt (a system prompt every
    // conversation starts with): this slot then shares its KV blocks instead of evaluating them.
    const Slot* donor = nullptr;
    size_t donor_keep = keep;
    for (const Slot& o : slots)
        if (&o != &s)
            if (const size_t l = whole(std::min(common_prefix(o.history, prompt), limit)); l > donor_keep) {
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
    s.blend_off = false;
    s.blended_documents = s.stored_documents = s.blended_tokens = s.recomputed_tokens = 0;
    if (s.req->req.grammar && !s.awaiting_trigger) hold_grammar(s);
    s.text = std::make_unique<TextStream>(s.req->req.stop);
    s.started = Clock::now();
    s.last_used = ++use_clock;
    std::lock_guard lock(m);
    ++metrics.slots_busy;
    metrics.busy[s.index] = true;
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
    done.blended_documents = s.blended_documents;
    done.stored_documents = s.stored_documents;
    done.blended_tokens = s.blended_tokens;
    done.recomputed_tokens = s.recomputed_tokens;
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

// Documents ascending, apart, inside the prompt and holding no image placeholders.
void check_documents(const CompletionRequest& req) {
    size_t end = 0;
    for (const DocumentSpan& d : req.documents) {
        if (d.n == 0 || d.first < end || d.first + d.n > req.prompt.size())
            throw std::invalid_argument("documents are empty, overlap, are not in order or lie outside the prompt");
        for (size_t i = d.first; i < d.first + d.n; ++i)
            if (req.prompt[i] < 0) throw std::invalid_argument("a document holds an image's placeholders");
        end = d.first + d.n;
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
    check_documents(req);
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
    EngineMetrics out;
    {
        std::lock_guard lock(impl_->m);
        out = impl_->metrics;
    }
    if (impl_->opts.blender) {
        const BlendStats b = impl_->opts.blender->stats();
        out.blending = true;
        out.blend_documents_total = b.documents;
        out.blend_documents_stored_total = b.from_store;
        out.blend_tokens_total = b.document_tokens;
        out.blend_recomputed_tokens_total = b.recomputed_tokens;
        out.blend_fallbacks_total = b.fallbacks;
        out.blend_store_bytes = b.store.host_bytes;
        out.blend_store_disk_bytes = b.store.disk_bytes;
    }
    return out;
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
