// CacheBlend's options of `vkllm serve`: --blend-separator marks documents in prompts, --blend-ratio
// the share of their tokens evaluated again, --kv-store / --kv-store-mib the document store's disk
// directory and budgets (serving/engine/blender.h).
#pragma once

#include "model/load.h"
#include "serving/engine/blender.h"

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

namespace vkllm::apps {

struct BlendFlags {
    std::string separator;
    float ratio = 0.15f;
    std::string store_dir;
    uint64_t host_mib = 1024, disk_mib = 8192;

    void add_to(CLI::App* cmd);
    bool on() const { return !separator.empty(); }
    // One more sequence than the slots: the blender's scratch, where documents are evaluated alone,
    // which takes blocks from the slots' pool rather than a context of its own (spare_seqs).
    void fit_model(ModelOptions& mo) const;
};

// --blend-ratio, as serve and bench-blend take it.
CLI::Option* add_blend_ratio_option(CLI::App* cmd, float& ratio);

// The blender for a model loaded with fit_model's sequences, or null when off. A model that cannot
// blend (engine::blend_refusal) gets none and a warning: its documents are evaluated as text.
std::shared_ptr<engine::Blender> make_blender(const BlendFlags& f, ModelGpu& model, uint32_t n_slots);

}  // namespace vkllm::apps
