// The speculative-decoding options of the commands that generate (run, chat, serve, bench): a draft
// model (--draft, --draft-max, --draft-min) or prompt lookup (--lookup), and the drafter they make
// beside the loaded model (serving/engine/drafter.h).
#pragma once

#include "apps/app_options.h"
#include "model/load.h"
#include "serving/engine/drafter.h"

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

namespace vkllm::apps {

struct SpeculationOptions {
    std::string draft;  // draft model file
    uint32_t draft_max = 8, draft_min = 1;
    uint32_t lookup = 0;  // prompt lookup's longest n-gram; 0: off

    void add_to(CLI::App* cmd);
    bool on() const { return !draft.empty() || lookup > 0; }
    // Checks the options and sizes the target's decode steps for the drafts (draft_rows, and a
    // ubatch that can roll them back); nothing when off.
    void fit_model(ModelOptions& mo) const;
};

// A drafter and the draft model it reads (null when the options are off).
struct Speculation {
    std::unique_ptr<LoadedModel> draft_model;
    std::shared_ptr<engine::Drafter> drafter;
};

// Loads --draft on the target's device (one sequence per slot, the target's context) after checking
// its vocabulary against the target's, or makes the lookup drafter. Errors name the option.
Speculation make_speculation(const SpeculationOptions& o, const LoadedModel& target, const DeviceOptions& dev,
                             uint32_t n_slots, bool quiet);

}  // namespace vkllm::apps
