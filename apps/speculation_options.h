// The speculative-decoding options of the commands that generate (run, chat, serve, bench): a draft
// model (--draft, --draft-max, --draft-min) or prompt lookup (--lookup), checked and set up by
// serving/engine/speculation.h as the C API's are.
#pragma once

#include "apps/app_options.h"
#include "model/load.h"
#include "serving/engine/speculation.h"

#include <CLI/CLI.hpp>

namespace vkllm::apps {

inline constexpr engine::SpeculationNames kSpeculationFlags{"--draft", "--lookup", "--draft-max", "--draft-min"};

struct SpeculationOptions {
    engine::SpeculationParams params;

    void add_to(CLI::App* cmd);
    bool on() const { return params.on(); }
    // Checks the options and sizes the target's decode steps for the drafts; nothing when off.
    void fit_model(ModelOptions& mo) const;
};

// The drafter beside the loaded target: the draft model on the target's (first) device. Prints
// what it set up unless quiet.
engine::Speculation make_speculation(const SpeculationOptions& o, const LoadedModel& target, const DeviceOptions& dev,
                                     uint32_t n_slots, bool quiet);

}  // namespace vkllm::apps
