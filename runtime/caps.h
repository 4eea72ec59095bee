// Everything vkllm needs to know about a physical device, read once into one struct, and the
// capability override that makes a strong device behave like a weak one (tests of fallback paths,
// workarounds for buggy drivers).
#pragma once

#include <volk.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace vkllm {

class KernelTuning;  // runtime/kernel_tuning.h

struct CoopMatShape {
    uint32_t m, n, k;
    std::string a_type, b_type, c_type, result_type;  // "f16", "f32", "s8", ...
};

struct DeviceCaps {
    // identity
    std::string name;
    uint32_t vendor_id = 0, device_id = 0;
    std::string vendor;  // "NVIDIA", "AMD", "Intel", "ARM", "Qualcomm", "Apple", "Mesa", ...
    std::string driver_name, driver_info;
    uint32_t driver_version = 0;
    uint32_t api_version = 0;  // min(device, instance): the version vkllm uses
    uint32_t device_api_version = 0;  // what the driver supports (VkPhysicalDeviceProperties::apiVersion)
    VkPhysicalDeviceType type = VK_PHYSICAL_DEVICE_TYPE_OTHER;
    std::array<uint8_t, VK_UUID_SIZE> pipeline_cache_uuid{};

    // subgroups
    uint32_t subgroup_size = 1;
    uint32_t min_subgroup_size = 1, max_subgroup_size = 1;
    bool subgroup_size_control = false;  // can require a subgroup size per pipeline
    bool subgroup_basic = false, subgroup_arithmetic = false, subgroup_shuffle = false, subgroup_ballot = false;

    // arithmetic and storage
    bool fp16 = false;  // shaderFloat16
    bool int8 = false;  // shaderInt8
    bool int64 = false;  // shaderInt64: the CPU-driver matvecs' 8-byte weight loads (weights.glsl)
    bool storage16 = false;  // storageBuffer16BitAccess
    bool storage8 = false;  // storageBuffer8BitAccess
    bool int_dot_product = false;  // VK_KHR_shader_integer_dot_product (shaderIntegerDotProduct)
    bool int_dot_accelerated = false;  // its signed 4x8-bit packed dot is accelerated (a native instruction)
    // The quantized linear layers take the integer-dot variants (X quantized to Q8_1 blocks, packed
    // 4x8-bit dot products): where the packed dot is accelerated, or forced with `--caps int-dot`.
    bool int_dot_kernels = false;
    bool cooperative_matrix = false;
    std::vector<CoopMatShape> coop_shapes;  // subgroup scope only
    // vulkanMemoryModel (GL_KHR_cooperative_matrix shaders declare it) and its device scope
    bool vulkan_memory_model = false;
    // The prompt chunks' matmuls take the cooperative-matrix kernel (matmul_coopmat.comp): on GPUs
    // where coopmat_usable() holds, or forced with `--caps coopmat` (CPU drivers emulate the matrix
    // units: correct, slow). `--caps no-coopmat` keeps the other kernels.
    bool coopmat_kernels = false;

    // compute limits
    uint32_t max_shared_memory = 0;
    std::array<uint32_t, 3> max_workgroup_size{};
    uint32_t max_workgroup_invocations = 0;
    std::array<uint32_t, 3> max_workgroup_count{};
    uint32_t max_push_constants = 0;

    // Shaders convert f16 data with integer arithmetic instead of unpackHalf2x16 (SOFT_HALF in
    // shaders/include/half.glsl): set for llvmpipe without native half conversion, whose LLVM
    // (Mesa 22.3 on aarch64) aborts compiling unpackHalf2x16; `--caps soft-half` forces it.
    bool soft_half = false;

    // memory
    // Kernel tuning for CPU drivers such as lavapipe (small workgroups: every barrier switches
    // between SIMD chunks). Derived from the device type; `--caps gpu-tuning` turns it off so the
    // GPU settings are exercised on a CPU device too.
    bool cpu_tuning = false;

    uint64_t max_storage_buffer_range = 0;
    uint64_t min_storage_buffer_offset_alignment = 1;
    uint64_t max_uniform_buffer_range = 0;  // bindings of the uniform X variants (matvec_u*_*, matvec_rows_u*_*)
    uint64_t min_uniform_buffer_offset_alignment = 1;
    uint64_t max_memory_allocation_size = 0;
    uint64_t max_buffer_size = 0;
    uint64_t device_local_bytes = 0;
    bool uma = false;  // device-local memory is also host-visible (integrated, CPU)

    // timing
    bool timestamps = false;
    float timestamp_period_ns = 0;

    // Rows of the linear-kernel table (runtime/ops/kernel_table.h) the planners take wherever they
    // serve the shape, by name (`--caps kernel=NAME`); empty: the table's own order decides.
    std::vector<std::string> forced_kernels;
    // The configurations `vkllm tune` measured on this device (runtime/kernel_tuning.h), which the
    // planners apply where they still fit (ops::configure, kernel_table.h); null: the rows' own.
    std::shared_ptr<const KernelTuning> tuning;

    std::string type_name() const;
    bool subgroup_ops() const { return subgroup_basic && subgroup_arithmetic; }
};

// Parsed from "no-fp16,no-subgroup-ops,shared-mem=16384,max-storage-range=33554432,...".
// Each entry can only weaken the device, but for int-dot, gpu-tuning and kernel=NAME, which change
// choices. Unknown entries throw std::invalid_argument naming them.
struct CapsOverride {
    bool no_fp16 = false, no_int8 = false, no_int64 = false, no_storage16 = false, no_storage8 = false;
    bool no_subgroup_ops = false, no_subgroup_size_control = false, no_int_dot = false;
    bool no_coopmat = false, no_timestamps = false, gpu_tuning = false, soft_half = false;
    bool int_dot = false;  // the integer-dot variants wherever the extension exists (accelerated or not)
    bool coopmat = false;  // the cooperative-matrix kernels wherever coopmat_usable() holds (CPU drivers too)
    uint32_t shared_mem = 0;  // 0: keep
    uint64_t max_storage_range = 0;  // 0: keep
    uint64_t max_uniform_range = 0;  // 0: keep
    uint64_t max_allocation = 0;  // 0: keep
    uint64_t device_memory = 0;  // device-local heap bytes; 0: keep (a small GPU on a big one)
    std::vector<std::string> kernels;  // kernel=NAME entries: DeviceCaps::forced_kernels

    static CapsOverride parse(const std::string& spec);
    static std::string help();  // one line per accepted entry
    bool empty() const;
    void apply(DeviceCaps& caps) const;
};

// The device's f16 x f16 -> f32 subgroup shape the cooperative-matrix matmul uses: the one with
// the most multiply-adds per instruction (16x16x16 over 16x8x16 on GPUs; lavapipe has 8x8x8 only),
// nullptr if it reports none.
const CoopMatShape* coopmat_f16_shape(const DeviceCaps& caps);
// What matmul_coopmat.comp needs: that shape, shaderFloat16, the Vulkan memory model its module
// declares, and a subgroup size it can require (its subgroups split the tile by gl_SubgroupID).
bool coopmat_usable(const DeviceCaps& caps);

DeviceCaps query_caps(VkInstance instance, VkPhysicalDevice pd, uint32_t instance_api_version);

// Extensions the logical device enables where present (and that DeviceCaps reports).
bool device_has_extension(VkPhysicalDevice pd, const char* name);

}  // namespace vkllm
