#include "runtime/device.h"

#include "runtime/vk_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace vkllm {

namespace {

// VkPhysicalDeviceCooperativeMatrixFeaturesKHR, declared from the Vulkan specification as caps.cpp
// declares the properties query: Debian 12's headers (1.3.239) predate the extension.
constexpr const char* kCoopMatrixExtension = "VK_KHR_cooperative_matrix";
struct CoopMatrixFeatures {
    VkStructureType sType = static_cast<VkStructureType>(1000506000);
    void* pNext = nullptr;
    VkBool32 cooperativeMatrix = VK_FALSE;
    VkBool32 cooperativeMatrixRobustBufferAccess = VK_FALSE;
};

int type_rank(VkPhysicalDeviceType t) {
    switch (t) {
        case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 0;
        case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 1;
        case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
        case VK_PHYSICAL_DEVICE_TYPE_CPU: return 3;
        default: return 4;
    }
}

std::string lower(std::string s) {
    for (auto& ch : s) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    return s;
}

std::string device_list(const std::vector<PhysicalDeviceEntry>& devices) {
    std::string out;
    for (auto& d : devices)
        out += fmt::format("{}{}: {} ({})", out.empty() ? "" : ", ", d.index, d.caps.name, d.caps.type_name());
    return out.empty() ? "none" : out;
}

}  // namespace

DeviceSelector DeviceSelector::parse(const std::string& text) {
    DeviceSelector s;
    if (!text.empty() && std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c); })) {
        if (text.size() > 6) throw std::invalid_argument("--device: index '" + text + "' is out of range");
        s.index = uint32_t(std::stoul(text));
    } else {
        s.name = text;
    }
    return s;
}

std::vector<PhysicalDeviceEntry> enumerate_devices(const Instance& instance) {
    std::vector<PhysicalDeviceEntry> out;
    auto pds = instance.physical_devices();
    for (uint32_t i = 0; i < pds.size(); ++i) {
        DeviceCaps caps = query_caps(instance.get(), pds[i], instance.api_version());
        if (caps.api_version < VK_API_VERSION_1_1) continue;  // vkllm needs subgroups and 16-bit storage structs
        out.push_back({i, pds[i], std::move(caps)});
    }
    return out;
}

const PhysicalDeviceEntry& select_device(const std::vector<PhysicalDeviceEntry>& devices, const DeviceSelector& sel) {
    if (devices.empty())
        throw DeviceLimitError("no Vulkan 1.1 device found (on Debian, lavapipe is in mesa-vulkan-drivers)");
    if (sel.index) {
        for (auto& d : devices)
            if (d.index == *sel.index) return d;
        throw DeviceLimitError(
            fmt::format("device index {} does not exist; devices: {}", *sel.index, device_list(devices)));
    }
    if (!sel.name.empty()) {
        for (auto& d : devices)
            if (lower(d.caps.name).find(lower(sel.name)) != std::string::npos) return d;
        throw DeviceLimitError(
            fmt::format("no device name contains '{}'; devices: {}", sel.name, device_list(devices)));
    }
    return *std::min_element(devices.begin(), devices.end(), [](const auto& a, const auto& b) {
        return std::pair(type_rank(a.caps.type), a.index) < std::pair(type_rank(b.caps.type), b.index);
    });
}

std::vector<const PhysicalDeviceEntry*> select_devices(const std::vector<PhysicalDeviceEntry>& devices,
                                                       std::span<const DeviceSelector> sels) {
    std::vector<const PhysicalDeviceEntry*> out;
    if (sels.empty()) {
        if (devices.empty()) select_device(devices, {});  // throws: none found
        for (const PhysicalDeviceEntry& d : devices) out.push_back(&d);
        return out;
    }
    for (const DeviceSelector& sel : sels) {
        const PhysicalDeviceEntry* d = &select_device(devices, sel);
        if (std::find(out.begin(), out.end(), d) != out.end())
            throw std::invalid_argument(fmt::format("device {} ({}) is named twice", d->index, d->caps.name));
        out.push_back(d);
    }
    return out;
}

Device::Device(const Instance& instance, const PhysicalDeviceEntry& entry, const CapsOverride& override)
    : physical_(entry.handle), index_(entry.index), caps_(entry.caps) {
    override.apply(caps_);
    // A validation layer built before VK_KHR_cooperative_matrix (Vulkan 1.3.255; Debian 12's is
    // 1.3.239) knows neither its structures nor its SPIR-V capability, and would report every use as
    // an error: with such a layer the device runs without the extension.
    if (instance.validation() && instance.validation_layer_version() < VK_MAKE_API_VERSION(0, 1, 3, 255)) {
        caps_.cooperative_matrix = caps_.coopmat_kernels = false;
        caps_.coop_shapes.clear();
    }
    vkGetPhysicalDeviceMemoryProperties(physical_, &memory_);

    uint32_t nq = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(physical_, &nq, nullptr);
    std::vector<VkQueueFamilyProperties> qf(nq);
    vkGetPhysicalDeviceQueueFamilyProperties(physical_, &nq, qf.data());
    // Prefer a compute queue with timestamps; a compute-only family is often the async one on
    // discrete GPUs but the graphics+compute family is the one that exists everywhere.
    int best = -1;
    for (uint32_t i = 0; i < nq; ++i) {
        if (!(qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT)) continue;
        if (best < 0 || (qf[i].timestampValidBits > 0 && qf[best].timestampValidBits == 0)) best = int(i);
    }
    if (best < 0) throw DeviceLimitError(fmt::format("device '{}' has no compute queue", caps_.name));
    queue_family_ = uint32_t(best);
    timestamp_bits_ = qf[best].timestampValidBits;
    if (timestamp_bits_ == 0) caps_.timestamps = false;

    bool v12 = caps_.api_version >= VK_API_VERSION_1_2, v13 = caps_.api_version >= VK_API_VERSION_1_3;
    std::vector<const char*> exts;
    auto want_ext = [&](const char* name, bool core) {
        if (core) return true;
        if (!device_has_extension(physical_, name)) return false;
        exts.push_back(name);
        return true;
    };

    VkPhysicalDeviceFeatures2 feats{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    VkPhysicalDevice16BitStorageFeatures s16{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
    VkPhysicalDevice8BitStorageFeatures s8{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES};
    VkPhysicalDeviceShaderFloat16Int8Features f16i8{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
    VkPhysicalDeviceSubgroupSizeControlFeatures sgsc{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES};
    VkPhysicalDeviceShaderIntegerDotProductFeatures dot{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES};
    feats.pNext = &s16;
    void** tail = &s16.pNext;
    s16.storageBuffer16BitAccess = caps_.storage16;
    feats.features.shaderInt64 = caps_.int64;  // the CPU-driver matvecs' 8-byte weight loads
    if ((caps_.storage8) && want_ext(VK_KHR_8BIT_STORAGE_EXTENSION_NAME, v12)) {
        s8.storageBuffer8BitAccess = VK_TRUE;
        *tail = &s8;
        tail = &s8.pNext;
    }
    if ((caps_.fp16 || caps_.int8) && want_ext(VK_KHR_SHADER_FLOAT16_INT8_EXTENSION_NAME, v12)) {
        f16i8.shaderFloat16 = caps_.fp16;
        f16i8.shaderInt8 = caps_.int8;
        *tail = &f16i8;
        tail = &f16i8.pNext;
    }
    if (caps_.subgroup_size_control && want_ext(VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME, v13)) {
        sgsc.subgroupSizeControl = VK_TRUE;
        sgsc.computeFullSubgroups = VK_TRUE;
        *tail = &sgsc;
        tail = &sgsc.pNext;
    }
    if (caps_.int_dot_product && want_ext(VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME, v13)) {
        dot.shaderIntegerDotProduct = VK_TRUE;
        *tail = &dot;
        tail = &dot.pNext;
    }
    // The cooperative-matrix matmul's module declares the capability and the Vulkan memory model.
    VkPhysicalDeviceVulkanMemoryModelFeatures vmm{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES};
    CoopMatrixFeatures coop;
    // Enabled wherever the kernel can run, chosen or not, so that `--caps kernel=matmul-coopmat`
    // forces it as `--caps coopmat` does.
    if (coopmat_usable(caps_) && want_ext(VK_KHR_VULKAN_MEMORY_MODEL_EXTENSION_NAME, v12) &&
        want_ext(kCoopMatrixExtension, false)) {
        vmm.vulkanMemoryModel = VK_TRUE;
        vmm.vulkanMemoryModelDeviceScope = VK_TRUE;  // the other shaders' atomics and buffer barriers
        *tail = &vmm;
        tail = &vmm.pNext;
        coop.cooperativeMatrix = VK_TRUE;
        *tail = &coop;
        tail = &coop.pNext;
    } else {
        caps_.cooperative_matrix = caps_.coopmat_kernels = false;
        caps_.coop_shapes.clear();
    }
    creation_feedback_ = want_ext(VK_EXT_PIPELINE_CREATION_FEEDBACK_EXTENSION_NAME, v13);
    if (!v12) want_ext(VK_KHR_STORAGE_BUFFER_STORAGE_CLASS_EXTENSION_NAME, false);

    float priority = 1.0f;
    VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
    qci.queueFamilyIndex = queue_family_;
    qci.queueCount = 1;
    qci.pQueuePriorities = &priority;
    VkDeviceCreateInfo ci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
    ci.pNext = &feats;
    ci.queueCreateInfoCount = 1;
    ci.pQueueCreateInfos = &qci;
    ci.enabledExtensionCount = uint32_t(exts.size());
    ci.ppEnabledExtensionNames = exts.data();
    VK_CHECK(vkCreateDevice(physical_, &ci, nullptr, &device_));
    vkGetDeviceQueue(device_, queue_family_, 0, &queue_);
}

Device::~Device() {
    if (device_) {
        vkDeviceWaitIdle(device_);
        vkDestroyDevice(device_, nullptr);
    }
}

}  // namespace vkllm
