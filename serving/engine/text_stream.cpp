#include "serving/engine/text_stream.h"

#include <algorithm>

namespace vkllm::engine {

namespace {

// Length of a UTF-8 sequence from its lead byte; 0 for a continuation or invalid lead byte.
size_t sequence_length(unsigned char c) {
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;
}

bool continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

}  // namespace

size_t incomplete_utf8_tail(std::string_view s) {
    // Look back at most 3 bytes for a lead byte whose sequence runs past the end.
    for (size_t back = 1; back <= std::min<size_t>(3, s.size()); ++back) {
        const unsigned char c = static_cast<unsigned char>(s[s.size() - back]);
        if (continuation(c)) continue;
        const size_t len = sequence_length(c);
        return len > back ? back : 0;
    }
    return 0;
}

std::string sanitize_utf8(std::string_view s) {
    // Each maximal invalid subpart becomes one U+FFFD (the WHATWG / Unicode recommendation): a
    // byte that cannot start a character alone, or a valid start cut short by a wrong byte.
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        const unsigned char c = static_cast<unsigned char>(s[i]);
        const size_t len = sequence_length(c);
        size_t good = len > 0 ? 1 : 0;  // bytes that belong to a well-formed prefix
        while (good > 0 && good < len && i + good < s.size()) {
            const unsigned char b = static_cast<unsigned char>(s[i + good]);
            // The second byte's range excludes overlong forms, surrogates and code points past U+10FFFF.
            unsigned char lo = 0x80, hi = 0xBF;
            if (good == 1) {
                if (c == 0xE0) lo = 0xA0;
                if (c == 0xED) hi = 0x9F;
                if (c == 0xF0) lo = 0x90;
                if (c == 0xF4) hi = 0x8F;
            }
            if (b < lo || b > hi) break;
            ++good;
        }
        if (len > 0 && good == len) {
            out.append(s.substr(i, len));
            i += len;
        } else {
            out += "\xEF\xBF\xBD";
            i += std::max<size_t>(good, 1);
        }
    }
    return out;
}

TextStream::TextStream(std::vector<std::string> stop) : stop_(std::move(stop)) {
    stop_.erase(std::remove(stop_.begin(), stop_.end(), std::string()), stop_.end());
}

std::string TextStream::push(std::string_view piece) {
    if (stopped_) return {};
    pending_ += piece;
    // The earliest stop string wins; the text before it is released, the rest dropped.
    size_t cut = std::string::npos;
    for (const std::string& s : stop_)
        if (const size_t at = pending_.find(s); at < cut) {
            cut = at;
            matched_ = s;
        }
    if (cut != std::string::npos) {
        stopped_ = true;
        std::string out = sanitize_utf8(std::string_view(pending_).substr(0, cut));
        pending_.clear();
        return out;
    }
    // Hold back the longest tail that is a proper prefix of some stop string, and an unfinished
    // UTF-8 character.
    size_t hold = 0;
    for (const std::string& s : stop_)
        for (size_t len = std::min(s.size() - 1, pending_.size()); len > hold; --len)
            if (std::string_view(pending_).substr(pending_.size() - len) == std::string_view(s).substr(0, len)) {
                hold = len;
                break;
            }
    const size_t release = pending_.size() - hold;
    const size_t keep_utf8 = incomplete_utf8_tail(std::string_view(pending_).substr(0, release));
    std::string out = pending_.substr(0, release - keep_utf8);
    pending_.erase(0, release - keep_utf8);
    return sanitize_utf8(out);
}

std::string TextStream::flush() {
    std::string out = sanitize_utf8(pending_);
    pending_.clear();
    return out;
}

}  // namespace vkllm::engine
