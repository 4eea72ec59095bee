#include "runtime/instance.h"

#include "runtime/vk_check.h"

#include <fmt/format.h>

#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <mutex>

namespace vkllm {

namespace {

// The Vulkan version vkllm needs from the loader (and from a device: enumerate_devices()).
constexpr uint32_t kMinLoaderVersion = VK_API_VERSION_1_1;

std::string version_string(uint32_t v) {
    return fmt::format("{}.{}.{}", VK_API_VERSION_MAJOR(v), VK_API_VERSION_MINOR(v), VK_API_VERSION_PATCH(v));
}

// Every Vulkan call goes through volk's global function pointers; nothing links libvulkan. They
// are filled twice, each time once per process, under one mutex:
//  - load_loader(), before the first instance: volkInitialize() dlopen()s the loader and fetches
//    its global functions (vkCreateInstance, vkEnumerateInstance*). A failure leaves nothing set,
//    so the next Instance tries again.
//  - load_instance_functions(), after the first vkCreateInstance: volkLoadInstance() fills every
//    instance- and device-level pointer through vkGetInstanceProcAddr(first instance).
// Loading them once is right for any number of instances and devices, alive together or one after
// another, on any thread: for the core functions vkllm calls through these pointers,
// vkGetInstanceProcAddr returns the loader's trampolines, which find the layer and driver chain
// through the dispatchable handle passed to them, so a pointer fetched through the first instance
// serves every later instance and device (tests/runtime/test_instance.cpp checks that another
// instance gets the same addresses) and stays valid after that instance is destroyed (the loader is
// never unloaded). Reloading per instance would rewrite pointers that other threads are calling.
// volkLoadDevice() is never used: it would bind the global device functions to one VkDevice and
// its driver, wrong for every other device. Instance-extension functions are the exception: the
// loader hands them out only for an instance that enabled the extension, so they are fetched per
// instance (debug utils below, cooperative matrix in caps.cpp).
std::mutex g_volk_mutex;
bool g_loader_loaded = false;
bool g_instance_functions_loaded = false;

// Why dlopen() refused the loader, for the error message (volk reports only failure).
std::string loader_open_error() {
    void* lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib) {
        dlclose(lib);
        return "";
    }
    const char* why = dlerror();
    return why ? fmt::format(" ({})", why) : "";
}

void load_loader() {
    std::lock_guard lock(g_volk_mutex);
    if (g_loader_loaded) return;
    if (volkInitialize() != VK_SUCCESS)
        throw std::runtime_error(
            fmt::format("the Vulkan loader (libvulkan.so.1) could not be loaded{}: install a "
                        "Vulkan driver/loader, e.g. Debian's libvulkan1",
                        loader_open_error()));
    g_loader_loaded = true;
}

void load_instance_functions(VkInstance instance) {
    std::lock_guard lock(g_volk_mutex);
    if (g_instance_functions_loaded) return;
    volkLoadInstance(instance);
    g_instance_functions_loaded = true;
}

// The layer's specVersion, 0 where it is not installed.
uint32_t layer_version(const char* name) {
    uint32_t n = 0;
    VK_CHECK(vkEnumerateInstanceLayerProperties(&n, nullptr));
    std::vector<VkLayerProperties> layers(n);
    VK_CHECK(vkEnumerateInstanceLayerProperties(&n, layers.data()));
    for (auto& l : layers)
        if (std::strcmp(l.layerName, name) == 0) return std::max<uint32_t>(l.specVersion, 1);
    return 0;
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
    load_loader();
    // 1.0 when the loader predates vkEnumerateInstanceVersion; 0 when the library is no loader at all.
    uint32_t loader_version = volkGetInstanceVersion();
    if (loader_version == 0)
        throw std::runtime_error(
            "the library loaded as the Vulkan loader (libvulkan.so.1) has no vkCreateInstance: "
            "install a Vulkan driver/loader, e.g. Debian's libvulkan1");
    if (loader_version < kMinLoaderVersion)
        throw DeviceLimitError(
            fmt::format("the Vulkan loader (libvulkan.so.1) supports Vulkan {}; vkllm needs {} or "
                        "newer: update the loader, e.g. Debian's libvulkan1",
                        version_string(loader_version), version_string(kMinLoaderVersion)));
    api_version_ = loader_version >= VK_API_VERSION_1_3 ? VK_API_VERSION_1_3 : loader_version;

    std::vector<const char*> layers, exts;
    validation_layer_version_ = opts.validation ? layer_version(kValidationLayer) : 0;
    validation_ = validation_layer_version_ != 0;
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
    dbg.messageSeverity =
        VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
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
    load_instance_functions(instance_);

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
