// Compute pipelines built from the embedded shader table, and the VkPipelineCache persisted to a
// file so that the second start of vkllm skips shader compilation.
#pragma once

#include "runtime/handle.h"
#include "runtime/shader_registry.h"

#include <array>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vkllm {

class Device;

// Specialization constant SOFT_HALF of shaders/include/half.glsl: passed as true to every pipeline
// on a device with DeviceCaps::soft_half (a shader without it ignores the entry).
constexpr uint32_t kSoftHalfSpecId = 100;

struct PipelineDesc {
    PipelineDesc() = default;
    PipelineDesc(ShaderId id, std::vector<uint32_t> spec = {}, uint32_t subgroup_size = 0);
    // A variant named at run time (tests, tools): looked up here, std::out_of_range when absent.
    PipelineDesc(std::string_view name, std::vector<uint32_t> spec = {}, uint32_t subgroup_size = 0);

    ShaderId id{};
    std::string shader;  // the variant's name (shader_name(id)): logs, the key, warm-up listings, errors
    std::vector<uint32_t> spec;  // spec[i] = value (raw bits) of specialization constant id i
    uint32_t subgroup_size = 0;  // require this subgroup size (needs subgroup size control); 0 = driver's choice
    std::string key() const;
};

class Pipeline {
public:
    Pipeline(const Device& device, VkPipelineCache cache, const PipelineDesc& desc);
    const ShaderInfo& info() const { return *info_; }
    const std::string& name() const { return name_; }
    VkPipeline get() const { return pipeline_.get(); }
    VkPipelineLayout layout() const { return layout_.get(); }
    VkDescriptorSetLayout set_layout() const { return set_layout_.get(); }
    const std::array<uint32_t, 3>& local_size() const { return local_size_; }
    bool cache_hit() const { return cache_hit_; }  // per VK_EXT_pipeline_creation_feedback
    bool feedback_valid() const { return feedback_valid_; }
    double create_ms() const { return create_ms_; }

private:
    const ShaderInfo* info_;
    std::string name_;
    std::array<uint32_t, 3> local_size_;
    Unique<VkDescriptorSetLayout> set_layout_;
    Unique<VkPipelineLayout> layout_;
    Unique<VkPipeline> pipeline_;
    bool cache_hit_ = false, feedback_valid_ = false;
    double create_ms_ = 0;
};

enum class CacheLoad { Disabled, Missing, Loaded, Corrupt, Foreign };

class PipelineCache {
public:
    // file empty = in-memory cache only. A corrupt, truncated or foreign file is ignored (and
    // replaced on save); load_status() says which.
    PipelineCache(const Device& device, std::optional<std::filesystem::path> file);
    ~PipelineCache();
    PipelineCache(const PipelineCache&) = delete;
    PipelineCache& operator=(const PipelineCache&) = delete;

    VkPipelineCache get() const { return cache_.get(); }
    CacheLoad load_status() const { return load_; }
    size_t loaded_bytes() const { return loaded_bytes_; }
    const std::optional<std::filesystem::path>& file() const { return file_; }
    void mark_dirty() { dirty_ = true; }
    // Writes the file atomically (temp + rename) when new pipelines were created. Errors are
    // returned, not thrown: a read-only cache directory must not stop inference.
    std::string save();

    static std::optional<std::filesystem::path> default_dir();  // $XDG_CACHE_HOME/vkllm or ~/.cache/vkllm
    static std::string file_name(const Device& device);

private:
    const Device& device_;
    std::optional<std::filesystem::path> file_;
    Unique<VkPipelineCache> cache_;
    CacheLoad load_ = CacheLoad::Disabled;
    size_t loaded_bytes_ = 0;
    bool dirty_ = false;
};

}  // namespace vkllm
