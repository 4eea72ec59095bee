// Text between the C API (UTF-8) and Java (UTF-16 Strings).
//
// JNI's own *StringUTF* functions speak *modified* UTF-8: they write a character outside the BMP
// (an emoji) as two 3-byte surrogates and NUL as two bytes, and they expect the same on input, so
// a 4-byte UTF-8 character from the model would reach Java mangled (or crash -Xcheck:jni). These
// convert real UTF-8 to and from UTF-16, as Java's own UTF_8 charset does; Java Strings are made
// and read through them, and checked where they become C strings.
#pragma once

#include "embed/jni/jni_support.h"

#include <jni.h>
#include <vkllm/vkllm.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
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

static_assert(std::is_same_v<jchar, uint16_t>, "jchar is a UTF-16 code unit");

// A Java String of `len` bytes of UTF-8; null with an exception pending when the JVM is out of memory.
jstring new_string(JNIEnv* env, const char* utf8, size_t len, std::vector<jchar>& scratch);
jstring new_string(JNIEnv* env, const std::string& utf8);

// The UTF-8 of a Java String; false with an exception pending.
bool utf8_of(JNIEnv* env, jstring s, std::string& out);

// The UTF-8 of a String that becomes a C string: an embedded NUL would silently cut it short,
// so it is refused. `what` names the argument in the message.
bool c_string_of(JNIEnv* env, jstring s, std::string& out, const char* what);

// A params string that may be null (the C default). Not std::optional<std::string>: GCC 12 at -O3
// warns of an uninitialized string inside one (a false positive, but the build uses -Werror).
struct OptionalCString {
    bool present = false;
    std::string value;
    const char* c_str() const { return present ? value.c_str() : nullptr; }
};

// As c_string_of, for the optional strings of the params (null stays null).
bool optional_c_string_of(JNIEnv* env, jstring s, OptionalCString& out, const char* what);

// The elements of a String[] (null: none); false with an exception pending.
bool c_strings_of(JNIEnv* env, jobjectArray array, std::vector<std::string>& out, const char* what);

// The UTF-8 of each element of a String[] that the C API takes with lengths (so a NUL is
// text like any other); false with an exception pending, a NullPointerException naming the element
// (`what`[i]) for a null one.
bool utf8_strings_of(JNIEnv* env, jobjectArray array, std::vector<std::string>& out, const char* what);

// The pointers and lengths of `strings`, as vkllm_embed_batch and vkllm_rerank take them.
struct TextList {
    std::vector<const char*> ptrs;
    std::vector<size_t> lens;
    explicit TextList(const std::vector<std::string>& strings) {
        for (const std::string& s : strings) {
            ptrs.push_back(s.data());
            lens.push_back(s.size());
        }
    }
};

// A buffer-filling C call (detokenize, chat template) made twice when the first guess is too
// small; the text, or nullopt with a VkllmException pending.
template <typename Call>
std::optional<std::string> fill_text(JNIEnv* env, size_t guess, Call&& call) {
    std::string buf(guess + 1, '\0');
    size_t len = 0;
    vkllm_status st = call(buf.data(), buf.size(), &len);
    if (st == VKLLM_ERR_BUFFER_TOO_SMALL) {
        buf.assign(len + 1, '\0');
        st = call(buf.data(), buf.size(), &len);
    }
    if (st != VKLLM_OK) {
        throw_status(env, st);
        return std::nullopt;
    }
    buf.resize(len);
    return buf;
}

}  // namespace vkllm::jni
