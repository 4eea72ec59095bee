#include "apps/speculation_options.h"

#include "apps/load_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

namespace vkllm::apps {

void SpeculationOptions::add_to(CLI::App* cmd) {
    auto* d = cmd->add_option("--draft", draft,
                              "Speculative decoding with this draft model (a smaller model of the same vocabulary)");
    cmd->add_option("--draft-max", draft_max, "Tokens drafted and verified per step at most")
        ->check(CLI::Range(1, 32))
        ->capture_default_str();
    cmd->add_option("--draft-min", draft_min, "Drafts shorter than this are not verified")
        ->check(CLI::Range(1, 32))
        ->capture_default_str();
    auto* l = cmd->add_flag("--lookup{3}", lookup,
                            "Speculative decoding by prompt lookup: drafts copied from where the context's last "
                            "N tokens (--lookup=N, default 3) occurred before");
    d->excludes(l);
}

void SpeculationOptions::fit_model(ModelOptions& mo) const {
    if (!on()) return;
    if (draft_min > draft_max)
        throw std::invalid_argument(fmt::format("--draft-min {} is more than --draft-max {}", draft_min, draft_max));
    if (!draft.empty()) check_model_path(draft);
    mo.draft_rows = draft_max;
    mo.ubatch = std::max(mo.ubatch, draft_max + 1);  // a ring rolls drafts back within a ubatch
}

Speculation make_speculation(const SpeculationOptions& o, const LoadedModel& target, const DeviceOptions& dev,
                             uint32_t n_slots, bool quiet) {
    Speculation s;
    if (o.lookup > 0) {
        s.drafter = std::make_shared<engine::LookupDrafter>(o.lookup);
        if (!quiet)
            fmt::print(stderr,
                       "speculative decoding: prompt lookup (n-grams of up to {} tokens), up to {} "
                       "drafts per step\n",
                       o.lookup, o.draft_max);
        return s;
    }
    if (o.draft.empty()) return s;
    ModelOptions mo;
    mo.n_ctx = target.model->n_ctx();
    mo.n_seq = n_slots;
    // A step's catch-up is the target's last token and, when every draft was kept, the last draft.
    mo.draft_rows = 1;
    DeviceOptions d = dev;
    d.devices.clear();  // a split target's draft goes on its first device
    d.split.clear();
    s.draft_model = std::make_unique<LoadedModel>(load_model(o.draft, d, mo, quiet));
    try {
        engine::check_draft_vocab(*target.tokenizer, *s.draft_model->tokenizer);
    } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(fmt::format("--draft {}: {}", o.draft, e.what()));
    }
    s.drafter = std::make_shared<engine::ModelDrafter>(*s.draft_model->model, *target.tokenizer, 1 + mo.draft_rows);
    if (!quiet)
        fmt::print(stderr, "speculative decoding: draft {} ({} layers), up to {} drafts per step\n", o.draft,
                   s.draft_model->cfg.n_layers, o.draft_max);
    return s;
}

}  // namespace vkllm::apps
