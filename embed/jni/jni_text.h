// Text between the C API (UTF-8) and Java (UTF-16 Strings).
//
// JNI's own *StringUTF* functions speak *modified* UTF-8: they write a character outside the BMP
// (an emoji) as two 3-byte surrogates and NUL as two bytes, and they expect the same on input, so
// a 4-byte UTF-8 character from the model would reach Java mangled (or crash -Xcheck:jni). These
// convert real UTF-8 to and from UTF-16, as Java's own UTF_8 charset does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace vkllm::jni {

// Appends the UTF-16 code units of `len` bytes of UTF-8 to `out`. Ill-formed bytes become U+FFFD
// exactly as new String(bytes, UTF_8) replaces them (one per maximal subpart, the Unicode
// recommendation, except that a surrogate written in 3 bytes is one U+FFFD), so the library's
// bytes never make a String other than the one Java itself would.
void utf8_to_utf16(const char* utf8, size_t len, std::vector<uint16_t>& out);

// Appends the UTF-8 of `n` UTF-16 code units to `out`. An unpaired surrogate becomes '?', as
// String.getBytes(UTF_8) writes it.
void utf16_to_utf8(const uint16_t* utf16, size_t n, std::string& out);

}  // namespace vkllm::jni
