#include "runtime/vk_check.h"

namespace vkllm {

const char* vk_result_name(VkResult r) {
    switch (r) {
#define VKLLM_CASE(x) \
    case x: return #x;
        VKLLM_CASE(VK_SUCCESS)
        VKLLM_CASE(VK_NOT_READY)
        VKLLM_CASE(VK_TIMEOUT)
        VKLLM_CASE(VK_EVENT_SET)
        VKLLM_CASE(VK_EVENT_RESET)
        VKLLM_CASE(VK_INCOMPLETE)
        VKLLM_CASE(VK_ERROR_OUT_OF_HOST_MEMORY)
        VKLLM_CASE(VK_ERROR_OUT_OF_DEVICE_MEMORY)
        VKLLM_CASE(VK_ERROR_INITIALIZATION_FAILED)
        VKLLM_CASE(VK_ERROR_DEVICE_LOST)
        VKLLM_CASE(VK_ERROR_MEMORY_MAP_FAILED)
        VKLLM_CASE(VK_ERROR_LAYER_NOT_PRESENT)
        VKLLM_CASE(VK_ERROR_EXTENSION_NOT_PRESENT)
        VKLLM_CASE(VK_ERROR_FEATURE_NOT_PRESENT)
        VKLLM_CASE(VK_ERROR_INCOMPATIBLE_DRIVER)
        VKLLM_CASE(VK_ERROR_TOO_MANY_OBJECTS)
        VKLLM_CASE(VK_ERROR_FORMAT_NOT_SUPPORTED)
        VKLLM_CASE(VK_ERROR_FRAGMENTED_POOL)
        VKLLM_CASE(VK_ERROR_UNKNOWN)
        VKLLM_CASE(VK_ERROR_OUT_OF_POOL_MEMORY)
        VKLLM_CASE(VK_ERROR_INVALID_EXTERNAL_HANDLE)
        VKLLM_CASE(VK_ERROR_FRAGMENTATION)
        VKLLM_CASE(VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS)
        VKLLM_CASE(VK_PIPELINE_COMPILE_REQUIRED)
#undef VKLLM_CASE
        default: return "VK_RESULT_UNKNOWN";
    }
}

VulkanError::VulkanError(VkResult result, std::string call)
    : std::runtime_error(std::string(vk_result_name(result)) + " from " + call),
      result_(result),
      call_(std::move(call)) {}

}  // namespace vkllm
