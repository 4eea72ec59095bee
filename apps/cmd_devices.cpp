// `vkllm devices`: every Vulkan device with the capabilities vkllm uses, as a table or JSON.
#include "apps/commands.h"
#include "runtime/device.h"
#include "runtime/instance.h"
#include "runtime/vk_check.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace vkllm::app {

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
        coop.push_back({{"m", s.m}, {"n", s.n}, {"k", s.k}, {"a", s.a_type}, {"b", s.b_type}, {"c", s.c_type},
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
        {"subgroup_ops", {{"basic", c.subgroup_basic}, {"arithmetic", c.subgroup_arithmetic},
                          {"shuffle", c.subgroup_shuffle}, {"ballot", c.subgroup_ballot}}},
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
            {"Vulkan API", c.device_api_version == c.api_version
                               ? version_str(c.api_version)
                               : fmt::format("{} (vkllm uses {})", version_str(c.device_api_version),
                                             version_str(c.api_version))},
            {"subgroup size", fmt::format("{} (range {}..{}, size control {})", c.subgroup_size, c.min_subgroup_size,
                                          c.max_subgroup_size, yn(c.subgroup_size_control))},
            {"subgroup ops", fmt::format("basic {}, arithmetic {}, shuffle {}, ballot {}", yn(c.subgroup_basic),
                                         yn(c.subgroup_arithmetic), yn(c.subgroup_shuffle), yn(c.subgroup_ballot))},
            {"fp16 / int8 / int64 math", fmt::format("{} / {} / {}{}", yn(c.fp16), yn(c.int8), yn(c.int64),
                                             c.soft_half ? " (f16 data converted without unpackHalf2x16)" : "")},
            {"16/8-bit storage", fmt::format("{} / {}", yn(c.storage16), yn(c.storage8))},
            {"integer dot product", !c.int_dot_product ? std::string("no")
                                    : fmt::format("yes (4x8-bit packed {}accelerated; int-dot kernels {})",
                                                  c.int_dot_accelerated ? "" : "not ", c.int_dot_kernels ? "on" : "off")},
            {"cooperative matrix", c.cooperative_matrix ? fmt::format("yes ({} shapes)", c.coop_shapes.size()) : "no"},
            {"shared memory", bytes_str(c.max_shared_memory)},
            {"workgroup", fmt::format("{} invocations, size {}x{}x{}", c.max_workgroup_invocations,
                                      c.max_workgroup_size[0], c.max_workgroup_size[1], c.max_workgroup_size[2])},
            {"maxStorageBufferRange", bytes_str(c.max_storage_buffer_range)},
            {"storage offset align", fmt::format("{} B", c.min_storage_buffer_offset_alignment)},
            {"maxUniformBufferRange", fmt::format("{}, offset align {} B", bytes_str(c.max_uniform_buffer_range),
                                                  c.min_uniform_buffer_offset_alignment)},
            {"max allocation / buffer", fmt::format("{} / {}", bytes_str(c.max_memory_allocation_size), bytes_str(c.max_buffer_size))},
            {"device-local memory", fmt::format("{}{}", bytes_str(c.device_local_bytes), c.uma ? " (unified with host)" : "")},
            {"timestamps", c.timestamps ? fmt::format("yes ({} ns/tick)", c.timestamp_period_ns) : "no"},
        };
        for (auto& [k, v] : rows) fmt::print("  {:<24} {}\n", k, v);
    }
}

}  // namespace

void register_devices(CLI::App& app) {
    auto* cmd = app.add_subcommand("devices", "List Vulkan devices and the capabilities vkllm uses");
    auto json = std::make_shared<bool>(false);
    cmd->add_flag("--json", *json, "Print JSON instead of a table");
    cmd->callback([json] {
        Instance instance;
        auto devices = enumerate_devices(instance);
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
        if (devices.empty()) throw DeviceLimitError("no Vulkan 1.1 device found (on Debian: apt-get install mesa-vulkan-drivers)");
        print_table(devices, chosen);
    });
}

}  // namespace vkllm::app
