// How deep the parser and the interpreter may recurse: each measures the thread's stack when it
// starts and stops with an Error before using half of what was left, whatever the thread's stack
// size (a 512 KiB worker thread included) and whatever a frame costs (sanitizer builds are fat).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace vkllm::chat_template::jinja {

class StackBudget {
public:
    StackBudget();  // measures from the caller's frame
    // Throws Error("<what> nested too deeply ...") when the current frame is past the budget.
    void check(const char* what) const;

private:
    uintptr_t base_;
    size_t budget_;
};

}  // namespace vkllm::chat_template::jinja
