#include "runtime/caps.h"

#include "runtime/vk_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <stdexcept>

namespace vkllm {

namespace {

std::string vendor_name(uint32_t id) {
    switch (id) {
        case 0x10de: return "NVIDIA";
        case 0x1002: return "AMD";
        case 0x8086: return "Intel";
        case 0x13b5: return "ARM";
        case 0x5143: return "Qualcomm";
        case 0x106b: return "Apple";
        case 0x1010: return "ImgTec";
        case 0x10005: return "Mesa";
        default: return fmt::format("0x{:04x}", id);
    }
}

uint64_t parse_size(const std::string& key, const std::string& v) {
    size_t pos = 0;
    unsigned long long n = 0;
    try {
        n = std::stoull(v, &pos, 0);
    } catch (const std::exception&) {
        pos = 0;
    }
    if (pos == 0 || v[0] == '-') throw std::invalid_argument(fmt::format("--caps {}: '{}' is not a number", key, v));
    std::string suffix = v.substr(pos);
    if (suffix == "k" || suffix == "K")
        n <<= 10;
    else if (suffix == "m" || suffix == "M")
        n <<= 20;
    else if (suffix == "g" || suffix == "G")
        n <<= 30;
    else if (!suffix.empty())
        throw std::invalid_argument(fmt::format("--caps {}: bad suffix '{}'", key, suffix));
    if (n == 0) throw std::invalid_argument(fmt::format("--caps {}: must be > 0", key));
    return n;
}

// VK_KHR_cooperative_matrix's query, declared here from the Vulkan specification: Debian 12's
// headers (1.3.239) predate the extension, and without these the shapes a tensor-core kernel must
// pick from would never be read on the GPUs that report them. The layout and values are the
// extension's ABI (VkCooperativeMatrixPropertiesKHR, VkComponentTypeKHR, VkScopeKHR).
constexpr VkStructureType kCoopMatrixPropertiesSType = static_cast<VkStructureType>(1000506001);
constexpr uint32_t kCoopScopeSubgroup = 3;
struct CoopMatrixProperties {
    VkStructureType sType = kCoopMatrixPropertiesSType;
    void* pNext = nullptr;
    uint32_t MSize = 0, NSize = 0, KSize = 0;
    uint32_t AType = 0, BType = 0, CType = 0, ResultType = 0;  // VkComponentTypeKHR
    VkBool32 saturatingAccumulation = VK_FALSE;
    uint32_t scope = 0;  // VkScopeKHR
};
static_assert(sizeof(CoopMatrixProperties) == (sizeof(void*) == 8 ? 56 : 44), "the extension's struct layout");
using GetCoopMatrixProperties = VkResult(VKAPI_PTR*)(VkPhysicalDevice, uint32_t*, CoopMatrixProperties*);

std::string component_name(uint32_t t) {
    switch (t) {
        case 0: return "f16";
        case 1: return "f32";
        case 3: return "s8";
        case 5: return "s32";
        case 7: return "u8";
        case 9: return "u32";
        default: return fmt::format("type{}", t);
    }
}

}  // namespace

bool device_has_extension(VkPhysicalDevice pd, const char* name) {
    uint32_t n = 0;
    VK_CHECK(vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, nullptr));
    std::vector<VkExtensionProperties> exts(n);
    VK_CHECK(vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, exts.data()));
    for (auto& e : exts)
        if (std::strcmp(e.extensionName, name) == 0) return true;
    return false;
}

std::string DeviceCaps::type_name() const {
    switch (type) {
        case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete";
        case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated";
        case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual";
        case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
        default: return "other";
    }
}

DeviceCaps query_caps(VkInstance instance, VkPhysicalDevice pd, uint32_t instance_api_version) {
    DeviceCaps c;
    VkPhysicalDeviceProperties base{};
    vkGetPhysicalDeviceProperties(pd, &base);
    c.device_api_version = base.apiVersion;
    c.api_version = std::min(base.apiVersion, instance_api_version);
    bool v12 = c.api_version >= VK_API_VERSION_1_2, v13 = c.api_version >= VK_API_VERSION_1_3;
    bool has_driver_props = v12 || device_has_extension(pd, VK_KHR_DRIVER_PROPERTIES_EXTENSION_NAME);
    bool has_f16i8 = v12 || device_has_extension(pd, VK_KHR_SHADER_FLOAT16_INT8_EXTENSION_NAME);
    bool has_8bit = v12 || device_has_extension(pd, VK_KHR_8BIT_STORAGE_EXTENSION_NAME);
    bool has_sgsc = v13 || device_has_extension(pd, VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
    bool has_dot = v13 || device_has_extension(pd, VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME);
    bool has_maint4 = v13 || device_has_extension(pd, VK_KHR_MAINTENANCE_4_EXTENSION_NAME);
    bool has_vmm = v12 || device_has_extension(pd, VK_KHR_VULKAN_MEMORY_MODEL_EXTENSION_NAME);
    c.cooperative_matrix = device_has_extension(pd, "VK_KHR_cooperative_matrix");

    // --- properties ---
    VkPhysicalDeviceProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    VkPhysicalDeviceSubgroupProperties sg{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceMaintenance3Properties m3{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
    VkPhysicalDeviceDriverProperties drv{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
    VkPhysicalDeviceSubgroupSizeControlProperties sgsc{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES};
    VkPhysicalDeviceMaintenance4Properties m4{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_4_PROPERTIES};
    props.pNext = &sg;
    sg.pNext = &m3;
    void** tail = &m3.pNext;
    if (has_driver_props) {
        *tail = &drv;
        tail = &drv.pNext;
    }
    if (has_sgsc) {
        *tail = &sgsc;
        tail = &sgsc.pNext;
    }
    if (has_maint4) {
        *tail = &m4;
        tail = &m4.pNext;
    }
    VkPhysicalDeviceShaderIntegerDotProductProperties dotp{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_PROPERTIES};
    if (has_dot) {
        *tail = &dotp;
        tail = &dotp.pNext;
    }
    vkGetPhysicalDeviceProperties2(pd, &props);
    const VkPhysicalDeviceLimits& lim = props.properties.limits;

    c.name = props.properties.deviceName;
    c.vendor_id = props.properties.vendorID;
    c.device_id = props.properties.deviceID;
    c.vendor = vendor_name(c.vendor_id);
    c.driver_version = props.properties.driverVersion;
    c.type = props.properties.deviceType;
    c.cpu_tuning = c.type == VK_PHYSICAL_DEVICE_TYPE_CPU;
    std::memcpy(c.pipeline_cache_uuid.data(), props.properties.pipelineCacheUUID, VK_UUID_SIZE);
    if (has_driver_props) {
        c.driver_name = drv.driverName;
        c.driver_info = drv.driverInfo;
    }

    c.subgroup_size = sg.subgroupSize;
    c.min_subgroup_size = c.max_subgroup_size = sg.subgroupSize;
    bool compute_sg = sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT;
    c.subgroup_basic = compute_sg && (sg.supportedOperations & VK_SUBGROUP_FEATURE_BASIC_BIT);
    c.subgroup_arithmetic = compute_sg && (sg.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
    c.subgroup_shuffle = compute_sg && (sg.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT);
    c.subgroup_ballot = compute_sg && (sg.supportedOperations & VK_SUBGROUP_FEATURE_BALLOT_BIT);

    c.max_shared_memory = lim.maxComputeSharedMemorySize;
    for (int i = 0; i < 3; ++i) {
        c.max_workgroup_size[i] = lim.maxComputeWorkGroupSize[i];
        c.max_workgroup_count[i] = lim.maxComputeWorkGroupCount[i];
    }
    c.max_workgroup_invocations = lim.maxComputeWorkGroupInvocations;
    c.max_push_constants = lim.maxPushConstantsSize;
    c.max_storage_buffer_range = lim.maxStorageBufferRange;
    c.min_storage_buffer_offset_alignment = lim.minStorageBufferOffsetAlignment;
    c.max_uniform_buffer_range = lim.maxUniformBufferRange;
    c.min_uniform_buffer_offset_alignment = lim.minUniformBufferOffsetAlignment;
    c.max_memory_allocation_size = m3.maxMemoryAllocationSize;
    c.max_buffer_size = has_maint4 ? m4.maxBufferSize : m3.maxMemoryAllocationSize;
    c.timestamp_period_ns = lim.timestampPeriod;

    // --- features ---
    VkPhysicalDeviceFeatures2 feats{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    VkPhysicalDevice16BitStorageFeatures s16{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
    VkPhysicalDevice8BitStorageFeatures s8{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES};
    VkPhysicalDeviceShaderFloat16Int8Features f16i8{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
    VkPhysicalDeviceSubgroupSizeControlFeatures sgscf{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES};
    VkPhysicalDeviceShaderIntegerDotProductFeatures dot{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES};
    VkPhysicalDeviceVulkanMemoryModelFeatures vmm{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES};
    feats.pNext = &s16;
    tail = &s16.pNext;
    if (has_vmm) {
        *tail = &vmm;
        tail = &vmm.pNext;
    }
    if (has_8bit) {
        *tail = &s8;
        tail = &s8.pNext;
    }
    if (has_f16i8) {
        *tail = &f16i8;
        tail = &f16i8.pNext;
    }
    if (has_sgsc) {
        *tail = &sgscf;
        tail = &sgscf.pNext;
    }
    if (has_dot) {
        *tail = &dot;
        tail = &dot.pNext;
    }
    vkGetPhysicalDeviceFeatures2(pd, &feats);
    c.storage16 = s16.storageBuffer16BitAccess;
    c.storage8 = has_8bit && s8.storageBuffer8BitAccess;
    c.fp16 = has_f16i8 && f16i8.shaderFloat16;
    c.int8 = has_f16i8 && f16i8.shaderInt8;
    c.int64 = feats.features.shaderInt64;
    // Both: enabling the memory model without its device scope would make every other shader that
    // uses Device scope (atomics, buffer barriers) invalid.
    c.vulkan_memory_model = has_vmm && vmm.vulkanMemoryModel && vmm.vulkanMemoryModelDeviceScope;
    c.int_dot_product = has_dot && dot.shaderIntegerDotProduct;
    c.int_dot_accelerated = c.int_dot_product && dotp.integerDotProduct4x8BitPackedSignedAccelerated;
    c.int_dot_kernels = c.int_dot_accelerated;
    // llvmpipe offers shaderFloat16 exactly where it converts halves natively (x86 with F16C); where
    // it does not, Mesa 22.3's conversion path (used on aarch64) crashes LLVM, so shaders avoid it.
    c.soft_half = c.name.find("llvmpipe") != std::string::npos && !c.fp16;
    c.subgroup_size_control = has_sgsc && sgscf.subgroupSizeControl && sgscf.computeFullSubgroups &&
                              (sgsc.requiredSubgroupSizeStages & VK_SHADER_STAGE_COMPUTE_BIT);
    if (c.subgroup_size_control) {
        c.min_subgroup_size = sgsc.minSubgroupSize;
        c.max_subgroup_size = sgsc.maxSubgroupSize;
    }

    // --- memory ---
    VkPhysicalDeviceMemoryProperties mem{};
    vkGetPhysicalDeviceMemoryProperties(pd, &mem);
    for (uint32_t h = 0; h < mem.memoryHeapCount; ++h)
        if (mem.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) c.device_local_bytes += mem.memoryHeaps[h].size;
    bool all_local_visible = true;
    for (uint32_t t = 0; t < mem.memoryTypeCount; ++t) {
        auto f = mem.memoryTypes[t].propertyFlags;
        if ((f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) && !(f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT))
            all_local_visible = false;
    }
    c.uma =
        all_local_visible || c.type == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU || c.type == VK_PHYSICAL_DEVICE_TYPE_CPU;

    // --- queue with compute and timestamps ---
    uint32_t nq = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, nullptr);
    std::vector<VkQueueFamilyProperties> qf(nq);
    vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, qf.data());
    for (auto& q : qf)
        if ((q.queueFlags & VK_QUEUE_COMPUTE_BIT) && q.timestampValidBits > 0 && lim.timestampPeriod > 0)
            c.timestamps = true;

    if (c.cooperative_matrix) {
        auto get = reinterpret_cast<GetCoopMatrixProperties>(
            vkGetInstanceProcAddr(instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR"));
        uint32_t n = 0;
        if (get && get(pd, &n, nullptr) == VK_SUCCESS && n > 0) {
            std::vector<CoopMatrixProperties> shapes(n);
            if (get(pd, &n, shapes.data()) == VK_SUCCESS)
                for (uint32_t i = 0; i < n; ++i)
                    if (const CoopMatrixProperties& s = shapes[i]; s.scope == kCoopScopeSubgroup)
                        c.coop_shapes.push_back({s.MSize, s.NSize, s.KSize, component_name(s.AType),
                                                 component_name(s.BType), component_name(s.CType),
                                                 component_name(s.ResultType)});
        }
    }
    // CPU drivers emulate the matrix units lane by lane: slower than their own kernels.
    c.coopmat_kernels = !c.cpu_tuning && coopmat_usable(c);
    return c;
}

const CoopMatShape* coopmat_f16_shape(const DeviceCaps& caps) {
    const CoopMatShape* best = nullptr;
    for (const CoopMatShape& s : caps.coop_shapes)
        if (s.a_type == "f16" && s.b_type == "f16" && s.c_type == "f32" && s.result_type == "f32" &&
            (!best || uint64_t(s.m) * s.n * s.k > uint64_t(best->m) * best->n * best->k))
            best = &s;
    return best;
}

bool coopmat_usable(const DeviceCaps& caps) {
    return caps.cooperative_matrix && caps.fp16 && caps.vulkan_memory_model && caps.subgroup_size_control &&
           caps.subgroup_basic && coopmat_f16_shape(caps) != nullptr;
}

// --- capability override -------------------------------------------------------------------------

std::string CapsOverride::help() {
    return "comma-separated: no-fp16, no-int8, no-int64, no-storage16, no-storage8, no-subgroup-ops, "
           "no-subgroup-size-control, no-int-dot, int-dot, no-coopmat, coopmat, no-timestamps, gpu-tuning, soft-half, "
           "shared-mem=BYTES, "
           "max-storage-range=BYTES, max-uniform-range=BYTES, max-alloc=BYTES, device-memory=BYTES (BYTES may end in "
           "k, m or g), kernel=NAME (repeatable, one per problem: take that row of the linear-kernel table wherever it "
           "serves the shape; docs/kernels.md lists the rows)";
}

CapsOverride CapsOverride::parse(const std::string& spec) {
    CapsOverride o;
    std::stringstream ss(spec);
    std::string item;
    while (std::getline(ss, item, ',')) {
        item.erase(0, item.find_first_not_of(" \t"));
        item.erase(item.find_last_not_of(" \t") + 1);
        if (item.empty()) continue;
        auto eq = item.find('=');
        std::string key = item.substr(0, eq), val = eq == std::string::npos ? "" : item.substr(eq + 1);
        bool flag = eq == std::string::npos;
        if (flag && key == "no-fp16")
            o.no_fp16 = true;
        else if (flag && key == "no-int8")
            o.no_int8 = true;
        else if (flag && key == "no-int64")
            o.no_int64 = true;
        else if (flag && key == "no-storage16")
            o.no_storage16 = true;
        else if (flag && key == "no-storage8")
            o.no_storage8 = true;
        else if (flag && key == "no-subgroup-ops")
            o.no_subgroup_ops = true;
        else if (flag && key == "no-subgroup-size-control")
            o.no_subgroup_size_control = true;
        else if (flag && key == "no-int-dot")
            o.no_int_dot = true;
        else if (flag && key == "int-dot")
            o.int_dot = true;
        else if (flag && key == "no-coopmat")
            o.no_coopmat = true;
        else if (flag && key == "coopmat")
            o.coopmat = true;
        else if (flag && key == "no-timestamps")
            o.no_timestamps = true;
        else if (flag && key == "gpu-tuning")
            o.gpu_tuning = true;
        else if (flag && key == "soft-half")
            o.soft_half = true;
        else if (!flag && key == "shared-mem")
            o.shared_mem = uint32_t(std::min<uint64_t>(parse_size(key, val), UINT32_MAX));
        else if (!flag && key == "max-storage-range")
            o.max_storage_range = parse_size(key, val);
        else if (!flag && key == "max-uniform-range")
            o.max_uniform_range = parse_size(key, val);
        else if (!flag && key == "max-alloc")
            o.max_allocation = parse_size(key, val);
        else if (!flag && key == "device-memory")
            o.device_memory = parse_size(key, val);
        else if (!flag && key == "kernel" && !val.empty())
            o.kernels.push_back(val);
        else
            throw std::invalid_argument(fmt::format("--caps: unknown entry '{}'; accepted: {}", item, help()));
    }
    return o;
}

bool CapsOverride::empty() const {
    return !(no_fp16 || no_int8 || no_int64 || no_storage16 || no_storage8 || no_subgroup_ops ||
             no_subgroup_size_control || no_int_dot || int_dot || no_coopmat || coopmat || no_timestamps ||
             gpu_tuning || soft_half || shared_mem || max_storage_range || max_uniform_range || max_allocation ||
             device_memory || !kernels.empty());
}

void CapsOverride::apply(DeviceCaps& c) const {
    if (no_fp16) c.fp16 = false;
    if (no_int8) c.int8 = false;
    if (no_int64) c.int64 = false;
    if (no_storage16) c.storage16 = false;
    if (no_storage8) c.storage8 = false;
    if (no_subgroup_ops) c.subgroup_arithmetic = c.subgroup_shuffle = c.subgroup_ballot = false;
    if (no_subgroup_size_control) {
        c.subgroup_size_control = false;
        c.min_subgroup_size = c.max_subgroup_size = c.subgroup_size;
    }
    // int-dot changes a choice, not a capability: the variants need the extension all the same.
    if (int_dot && !no_int_dot) c.int_dot_kernels = c.int_dot_product;
    if (no_int_dot) c.int_dot_product = c.int_dot_accelerated = c.int_dot_kernels = false;
    if (no_coopmat) {
        c.cooperative_matrix = false;
        c.coop_shapes.clear();
    }
    if (no_timestamps) c.timestamps = false;
    if (gpu_tuning) c.cpu_tuning = false;
    // A choice like int-dot, decided after the entries that take away what the kernel needs.
    if (coopmat && !no_coopmat) c.coopmat_kernels = true;
    c.coopmat_kernels = c.coopmat_kernels && coopmat_usable(c);
    if (soft_half) c.soft_half = true;
    // Limits only ever shrink: an override cannot promise more than the hardware has.
    if (shared_mem) c.max_shared_memory = std::min(c.max_shared_memory, shared_mem);
    if (max_storage_range) c.max_storage_buffer_range = std::min(c.max_storage_buffer_range, max_storage_range);
    if (max_uniform_range) c.max_uniform_buffer_range = std::min(c.max_uniform_buffer_range, max_uniform_range);
    if (max_allocation) c.max_memory_allocation_size = std::min(c.max_memory_allocation_size, max_allocation);
    if (device_memory) c.device_local_bytes = std::min(c.device_local_bytes, device_memory);
    // kernel= changes a choice too; the planners check the names and the device (ops::pick_kernel).
    for (const std::string& k : kernels) c.forced_kernels.push_back(k);
}

}  // namespace vkllm
