// Python str semantics over UTF-8: Python counts, indexes and slices code points, and its
// whitespace and case rules are Unicode's. Invalid UTF-8 bytes count as one character each.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vkllm::chat_template::jinja::pystr {

// The code points of `s` (an invalid byte becomes its own value 0xDC80+byte, as Python's
// surrogateescape would, so that encode(decode(s)) == s).
std::vector<uint32_t> decode(std::string_view s);
std::string encode(const std::vector<uint32_t>& cps, size_t begin = 0, size_t end = SIZE_MAX);
void append_utf8(std::string& out, uint32_t cp);
size_t length(std::string_view s);  // code points
bool is_ascii(std::string_view s);

bool is_space(uint32_t cp);  // str.isspace()
uint32_t to_upper(uint32_t cp);
uint32_t to_lower(uint32_t cp);
bool is_alpha(uint32_t cp);  // cased letters and other letters (approximation of str.isalpha)
bool is_digit(uint32_t cp);
bool is_alnum(uint32_t cp);

std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string capitalize(std::string_view s);  // str.capitalize
std::string title(std::string_view s);  // str.title

// strip/lstrip/rstrip: `chars` absent: whitespace.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split(sep, maxsplit): sep absent: runs of whitespace, no empty pieces.
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> splitlines(std::string_view s, bool keepends = false);
std::string replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count);
// str.find / str.rfind: the code point index of the first (last) match, -1 when none; str.count.
int64_t find(std::string_view s, std::string_view sub, bool reverse = false);
int64_t count(std::string_view s, std::string_view sub);

}  // namespace vkllm::chat_template::jinja::pystr
