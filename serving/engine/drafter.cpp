#include "serving/engine/drafter.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

namespace vkllm::engine {

namespace {

size_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
    size_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
    return n;
}

}  // namespace

// --- prompt lookup ----------------------------------------------------------------------------------

LookupDrafter::LookupDrafter(uint32_t ngram_max, uint32_t ngram_min) : ngram_max_(ngram_max), ngram_min_(ngram_min) {
    if (ngram_min == 0 || ngram_max < ngram_min)
        throw std::invalid_argument(
            fmt::format("lookup n-grams of {} to {} tokens: need 1 <= min <= max", ngram_min, ngram_max));
}

void LookupDrafter::propose(std::span<DraftRequest> requests) {
    for (DraftRequest& r : requests) {
        r.draft.clear();
        const std::span<const int32_t> c = r.context;
        const size_t len = c.size();
        if (r.max == 0) continue;
        for (size_t n = std::min<size_t>(ngram_max_, len > 0 ? len - 1 : 0); n >= ngram_min_; --n) {
            const std::span<const int32_t> tail = c.subspan(len - n);
            // The latest earlier occurrence: the text most like what comes next.
            for (size_t start = len - n; start-- > 0;) {
                if (!std::equal(tail.begin(), tail.end(), c.begin() + long(start))) continue;
                for (size_t i = start + n; i < len && r.draft.size() < r.max && c[i] >= 0; ++i) r.draft.push_back(c[i]);
                break;
            }
            if (!r.draft.empty()) break;
        }
    }
}

// --- a draft model ------------------------------------------------------------------------------------

ModelDrafter::ModelDrafter(SequenceModel& draft, const Tokenizer& tok)
    : model_(draft), tok_(tok), catch_up_rows_(1 + draft.draft_rows()), held_(draft.n_seq()) {
    if (!draft.config().arch->stack.lm_head || !draft.config().causal)
        throw std::invalid_argument(
            fmt::format("a {} model cannot draft: it needs a causal language-model head", draft.config().arch->name));
    for (uint32_t s = 0; s < draft.n_seq(); ++s) model_.reset(s);
}

void ModelDrafter::propose(std::span<DraftRequest> requests) {
    std::vector<DraftRequest*> active;  // requests whose sequence this call evaluates
    try {
        catch_up(requests, active);
        extend(active);
    } catch (...) {
        // What the draft model's cache holds of these sequences is no longer known: forget them
        // (the next call evaluates their contexts again).
        for (DraftRequest* r : active) {
            model_.reset(r->slot);
            held_[r->slot].clear();
            r->draft.clear();
        }
        throw;
    }
}

void ModelDrafter::catch_up(std::span<DraftRequest> requests, std::vector<DraftRequest*>& active) {
    // Each slot's sequence catches up with its context, its last token included (that token's
    // logits give the first draft). A gap of a few tokens (the last step's accepted tokens) rides
    // in one decode step for all slots; a new prompt is evaluated a ubatch per call, as the engine
    // reads prompts, and drafts once it is in.
    const int32_t n_vocab = int32_t(model_.config().n_vocab);
    std::vector<SeqToken> batch;
    std::vector<std::pair<DraftRequest*, uint32_t>> batched;  // a request and its last row in batch
    for (DraftRequest& r : requests) {
        r.draft.clear();
        const std::span<const int32_t> c = r.context;
        // No row left for a draft; a slot the draft model has no sequence for; ids it cannot read
        // (an image's placeholders, a vocabulary a little smaller than the target's).
        if (r.max == 0 || c.empty() || c.size() >= model_.n_ctx() || r.slot >= held_.size() ||
            std::any_of(c.begin(), c.end(), [&](int32_t t) { return t < 0 || t >= n_vocab; }))
            continue;
        r.max = std::min<uint32_t>(r.max, model_.n_ctx() - uint32_t(c.size()));
        std::vector<int32_t>& held = held_[r.slot];
        active.push_back(&r);
        size_t keep = std::min(common_prefix(held, c), c.size() - 1);
        if (keep < held.size()) {
            if (!model_.truncate(r.slot, uint32_t(keep))) {
                model_.reset(r.slot);
                keep = 0;
            }
            held.resize(keep);
        }
        const std::span<const int32_t> gap = c.subspan(keep);
        if (gap.size() <= catch_up_rows_) {
            for (int32_t t : gap) batch.push_back({r.slot, t});
            batched.emplace_back(&r, uint32_t(batch.size() - 1));
            continue;
        }
        const std::span<const int32_t> chunk = gap.first(std::min<size_t>(gap.size(), model_.ubatch()));
        model_.eval(r.slot, chunk);
        held.insert(held.end(), chunk.begin(), chunk.end());
        if (chunk.size() < gap.size()) continue;  // the rest next time
        const int32_t first = model_.argmax_rows(1)[0];
        if (first >= 0) r.draft.push_back(first);
    }
    if (batch.empty()) return;
    model_.decode(batch);
    const std::vector<int32_t> am = model_.argmax_rows(uint32_t(batch.size()));
    for (auto [r, last] : batched) {
        const std::span<const int32_t> c = r->context;
        std::vector<int32_t>& held = held_[r->slot];
        held.insert(held.end(), c.begin() + long(held.size()), c.end());
        if (am[last] >= 0) r->draft.push_back(am[last]);
    }
}

void ModelDrafter::extend(const std::vector<DraftRequest*>& active) {
    // One decode step per further draft token, every slot still drafting side by side.
    auto more = [&](const DraftRequest* r) {
        return !r->draft.empty() && r->draft.size() < r->max && !tok_.is_eog(r->draft.back());
    };
    for (;;) {
        std::vector<SeqToken> step;
        std::vector<DraftRequest*> rows;
        for (DraftRequest* r : active)
            if (more(r)) {
                step.push_back({r->slot, r->draft.back()});
                rows.push_back(r);
            }
        if (step.empty()) return;
        model_.decode(step);
        const std::vector<int32_t> am = model_.argmax_rows(uint32_t(step.size()));
        for (size_t i = 0; i < rows.size(); ++i) {
            held_[rows[i]->slot].push_back(rows[i]->draft.back());
            if (am[i] >= 0)
                rows[i]->draft.push_back(am[i]);
            else
                rows[i]->max = uint32_t(rows[i]->draft.size());  // not finite: stop here
        }
    }
}

// --- vocabulary ---------------------------------------------------------------------------------------

void check_draft_vocab(const Tokenizer& target, const Tokenizer& draft) {
    auto refuse = [](const std::string& what) {
        throw std::invalid_argument("the draft model's vocabulary differs from the model's: " + what);
    };
    if (target.model_name() != draft.model_name())
        refuse(fmt::format("its tokenizer is {}, the model's {}", draft.model_name(), target.model_name()));
    const size_t nt = target.n_vocab(), nd = draft.n_vocab();
    if (std::max(nt, nd) - std::min(nt, nd) > 128)
        refuse(fmt::format("it has {} tokens, the model {} (at most 128 apart)", nd, nt));
    if (target.bos_id() != draft.bos_id())
        refuse(fmt::format("its BOS is token {}, the model's {}", draft.bos_id(), target.bos_id()));
    if (target.eos_id() != draft.eos_id())
        refuse(fmt::format("its EOS is token {}, the model's {}", draft.eos_id(), target.eos_id()));
    for (size_t id = 0; id < std::min(nt, nd); ++id)
        if (target.token_text(int32_t(id)) != draft.token_text(int32_t(id)))
            refuse(fmt::format("token {} is \"{}\" in the draft, \"{}\" in the model", id,
                               draft.token_text(int32_t(id)), target.token_text(int32_t(id))));
}

}  // namespace vkllm::engine
