// The runtime's one entry point: instance, chosen device, memory, pipelines (created on first use
// and cached on disk), transfers and submission. Ops and the model layer take a Context&.
#pragma once

#include "runtime/caps.h"
#include "runtime/command_stream.h"
#include "runtime/device.h"
#include "runtime/instance.h"
#include "runtime/memory.h"
#include "runtime/pipeline.h"

#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>

namespace vkllm {

struct ContextOptions {
    InstanceOptions instance;
    DeviceSelector device;
    CapsOverride caps;
    bool pipeline_cache = true;  // persist VkPipelineCache to disk
    std::optional<std::filesystem::path> cache_dir;  // default: PipelineCache::default_dir()
    // Read the kernel configurations `vkllm tune` measured (runtime/kernel_tuning.h) from the cache
    // directory into caps().tuning. Off by default: the commands that run a model turn it on, so
    // that tests and library users plan with the table's own rows unless they ask.
    bool kernel_tuning = false;
    // Where the one line saying why a tuning file was ignored goes (stale, foreign, corrupt); null: dropped.
    std::function<void(const std::string&)> warn;
    uint64_t fence_timeout_ns = 600ull * 1000000000ull;  // a hung GPU becomes an error, not a hang
};

struct PipelineStats {
    uint32_t created = 0;
    uint32_t cache_hits = 0;  // as reported by VK_EXT_pipeline_creation_feedback
    double create_ms = 0;
};

class Context {
public:
    explicit Context(const ContextOptions& opts = {});
    ~Context();
    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;

    Instance& instance() { return *instance_; }
    Device& device() { return *device_; }
    const DeviceCaps& caps() const { return device_->caps(); }
    Allocator& allocator() { return *allocator_; }
    PipelineCache& pipeline_cache() { return *cache_; }
    // Where this device's kernel tuning file lives (beside the pipeline cache, whether or not that
    // is persisted); nullopt when there is no cache directory.
    std::optional<std::filesystem::path> kernel_tuning_path() const;
    const PipelineStats& pipeline_stats() const { return pipeline_stats_; }

    // The pipeline for `desc`, created on first use. Thread-safe.
    const Pipeline& pipeline(const PipelineDesc& desc);
    // Creates the given pipelines on several threads (start-up time is compile time).
    void prepare_pipelines(std::span<const PipelineDesc> descs);

    Buffer create_buffer(VkDeviceSize size, MemoryUsage usage, std::string name) {
        return allocator_->allocate(size, usage, std::move(name));
    }
    // Host <-> device copies; mapped buffers are copied directly, others through staging.
    void upload(const Buffer& dst, const void* src, size_t bytes, size_t dst_offset = 0);
    void download(const Buffer& src, void* dst, size_t bytes, size_t src_offset = 0);
    // Any slice, always through staging (for debugging paths that only hold a BufferSlice).
    void download(const BufferSlice& src, void* dst, size_t bytes);

    // Submits the streams in order in one vkQueueSubmit and waits for completion. Thread-safe, as are
    // upload(), download() and create_buffer(): threads sharing a context take turns on its queue
    // (a vision encoder on a caller's thread beside the engine's).
    void submit(std::span<CommandStream* const> streams);

private:
    void run_transfer(const BufferSlice& src, const BufferSlice& dst);
    size_t ensure_staging();  // allocates the staging buffer once; returns its size
    void wait_fence();

    ContextOptions opts_;
    std::unique_ptr<Instance> instance_;
    std::unique_ptr<Device> device_;
    std::unique_ptr<Allocator> allocator_;
    std::unique_ptr<PipelineCache> cache_;
    std::mutex pipelines_mutex_;
    // The queue, its fence and the staging buffer: one submission (and its wait) at a time.
    std::recursive_mutex queue_mutex_;
    std::unordered_map<std::string, std::unique_ptr<Pipeline>> pipelines_;
    PipelineStats pipeline_stats_;
    Unique<VkFence> fence_;
    std::unique_ptr<CommandStream> transfer_;
    Buffer staging_;
};

}  // namespace vkllm
