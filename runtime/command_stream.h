// A command buffer recorded once and submitted many times. It binds pipelines and descriptor
// sets, pushes constants, dispatches, and inserts a barrier only where a dispatch reads or writes
// a buffer range that an earlier dispatch since the last barrier wrote (or, for a write, read):
// independent dispatches (Q, K and V projections, say) run without a barrier between them.
#pragma once

#include "runtime/handle.h"
#include "runtime/memory.h"

#include <array>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace vkllm {

class Context;
class Pipeline;

struct DispatchTiming {
    std::string label;  // the caller's op label ("matvec", "attention", ...)
    std::string pipeline;  // pipeline key
    double ns = 0;
};

struct StreamStats {
    uint32_t dispatches = 0;
    uint32_t barriers = 0;
    uint32_t descriptor_sets = 0;
};

class CommandStream {
public:
    explicit CommandStream(Context& ctx);
    ~CommandStream();
    CommandStream(const CommandStream&) = delete;
    CommandStream& operator=(const CommandStream&) = delete;

    // Starts a new recording; the previous one (and its descriptor sets) is dropped.
    void begin(bool timing = false);
    void dispatch(const Pipeline& p, std::span<const BufferSlice> bindings, const void* push, uint32_t push_bytes,
                  std::array<uint32_t, 3> groups, std::string_view label = {});
    template <typename PC>
    void dispatch(const Pipeline& p, std::initializer_list<BufferSlice> bindings, const PC& push,
                  std::array<uint32_t, 3> groups, std::string_view label = {}) {
        dispatch(p, std::span<const BufferSlice>(bindings.begin(), bindings.size()), &push, sizeof(PC), groups, label);
    }
    void dispatch(const Pipeline& p, std::initializer_list<BufferSlice> bindings, std::array<uint32_t, 3> groups,
                  std::string_view label = {}) {
        dispatch(p, std::span<const BufferSlice>(bindings.begin(), bindings.size()), nullptr, 0, groups, label);
    }
    void copy(const BufferSlice& src, const BufferSlice& dst);
    void fill(const BufferSlice& dst, uint32_t value);
    void barrier();  // full compute/transfer memory barrier, for dependencies the tracker cannot see
    void end();

    VkCommandBuffer get() const { return cmd_; }
    bool recorded() const { return recorded_; }
    void submit_and_wait();
    // After the submission completed; empty unless begin(true) and the device has timestamps.
    std::vector<DispatchTiming> timings() const;
    const StreamStats& stats() const { return stats_; }

private:
    struct Access {
        BufferSlice range;
        bool write;
    };
    void track(const BufferSlice& range, bool write);
    VkDescriptorSet allocate_set(VkDescriptorSetLayout layout);

    Context& ctx_;
    Unique<VkCommandPool> pool_;
    VkCommandBuffer cmd_ = VK_NULL_HANDLE;
    std::vector<Unique<VkDescriptorPool>> descriptor_pools_;
    size_t current_pool_ = 0;
    Unique<VkQueryPool> queries_;
    uint32_t query_capacity_ = 0;
    bool timing_ = false, recording_ = false, recorded_ = false;
    std::vector<Access> pending_;  // accesses since the last barrier
    std::vector<std::pair<std::string, std::string>> labels_;
    StreamStats stats_;
};

}  // namespace vkllm
