// `vkllm devices`: every Vulkan device with the capabilities vkllm uses, as a table or JSON; with -m,
// how that model's layers would be split over the devices (model/forward/device_split.h).
#include "apps/app_options.h"
#include "apps/commands.h"
#include "model/arch/model_config.h"
#include "model/forward/device_split.h"
#include "model/gguf/gguf.h"
#include "model/load.h"
#include "runtime/device.h"
#include "runtime/instance.h"
#include "runtime/vk_check.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace vkllm::apps {

namespace {

std::string bytes_str(uint64_t b) {
    if (b >= (1ull << 30) && b % (1ull << 30) == 0) return fmt::format("{} GiB", b >> 30);
    if (b >= (1ull << 30)) return fmt::format("{:.1f} GiB", double(b) / (1ull << 30));
    if (b >= (1ull << 20)) return fmt::format("{} MiB", b >> 20);
    if (b >= (1ull << 10)) return fmt::format("{} KiB", b >> 10);
    return fmt::format("{} B", b);
}

std::string version_str(uint32_t v) {
    return fmt::format("{}.{}.{}", VK_API_VERSION_MAJOR(v), VK_API_VERSION_MINOR(v), VK_API_VERSION_PATCH(v));
}

nlohmann::json to_json(const PhysicalDeviceEntry& d) {
    const DeviceCaps& c = d.caps;
    nlohmann::json coop = nlohmann::json::array();
    for (auto& s : c.coop_shapes)
        coop.push_back({{"m", s.m},
                        {"n", s.n},
                        {"k", s.k},
                        {"a", s.a_type},
                        {"b", s.b_type},
                        {"c", s.c_type},
                        {"result", s.result_type}});
    return {
        {"index", d.index},
        {"name", c.name},
        {"vendor", c.vendor},
        {"vendor_id", c.vendor_id},
        {"device_id", c.device_id},
        {"type", c.type_name()},
        {"driver_name", c.driver_name},
        {"driver_info", c.driver_info},
        {"driver_version", c.driver_version},
        {"api_version", version_str(c.api_version)},
        {"device_api_version", version_str(c.device_api_version)},
        {"subgroup_size", c.subgroup_size},
        {"subgroup_size_range", {c.min_subgroup_size, c.max_subgroup_size}},
        {"subgroup_size_control", c.subgroup_size_control},
        {"subgroup_ops",
         {{"basic", c.subgroup_basic},
          {"arithmetic", c.subgroup_arithmetic},
          {"shuffle", c.subgroup_shuffle},
          {"ballot", c.subgroup_ballot}}},
        {"fp16", c.fp16},
        {"soft_half", c.soft_half},
        {"int8", c.int8},
        {"int64", c.int64},
        {"storage16", c.storage16},
        {"storage8", c.storage8},
        {"integer_dot_product", c.int_dot_product},
        {"integer_dot_product_accelerated", c.int_dot_accelerated},
        {"integer_dot_kernels", c.int_dot_kernels},
        {"cooperative_matrix", c.cooperative_matrix},
        {"cooperative_matrix_shapes", coop},
        {"coopmat_kernels", c.coopmat_kernels},
        {"coopmat_usable", coopmat_usable(c)},
        {"max_shared_memory", c.max_shared_memory},
        {"max_workgroup_size", c.max_workgroup_size},
        {"max_workgroup_invocations", c.max_workgroup_invocations},
        {"max_storage_buffer_range", c.max_storage_buffer_range},
        {"min_storage_buffer_offset_alignment", c.min_storage_buffer_offset_alignment},
        {"max_uniform_buffer_range", c.max_uniform_buffer_range},
        {"min_uniform_buffer_offset_alignment", c.min_uniform_buffer_offset_alignment},
        {"max_memory_allocation_size", c.max_memory_allocation_size},
        {"max_buffer_size", c.max_buffer_size},
        {"device_local_bytes", c.device_local_bytes},
        {"uma", c.uma},
        {"timestamps", c.timestamps},
        {"timestamp_period_ns", c.timestamp_period_ns},
    };
}

void print_table(const std::vector<PhysicalDeviceEntry>& devices, const PhysicalDeviceEntry* chosen) {
    auto yn = [](bool b) { return b ? "yes" : "no"; };
    for (auto& d : devices) {
        const DeviceCaps& c = d.caps;
        fmt::print("device {}{}: {}\n", d.index, &d == chosen ? " (default)" : "", c.name);
        std::vector<std::pair<std::string, std::string>> rows = {
            {"vendor / type", fmt::format("{} / {}", c.vendor, c.type_name())},
            {"driver", fmt::format("{} {} (version 0x{:x})", c.driver_name, c.driver_info, c.driver_version)},
            {"Vulkan API",
             c.device_api_version == c.api_version
                 ? version_str(c.api_version)
                 : fmt::format("{} (vkllm uses {})", version_str(c.device_api_version), version_str(c.api_version))},
            {"subgroup size", fmt::format("{} (range {}..{}, size control {})", c.subgroup_size, c.min_subgroup_size,
                                          c.max_subgroup_size, yn(c.subgroup_size_control))},
            {"subgroup ops", fmt::format("basic {}, arithmetic {}, shuffle {}, ballot {}", yn(c.subgroup_basic),
                                         yn(c.subgroup_arithmetic), yn(c.subgroup_shuffle), yn(c.subgroup_ballot))},
            {"fp16 / int8 / int64 math",
             fmt::format("{} / {} / {}{}", yn(c.fp16), yn(c.int8), yn(c.int64),
                         c.soft_half ? " (f16 data converted without unpackHalf2x16)" : "")},
            {"16/8-bit storage", fmt::format("{} / {}", yn(c.storage16), yn(c.storage8))},
            {"integer dot product",
             !c.int_dot_product ? std::string("no")
                                : fmt::format("yes (4x8-bit packed {}accelerated; int-dot kernels {})",
                                              c.int_dot_accelerated ? "" : "not ", c.int_dot_kernels ? "on" : "off")},
            {"cooperative matrix",
             c.cooperative_matrix
                 ? fmt::format("yes ({} shapes{}; coopmat kernels {})", c.coop_shapes.size(),
                               coopmat_f16_shape(c) ? fmt::format(", f16 {}x{}x{}", coopmat_f16_shape(c)->m,
                                                                  coopmat_f16_shape(c)->n, coopmat_f16_shape(c)->k)
                                                    : "",
                               c.coopmat_kernels   ? "on"
                               : coopmat_usable(c) ? "off"
                                                   : "unusable")
                 : "no"},
            {"shared memory", bytes_str(c.max_shared_memory)},
            {"workgroup", fmt::format("{} invocations, size {}x{}x{}", c.max_workgroup_invocations,
                                      c.max_workgroup_size[0], c.max_workgroup_size[1], c.max_workgroup_size[2])},
            {"maxStorageBufferRange", bytes_str(c.max_storage_buffer_range)},
            {"storage offset align", fmt::format("{} B", c.min_storage_buffer_offset_alignment)},
            {"maxUniformBufferRange", fmt::format("{}, offset align {} B", bytes_str(c.max_uniform_buffer_range),
                                                  c.min_uniform_buffer_offset_alignment)},
            {"max allocation / buffer",
             fmt::format("{} / {}", bytes_str(c.max_memory_allocation_size), bytes_str(c.max_buffer_size))},
            {"device-local memory",
             fmt::format("{}{}", bytes_str(c.device_local_bytes), c.uma ? " (unified with host)" : "")},
            {"timestamps", c.timestamps ? fmt::format("yes ({} ns/tick)", c.timestamp_period_ns) : "no"},
        };
        for (auto& [k, v] : rows) fmt::print("  {:<24} {}\n", k, v);
    }
}

struct SplitOptions {
    std::string model;
    std::string devices;  // "": every device
    std::string split = "layer";
    uint32_t n_ctx = 0, parallel = 1;
    ops::KvType kv_type = ops::KvType::F16;
};

// The devices --devices names (indices or name substrings, comma-separated), each once; every device
// when it names none.
std::vector<const PhysicalDeviceEntry*> chosen_devices(const std::vector<PhysicalDeviceEntry>& all,
                                                       const std::string& list) {
    const std::vector<DeviceSelector> sels =
        list.empty() ? std::vector<DeviceSelector>{} : parse_devices(list, "--devices");
    try {
        return select_devices(all, sels);
    } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(fmt::format("--devices '{}': {}", list, e.what()));
    }
}

void print_split(const SplitOptions& o, const std::vector<PhysicalDeviceEntry>& all, bool json) {
    const std::vector<double> ratios = parse_split(o.split);
    const std::vector<const PhysicalDeviceEntry*> chosen = chosen_devices(all, o.devices);
    check_model_path(o.model);
    const GgufFile file = GgufFile::open(o.model);
    const ModelConfig cfg = ModelConfig::from_gguf(file);
    std::vector<SplitDevice> devices;
    for (const PhysicalDeviceEntry* d : chosen) devices.push_back({d->index, d->caps});
    ModelOptions mo;
    mo.n_ctx = o.n_ctx;
    mo.kv_type = o.kv_type;
    mo.n_seq = o.parallel;
    const SplitPlan plan = plan_split(devices, file, cfg, mo, ratios);
    if (json) {
        nlohmann::json parts = nlohmann::json::array();
        for (const SplitPart& p : plan.parts)
            parts.push_back({{"device", devices[p.device].index},
                             {"name", devices[p.device].caps.name},
                             {"layers", {p.layers.first, p.layers.end()}},
                             {"embedding", p.layers.first == 0},
                             {"output_head", p.layers.end() == cfg.n_layers},
                             {"weights_bytes", p.memory.weights},
                             {"kv_cache_bytes", p.memory.kv_cache},
                             {"scratch_bytes", p.memory.scratch},
                             {"device_local_bytes", p.memory.available}});
        fmt::print("{}\n", nlohmann::json{{"model", o.model},
                                          {"n_layers", cfg.n_layers},
                                          {"n_ctx", plan.n_ctx},
                                          {"by", plan.by_memory ? "memory" : "ratios"},
                                          {"shares", plan.shares},
                                          {"parts", parts}}
                               .dump(2));
        return;
    }
    std::string shares;
    for (double s : plan.shares)
        shares += fmt::format("{}{}", shares.empty() ? "" : ",",
                              plan.by_memory ? bytes_str(uint64_t(s)) : fmt::format("{:g}", s));
    fmt::print("{}: {} layers over {} device(s), split by {} ({}), context {} x {} sequence(s), KV {}\n", o.model,
               cfg.n_layers, chosen.size(), plan.by_memory ? "device-local memory" : "--split ratios", shares,
               plan.n_ctx, o.parallel, ops::kv_type_name(o.kv_type));
    fmt::print(
        "| device | layers | holds | weights | KV cache | scratch | device-local |\n|---|---|---|---|---|---|---|\n");
    for (const SplitPart& p : plan.parts) {
        std::string holds = p.layers.first == 0 ? "embedding" : "";
        if (p.layers.end() == cfg.n_layers) holds += holds.empty() ? "output head" : ", output head";
        fmt::print("| {} {} | {} | {} | {} | {} | {} | {} |\n", devices[p.device].index, devices[p.device].caps.name,
                   layer_span(p.layers), holds.empty() ? "-" : holds, bytes_str(p.memory.weights),
                   bytes_str(p.memory.kv_cache), bytes_str(p.memory.scratch), bytes_str(p.memory.available));
    }
    fmt::print(
        "(run, chat, serve, perplexity, bench and bench-serve split the model so with the same --devices and "
        "--split)\n");
}

}  // namespace

void register_devices(CLI::App& app) {
    auto* cmd = app.add_subcommand("devices",
                                   "List Vulkan devices and the capabilities vkllm uses; with -m, how a model "
                                   "would be split over them");
    auto json = std::make_shared<bool>(false);
    auto so = std::make_shared<SplitOptions>();
    cmd->add_flag("--json", *json, "Print JSON instead of a table");
    cmd->add_option("-m,--model", so->model, "Show how this GGUF model's layers would be split over the devices");
    cmd->add_option("--devices", so->devices,
                    "With -m: the devices, by index or name substring, comma-separated "
                    "(default: every device)");
    cmd->add_option("--split", so->split,
                    "With -m: layer (by each device's device-local memory, the default) or "
                    "layer:R0,R1,... (layers in these ratios)");
    cmd->add_option("--ctx", so->n_ctx, "With -m: KV cache rows per sequence (default: the model's, capped by memory)");
    cmd->add_option("--parallel", so->parallel, "With -m: sequences with a KV cache each (a server's slots)")
        ->check(CLI::Range(1u, 256u));
    add_kv_type_option(cmd, so->kv_type);
    cmd->callback([json, so, cmd] {
        for (const char* opt : {"--devices", "--split", "--ctx", "--parallel", "--kv-type"})
            if (cmd->count(opt) > 0 && so->model.empty())
                throw std::invalid_argument(fmt::format("{} is for a split plan: give -m MODEL", opt));
        Instance instance;
        auto devices = enumerate_devices(instance);
        if (!so->model.empty()) {
            if (devices.empty())
                throw DeviceLimitError("no Vulkan 1.1 device found (on Debian: apt-get install mesa-vulkan-drivers)");
            print_split(*so, devices, *json);
            return;
        }
        const PhysicalDeviceEntry* chosen = devices.empty() ? nullptr : &select_device(devices, {});
        if (*json) {
            nlohmann::json out = nlohmann::json::array();
            for (auto& d : devices) {
                auto j = to_json(d);
                j["default"] = &d == chosen;
                out.push_back(j);
            }
            fmt::print("{}\n", out.dump(2));
            return;
        }
        if (devices.empty())
            throw DeviceLimitError("no Vulkan 1.1 device found (on Debian: apt-get install mesa-vulkan-drivers)");
        print_table(devices, chosen);
    });
}

}  // namespace vkllm::apps
