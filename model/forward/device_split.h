#pragma once
// How a model's layers would be split over several devices: contiguous layer ranges, the token
// embedding with the first range and the output head with the last (LayerRange), each range's
// weights and KV cache checked against its device's memory by plan_memory. `vkllm devices -m`
// prints the plan; load_model runs it (ModelGpu's stages, one per part).
#include "model/forward/model_gpu.h"

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace vkllm {

// Layer counts for `shares` (one per device, >= 0, not all 0) over n_layers: proportional, the
// remainders rounded by the largest fractional parts (ties to the earlier device), so the counts
// add up to n_layers. A device whose share rounds to no layer gets 0.
std::vector<uint32_t> split_layer_counts(uint32_t n_layers, std::span<const double> shares);

// A device a split may use: its capabilities, and the index that names it (`vkllm devices`).
struct SplitDevice {
    uint32_t index = 0;
    DeviceCaps caps;
};

struct SplitPart {
    size_t device = 0;  // position in the devices given to plan_split
    LayerRange layers;
    MemoryPlan memory;  // this range's weights, KV cache and scratch (the logits: the last range's)
};

struct SplitPlan {
    std::vector<double> shares;  // what the layers were split by (the ratios, or device memory)
    bool by_memory = false;  // shares are each device's device-local memory
    uint32_t n_ctx = 0;  // the same context on every part
    std::vector<SplitPart> parts;  // in layer order; devices given no layer have no part
};

// Splits cfg's layers over `devices` by `ratios` (one per device), or by each device's
// device-local memory when `ratios` is empty. Throws std::invalid_argument for ratios that do not
// match the devices or are negative or all zero, ModelConfigError for a model that is not a
// decoder-only one, and DeviceLimitError naming every part's sizes and its device's memory when a
// part does not fit. The context: opts.n_ctx, or the largest every part can hold (up to the model's).
SplitPlan plan_split(std::span<const SplitDevice> devices, const GgufFile& file, const ModelConfig& cfg,
                     const ModelOptions& opts, std::span<const double> ratios = {});

// "3" or "0-2": a range's layers as the split plan prints them.
std::string layer_span(const LayerRange& r);

// The comma-separated items of --split's ratios and --devices, empty ones kept (for the caller to refuse).
std::vector<std::string> comma_items(const std::string& list);

// The devices a list names (`--devices 0,1`, the C API's `devices`): indices or name substrings,
// comma-separated; std::invalid_argument naming `option` for an empty entry.
std::vector<DeviceSelector> parse_devices(const std::string& list, std::string_view option);

// Parses --split's value: "layer" (by device memory) or "layer:R0,R1,..." (non-negative ratios).
// Returns the ratios (empty for "layer"); std::invalid_argument naming the problem otherwise.
std::vector<double> parse_split(const std::string& spec);

}  // namespace vkllm
