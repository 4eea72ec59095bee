// VkInstance with optional Khronos validation. Validation messages go to a sink the caller
// chooses; tests count errors through it and fail on any.
#pragma once

#include <volk.h>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace vkllm {

enum class MessageSeverity { Verbose, Info, Warning, Error };
using MessageSink = std::function<void(MessageSeverity, std::string_view)>;

struct InstanceOptions {
    bool validation = false;  // enable VK_LAYER_KHRONOS_validation
    bool require_validation = false;  // throw if the layer is missing (tests) instead of running without
    MessageSink sink;  // receives validation messages (warnings and errors)
};

class Instance {
public:
    explicit Instance(const InstanceOptions& opts = {});
    ~Instance();
    Instance(const Instance&) = delete;
    Instance& operator=(const Instance&) = delete;
    Instance(Instance&&) = delete;

    VkInstance get() const { return instance_; }
    uint32_t api_version() const { return api_version_; }
    std::vector<VkPhysicalDevice> physical_devices() const;
    bool validation() const { return validation_; }
    // The enabled validation layer's specVersion (the Vulkan headers it was built with); 0 without it.
    uint32_t validation_layer_version() const { return validation_layer_version_; }

private:
    VkInstance instance_ = VK_NULL_HANDLE;
    VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
    uint32_t api_version_ = VK_API_VERSION_1_1;
    bool validation_ = false;
    uint32_t validation_layer_version_ = 0;
    MessageSink sink_;
};

}  // namespace vkllm
