#include "serving/engine/speculation.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace vkllm::engine {

void check_speculation(const SpeculationParams& p, const SpeculationNames& n) {
    auto bad = [](const std::string& what) { throw std::invalid_argument(what); };
    if (!p.draft_model.empty() && p.lookup > 0)
        bad(fmt::format("{} and {} are two ways to draft: give only one", n.draft_model, n.lookup));
    if (p.lookup > 8) bad(fmt::format("{} {}: n-grams of at most 8 tokens", n.lookup, p.lookup));
    if (p.draft_max < 1 || p.draft_max > 32) bad(fmt::format("{} {} must be 1..32", n.draft_max, p.draft_max));
    if (p.draft_min < 1) bad(fmt::format("{} {} must be at least 1", n.draft_min, p.draft_min));
    if (p.draft_min > p.draft_max)
        bad(fmt::format("{} {} is more than {} {}", n.draft_min, p.draft_min, n.draft_max, p.draft_max));
}

void fit_for_drafts(const SpeculationParams& p, ModelOptions& target) {
    if (!p.on()) return;
    target.draft_rows = p.draft_max;
    target.ubatch = std::max(target.ubatch, p.draft_max + 1);
}

Speculation make_speculation(const SpeculationParams& p, const LoadedModel& target, const ContextOptions& device,
                             uint32_t n_slots, const SpeculationNames& n) {
    Speculation s;
    if (p.lookup > 0) {
        s.drafter = std::make_shared<LookupDrafter>(p.lookup);
        return s;
    }
    if (p.draft_model.empty()) return s;
    const std::string name = fmt::format("{} {}", n.draft_model, p.draft_model);
    LoadOptions lo;
    lo.context = device;
    lo.model.n_ctx = target.model->n_ctx();
    lo.model.n_seq = n_slots;
    lo.model.kv_type = target.model->options().kv_type;
    lo.model.kv_budget = target.model->memory_plan().kv_budget;  // as many rows as the target's pool
    // A step's catch-up is the target's last token and, when every draft was kept, the last draft.
    lo.model.draft_rows = 1;
    try {
        s.draft_model = std::make_unique<LoadedModel>(load_model(p.draft_model, lo));
    } catch (const NoDeviceError&) {
        throw;
    } catch (const DeviceLimitError& e) {
        throw DeviceLimitError(fmt::format("{}: {}", name, e.what()));
    }
    try {
        check_draft_vocab(*target.tokenizer, *s.draft_model->tokenizer);
        s.drafter = std::make_shared<ModelDrafter>(*s.draft_model->model, *target.tokenizer);
    } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(fmt::format("{}: {}", name, e.what()));
    }
    return s;
}

}  // namespace vkllm::engine
