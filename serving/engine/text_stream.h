// The text side of one generation: token pieces in, text out in whole UTF-8 characters, with
// stop strings cut out. Text that could still be the start of a stop string is held back until
// the next pieces decide it, so a client never sees part of a stop string.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace vkllm::engine {

class TextStream {
public:
    explicit TextStream(std::vector<std::string> stop);

    // Adds a token's piece; returns the text that can be released now. After a stop string has
    // been found, stopped() is true and the text up to it has been released.
    std::string push(std::string_view piece);
    // The rest at the end of generation: held-back text, an incomplete trailing UTF-8 sequence
    // replaced by U+FFFD.
    std::string flush();
    bool stopped() const { return stopped_; }
    // The stop string that was found (the earliest in the text; "" before).
    const std::string& matched() const { return matched_; }

private:
    std::vector<std::string> stop_;
    std::string matched_;
    std::string pending_;
    bool stopped_ = false;
};

// Bytes at the end of `s` that begin a UTF-8 sequence which is not complete yet (0..3).
size_t incomplete_utf8_tail(std::string_view s);
// `s` with every invalid UTF-8 sequence replaced by U+FFFD (JSON needs valid UTF-8).
std::string sanitize_utf8(std::string_view s);

}  // namespace vkllm::engine
