// Move-only owner of one Vulkan object created from a VkDevice. The destroy function is stored
// with the handle so one template serves every object type without a wrapper class per type.
#pragma once

#include <volk.h>

#include <utility>

namespace vkllm {

template <typename H>
class Unique {
public:
    using Destroy = void (*)(VkDevice, H, const VkAllocationCallbacks*);

    Unique() = default;
    Unique(VkDevice device, H handle, Destroy destroy) : device_(device), handle_(handle), destroy_(destroy) {}
    Unique(const Unique&) = delete;
    Unique& operator=(const Unique&) = delete;
    Unique(Unique&& o) noexcept { swap(o); }
    Unique& operator=(Unique&& o) noexcept {
        if (this != &o) {
            reset();
            swap(o);
        }
        return *this;
    }
    ~Unique() { reset(); }

    H get() const { return handle_; }
    explicit operator bool() const { return handle_ != VK_NULL_HANDLE; }
    void reset() {
        if (handle_ != VK_NULL_HANDLE) destroy_(device_, handle_, nullptr);
        handle_ = VK_NULL_HANDLE;
    }

private:
    void swap(Unique& o) noexcept {
        std::swap(device_, o.device_);
        std::swap(handle_, o.handle_);
        std::swap(destroy_, o.destroy_);
    }
    VkDevice device_ = VK_NULL_HANDLE;
    H handle_ = VK_NULL_HANDLE;
    Destroy destroy_ = nullptr;
};

}  // namespace vkllm
