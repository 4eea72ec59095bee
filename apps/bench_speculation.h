// `vkllm bench --draft D | --lookup[=N]`: what speculative decoding buys on this device. The cost of
// verifying k drafts (one decode step of 1 + k rows of one sequence) against decoding one token, for
// k = 1, 2, 4, ... up to --draft-max; then greedy generation through the engine without and with the
// drafter: tokens/s of each, the speed-up, the drafts kept of those verified and the tokens each
// step yields. Greedy output with drafts is plain decoding's (the engine tests check it); the bench
// checks it again on its run and reports it.
#pragma once

#include "apps/speculation_options.h"

#include <nlohmann/json.hpp>

namespace vkllm::apps {

// The "speculation" object of one model's results. `m` must have been loaded through
// SpeculationOptions::fit_model; `prompt` is the generation's prompt ("" means BOS only).
nlohmann::json bench_speculation(LoadedModel& m, const SpeculationOptions& o, const DeviceOptions& dev,
                                 const std::string& prompt, uint32_t n_gen, int reps);

// The Markdown lines of every result's "speculation" object (nothing where none has one).
void print_speculation_markdown(const nlohmann::json& results);

}  // namespace vkllm::apps
