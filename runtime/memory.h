// Device memory: a sub-allocator that packs many tensors into few large VkBuffer+VkDeviceMemory
// blocks (drivers limit allocation count, and one big buffer per block means one VkBuffer handle
// for hundreds of tensors), and the move-only Buffer that owns one range of a block.
#pragma once

#include "runtime/handle.h"

#include <volk.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <memory>
#include <string>
#include <vector>

namespace vkllm {

class Device;

enum class MemoryUsage {
    Device,  // device-local; the host reaches it only through staging
    DeviceHostVisible,  // device-local and mapped where the device has such memory (UMA, ReBAR), else Device
    Upload,  // host-visible, coherent: staging for uploads, small per-step inputs
    Readback,  // host-visible, coherent, cached where possible: results read by the host
};

// A range of a VkBuffer as a shader binding sees it.
struct BufferSlice {
    VkBuffer buffer = VK_NULL_HANDLE;
    VkDeviceSize offset = 0;
    VkDeviceSize size = 0;
    bool overlaps(const BufferSlice& o) const {
        return buffer == o.buffer && offset < o.offset + o.size && o.offset < offset + size;
    }
};

class Allocator;

class Buffer {
public:
    Buffer() = default;
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    Buffer(Buffer&& o) noexcept { swap(o); }
    Buffer& operator=(Buffer&& o) noexcept {
        if (this != &o) {
            reset();
            swap(o);
        }
        return *this;
    }
    ~Buffer() { reset(); }
    void reset();

    explicit operator bool() const { return allocator_ != nullptr; }
    VkBuffer vk() const { return buffer_; }
    VkDeviceSize offset() const { return offset_; }
    VkDeviceSize size() const { return size_; }
    void* mapped() const { return mapped_; }  // nullptr unless host-visible
    // A sub-range [offset, offset + size) of this buffer; size 0 = to the end. Throws if out of range.
    BufferSlice slice(VkDeviceSize offset = 0, VkDeviceSize size = 0) const;
    const std::string& name() const { return name_; }

private:
    friend class Allocator;
    void swap(Buffer& o) noexcept;
    Allocator* allocator_ = nullptr;
    size_t block_ = 0;
    VkBuffer buffer_ = VK_NULL_HANDLE;
    VkDeviceSize offset_ = 0, size_ = 0, reserved_ = 0;
    void* mapped_ = nullptr;
    std::string name_;
};

struct AllocatorStats {
    size_t blocks = 0;
    uint64_t reserved_bytes = 0;  // VkDeviceMemory allocated
    uint64_t used_bytes = 0;  // handed out in Buffers (aligned)
    uint64_t peak_used_bytes = 0;
    uint64_t device_used_bytes = 0;  // used by Device/DeviceHostVisible buffers
    uint64_t peak_device_used_bytes = 0;
};

class Allocator {
public:
    explicit Allocator(const Device& device, VkDeviceSize block_size = 256ull << 20);
    ~Allocator();
    Allocator(const Allocator&) = delete;
    Allocator& operator=(const Allocator&) = delete;

    // Throws DeviceLimitError (naming `name` and the sizes) when the request can never be met,
    // VulkanError when the driver refuses.
    Buffer allocate(VkDeviceSize size, MemoryUsage usage, std::string name);
    const AllocatorStats& stats() const { return stats_; }
    VkDeviceSize alignment() const { return alignment_; }
    VkDeviceSize block_size() const { return block_size_; }

private:
    friend class Buffer;
    struct Block {
        Unique<VkBuffer> buffer;
        VkDeviceMemory memory = VK_NULL_HANDLE;
        VkDeviceSize size = 0;
        VkDeviceSize memory_bytes = 0;
        void* mapped = nullptr;
        MemoryUsage usage = MemoryUsage::Device;
        bool dedicated = false;
        std::map<VkDeviceSize, VkDeviceSize> free;  // offset -> size, coalesced
    };
    void release(Buffer& b);
    size_t create_block(VkDeviceSize size, MemoryUsage usage, bool dedicated, const std::string& name);
    uint32_t memory_type(uint32_t type_bits, MemoryUsage usage, bool* host_visible) const;

    const Device& device_;
    VkDeviceSize block_size_;
    VkDeviceSize alignment_;
    std::vector<std::unique_ptr<Block>> blocks_;  // null entries are released dedicated blocks
    AllocatorStats stats_;
    // allocate() and release() may run on several threads (an image encoded on a caller's thread
    // while the engine's thread generates on the same device).
    std::mutex mutex_;
};

}  // namespace vkllm
