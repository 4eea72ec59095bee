#include "runtime/memory.h"

#include "runtime/device.h"
#include "runtime/vk_check.h"

#include <fmt/format.h>

#include <algorithm>

namespace vkllm {

namespace {
VkDeviceSize align_up(VkDeviceSize v, VkDeviceSize a) { return (v + a - 1) / a * a; }
// KiB below 1 MiB: a refused 128 KiB buffer under a 64 KiB cap must not read "0.1 MiB > 0.1 MiB".
std::string mib(uint64_t bytes) {
    if (bytes < (1 << 20)) return fmt::format("{:.1f} KiB", double(bytes) / (1 << 10));
    return fmt::format("{:.1f} MiB", double(bytes) / (1 << 20));
}
bool is_device(MemoryUsage u) { return u == MemoryUsage::Device || u == MemoryUsage::DeviceHostVisible; }
}  // namespace

// --- Buffer --------------------------------------------------------------------------------------

void Buffer::reset() {
    if (allocator_) allocator_->release(*this);
    allocator_ = nullptr;
    buffer_ = VK_NULL_HANDLE;
    mapped_ = nullptr;
    size_ = offset_ = reserved_ = 0;
}

void Buffer::swap(Buffer& o) noexcept {
    std::swap(allocator_, o.allocator_);
    std::swap(block_, o.block_);
    std::swap(buffer_, o.buffer_);
    std::swap(offset_, o.offset_);
    std::swap(size_, o.size_);
    std::swap(reserved_, o.reserved_);
    std::swap(mapped_, o.mapped_);
    std::swap(name_, o.name_);
}

BufferSlice Buffer::slice(VkDeviceSize offset, VkDeviceSize size) const {
    if (size == 0) size = offset <= size_ ? size_ - offset : 0;
    if (offset > size_ || size > size_ - offset || size == 0)
        throw std::out_of_range(
            fmt::format("slice [{}, +{}) outside buffer '{}' of {} bytes", offset, size, name_, size_));
    return BufferSlice{buffer_, offset_ + offset, size};
}

// --- Allocator -----------------------------------------------------------------------------------

Allocator::Allocator(const Device& device, VkDeviceSize block_size) : device_(device) {
    const DeviceCaps& c = device.caps();
    block_size_ = std::min<VkDeviceSize>({block_size, c.max_memory_allocation_size, c.max_buffer_size});
    // 256 bytes covers every storage- and uniform-offset alignment seen in practice and keeps
    // tensors on cache lines.
    alignment_ =
        std::max<VkDeviceSize>({c.min_storage_buffer_offset_alignment, c.min_uniform_buffer_offset_alignment, 256});
}

Allocator::~Allocator() {
    for (auto& b : blocks_) {
        if (!b) continue;
        b->buffer.reset();
        if (b->mapped) vkUnmapMemory(device_.get(), b->memory);
        vkFreeMemory(device_.get(), b->memory, nullptr);
    }
}

uint32_t Allocator::memory_type(uint32_t type_bits, MemoryUsage usage, bool* host_visible) const {
    const auto& mp = device_.memory_properties();
    constexpr auto L = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, V = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT,
                   C = VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, K = VK_MEMORY_PROPERTY_HOST_CACHED_BIT;
    std::vector<VkMemoryPropertyFlags> wanted;
    switch (usage) {
        case MemoryUsage::Device: wanted = {L, 0}; break;
        case MemoryUsage::DeviceHostVisible: wanted = {L | V | C, L, 0}; break;
        case MemoryUsage::Upload: wanted = {V | C}; break;
        case MemoryUsage::Readback: wanted = {V | C | K, V | C}; break;
    }
    for (auto flags : wanted)
        for (uint32_t t = 0; t < mp.memoryTypeCount; ++t)
            if ((type_bits & (1u << t)) && (mp.memoryTypes[t].propertyFlags & flags) == flags) {
                *host_visible = (mp.memoryTypes[t].propertyFlags & (V | C)) == (V | C);
                return t;
            }
    throw DeviceLimitError("no suitable Vulkan memory type for this buffer usage");
}

size_t Allocator::create_block(VkDeviceSize size, MemoryUsage usage, bool dedicated, const std::string& name) {
    VkDevice dev = device_.get();
    VkBufferCreateInfo bci{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
    bci.size = size;
    // Uniform too: the CPU-driver matvecs bind activations as uniform buffers (matvec_input.glsl).
    bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_UNIFORM_BUFFER_BIT |
                VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
    VkBuffer raw = VK_NULL_HANDLE;
    VK_CHECK(vkCreateBuffer(dev, &bci, nullptr, &raw));
    auto block = std::make_unique<Block>();
    block->buffer = Unique<VkBuffer>(dev, raw, vkDestroyBuffer);
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(dev, raw, &req);
    bool host_visible = false;
    VkMemoryAllocateInfo mai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
    mai.allocationSize = req.size;
    mai.memoryTypeIndex = memory_type(req.memoryTypeBits, usage, &host_visible);
    VkResult r = vkAllocateMemory(dev, &mai, nullptr, &block->memory);
    if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY)
        throw VulkanError(r, fmt::format("vkAllocateMemory({} for '{}'; {} already allocated)", mib(req.size), name,
                                         mib(stats_.reserved_bytes)));
    VK_CHECK(r);
    r = vkBindBufferMemory(dev, raw, block->memory, 0);
    if (r >= 0 && host_visible) r = vkMapMemory(dev, block->memory, 0, VK_WHOLE_SIZE, 0, &block->mapped);
    if (r < 0) {
        block->buffer.reset();
        vkFreeMemory(dev, block->memory, nullptr);
        throw VulkanError(r, "vkBindBufferMemory/vkMapMemory");
    }
    block->size = size;
    block->memory_bytes = req.size;
    block->usage = usage;
    block->dedicated = dedicated;
    block->free[0] = size;
    stats_.reserved_bytes += req.size;
    ++stats_.blocks;
    blocks_.push_back(std::move(block));
    return blocks_.size() - 1;
}

Buffer Allocator::allocate(VkDeviceSize size, MemoryUsage usage, std::string name) {
    if (size == 0) throw std::invalid_argument(fmt::format("buffer '{}': size 0", name));
    std::lock_guard lock(mutex_);
    const DeviceCaps& c = device_.caps();
    VkDeviceSize reserved = align_up(size, alignment_);
    if (size > c.max_buffer_size || size > c.max_memory_allocation_size)
        throw DeviceLimitError(fmt::format("buffer '{}' needs {} but this device allows at most {} per allocation",
                                           name, mib(size),
                                           mib(std::min(c.max_buffer_size, c.max_memory_allocation_size))));

    size_t block_index = SIZE_MAX;
    VkDeviceSize offset = 0;
    if (reserved <= block_size_) {
        for (size_t i = 0; i < blocks_.size() && block_index == SIZE_MAX; ++i) {
            Block* b = blocks_[i].get();
            if (!b || b->dedicated || b->usage != usage) continue;
            for (auto& [off, len] : b->free)
                if (len >= reserved) {
                    block_index = i;
                    offset = off;
                    break;
                }
        }
        if (block_index == SIZE_MAX) block_index = create_block(block_size_, usage, false, name);
    } else {
        block_index = create_block(reserved, usage, true, name);
    }
    Block& b = *blocks_[block_index];
    auto it = b.free.find(offset);
    VkDeviceSize len = it->second;
    b.free.erase(it);
    if (len > reserved) b.free[offset + reserved] = len - reserved;

    stats_.used_bytes += reserved;
    stats_.peak_used_bytes = std::max(stats_.peak_used_bytes, stats_.used_bytes);
    if (is_device(usage)) {
        stats_.device_used_bytes += reserved;
        stats_.peak_device_used_bytes = std::max(stats_.peak_device_used_bytes, stats_.device_used_bytes);
    }

    Buffer out;
    out.allocator_ = this;
    out.block_ = block_index;
    out.buffer_ = b.buffer.get();
    out.offset_ = offset;
    out.size_ = size;
    out.reserved_ = reserved;
    out.mapped_ = b.mapped ? static_cast<uint8_t*>(b.mapped) + offset : nullptr;
    out.name_ = std::move(name);
    return out;
}

void Allocator::release(Buffer& buf) {
    std::lock_guard lock(mutex_);
    Block& b = *blocks_.at(buf.block_);
    stats_.used_bytes -= buf.reserved_;
    if (is_device(b.usage)) stats_.device_used_bytes -= buf.reserved_;
    if (b.dedicated) {
        b.buffer.reset();
        if (b.mapped) vkUnmapMemory(device_.get(), b.memory);
        vkFreeMemory(device_.get(), b.memory, nullptr);
        stats_.reserved_bytes -= b.memory_bytes;
        --stats_.blocks;
        blocks_[buf.block_].reset();
        return;
    }
    auto [it, inserted] = b.free.emplace(buf.offset_, buf.reserved_);
    (void)inserted;
    auto next = std::next(it);
    if (next != b.free.end() && it->first + it->second == next->first) {
        it->second += next->second;
        b.free.erase(next);
    }
    if (it != b.free.begin()) {
        auto prev = std::prev(it);
        if (prev->first + prev->second == it->first) {
            prev->second += it->second;
            b.free.erase(it);
        }
    }
}

}  // namespace vkllm
