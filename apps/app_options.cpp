#include "apps/app_options.h"

#include "model/forward/device_split.h"
#include "runtime/ops/kernel_table.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace vkllm::apps {

std::optional<std::string> read_whole_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return std::nullopt;
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

namespace {

CLI::Validator number_check(bool allow_zero) {
    return CLI::Validator(
        [allow_zero](std::string& in) -> std::string {
            char* end = nullptr;
            const double v = std::strtod(in.c_str(), &end);
            if (in.empty() || end != in.c_str() + in.size() || !std::isfinite(v))
                return fmt::format("'{}' is not a number", in);
            if (v < 0 || (!allow_zero && v == 0))
                return fmt::format("must be {} 0, got {}", allow_zero ? ">=" : ">", in);
            return {};
        },
        allow_zero ? "NUMBER >= 0" : "NUMBER > 0");
}

}  // namespace

CLI::Validator non_negative_number() { return number_check(true); }
CLI::Validator positive_number() { return number_check(false); }

void add_kv_type_option(CLI::App* cmd, ops::KvType& kv) {
    std::vector<std::string> names;
    for (ops::KvType t : ops::kAllKvTypes) names.emplace_back(ops::kv_type_name(t));
    cmd->add_option_function<std::string>(
           "--kv-type", [&kv](const std::string& s) { kv = *ops::parse_kv_type(s); },  // checked below
           "KV cache element type (q8_0: 0.56x the memory of f16)")
        ->check(CLI::IsMember(names))
        ->default_str(ops::kv_type_name(kv));
}

void DeviceOptions::add_to(CLI::App* cmd) {
    cmd->add_option("--device", device, "Device index or name substring (see `vkllm devices`)");
    cmd->add_option("--caps", caps, "Make the device behave as if weaker: " + CapsOverride::help());
    cmd->add_flag("--validate", validate, "Enable the Khronos validation layer (prints its messages)");
    cmd->add_option("--cache-dir", cache_dir,
                    "Pipeline cache directory (default: $XDG_CACHE_HOME/vkllm or ~/.cache/vkllm)");
    cmd->add_flag("--no-pipeline-cache", no_cache, "Neither read nor write the pipeline cache");
}

void DeviceOptions::add_split_to(CLI::App* cmd) {
    cmd->add_option("--devices", devices,
                    "Split the model's layers over these devices: indices or name substrings, "
                    "comma-separated (see `vkllm devices -m MODEL --devices ...`)");
    cmd->add_option("--split", split,
                    "How --devices share the layers: layer (by each device's device-local memory, "
                    "the default) or layer:R0,R1,... (in these ratios); alone: over every device");
}

void DeviceOptions::add_tune_to(CLI::App* cmd) {
    reads_tuning = true;
    cmd->add_flag("--no-tune", no_tune,
                  "Ignore the kernel configurations `vkllm tune` measured on this device (docs/tuning.md)");
}

std::vector<DeviceSelector> DeviceOptions::split_devices() const {
    if (devices.empty() && split.empty()) return {};
    if (!device.empty())
        throw std::invalid_argument("--device picks one device, --devices and --split several: give one of them");
    std::vector<DeviceSelector> out;
    if (devices.empty()) {
        Instance instance;
        for (const PhysicalDeviceEntry& d : enumerate_devices(instance)) out.push_back(DeviceSelector{d.index, {}});
        return out;
    }
    return parse_devices(devices, "--devices");
}

ContextOptions DeviceOptions::context_options() const {
    ContextOptions o;
    if (!device.empty()) o.device = DeviceSelector::parse(device);
    o.caps = CapsOverride::parse(caps);
    // Names checked now, before a model loads; whether the device runs the row, once it is open.
    for (const std::string& k : o.caps.kernels)
        if (!ops::find_kernel_row(k)) {
            std::string names;
            for (const ops::KernelRow& r : ops::kernel_table())
                names += fmt::format("{}{}", names.empty() ? "" : ", ", r.name);
            throw std::invalid_argument(fmt::format("--caps kernel={}: no such kernel (the rows: {})", k, names));
        }
    o.instance.validation = validate;
    if (validate)
        o.instance.sink = [](MessageSeverity s, std::string_view msg) {
            fmt::print(stderr, "[validation {}] {}\n", s == MessageSeverity::Error ? "error" : "warning", msg);
        };
    o.pipeline_cache = !no_cache;
    if (!cache_dir.empty()) o.cache_dir = cache_dir;
    o.kernel_tuning = reads_tuning && !no_tune;
    o.warn = [](const std::string& line) { fmt::print(stderr, "{}\n", line); };
    return o;
}

}  // namespace vkllm::apps
