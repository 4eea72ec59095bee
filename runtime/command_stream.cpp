#include "runtime/command_stream.h"

#include "runtime/context.h"
#include "runtime/pipeline.h"
#include "runtime/vk_check.h"

#include <fmt/format.h>

namespace vkllm {

namespace {
constexpr uint32_t kSetsPerPool = 128;
constexpr uint32_t kBuffersPerPool = 1024;
constexpr uint32_t kUniformBuffersPerPool = 256;  // uniform X of the CPU decode matvecs
VkDescriptorType descriptor_type(const ShaderInfo& info, size_t binding) {
    return info.uniform_mask & (1u << binding) ? VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER : VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
}
constexpr uint32_t kMaxTimedDispatches = 2048;
}  // namespace

CommandStream::CommandStream(Context& ctx) : ctx_(ctx) {
    VkDevice dev = ctx.device().get();
    VkCommandPoolCreateInfo pci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pci.queueFamilyIndex = ctx.device().queue_family();
    VkCommandPool raw;
    VK_CHECK(vkCreateCommandPool(dev, &pci, nullptr, &raw));
    pool_ = Unique<VkCommandPool>(dev, raw, vkDestroyCommandPool);
    VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    ai.commandPool = raw;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    VK_CHECK(vkAllocateCommandBuffers(dev, &ai, &cmd_));
}

CommandStream::~CommandStream() = default;  // the pool frees the command buffer

VkDescriptorSet CommandStream::allocate_set(VkDescriptorSetLayout layout) {
    VkDevice dev = ctx_.device().get();
    for (;; ++current_pool_) {
        if (current_pool_ == descriptor_pools_.size()) {
            const VkDescriptorPoolSize sizes[] = {{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kBuffersPerPool},
                                                  {VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER, kUniformBuffersPerPool}};
            VkDescriptorPoolCreateInfo ci{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
            ci.maxSets = kSetsPerPool;
            ci.poolSizeCount = 2;
            ci.pPoolSizes = sizes;
            VkDescriptorPool raw;
            VK_CHECK(vkCreateDescriptorPool(dev, &ci, nullptr, &raw));
            descriptor_pools_.emplace_back(dev, raw, vkDestroyDescriptorPool);
        }
        VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
        ai.descriptorPool = descriptor_pools_[current_pool_].get();
        ai.descriptorSetCount = 1;
        ai.pSetLayouts = &layout;
        VkDescriptorSet set;
        VkResult r = vkAllocateDescriptorSets(dev, &ai, &set);
        if (r == VK_SUCCESS) return set;
        if (r != VK_ERROR_OUT_OF_POOL_MEMORY && r != VK_ERROR_FRAGMENTED_POOL) VK_CHECK(r);
    }
}

void CommandStream::begin(bool timing) {
    VkDevice dev = ctx_.device().get();
    VK_CHECK(vkResetCommandBuffer(cmd_, 0));
    for (auto& p : descriptor_pools_) VK_CHECK(vkResetDescriptorPool(dev, p.get(), 0));
    current_pool_ = 0;
    pending_.clear();
    labels_.clear();
    stats_ = {};
    timing_ = timing && ctx_.caps().timestamps;
    VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    VK_CHECK(vkBeginCommandBuffer(cmd_, &bi));
    recording_ = true;
    recorded_ = false;
    if (timing_) {
        if (!queries_) {
            VkQueryPoolCreateInfo qi{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
            qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
            qi.queryCount = 2 * kMaxTimedDispatches;
            VkQueryPool raw;
            VK_CHECK(vkCreateQueryPool(dev, &qi, nullptr, &raw));
            queries_ = Unique<VkQueryPool>(dev, raw, vkDestroyQueryPool);
            query_capacity_ = qi.queryCount;
        }
        vkCmdResetQueryPool(cmd_, queries_.get(), 0, query_capacity_);
    }
    // Work submitted earlier (another stream, an upload) may have written what this stream reads:
    // submission order alone does not make those writes visible.
    barrier();
    stats_.barriers = 0;
}

void CommandStream::barrier() {
    VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                       VK_ACCESS_TRANSFER_WRITE_BIT;
    constexpr VkPipelineStageFlags stages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
    vkCmdPipelineBarrier(cmd_, stages, stages, 0, 1, &mb, 0, nullptr, 0, nullptr);
    pending_.clear();
    ++stats_.barriers;
}

void CommandStream::track(const BufferSlice& range, bool write) {
    for (const Access& a : pending_)
        if ((write || a.write) && a.range.overlaps(range)) {
            barrier();
            return;
        }
}

void CommandStream::dispatch(const Pipeline& p, std::span<const BufferSlice> bindings, const void* push,
                             uint32_t push_bytes, std::array<uint32_t, 3> groups, std::string_view label) {
    if (!recording_) throw std::logic_error("CommandStream::dispatch outside begin()/end()");
    const ShaderInfo& info = p.info();
    const DeviceCaps& caps = ctx_.caps();
    if (bindings.size() != info.binding_count)
        throw std::logic_error(
            fmt::format("{}: {} bindings given, shader has {}", p.name(), bindings.size(), info.binding_count));
    if (push_bytes != info.push_constant_bytes)
        throw std::logic_error(fmt::format("{}: {} push-constant bytes given, shader declares {}", p.name(), push_bytes,
                                           info.push_constant_bytes));
    for (int d = 0; d < 3; ++d)
        if (groups[d] == 0 || groups[d] > caps.max_workgroup_count[d])
            throw DeviceLimitError(fmt::format("{}: {} workgroups in dimension {} (device allows 1..{})", p.name(),
                                               groups[d], d, caps.max_workgroup_count[d]));

    std::vector<VkDescriptorBufferInfo> infos(bindings.size());
    for (size_t b = 0; b < bindings.size(); ++b) {
        const BufferSlice& s = bindings[b];
        const bool uniform = descriptor_type(info, b) == VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER;
        const uint64_t range = uniform ? caps.max_uniform_buffer_range : caps.max_storage_buffer_range;
        const uint64_t align =
            uniform ? caps.min_uniform_buffer_offset_alignment : caps.min_storage_buffer_offset_alignment;
        if (s.size > range)
            throw DeviceLimitError(
                fmt::format("{}: binding {} is {} bytes, more than this device's {} ({} bytes); the op must split it",
                            p.name(), b, s.size, uniform ? "maxUniformBufferRange" : "maxStorageBufferRange", range));
        if (s.offset % align != 0)
            throw DeviceLimitError(
                fmt::format("{}: binding {} offset {} is not a multiple of {}", p.name(), b, s.offset, align));
        infos[b] = {s.buffer, s.offset, s.size};
    }
    // Barrier decision first, against everything since the last barrier, then record this
    // dispatch's accesses.
    bool need = false;
    for (size_t b = 0; b < bindings.size() && !need; ++b) {
        bool write = info.written_mask & (1u << b);
        for (const Access& a : pending_)
            if ((write || a.write) && a.range.overlaps(bindings[b])) {
                need = true;
                break;
            }
    }
    if (need) barrier();
    for (size_t b = 0; b < bindings.size(); ++b) pending_.push_back({bindings[b], bool(info.written_mask & (1u << b))});

    VkDescriptorSet set = allocate_set(p.set_layout());
    std::vector<VkWriteDescriptorSet> writes(bindings.size(), {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET});
    for (size_t b = 0; b < bindings.size(); ++b) {
        writes[b].dstSet = set;
        writes[b].dstBinding = uint32_t(b);
        writes[b].descriptorCount = 1;
        writes[b].descriptorType = descriptor_type(info, b);
        writes[b].pBufferInfo = &infos[b];
    }
    vkUpdateDescriptorSets(ctx_.device().get(), uint32_t(writes.size()), writes.data(), 0, nullptr);
    ++stats_.descriptor_sets;

    bool timed = timing_ && labels_.size() < kMaxTimedDispatches;
    if (timed)
        vkCmdWriteTimestamp(cmd_, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, queries_.get(), uint32_t(2 * labels_.size()));
    vkCmdBindPipeline(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, p.get());
    vkCmdBindDescriptorSets(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout(), 0, 1, &set, 0, nullptr);
    if (push_bytes) vkCmdPushConstants(cmd_, p.layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes, push);
    vkCmdDispatch(cmd_, groups[0], groups[1], groups[2]);
    if (timed) {
        vkCmdWriteTimestamp(cmd_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, queries_.get(),
                            uint32_t(2 * labels_.size() + 1));
        labels_.emplace_back(std::string(label), p.name());
    }
    ++stats_.dispatches;
}

void CommandStream::copy(const BufferSlice& src, const BufferSlice& dst) {
    if (src.size != dst.size) throw std::logic_error("CommandStream::copy: sizes differ");
    track(src, false);
    track(dst, true);
    pending_.push_back({src, false});
    pending_.push_back({dst, true});
    VkBufferCopy region{src.offset, dst.offset, src.size};
    vkCmdCopyBuffer(cmd_, src.buffer, dst.buffer, 1, &region);
}

void CommandStream::fill(const BufferSlice& dst, uint32_t value) {
    track(dst, true);
    pending_.push_back({dst, true});
    vkCmdFillBuffer(cmd_, dst.buffer, dst.offset, dst.size, value);
}

void CommandStream::end() {
    // Make this stream's writes visible to whatever is submitted next (host reads included).
    VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
    vkCmdPipelineBarrier(cmd_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                         VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
    VK_CHECK(vkEndCommandBuffer(cmd_));
    recording_ = false;
    recorded_ = true;
}

void CommandStream::submit_and_wait() {
    CommandStream* self = this;
    ctx_.submit(std::span<CommandStream* const>(&self, 1));
}

std::vector<DispatchTiming> CommandStream::timings() const {
    std::vector<DispatchTiming> out;
    if (!timing_ || labels_.empty()) return out;
    std::vector<uint64_t> ts(2 * labels_.size());
    VK_CHECK(vkGetQueryPoolResults(ctx_.device().get(), queries_.get(), 0, uint32_t(ts.size()), ts.size() * 8,
                                   ts.data(), 8, VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
    uint32_t bits = ctx_.device().timestamp_valid_bits();
    uint64_t mask = bits >= 64 ? ~0ull : ((1ull << bits) - 1);
    for (size_t i = 0; i < labels_.size(); ++i) {
        uint64_t dt = ((ts[2 * i + 1] & mask) - (ts[2 * i] & mask)) & mask;
        out.push_back({labels_[i].first, labels_[i].second, double(dt) * ctx_.caps().timestamp_period_ns});
    }
    return out;
}

}  // namespace vkllm
