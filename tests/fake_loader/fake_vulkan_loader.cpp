// Built as a libvulkan.so.1 of its own for test_cli: a loader that predates Vulkan 1.1, so vkllm's
// refusal of a too old loader (runtime/instance.cpp) can be seen without installing one.
#define VK_NO_PROTOTYPES
#include <vulkan/vulkan_core.h>

#include <cstring>

namespace {

VKAPI_ATTR VkResult VKAPI_CALL create_instance(const VkInstanceCreateInfo*, const VkAllocationCallbacks*, VkInstance*) {
    return VK_ERROR_INCOMPATIBLE_DRIVER;
}

}  // namespace

// A Vulkan 1.0 loader has vkCreateInstance but no vkEnumerateInstanceVersion.
extern "C" __attribute__((visibility("default"))) VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL
vkGetInstanceProcAddr(VkInstance, const char* name) {
    if (std::strcmp(name, "vkCreateInstance") == 0) return reinterpret_cast<PFN_vkVoidFunction>(&create_instance);
    return nullptr;
}
