#include "serving/chat_template/jinja/stack.h"

#include "serving/chat_template/jinja/value.h"

#include <pthread.h>

namespace vkllm::chat_template::jinja {

namespace {

// The current frame's address (the real stack, even where ASan moves locals to a fake stack).
__attribute__((noinline)) uintptr_t stack_address() { return reinterpret_cast<uintptr_t>(__builtin_frame_address(0)); }

}  // namespace

StackBudget::StackBudget() : base_(stack_address()), budget_(size_t(256) << 10) {
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
        void* low = nullptr;
        size_t size = 0;
        if (pthread_attr_getstack(&attr, &low, &size) == 0 && low && base_ > uintptr_t(low))
            budget_ = (base_ - uintptr_t(low)) / 2;
        pthread_attr_destroy(&attr);
    }
}

void StackBudget::check(const char* what) const {
    const uintptr_t here = stack_address();
    if (base_ > here && base_ - here > budget_)
        throw Error(std::string(what) + " nested too deeply for this thread's stack (" + std::to_string(budget_ >> 10) +
                    " KiB available)");
}

}  // namespace vkllm::chat_template::jinja
