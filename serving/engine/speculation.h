// Speculative decoding's setup, one place for every front end (the commands and the C API): the
// limits of its parameters, what the target model must be loaded with, and the drafter with its
// draft model (drafter.h says how drafts are made and verified).
#pragma once

#include "model/load.h"
#include "serving/engine/drafter.h"

#include <memory>
#include <string>

namespace vkllm::engine {

struct SpeculationParams {
    std::string draft_model;  // a draft model's file; "": none
    uint32_t lookup = 0;  // prompt lookup's longest n-gram, 1..8; 0: off
    uint32_t draft_max = 8;  // tokens drafted and verified per step, 1..32
    uint32_t draft_min = 1;  // shorter drafts are not verified, 1..draft_max
    bool on() const { return !draft_model.empty() || lookup > 0; }
};

// How a front end spells the parameters, for its error messages.
struct SpeculationNames {
    const char* draft_model = "draft_model";
    const char* lookup = "lookup";
    const char* draft_max = "draft_max";
    const char* draft_min = "draft_min";
};

// std::invalid_argument naming the parameter for a value out of its range, or a draft model and
// lookup together.
void check_speculation(const SpeculationParams& p, const SpeculationNames& names = {});

// The target's decode steps sized for the drafts (ModelOptions::draft_rows) and a ubatch that a
// sliding-window ring rolls them back within; nothing when off.
void fit_for_drafts(const SpeculationParams& p, ModelOptions& target);

// A drafter, and the draft model it reads (null when there is none).
struct Speculation {
    std::unique_ptr<LoadedModel> draft_model;
    std::shared_ptr<Drafter> drafter;  // null when off
};

// Lookup's drafter, or the draft model loaded on `device` (the target's, a split target's first)
// with the target's context, KV type and pool size and one sequence per slot, its vocabulary
// checked against the target's. Errors name the parameter and file: std::invalid_argument (another
// vocabulary, a model that cannot draft), ModelFileError, GgufError and DeviceLimitError as
// load_model throws them.
Speculation make_speculation(const SpeculationParams& p, const LoadedModel& target, const ContextOptions& device,
                             uint32_t n_slots, const SpeculationNames& names = {});

}  // namespace vkllm::engine
