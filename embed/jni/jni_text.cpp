#include "embed/jni/jni_text.h"

namespace vkllm::jni {

namespace {

void put_code_point(uint32_t cp, std::vector<uint16_t>& out) {
    if (cp < 0x10000) {
        out.push_back(uint16_t(cp));
    } else {
        cp -= 0x10000;
        out.push_back(uint16_t(0xD800 + (cp >> 10)));
        out.push_back(uint16_t(0xDC00 + (cp & 0x3FF)));
    }
}

}  // namespace

void utf8_to_utf16(const char* utf8, size_t len, std::vector<uint16_t>& out) {
    const auto* s = reinterpret_cast<const unsigned char*>(utf8);
    constexpr uint16_t replacement = 0xFFFD;
    size_t i = 0;
    while (i < len) {
        const unsigned b0 = s[i];
        if (b0 < 0x80) {
            out.push_back(uint16_t(b0));
            ++i;
            continue;
        }
        // The well-formed sequences (Unicode table 3-7): the lead byte fixes the length and the
        // range of the second byte, which is what excludes overlong forms, surrogates and code
        // points above U+10FFFF.
        int trail = 0;
        unsigned lo = 0x80, hi = 0xBF;
        uint32_t cp = 0;
        if (b0 >= 0xC2 && b0 <= 0xDF) {
            trail = 1;
            cp = b0 & 0x1F;
        } else if (b0 >= 0xE0 && b0 <= 0xEF) {
            trail = 2;
            cp = b0 & 0x0F;
            if (b0 == 0xE0) lo = 0xA0;
            // 0xED 0xA0..0xBF would be a surrogate; Java's decoder reads such a sequence whole
            // and replaces it with one U+FFFD (below), not one per byte.
        } else if (b0 >= 0xF0 && b0 <= 0xF4) {
            trail = 3;
            cp = b0 & 0x07;
            if (b0 == 0xF0) lo = 0x90;
            if (b0 == 0xF4) hi = 0x8F;
        } else {
            out.push_back(replacement);
            ++i;
            continue;
        }
        size_t j = i + 1;
        bool ok = true;
        for (int k = 0; k < trail; ++k, ++j) {
            if (j >= len || s[j] < lo || s[j] > hi) {
                ok = false;
                break;
            }
            cp = (cp << 6) | (s[j] & 0x3F);
            lo = 0x80;
            hi = 0xBF;
        }
        // A broken sequence is replaced up to (not including) the byte that broke it, which is
        // then read again as the start of whatever follows.
        if (ok && !(cp >= 0xD800 && cp <= 0xDFFF)) {
            put_code_point(cp, out);
        } else {
            out.push_back(replacement);
        }
        i = j;
    }
}

void utf16_to_utf8(const uint16_t* utf16, size_t n, std::string& out) {
    for (size_t i = 0; i < n; ++i) {
        uint32_t cp = utf16[i];
        if (cp >= 0xD800 && cp <= 0xDFFF) {
            if (cp <= 0xDBFF && i + 1 < n && utf16[i + 1] >= 0xDC00 && utf16[i + 1] <= 0xDFFF) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (utf16[i + 1] - 0xDC00);
                ++i;
            } else {
                out.push_back('?');
                continue;
            }
        }
        if (cp < 0x80) {
            out.push_back(char(cp));
        } else if (cp < 0x800) {
            out.push_back(char(0xC0 | (cp >> 6)));
            out.push_back(char(0x80 | (cp & 0x3F)));
        } else if (cp < 0x10000) {
            out.push_back(char(0xE0 | (cp >> 12)));
            out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
            out.push_back(char(0x80 | (cp & 0x3F)));
        } else {
            out.push_back(char(0xF0 | (cp >> 18)));
            out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
            out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
            out.push_back(char(0x80 | (cp & 0x3F)));
        }
    }
}

jstring new_string(JNIEnv* env, const char* utf8, size_t len, std::vector<jchar>& scratch) {
    scratch.clear();
    utf8_to_utf16(utf8, len, scratch);
    static const jchar none = 0;
    return env->NewString(scratch.empty() ? &none : scratch.data(), jsize(scratch.size()));
}

jstring new_string(JNIEnv* env, const std::string& utf8) {
    std::vector<jchar> scratch;
    return new_string(env, utf8.data(), utf8.size(), scratch);
}

bool utf8_of(JNIEnv* env, jstring s, std::string& out) {
    out.clear();
    const jsize n = env->GetStringLength(s);
    std::vector<jchar> units(size_t(n) + 1);
    env->GetStringRegion(s, 0, n, units.data());
    if (env->ExceptionCheck()) return false;
    utf16_to_utf8(units.data(), size_t(n), out);
    return true;
}

bool c_string_of(JNIEnv* env, jstring s, std::string& out, const char* what) {
    if (!s) {
        throw_java(env, "java/lang/NullPointerException", what);
        return false;
    }
    if (!utf8_of(env, s, out)) return false;
    if (out.find('\0') != std::string::npos) {
        const std::string msg = std::string(what) + " contains a NUL character (U+0000)";
        throw_java(env, "java/lang/IllegalArgumentException", msg.c_str());
        return false;
    }
    return true;
}

bool optional_c_string_of(JNIEnv* env, jstring s, OptionalCString& out, const char* what) {
    out.present = s != nullptr;
    return !s || c_string_of(env, s, out.value, what);
}

bool c_strings_of(JNIEnv* env, jobjectArray array, std::vector<std::string>& out, const char* what) {
    out.clear();
    if (!array) return true;
    const jsize n = env->GetArrayLength(array);
    out.resize(size_t(n));
    for (jsize i = 0; i < n; ++i) {
        auto s = static_cast<jstring>(env->GetObjectArrayElement(array, i));
        if (env->ExceptionCheck()) return false;
        const bool ok = c_string_of(env, s, out[size_t(i)], what);
        env->DeleteLocalRef(s);
        if (!ok) return false;
    }
    return true;
}

bool utf8_strings_of(JNIEnv* env, jobjectArray array, std::vector<std::string>& out, const char* what) {
    out.clear();
    if (!array) {
        throw_java(env, "java/lang/NullPointerException", what);
        return false;
    }
    const jsize n = env->GetArrayLength(array);
    out.resize(size_t(n));
    for (jsize i = 0; i < n; ++i) {
        auto s = static_cast<jstring>(env->GetObjectArrayElement(array, i));
        if (env->ExceptionCheck()) return false;
        if (!s) {
            const std::string msg = std::string(what) + "[" + std::to_string(i) + "] is null";
            throw_java(env, "java/lang/NullPointerException", msg.c_str());
            return false;
        }
        const bool ok = utf8_of(env, s, out[size_t(i)]);
        env->DeleteLocalRef(s);
        if (!ok) return false;
    }
    return true;
}

}  // namespace vkllm::jni

using namespace vkllm::jni;

extern "C" {

// ---- the text conversions, for the tests -----------------------------------------------------

JNIEXPORT jstring JNICALL Java_dev_vkllm_Native_decodeUtf8(JNIEnv* env, jclass, jbyteArray utf8) {
    return guarded(env, jstring(nullptr), [&]() -> jstring {
        const jsize n = env->GetArrayLength(utf8);
        std::string bytes(size_t(n), '\0');
        env->GetByteArrayRegion(utf8, 0, n, reinterpret_cast<jbyte*>(bytes.data()));
        if (env->ExceptionCheck()) return nullptr;
        return new_string(env, bytes);
    });
}

JNIEXPORT jbyteArray JNICALL Java_dev_vkllm_Native_encodeUtf8(JNIEnv* env, jclass, jstring text) {
    return guarded(env, jbyteArray(nullptr), [&]() -> jbyteArray {
        std::string bytes;
        if (!utf8_of(env, text, bytes)) return nullptr;
        jbyteArray out = env->NewByteArray(jsize(bytes.size()));
        if (out) env->SetByteArrayRegion(out, 0, jsize(bytes.size()), reinterpret_cast<const jbyte*>(bytes.data()));
        return out;
    });
}

}  // extern "C"
