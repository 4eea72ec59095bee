// Physical-device enumeration and selection, and the logical device with its compute queue.
// Features and extensions are enabled only where the device has them and the capability
// override allows them, so a shader that uses a disabled feature fails validation.
#pragma once

#include "runtime/caps.h"
#include "runtime/instance.h"

#include <optional>
#include <span>
#include <string>
#include <vector>

namespace vkllm {

struct PhysicalDeviceEntry {
    uint32_t index = 0;
    VkPhysicalDevice handle = VK_NULL_HANDLE;
    DeviceCaps caps;
};

// Select by index, or by case-insensitive name substring; empty selector = the preference order
// discrete > integrated > virtual > cpu (ties: lowest index).
struct DeviceSelector {
    std::optional<uint32_t> index;
    std::string name;
    static DeviceSelector parse(const std::string& text);  // "2" -> index, anything else -> name
};

std::vector<PhysicalDeviceEntry> enumerate_devices(const Instance& instance);
// Throws DeviceLimitError naming the selector and the devices that exist when nothing matches.
const PhysicalDeviceEntry& select_device(const std::vector<PhysicalDeviceEntry>& devices, const DeviceSelector& sel);
// Several devices (a model split over them): each selector's, in order; std::invalid_argument when two
// selectors name the same device, DeviceLimitError (as select_device) when one names none. Empty
// selectors: every device, in index order.
std::vector<const PhysicalDeviceEntry*> select_devices(const std::vector<PhysicalDeviceEntry>& devices,
                                                       std::span<const DeviceSelector> sels);

class Device {
public:
    Device(const Instance& instance, const PhysicalDeviceEntry& entry, const CapsOverride& override);
    ~Device();
    Device(const Device&) = delete;
    Device& operator=(const Device&) = delete;

    VkDevice get() const { return device_; }
    VkQueue queue() const { return queue_; }
    uint32_t queue_family() const { return queue_family_; }
    uint32_t timestamp_valid_bits() const { return timestamp_bits_; }
    const DeviceCaps& caps() const { return caps_; }
    // The tuned kernel configurations the planners read; set by Context before anything is planned.
    void set_tuning(std::shared_ptr<const KernelTuning> tuning) { caps_.tuning = std::move(tuning); }
    const VkPhysicalDeviceMemoryProperties& memory_properties() const { return memory_; }
    uint32_t index() const { return index_; }
    bool creation_feedback() const { return creation_feedback_; }  // VK_EXT_pipeline_creation_feedback

private:
    VkPhysicalDevice physical_ = VK_NULL_HANDLE;
    VkDevice device_ = VK_NULL_HANDLE;
    VkQueue queue_ = VK_NULL_HANDLE;
    uint32_t queue_family_ = 0;
    uint32_t timestamp_bits_ = 0;
    uint32_t index_ = 0;
    bool creation_feedback_ = false;
    DeviceCaps caps_;
    VkPhysicalDeviceMemoryProperties memory_{};
};

}  // namespace vkllm
