#include "runtime/context.h"

#include "runtime/kernel_tuning.h"
#include "runtime/vk_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

namespace vkllm {

namespace {
// Host copies go through one staging buffer of this size, or of the device's largest allocation
// where that is smaller (a 64 KiB cap must refuse the weight it cannot hold, not the staging).
constexpr VkDeviceSize kStagingBytes = 64ull << 20;
}  // namespace

Context::Context(const ContextOptions& opts) : opts_(opts) {
    instance_ = std::make_unique<Instance>(opts.instance);
    auto devices = enumerate_devices(*instance_);
    device_ = std::make_unique<Device>(*instance_, select_device(devices, opts.device), opts.caps);
    allocator_ = std::make_unique<Allocator>(*device_);
    std::optional<std::filesystem::path> file;
    if (opts.pipeline_cache) {
        auto dir = opts.cache_dir ? opts.cache_dir : PipelineCache::default_dir();
        if (dir) file = *dir / PipelineCache::file_name(*device_);
    }
    cache_ = std::make_unique<PipelineCache>(*device_, file);
    if (opts.kernel_tuning)
        if (const auto path = kernel_tuning_path()) {
            TuningLoad t = load_kernel_tuning(device_->caps(), *path);
            if (!t.warning.empty() && opts.warn) opts.warn(t.warning);
            device_->set_tuning(std::move(t.tuning));
        }
    VkFenceCreateInfo fci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    VkFence raw;
    VK_CHECK(vkCreateFence(device_->get(), &fci, nullptr, &raw));
    fence_ = Unique<VkFence>(device_->get(), raw, vkDestroyFence);
}

std::optional<std::filesystem::path> Context::kernel_tuning_path() const {
    const auto dir = opts_.cache_dir ? opts_.cache_dir : PipelineCache::default_dir();
    if (!dir) return std::nullopt;
    return *dir / kernel_tuning_file_name(device_->caps());
}

Context::~Context() {
    if (device_) vkDeviceWaitIdle(device_->get());
    transfer_.reset();
    staging_.reset();
    pipelines_.clear();
    if (cache_) cache_->save();
}

const Pipeline& Context::pipeline(const PipelineDesc& desc) {
    std::string key = desc.key();
    {
        std::lock_guard lock(pipelines_mutex_);
        auto it = pipelines_.find(key);
        if (it != pipelines_.end()) return *it->second;
    }
    // Created outside the lock so that prepare_pipelines() compiles in parallel.
    auto p = std::make_unique<Pipeline>(*device_, cache_->get(), desc);
    std::lock_guard lock(pipelines_mutex_);
    auto [it, inserted] = pipelines_.emplace(key, std::move(p));
    if (inserted) {
        ++pipeline_stats_.created;
        pipeline_stats_.cache_hits += it->second->cache_hit();
        pipeline_stats_.create_ms += it->second->create_ms();
        cache_->mark_dirty();
    }
    return *it->second;
}

void Context::prepare_pipelines(std::span<const PipelineDesc> descs) {
    unsigned n_threads = std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
    std::atomic<size_t> next{0};
    std::vector<std::string> errors(descs.size());
    auto work = [&] {
        for (size_t i; (i = next++) < descs.size();) {
            try {
                pipeline(descs[i]);
            } catch (const std::exception& e) {
                errors[i] = e.what();
            }
        }
    };
    std::vector<std::thread> threads;
    for (unsigned t = 1; t < std::min<size_t>(n_threads, descs.size()); ++t) threads.emplace_back(work);
    work();
    for (auto& t : threads) t.join();
    for (auto& e : errors)
        if (!e.empty()) throw std::runtime_error(e);
}

void Context::wait_fence() {
    VkFence f = fence_.get();
    VkResult r = vkWaitForFences(device_->get(), 1, &f, VK_TRUE, opts_.fence_timeout_ns);
    if (r == VK_TIMEOUT)
        throw VulkanError(
            r, fmt::format("vkWaitForFences (GPU work did not finish in {} s)", opts_.fence_timeout_ns / 1e9));
    VK_CHECK(r);
    VK_CHECK(vkResetFences(device_->get(), 1, &f));
}

void Context::submit(std::span<CommandStream* const> streams) {
    std::lock_guard lock(queue_mutex_);
    std::vector<VkCommandBuffer> cmds;
    for (CommandStream* s : streams) {
        if (!s->recorded()) throw std::logic_error("Context::submit: stream was not recorded (begin/end)");
        cmds.push_back(s->get());
    }
    VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
    si.commandBufferCount = uint32_t(cmds.size());
    si.pCommandBuffers = cmds.data();
    VK_CHECK(vkQueueSubmit(device_->queue(), 1, &si, fence_.get()));
    wait_fence();
}

size_t Context::ensure_staging() {
    if (!staging_) {
        const DeviceCaps& c = caps();
        const VkDeviceSize bytes = std::min({kStagingBytes, c.max_memory_allocation_size, c.max_buffer_size});
        staging_ = allocator_->allocate(bytes, MemoryUsage::Upload, "staging");
    }
    return size_t(staging_.size());
}

void Context::run_transfer(const BufferSlice& src, const BufferSlice& dst) {
    if (!transfer_) transfer_ = std::make_unique<CommandStream>(*this);
    transfer_->begin();
    transfer_->copy(src, dst);
    transfer_->end();
    transfer_->submit_and_wait();
}

void Context::upload(const Buffer& dst, const void* src, size_t bytes, size_t dst_offset) {
    if (dst_offset > dst.size() || bytes > dst.size() - dst_offset)
        throw std::out_of_range(fmt::format("upload of {} bytes at {} overflows buffer '{}' ({} bytes)", bytes,
                                            dst_offset, dst.name(), dst.size()));
    if (bytes == 0) return;
    if (dst.mapped()) {
        std::memcpy(static_cast<uint8_t*>(dst.mapped()) + dst_offset, src, bytes);
        return;
    }
    std::lock_guard lock(queue_mutex_);
    const size_t chunk = ensure_staging();
    for (size_t done = 0; done < bytes;) {
        size_t n = std::min<size_t>(bytes - done, chunk);
        std::memcpy(staging_.mapped(), static_cast<const uint8_t*>(src) + done, n);
        run_transfer(staging_.slice(0, n), dst.slice(dst_offset + done, n));
        done += n;
    }
}

void Context::download(const Buffer& src, void* dst, size_t bytes, size_t src_offset) {
    if (src_offset > src.size() || bytes > src.size() - src_offset)
        throw std::out_of_range(fmt::format("download of {} bytes at {} overflows buffer '{}' ({} bytes)", bytes,
                                            src_offset, src.name(), src.size()));
    if (bytes == 0) return;
    if (src.mapped()) {
        std::memcpy(dst, static_cast<const uint8_t*>(src.mapped()) + src_offset, bytes);
        return;
    }
    std::lock_guard lock(queue_mutex_);
    const size_t chunk = ensure_staging();
    for (size_t done = 0; done < bytes;) {
        size_t n = std::min<size_t>(bytes - done, chunk);
        run_transfer(src.slice(src_offset + done, n), staging_.slice(0, n));
        std::memcpy(static_cast<uint8_t*>(dst) + done, staging_.mapped(), n);
        done += n;
    }
}

void Context::download(const BufferSlice& src, void* dst, size_t bytes) {
    if (bytes > src.size)
        throw std::out_of_range(fmt::format("download of {} bytes from a slice of {}", bytes, src.size));
    std::lock_guard lock(queue_mutex_);
    const size_t chunk = ensure_staging();
    for (size_t done = 0; done < bytes;) {
        size_t n = std::min<size_t>(bytes - done, chunk);
        run_transfer(BufferSlice{src.buffer, src.offset + done, n}, staging_.slice(0, n));
        std::memcpy(static_cast<uint8_t*>(dst) + done, staging_.mapped(), n);
        done += n;
    }
}

}  // namespace vkllm
