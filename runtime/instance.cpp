#include "runtime/instance.h"

#include "runtime/vk_check.h"

#include <cstring>

namespace vkllm {

namespace {

bool has_layer(const char* name) {
    uint32_t n = 0;
    VK_CHECK(vkEnumerateInstanceLayerProperties(&n, nullptr));
    std::vector<VkLayerProperties> layers(n);
    VK_CHECK(vkEnumerateInstanceLayerProperties(&n, layers.data()));
    for (auto& l : layers)
        if (std::strcmp(l.layerName, name) == 0) return true;
    return false;
}

bool has_instance_extension(const char* name) {
    uint32_t n = 0;
    VK_CHECK(vkEnumerateInstanceExtensionProperties(nullptr, &n, nullptr));
    std::vector<VkExtensionProperties> exts(n);
    VK_CHECK(vkEnumerateInstanceExtensionProperties(nullptr, &n, exts.data()));
    for (auto& e : exts)
        if (std::strcmp(e.extensionName, name) == 0) return true;
    return false;
}

VKAPI_ATTR VkBool32 VKAPI_CALL debug_callback(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                              VkDebugUtilsMessageTypeFlagsEXT,
                                              const VkDebugUtilsMessengerCallbackDataEXT* data, void* user) {
    auto* sink = static_cast<MessageSink*>(user);
    MessageSeverity s = severity >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT     ? MessageSeverity::Error
                        : severity >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT ? MessageSeverity::Warning
                        : severity >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_INFO_BIT_EXT    ? MessageSeverity::Info
                                                                                      : MessageSeverity::Verbose;
    if (*sink) (*sink)(s, data && data->pMessage ? data->pMessage : "");
    return VK_FALSE;
}

constexpr const char* kValidationLayer = "VK_LAYER_KHRONOS_validation";

}  // namespace

Instance::Instance(const InstanceOptions& opts) : sink_(opts.sink) {
    uint32_t loader_version = VK_API_VERSION_1_0;
    VK_CHECK(vkEnumerateInstanceVersion(&loader_version));
    if (loader_version < VK_API_VERSION_1_1)
        throw DeviceLimitError("the Vulkan loader supports only Vulkan 1.0; vkllm needs 1.1 or newer");
    api_version_ = loader_version >= VK_API_VERSION_1_3 ? VK_API_VERSION_1_3 : loader_version;

    std::vector<const char*> layers, exts;
    validation_ = opts.validation && has_layer(kValidationLayer);
    if (opts.validation && !validation_ && opts.require_validation)
        throw std::runtime_error(std::string(kValidationLayer) +
                                 " was requested but is not installed (Debian: vulkan-validationlayers)");
    bool debug_utils = validation_ && has_instance_extension(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
    if (validation_) layers.push_back(kValidationLayer);
    if (debug_utils) exts.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
    VkInstanceCreateFlags flags = 0;
    // MoltenVK and other non-conformant drivers are only listed when we opt into portability.
    if (has_instance_extension(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME)) {
        exts.push_back(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME);
        flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
    }

    VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
    app.pApplicationName = "vkllm";
    app.pEngineName = "vkllm";
    app.apiVersion = api_version_;

    VkDebugUtilsMessengerCreateInfoEXT dbg{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
    dbg.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
    dbg.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                      VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
    dbg.pfnUserCallback = debug_callback;
    dbg.pUserData = &sink_;

    VkInstanceCreateInfo ci{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    ci.pNext = debug_utils ? &dbg : nullptr;  // also catches messages from vkCreateInstance itself
    ci.flags = flags;
    ci.pApplicationInfo = &app;
    ci.enabledLayerCount = uint32_t(layers.size());
    ci.ppEnabledLayerNames = layers.data();
    ci.enabledExtensionCount = uint32_t(exts.size());
    ci.ppEnabledExtensionNames = exts.data();
    VK_CHECK(vkCreateInstance(&ci, nullptr, &instance_));

    if (debug_utils) {
        auto create = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
            vkGetInstanceProcAddr(instance_, "vkCreateDebugUtilsMessengerEXT"));
        if (create) {
            VkResult r = create(instance_, &dbg, nullptr, &messenger_);
            if (r < 0) {
                vkDestroyInstance(instance_, nullptr);
                throw VulkanError(r, "vkCreateDebugUtilsMessengerEXT");
            }
        }
    }
}

Instance::~Instance() {
    if (messenger_) {
        auto destroy = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
            vkGetInstanceProcAddr(instance_, "vkDestroyDebugUtilsMessengerEXT"));
        if (destroy) destroy(instance_, messenger_, nullptr);
    }
    if (instance_) vkDestroyInstance(instance_, nullptr);
}

std::vector<VkPhysicalDevice> Instance::physical_devices() const {
    uint32_t n = 0;
    VK_CHECK(vkEnumeratePhysicalDevices(instance_, &n, nullptr));
    std::vector<VkPhysicalDevice> devs(n);
    VK_CHECK(vkEnumeratePhysicalDevices(instance_, &n, devs.data()));
    devs.resize(n);
    return devs;
}

}  // namespace vkllm
