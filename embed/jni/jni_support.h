// libvkllm_jni.so: the native methods of dev.vkllm.Native, each a thin call of the C API
// (include/vkllm/vkllm.h). The Java classes own the concurrency rules (who may free a handle
// when); this library owns the crossing itself: text in real UTF-8 both ways (jni_text), every Java
// exception raised inside a callback stopped, kept and rethrown unchanged after the C call returns
// (jni_callbacks), every C failure turned into a VkllmException carrying vkllm_last_error() of this
// thread, and no C++ exception ever unwinding into the JVM (here). The natives themselves are in
// jni_model.cpp and jni_session.cpp; JNI_OnLoad and the library's defaults in jni_support.cpp.
#pragma once

#include <jni.h>
#include <vkllm/vkllm.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <new>

namespace vkllm::jni {

// Looked up once in JNI_OnLoad: FindClass from a callback would use the wrong class loader on
// Android (the system one, which does not know dev.vkllm), and lookups per token cost time.
struct JavaRefs {
    jclass vkllm_exception = nullptr;
    jmethodID vkllm_exception_init = nullptr;
    jclass model_info = nullptr;
    jmethodID model_info_init = nullptr;
    jclass generation_stats = nullptr;
    jmethodID generation_stats_init = nullptr;
    jmethodID on_token = nullptr;
    jmethodID on_progress = nullptr;
    jmethodID on_log = nullptr;
    jobject log_levels[3] = {};  // LogListener.Level.INFO, WARNING, ERROR
    jfieldID sampling_fields[11] = {};  // GenerateParams' fields, as kSamplingFields lists them
    jfieldID sampling_stop = nullptr;  // GenerateParams.stop (String[])
    jfieldID sampling_grammar = nullptr, sampling_json_schema = nullptr;  // String, null when unset
};
extern JavaRefs refs;

// dev.vkllm.GenerateParams is vkllm_sampling as a Java object: each field's Java name and its place
// in the struct. The one list both directions (the defaults into Java, the values into C) read.
struct SamplingField {
    const char* name;
    char kind;  // 'F' float, 'I' int32_t, 'J' uint64_t (the seed: -1 is VKLLM_SEED_RANDOM), 'Z' bool
    size_t offset;
};
inline constexpr SamplingField kSamplingFields[] = {
    {"temperature", 'F', offsetof(vkllm_sampling, temperature)},
    {"topK", 'I', offsetof(vkllm_sampling, top_k)},
    {"topP", 'F', offsetof(vkllm_sampling, top_p)},
    {"minP", 'F', offsetof(vkllm_sampling, min_p)},
    {"repeatPenalty", 'F', offsetof(vkllm_sampling, repeat_penalty)},
    {"repeatLastN", 'I', offsetof(vkllm_sampling, repeat_last_n)},
    {"presencePenalty", 'F', offsetof(vkllm_sampling, presence_penalty)},
    {"frequencyPenalty", 'F', offsetof(vkllm_sampling, frequency_penalty)},
    {"nPredict", 'I', offsetof(vkllm_sampling, n_predict)},
    {"seed", 'J', offsetof(vkllm_sampling, seed)},
    {"ignoreEos", 'Z', offsetof(vkllm_sampling, ignore_eos)},
};

// The JVM that loaded the library (JNI_OnLoad): the log callback attaches the library's threads to it.
extern JavaVM* java_vm;

// Throws `class_name` with `message`, unless an exception is already pending.
void throw_java(JNIEnv* env, const char* class_name, const char* message);

// Throws VkllmException for a failed C call; must run before any other vkllm call on this
// thread, which would replace vkllm_last_error().
void throw_status(JNIEnv* env, vkllm_status status);

// Runs the body of a native method: a C++ exception (only std::bad_alloc is possible: the C
// API itself never throws) becomes a Java exception instead of unwinding through the JVM.
template <typename T, typename F>
T guarded(JNIEnv* env, T on_failure, F&& body) {
    try {
        return body();
    } catch (const std::bad_alloc&) {
        throw_java(env, "java/lang/OutOfMemoryError", "out of native memory in libvkllm_jni");
    } catch (const std::exception& e) {
        throw_java(env, "java/lang/RuntimeException", e.what());
    } catch (...) {
        throw_java(env, "java/lang/RuntimeException", "unknown C++ exception in libvkllm_jni");
    }
    return on_failure;
}

inline vkllm_model* model_of(jlong h) { return reinterpret_cast<vkllm_model*>(static_cast<intptr_t>(h)); }

inline vkllm_session* session_of(jlong h) { return reinterpret_cast<vkllm_session*>(static_cast<intptr_t>(h)); }

inline jlong handle_of(const void* p) { return static_cast<jlong>(reinterpret_cast<intptr_t>(p)); }

}  // namespace vkllm::jni
