// Vulkan error handling: every failing Vulkan call becomes a VulkanError that carries the call
// and the VkResult name, so a report from a user's machine says what failed and how.
#pragma once

#include <volk.h>

#include <stdexcept>
#include <string>

namespace vkllm {

const char* vk_result_name(VkResult r);

class VulkanError : public std::runtime_error {
public:
    VulkanError(VkResult result, std::string call);
    VkResult result() const { return result_; }
    const std::string& call() const { return call_; }

private:
    VkResult result_;
    std::string call_;
};

// Raised for conditions that are not Vulkan failures but make a request impossible on this
// device (buffer too large for a binding, out of device memory before allocating, ...).
class DeviceLimitError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

inline void vk_check(VkResult r, const char* call) {
    if (r < 0) throw VulkanError(r, call);
}

}  // namespace vkllm

#define VK_CHECK(expr) ::vkllm::vk_check((expr), #expr)
