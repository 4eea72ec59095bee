#include "serving/engine/blender.h"
#include "serving/engine/drafter.h"
#include "serving/engine/engine_impl.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace vkllm::engine {

using namespace detail;

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
        // Text up to the next image or document, an image's rows (all of them when they see each
        // other), or documents blended with the text after them.
        size_t chunk = std::min<size_t>(model.ubatch(), prompt.size() - s.prompt_done);
        const PromptEmbeddings* image = image_at(req, s.prompt_done);
        size_t blended = 0;
        if (opts.blender && !s.blend_off) {
            const auto next = std::find_if(req.documents.begin(), req.documents.end(),
                                           [&](const DocumentSpan& d) { return d.first >= s.prompt_done; });
            if (next != req.documents.end() && next->first == s.prompt_done) blended = blend_step(s);
            // Text stops at the next document, where the blend starts (after a failed one: no more).
            if (!blended && !s.blend_off && next != req.documents.end())
                chunk = std::min(chunk, next->first - s.prompt_done);
        }
        if (blended) {
            chunk = blended;
        } else if (image) {
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

size_t Engine::Impl::blend_step(Slot& s) {
    const CompletionRequest& req = s.req->req;
    const std::vector<int32_t>& prompt = req.prompt;
    // The run of adjacent documents from here, and the text after it up to the next document or image.
    std::vector<std::span<const int32_t>> docs;
    size_t end = s.prompt_done, then_end = prompt.size();
    for (const DocumentSpan& d : req.documents) {
        if (d.first < s.prompt_done) continue;
        if (d.first == end) {
            docs.emplace_back(prompt.data() + d.first, d.n);
            end = d.first + d.n;
        } else {
            then_end = std::min(then_end, d.first);
            break;
        }
    }
    for (const PromptEmbeddings& im : req.images)
        if (im.first >= end) then_end = std::min<size_t>(then_end, im.first);
    if (docs.empty() || then_end == end) {
        s.blend_off = true;  // nothing after the documents to fuse the recompute with: plain prefill
        return 0;
    }
    const std::span<const int32_t> then(prompt.data() + end, then_end - end);
    // The slot's new rows, or the scratch sequence's for the longest document (it gives its blocks
    // back before the slot grows): the larger of the two.
    size_t longest = 0;
    for (const auto& d : docs) longest = std::max(longest, d.size());
    make_room(std::max(model.kv_blocks_needed(s.index, uint32_t(then_end - s.prompt_done)),
                       uint32_t((longest + kv_block_rows - 1) / kv_block_rows)));
    try {
        const BlendOutcome b = opts.blender->blend(s.index, docs, then);
        s.blended_documents += b.documents;
        s.stored_documents += b.from_store;
        s.blended_tokens += b.tokens;
        s.recomputed_tokens += b.recomputed;
    } catch (const std::exception&) {
        // The model refused or ran out of room: the sequence is as it was, the documents go in as text.
        opts.blender->count_fallback();
        s.blend_off = true;
        return 0;
    }
    return then_end - s.prompt_done;
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
    try {
        opts.drafter->propose(reqs);
    } catch (const std::exception&) {
        // Drafts only save time: a drafter that fails (a draft model's device error, its cache full)
        // costs this step its drafts, never a request. It left its own state consistent (drafter.h).
        return out;
    }
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
            // A lazy grammar that started (or was dropped) at this token changes how the next is
            // chosen (host sampling under its mask, or the device's argmax): the rows after it were
            // read the other way, so the run ends here and the next step chooses as plain decoding.
            if (needs_logits(s) != host) break;
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

}  // namespace vkllm::engine
