#include "apps/speculation_options.h"

#include <fmt/format.h>

#include <cstdio>

namespace vkllm::apps {

void SpeculationOptions::add_to(CLI::App* cmd) {
    auto* d = cmd->add_option("--draft", params.draft_model,
                              "Speculative decoding with this draft model (a smaller model of the same vocabulary)");
    cmd->add_option("--draft-max", params.draft_max, "Tokens drafted and verified per step at most")
        ->check(CLI::Range(1, 32))
        ->capture_default_str();
    cmd->add_option("--draft-min", params.draft_min, "Drafts shorter than this are not verified")
        ->check(CLI::Range(1, 32))
        ->capture_default_str();
    auto* l = cmd->add_flag("--lookup{3}", params.lookup,
                            "Speculative decoding by prompt lookup: drafts copied from where the context's last "
                            "N tokens (--lookup=N, 1..8, default 3) occurred before")
                  ->check(CLI::Range(1, 8));
    d->excludes(l);
}

void SpeculationOptions::fit_model(ModelOptions& mo) const {
    if (!on()) return;
    engine::check_speculation(params, kSpeculationFlags);
    if (!params.draft_model.empty()) check_model_path(params.draft_model);
    engine::fit_for_drafts(params, mo);
}

engine::Speculation make_speculation(const SpeculationOptions& o, const LoadedModel& target, const DeviceOptions& dev,
                                     uint32_t n_slots, bool quiet) {
    ContextOptions device = dev.context_options();
    if (const std::vector<DeviceSelector> split = dev.split_devices(); !split.empty()) device.device = split.front();
    engine::Speculation s = engine::make_speculation(o.params, target, device, n_slots, kSpeculationFlags);
    if (!quiet && s.drafter) {
        if (s.draft_model)
            fmt::print(stderr, "speculative decoding: draft {} ({} layers), up to {} drafts per step\n",
                       o.params.draft_model, s.draft_model->cfg.n_layers, o.params.draft_max);
        else
            fmt::print(stderr,
                       "speculative decoding: prompt lookup (n-grams of up to {} tokens), up to {} drafts "
                       "per step\n",
                       o.params.lookup, o.params.draft_max);
    }
    return s;
}

}  // namespace vkllm::apps
