#include "runtime/pipeline.h"

#include "runtime/device.h"
#include "runtime/vk_check.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <utility>

namespace vkllm {

PipelineDesc::PipelineDesc(ShaderId variant_id, std::vector<uint32_t> constants, uint32_t required_subgroup)
    : id(variant_id), shader(shader_name(variant_id)), spec(std::move(constants)), subgroup_size(required_subgroup) {}

PipelineDesc::PipelineDesc(std::string_view name, std::vector<uint32_t> constants, uint32_t required_subgroup)
    : PipelineDesc(find_shader_id(name), std::move(constants), required_subgroup) {}

std::string PipelineDesc::key() const {
    std::string k = shader;
    for (uint32_t v : spec) k += fmt::format(":{}", v);
    if (subgroup_size) k += fmt::format("@sg{}", subgroup_size);
    return k;
}

Pipeline::Pipeline(const Device& device, VkPipelineCache cache, const PipelineDesc& desc)
    : info_(&shader_info(desc.id)), name_(desc.key()) {
    VkDevice dev = device.get();
    const DeviceCaps& caps = device.caps();
    for (int d = 0; d < 3; ++d) {
        int32_t id = info_->local_size_spec_id[d];
        local_size_[d] = id >= 0 && size_t(id) < desc.spec.size() ? desc.spec[id] : info_->local_size[d];
    }
    uint32_t invocations = local_size_[0] * local_size_[1] * local_size_[2];
    if (invocations > caps.max_workgroup_invocations || local_size_[0] > caps.max_workgroup_size[0])
        throw DeviceLimitError(fmt::format("pipeline {}: workgroup {}x{}x{} exceeds the device limit of {} invocations",
                                           name_, local_size_[0], local_size_[1], local_size_[2],
                                           caps.max_workgroup_invocations));
    if (info_->push_constant_bytes > caps.max_push_constants)
        throw DeviceLimitError(fmt::format("pipeline {}: {} bytes of push constants, device allows {}", name_,
                                           info_->push_constant_bytes, caps.max_push_constants));

    std::vector<VkDescriptorSetLayoutBinding> bindings(info_->binding_count);
    for (uint32_t b = 0; b < info_->binding_count; ++b)
        bindings[b] = {
            b, info_->uniform_mask & (1u << b) ? VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER : VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
            1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
    VkDescriptorSetLayoutCreateInfo dsl{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
    dsl.bindingCount = uint32_t(bindings.size());
    dsl.pBindings = bindings.data();
    VkDescriptorSetLayout raw_dsl;
    VK_CHECK(vkCreateDescriptorSetLayout(dev, &dsl, nullptr, &raw_dsl));
    set_layout_ = Unique<VkDescriptorSetLayout>(dev, raw_dsl, vkDestroyDescriptorSetLayout);

    VkPushConstantRange pcr{VK_SHADER_STAGE_COMPUTE_BIT, 0, info_->push_constant_bytes};
    VkPipelineLayoutCreateInfo plc{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
    plc.setLayoutCount = 1;
    plc.pSetLayouts = &raw_dsl;
    plc.pushConstantRangeCount = info_->push_constant_bytes ? 1 : 0;
    plc.pPushConstantRanges = &pcr;
    VkPipelineLayout raw_layout;
    VK_CHECK(vkCreatePipelineLayout(dev, &plc, nullptr, &raw_layout));
    layout_ = Unique<VkPipelineLayout>(dev, raw_layout, vkDestroyPipelineLayout);

    VkShaderModuleCreateInfo smc{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    smc.codeSize = size_t(info_->code_words) * 4;
    smc.pCode = info_->code;
    VkShaderModule raw_module;
    VK_CHECK(vkCreateShaderModule(dev, &smc, nullptr, &raw_module));
    Unique<VkShaderModule> module(dev, raw_module, vkDestroyShaderModule);

    std::vector<uint32_t> values = desc.spec;
    std::vector<VkSpecializationMapEntry> entries(values.size());
    for (uint32_t i = 0; i < values.size(); ++i) entries[i] = {i, i * 4, 4};
    if (caps.soft_half) {
        entries.push_back({kSoftHalfSpecId, uint32_t(values.size()) * 4, 4});
        values.push_back(VK_TRUE);
    }
    VkSpecializationInfo si{uint32_t(entries.size()), entries.data(), values.size() * 4, values.data()};

    VkPipelineShaderStageCreateInfo stage{VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
    stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    stage.module = raw_module;
    stage.pName = "main";
    stage.pSpecializationInfo = entries.empty() ? nullptr : &si;
    VkPipelineShaderStageRequiredSubgroupSizeCreateInfo req{
        VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO};
    if (desc.subgroup_size) {
        if (!caps.subgroup_size_control || desc.subgroup_size < caps.min_subgroup_size ||
            desc.subgroup_size > caps.max_subgroup_size)
            throw DeviceLimitError(fmt::format("pipeline {}: subgroup size {} cannot be required on this device", name_,
                                               desc.subgroup_size));
        req.requiredSubgroupSize = desc.subgroup_size;
        stage.pNext = &req;
        stage.flags = VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT;
    }

    VkComputePipelineCreateInfo cpi{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
    cpi.stage = stage;
    cpi.layout = raw_layout;
    VkPipelineCreationFeedback fb{}, stage_fb{};
    VkPipelineCreationFeedbackCreateInfo fbi{VK_STRUCTURE_TYPE_PIPELINE_CREATION_FEEDBACK_CREATE_INFO};
    fbi.pPipelineCreationFeedback = &fb;
    fbi.pipelineStageCreationFeedbackCount = 1;
    fbi.pPipelineStageCreationFeedbacks = &stage_fb;
    if (device.creation_feedback()) cpi.pNext = &fbi;

    auto t0 = std::chrono::steady_clock::now();
    VkPipeline raw_pipeline;
    VK_CHECK(vkCreateComputePipelines(dev, cache, 1, &cpi, nullptr, &raw_pipeline));
    create_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    pipeline_ = Unique<VkPipeline>(dev, raw_pipeline, vkDestroyPipeline);
    feedback_valid_ = device.creation_feedback() && (fb.flags & VK_PIPELINE_CREATION_FEEDBACK_VALID_BIT);
    cache_hit_ = feedback_valid_ && (fb.flags & VK_PIPELINE_CREATION_FEEDBACK_APPLICATION_PIPELINE_CACHE_HIT_BIT);
}

// --- pipeline cache file -------------------------------------------------------------------------
//
// Layout: Header, then `data_size` bytes of VkPipelineCache data. The driver validates its own
// header, but a damaged body can crash some drivers, so the whole payload is hashed by us first.

namespace {

constexpr char kMagic[8] = {'V', 'K', 'L', 'L', 'M', 'P', 'C', '1'};

struct CacheHeader {
    char magic[8];
    uint32_t vendor_id, device_id, driver_version, reserved;
    uint8_t uuid[VK_UUID_SIZE];
    uint64_t shader_hash;
    uint64_t data_size;
    uint64_t data_hash;
};

uint64_t fnv1a(const uint8_t* p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; ++i) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

CacheHeader expected_header(const Device& device) {
    CacheHeader h{};
    std::memcpy(h.magic, kMagic, 8);
    h.vendor_id = device.caps().vendor_id;
    h.device_id = device.caps().device_id;
    h.driver_version = device.caps().driver_version;
    std::memcpy(h.uuid, device.caps().pipeline_cache_uuid.data(), VK_UUID_SIZE);
    h.shader_hash = shader_table_hash();
    return h;
}

}  // namespace

std::optional<std::filesystem::path> PipelineCache::default_dir() {
    if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::filesystem::path(x) / "vkllm";
    if (const char* h = std::getenv("HOME"); h && *h) return std::filesystem::path(h) / ".cache" / "vkllm";
    return std::nullopt;
}

std::string PipelineCache::file_name(const Device& device) {
    std::string uuid;
    for (uint8_t b : device.caps().pipeline_cache_uuid) uuid += fmt::format("{:02x}", b);
    return fmt::format("pipelines-{}-{:x}.bin", uuid, device.caps().driver_version);
}

PipelineCache::PipelineCache(const Device& device, std::optional<std::filesystem::path> file)
    : device_(device), file_(std::move(file)) {
    std::vector<uint8_t> data;
    if (file_) {
        load_ = CacheLoad::Missing;
        std::ifstream f(*file_, std::ios::binary);
        if (f) {
            std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
            CacheHeader want = expected_header(device), got{};
            if (bytes.size() < sizeof got) {
                load_ = CacheLoad::Corrupt;
            } else {
                std::memcpy(&got, bytes.data(), sizeof got);
                uint64_t payload = bytes.size() - sizeof got;
                if (std::memcmp(got.magic, kMagic, 8) != 0 || got.data_size != payload ||
                    got.data_hash != fnv1a(bytes.data() + sizeof got, payload)) {
                    load_ = CacheLoad::Corrupt;
                } else if (got.vendor_id != want.vendor_id || got.device_id != want.device_id ||
                           got.driver_version != want.driver_version ||
                           std::memcmp(got.uuid, want.uuid, VK_UUID_SIZE) != 0 || got.shader_hash != want.shader_hash) {
                    load_ = CacheLoad::Foreign;
                } else {
                    data.assign(bytes.begin() + sizeof got, bytes.end());
                    load_ = CacheLoad::Loaded;
                    loaded_bytes_ = data.size();
                }
            }
        }
        if (load_ != CacheLoad::Loaded) dirty_ = true;  // rewrite a bad or missing file
    }
    VkPipelineCacheCreateInfo ci{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
    ci.initialDataSize = data.size();
    ci.pInitialData = data.empty() ? nullptr : data.data();
    VkPipelineCache raw;
    VK_CHECK(vkCreatePipelineCache(device.get(), &ci, nullptr, &raw));
    cache_ = Unique<VkPipelineCache>(device.get(), raw, vkDestroyPipelineCache);
}

PipelineCache::~PipelineCache() { save(); }

std::string PipelineCache::save() {
    if (!file_ || !dirty_ || !cache_) return {};
    size_t n = 0;
    if (vkGetPipelineCacheData(device_.get(), cache_.get(), &n, nullptr) != VK_SUCCESS)
        return "vkGetPipelineCacheData failed";
    std::vector<uint8_t> data(n);
    if (n && vkGetPipelineCacheData(device_.get(), cache_.get(), &n, data.data()) < 0)
        return "vkGetPipelineCacheData failed";
    data.resize(n);
    CacheHeader h = expected_header(device_);
    h.data_size = data.size();
    h.data_hash = fnv1a(data.data(), data.size());
    std::error_code ec;
    std::filesystem::create_directories(file_->parent_path(), ec);
    auto tmp = *file_;
    tmp += fmt::format(".tmp{}", reinterpret_cast<uintptr_t>(this) & 0xffff);
    {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        if (!f) return "cannot write " + tmp.string();
        f.write(reinterpret_cast<const char*>(&h), sizeof h);
        f.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size()));
        if (!f) return "cannot write " + tmp.string();
    }
    std::filesystem::rename(tmp, *file_, ec);
    if (ec) return "cannot rename cache file: " + ec.message();
    dirty_ = false;
    return {};
}

}  // namespace vkllm
