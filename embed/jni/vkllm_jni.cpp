// libvkllm_jni.so: the native methods of dev.vkllm.Native, each a thin call of the C API
// (include/vkllm/vkllm.h). The Java classes own the concurrency rules (who may free a handle
// when); this file owns the crossing itself: text in real UTF-8 both ways, every Java exception
// raised inside a callback stopped, kept and rethrown unchanged after the C call returns, every
// C failure turned into a VkllmException carrying vkllm_last_error() of this thread, and no
// C++ exception ever unwinding into the JVM.
#include "embed/jni/jni_text.h"

#include <jni.h>
#include <vkllm/vkllm.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

using vkllm::jni::utf16_to_utf8;
using vkllm::jni::utf8_to_utf16;

static_assert(std::is_same_v<jchar, uint16_t>, "jchar is a UTF-16 code unit");

namespace {

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
    jfieldID sampling_stop = nullptr;   // GenerateParams.stop (String[])
    jfieldID sampling_grammar = nullptr, sampling_json_schema = nullptr;  // String, null when unset
};
JavaRefs refs;

// dev.vkllm.GenerateParams is vkllm_sampling as a Java object: each field's Java name and its place
// in the struct. The one list both directions (the defaults into Java, the values into C) read.
struct SamplingField {
    const char* name;
    char kind;  // 'F' float, 'I' int32_t, 'J' uint64_t (the seed: -1 is VKLLM_SEED_RANDOM), 'Z' bool
    size_t offset;
};
constexpr SamplingField kSamplingFields[] = {
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
JavaVM* java_vm = nullptr;

// ---- text ------------------------------------------------------------------------------------

// A Java String of `len` bytes of UTF-8; null with an exception pending when the JVM is out of memory.
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

void throw_java(JNIEnv* env, const char* class_name, const char* message) {
    if (env->ExceptionCheck()) return;  // the first problem is the one to report
    jclass c = env->FindClass(class_name);
    if (c) env->ThrowNew(c, message);
}

// The UTF-8 of a Java String; false with an exception pending.
bool utf8_of(JNIEnv* env, jstring s, std::string& out) {
    out.clear();
    const jsize n = env->GetStringLength(s);
    std::vector<jchar> units(size_t(n) + 1);
    env->GetStringRegion(s, 0, n, units.data());
    if (env->ExceptionCheck()) return false;
    utf16_to_utf8(units.data(), size_t(n), out);
    return true;
}

// The UTF-8 of a String that becomes a C string: an embedded NUL would silently cut it short,
// so it is refused. `what` names the argument in the message.
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

// A params string that may be null (the C default). Not std::optional<std::string>: GCC 12 at -O3
// warns of an uninitialized string inside one (a false positive, but the build uses -Werror).
struct OptionalCString {
    bool present = false;
    std::string value;
    const char* c_str() const { return present ? value.c_str() : nullptr; }
};

// As c_string_of, for the optional strings of the params (null stays null).
bool optional_c_string_of(JNIEnv* env, jstring s, OptionalCString& out, const char* what) {
    out.present = s != nullptr;
    return !s || c_string_of(env, s, out.value, what);
}

// The elements of a String[] (null: none); false with an exception pending.
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

// The UTF-8 of each element of a String[] that the C API takes with lengths (so a NUL is
// text like any other); false with an exception pending, a NullPointerException naming the element
// (`what`[i]) for a null one.
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

// ---- failures --------------------------------------------------------------------------------

// Throws VkllmException for a failed C call; must run before any other vkllm call on this
// thread, which would replace vkllm_last_error().
void throw_status(JNIEnv* env, vkllm_status status) {
    if (env->ExceptionCheck()) return;
    const char* last = vkllm_last_error();
    const std::string message = *last ? std::string(last) : std::string(vkllm_status_name(status));
    jstring jmessage = new_string(env, message);
    if (!jmessage) return;
    jobject e = env->NewObject(refs.vkllm_exception, refs.vkllm_exception_init, jmessage, jint(status));
    env->DeleteLocalRef(jmessage);
    if (e) env->Throw(static_cast<jthrowable>(e));
}

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

vkllm_model* model_of(jlong h) {
    return reinterpret_cast<vkllm_model*>(static_cast<intptr_t>(h));
}

vkllm_session* session_of(jlong h) {
    return reinterpret_cast<vkllm_session*>(static_cast<intptr_t>(h));
}

jlong handle_of(const void* p) {
    return static_cast<jlong>(reinterpret_cast<intptr_t>(p));
}

// ---- callbacks -------------------------------------------------------------------------------
//
// Callbacks run on the thread of the native method that made the C call (the C API promises
// that), so its JNIEnv is the right one to use. A Java exception in a callback is taken out of
// the way (ExceptionOccurred + ExceptionClear) and the callback asks the C API to stop; the
// native method rethrows that very object once the C call has returned. Leaving it pending
// instead would make every later JNI call in the callback undefined.

struct PieceSink {
    JNIEnv* env = nullptr;
    jobject callback = nullptr;  // null: the text is only collected
    std::string text;            // everything generated, returned by generate()
    std::vector<jchar> scratch;
    jthrowable error = nullptr;  // thrown by the callback, or an OutOfMemoryError of ours
    bool out_of_memory = false;
};

int on_piece(const char* utf8, size_t len, void* user_data) noexcept {
    auto& sink = *static_cast<PieceSink*>(user_data);
    if (sink.error || sink.out_of_memory) return 1;
    JNIEnv* env = sink.env;
    try {
        sink.text.append(utf8, len);
        if (!sink.callback) return 0;
        jstring piece = new_string(env, utf8, len, sink.scratch);
        jboolean go_on = JNI_FALSE;
        if (piece) go_on = env->CallBooleanMethod(sink.callback, refs.on_token, piece);
        if (env->ExceptionCheck()) {
            sink.error = env->ExceptionOccurred();
            env->ExceptionClear();
        }
        // One local reference per piece would overflow the frame's table in a long generation.
        if (piece) env->DeleteLocalRef(piece);
        return sink.error || !go_on ? 1 : 0;
    } catch (...) {
        sink.out_of_memory = true;  // append or the scratch buffer: std::bad_alloc
        return 1;
    }
}

struct ProgressSink {
    JNIEnv* env = nullptr;
    jobject listener = nullptr;
    jthrowable error = nullptr;
};

int on_progress(float fraction, void* user_data) noexcept {
    auto& sink = *static_cast<ProgressSink*>(user_data);
    if (sink.error) return 1;
    JNIEnv* env = sink.env;
    const jboolean go_on = env->CallBooleanMethod(sink.listener, refs.on_progress, jfloat(fraction));
    if (env->ExceptionCheck()) {
        sink.error = env->ExceptionOccurred();
        env->ExceptionClear();
        return 1;
    }
    return go_on ? 0 : 1;
}

// The log callback, unlike the others, may run on the library's own threads (the engine's),
// which the JVM does not know: they are attached on their first message, as daemons (so that they
// never hold up the JVM's exit), and detached when they end.
struct ThreadAttachment {
    bool attached = false;
    ~ThreadAttachment() {
        if (attached) java_vm->DetachCurrentThread();
    }
};
thread_local ThreadAttachment this_thread_attachment;

JNIEnv* env_of_this_thread() {
    JNIEnv* env = nullptr;
    const jint got = java_vm->GetEnv(reinterpret_cast<void**>(&env), JNI_VERSION_1_6);
    if (got == JNI_OK) return env;
    if (got != JNI_EDETACHED) return nullptr;
    JavaVMAttachArgs args{JNI_VERSION_1_6, const_cast<char*>("vkllm"), nullptr};
#ifdef __ANDROID__
    // Android's jni.h declares the first parameter JNIEnv**, the JDK's void**.
    if (java_vm->AttachCurrentThreadAsDaemon(&env, &args) != JNI_OK) return nullptr;
#else
    if (java_vm->AttachCurrentThreadAsDaemon(reinterpret_cast<void**>(&env), &args) != JNI_OK) return nullptr;
#endif
    this_thread_attachment.attached = true;
    return env;
}

struct LogSink {
    jobject listener = nullptr;  // a global reference: used from any thread until the sink is freed
};

void on_log(vkllm_log_level level, const char* message, void* user_data) noexcept {
    const auto& sink = *static_cast<const LogSink*>(user_data);
    JNIEnv* env = env_of_this_thread();
    if (!env) return;
    try {
        // An attached thread has no native frame to drop local references with: each one is
        // deleted here, or it would live as long as the thread.
        std::vector<jchar> scratch;
        jstring text = new_string(env, message, strlen(message), scratch);
        const int i = level == VKLLM_LOG_ERROR ? 2 : level == VKLLM_LOG_WARNING ? 1 : 0;
        if (text) env->CallVoidMethod(sink.listener, refs.on_log, refs.log_levels[i], text);
        if (env->ExceptionCheck()) {
            // Nobody could catch it on the library's threads, and on a Java thread it would be
            // left pending in the middle of a C call: report it like an uncaught one and go on.
            env->ExceptionDescribe();
            env->ExceptionClear();
        }
        if (text) env->DeleteLocalRef(text);
    } catch (...) {
        // std::bad_alloc of the scratch buffer: a message lost, nothing worse.
    }
}

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

bool set_cached(JNIEnv* env, jclass& global, const char* name) {
    jclass local = env->FindClass(name);
    if (!local) return false;
    global = static_cast<jclass>(env->NewGlobalRef(local));
    env->DeleteLocalRef(local);
    return global != nullptr;
}

jmethodID method_of(JNIEnv* env, const char* class_name, const char* method, const char* signature) {
    jclass c = env->FindClass(class_name);
    if (!c) return nullptr;
    jmethodID id = env->GetMethodID(c, method, signature);
    env->DeleteLocalRef(c);
    return id;
}

}  // namespace

extern "C" {

JNIEXPORT jint JNICALL JNI_OnLoad(JavaVM* vm, void*) {
    JNIEnv* env = nullptr;
    if (vm->GetEnv(reinterpret_cast<void**>(&env), JNI_VERSION_1_6) != JNI_OK) return JNI_ERR;
    java_vm = vm;
    if (!set_cached(env, refs.vkllm_exception, "dev/vkllm/VkllmException") ||
        !set_cached(env, refs.model_info, "dev/vkllm/ModelInfo") ||
        !set_cached(env, refs.generation_stats, "dev/vkllm/GenerationStats"))
        return JNI_ERR;
    refs.vkllm_exception_init = env->GetMethodID(refs.vkllm_exception, "<init>", "(Ljava/lang/String;I)V");
    refs.model_info_init = env->GetMethodID(refs.model_info, "<init>",
                                            "(Ljava/lang/String;Ljava/lang/String;Ljava/lang/String;IIIIIIIIIIIJJJ"
                                            "ZIILjava/lang/String;I)V");
    refs.generation_stats_init = env->GetMethodID(refs.generation_stats, "<init>", "(IIIIDDDDI)V");
    refs.on_token = method_of(env, "dev/vkllm/TokenCallback", "onToken", "(Ljava/lang/String;)Z");
    refs.on_progress = method_of(env, "dev/vkllm/LoadProgress", "onProgress", "(F)Z");
    refs.on_log = method_of(env, "dev/vkllm/LogListener", "onLog", "(Ldev/vkllm/LogListener$Level;Ljava/lang/String;)V");
    if (!refs.vkllm_exception_init || !refs.model_info_init || !refs.generation_stats_init || !refs.on_token ||
        !refs.on_progress || !refs.on_log)
        return JNI_ERR;
    static_assert(std::size(kSamplingFields) == std::size(JavaRefs{}.sampling_fields));
    jclass params = env->FindClass("dev/vkllm/GenerateParams");
    if (!params) return JNI_ERR;
    for (size_t i = 0; i < std::size(kSamplingFields); ++i) {
        const char sig[2] = {kSamplingFields[i].kind, '\0'};
        refs.sampling_fields[i] = env->GetFieldID(params, kSamplingFields[i].name, sig);
        if (!refs.sampling_fields[i]) return JNI_ERR;
    }
    refs.sampling_stop = env->GetFieldID(params, "stop", "[Ljava/lang/String;");
    refs.sampling_grammar = env->GetFieldID(params, "grammar", "Ljava/lang/String;");
    refs.sampling_json_schema = env->GetFieldID(params, "jsonSchema", "Ljava/lang/String;");
    env->DeleteLocalRef(params);
    if (!refs.sampling_stop || !refs.sampling_grammar || !refs.sampling_json_schema) return JNI_ERR;
    jclass level = env->FindClass("dev/vkllm/LogListener$Level");
    if (!level) return JNI_ERR;
    const char* names[3] = {"INFO", "WARNING", "ERROR"};
    for (int i = 0; i < 3; ++i) {
        jfieldID f = env->GetStaticFieldID(level, names[i], "Ldev/vkllm/LogListener$Level;");
        jobject value = f ? env->GetStaticObjectField(level, f) : nullptr;
        if (!value) return JNI_ERR;
        refs.log_levels[i] = env->NewGlobalRef(value);
        env->DeleteLocalRef(value);
    }
    env->DeleteLocalRef(level);
    return JNI_VERSION_1_6;
}

// ---- library and defaults --------------------------------------------------------------------

JNIEXPORT jstring JNICALL Java_dev_vkllm_Native_version(JNIEnv* env, jclass) {
    return guarded(env, jstring(nullptr), [&] { return new_string(env, vkllm_version()); });
}

JNIEXPORT void JNICALL Java_dev_vkllm_Native_samplingDefaults(JNIEnv* env, jclass, jobject params) {
    const vkllm_sampling d = vkllm_sampling_default();
    const auto* base = reinterpret_cast<const unsigned char*>(&d);
    for (size_t i = 0; i < std::size(kSamplingFields); ++i) {
        const SamplingField& f = kSamplingFields[i];
        const jfieldID id = refs.sampling_fields[i];
        switch (f.kind) {
            case 'F': { float v; std::memcpy(&v, base + f.offset, sizeof v); env->SetFloatField(params, id, v); break; }
            case 'I': { int32_t v; std::memcpy(&v, base + f.offset, sizeof v); env->SetIntField(params, id, v); break; }
            case 'J': { uint64_t v; std::memcpy(&v, base + f.offset, sizeof v); env->SetLongField(params, id, jlong(v)); break; }
            case 'Z': { bool v; std::memcpy(&v, base + f.offset, sizeof v); env->SetBooleanField(params, id, v ? JNI_TRUE : JNI_FALSE); break; }
        }
    }
}

JNIEXPORT jintArray JNICALL Java_dev_vkllm_Native_modelDefaultInts(JNIEnv* env, jclass) {
    const vkllm_model_params d = vkllm_model_default_params();
    const jint v[] = {d.device_index, jint(d.n_ctx), jint(d.max_sessions), jint(d.kv_type), jint(d.ubatch),
                      d.validation ? 1 : 0};
    jintArray a = env->NewIntArray(6);
    if (a) env->SetIntArrayRegion(a, 0, 6, v);
    return a;
}

JNIEXPORT jboolean JNICALL Java_dev_vkllm_Native_sessionDefaultParseSpecial(JNIEnv*, jclass) {
    return vkllm_session_default_params().parse_special ? JNI_TRUE : JNI_FALSE;
}

// ---- models ----------------------------------------------------------------------------------

JNIEXPORT jlong JNICALL Java_dev_vkllm_Native_modelLoad(JNIEnv* env, jclass, jstring path, jint device_index,
                                                        jstring device_name, jstring caps, jint n_ctx,
                                                        jint max_sessions, jint kv_type, jint ubatch,
                                                        jstring chat_template, jstring cache_dir,
                                                        jboolean validation, jobject progress, jlong log_sink,
                                                        jstring pooling, jstring devices, jstring split,
                                                        jint kv_budget) {
    return guarded(env, jlong(0), [&]() -> jlong {
        std::string c_path;
        OptionalCString c_device, c_caps, c_template, c_cache, c_pooling, c_devices, c_split;
        if (!c_string_of(env, path, c_path, "path") ||
            !optional_c_string_of(env, device_name, c_device, "deviceName") ||
            !optional_c_string_of(env, caps, c_caps, "caps") ||
            !optional_c_string_of(env, chat_template, c_template, "chatTemplate") ||
            !optional_c_string_of(env, cache_dir, c_cache, "cacheDir") ||
            !optional_c_string_of(env, pooling, c_pooling, "pooling") ||
            !optional_c_string_of(env, devices, c_devices, "devices") ||
            !optional_c_string_of(env, split, c_split, "split"))
            return 0;
        // Java has no unsigned int: a negative count would wrap to billions in C; refuse it here
        // with the name Java knows it by.
        if (n_ctx < 0 || max_sessions < 0 || ubatch < 0 || kv_budget < 0) {
            throw_java(env, "java/lang/IllegalArgumentException",
                       "nCtx, maxSessions, ubatch and kvBudget must not be negative");
            return 0;
        }
        // The ordinal of ModelParams.KvType, whose order is vkllm_kv_type's (checked before the cast:
        // an int outside an enum's values is undefined behaviour in C++).
        if (kv_type < VKLLM_KV_F16 || kv_type > VKLLM_KV_Q8_0) {
            throw_java(env, "java/lang/IllegalArgumentException", "kvType is not a ModelParams.KvType");
            return 0;
        }
        vkllm_model_params p = vkllm_model_default_params();
        p.device_index = device_index;
        p.device_name = c_device.c_str();
        p.caps = c_caps.c_str();
        p.devices = c_devices.c_str();
        p.split = c_split.c_str();
        p.n_ctx = uint32_t(n_ctx);
        p.max_sessions = uint32_t(max_sessions);
        p.kv_type = static_cast<vkllm_kv_type>(kv_type);
        p.ubatch = uint32_t(ubatch);
        p.kv_budget = uint32_t(kv_budget);
        p.chat_template = c_template.c_str();
        p.cache_dir = c_cache.c_str();
        p.validation = validation == JNI_TRUE;
        p.pooling = c_pooling.c_str();
        if (log_sink != 0) {
            p.log = on_log;
            p.log_user_data = reinterpret_cast<LogSink*>(static_cast<intptr_t>(log_sink));
        }
        ProgressSink sink;
        if (progress) {
            sink.env = env;
            sink.listener = progress;
            p.progress = on_progress;
            p.progress_user_data = &sink;
        }
        vkllm_model* model = nullptr;
        const vkllm_status st = vkllm_model_load(c_path.c_str(), &p, &model);
        if (sink.error) {
            vkllm_model_free(model);  // NULL unless the listener threw on the last report
            env->Throw(sink.error);
            return 0;
        }
        if (st != VKLLM_OK) {
            throw_status(env, st);
            return 0;
        }
        return handle_of(model);
    });
}

JNIEXPORT void JNICALL Java_dev_vkllm_Native_modelFree(JNIEnv*, jclass, jlong model) {
    vkllm_model_free(model_of(model));
}

JNIEXPORT jlong JNICALL Java_dev_vkllm_Native_logSinkNew(JNIEnv* env, jclass, jobject listener) {
    return guarded(env, jlong(0), [&]() -> jlong {
        auto* sink = new LogSink;
        sink->listener = env->NewGlobalRef(listener);
        if (!sink->listener) {
            delete sink;
            return 0;  // OutOfMemoryError pending
        }
        return handle_of(sink);
    });
}

JNIEXPORT void JNICALL Java_dev_vkllm_Native_logSinkFree(JNIEnv* env, jclass, jlong sink_handle) {
    auto* sink = reinterpret_cast<LogSink*>(static_cast<intptr_t>(sink_handle));
    if (!sink) return;
    env->DeleteGlobalRef(sink->listener);
    delete sink;
}

JNIEXPORT jobject JNICALL Java_dev_vkllm_Native_modelInfo(JNIEnv* env, jclass, jlong model) {
    return guarded(env, jobject(nullptr), [&]() -> jobject {
        vkllm_model_info info{};
        info.struct_size = sizeof(info);
        const vkllm_status st = vkllm_model_get_info(model_of(model), &info);
        if (st != VKLLM_OK) {
            throw_status(env, st);
            return nullptr;
        }
        auto field = [&](const char* chars, size_t capacity) {
            return new_string(env, std::string(chars, strnlen(chars, capacity)));
        };
        jstring arch = field(info.architecture, sizeof(info.architecture));
        jstring device = arch ? field(info.device, sizeof(info.device)) : nullptr;
        jstring tmpl = device ? field(info.chat_template, sizeof(info.chat_template)) : nullptr;
        jstring pooling = tmpl ? field(info.pooling, sizeof(info.pooling)) : nullptr;
        if (!pooling) return nullptr;
        return env->NewObject(refs.model_info, refs.model_info_init, arch, device, tmpl, jint(info.n_vocab),
                              jint(info.n_layers), jint(info.dim), jint(info.n_heads), jint(info.n_kv_heads),
                              jint(info.head_dim), jint(info.n_ctx), jint(info.n_ctx_train), jint(info.max_sessions),
                              jint(info.bos_token), jint(info.eos_token), jlong(info.weights_bytes),
                              jlong(info.kv_cache_bytes), jlong(info.scratch_bytes),
                              info.embeddings ? JNI_TRUE : JNI_FALSE, jint(info.embedding_dim),
                              jint(info.max_embed_tokens), pooling, jint(info.kv_budget));
    });
}

JNIEXPORT jintArray JNICALL Java_dev_vkllm_Native_tokenize(JNIEnv* env, jclass, jlong model, jstring text,
                                                           jboolean add_special, jboolean parse_special) {
    return guarded(env, jintArray(nullptr), [&]() -> jintArray {
        std::string c_text;
        if (!utf8_of(env, text, c_text)) return nullptr;
        // About one token per 2 bytes in practice; the second call is rare.
        std::vector<int32_t> ids(c_text.size() / 2 + 8);
        size_t n = 0;
        vkllm_status st = vkllm_tokenize(model_of(model), c_text.data(), c_text.size(), add_special == JNI_TRUE,
                                         parse_special == JNI_TRUE, ids.data(), ids.size(), &n);
        if (st == VKLLM_ERR_BUFFER_TOO_SMALL) {
            ids.resize(n);
            st = vkllm_tokenize(model_of(model), c_text.data(), c_text.size(), add_special == JNI_TRUE,
                                parse_special == JNI_TRUE, ids.data(), ids.size(), &n);
        }
        if (st != VKLLM_OK) {
            throw_status(env, st);
            return nullptr;
        }
        jintArray out = env->NewIntArray(jsize(n));
        if (out && n > 0) env->SetIntArrayRegion(out, 0, jsize(n), reinterpret_cast<const jint*>(ids.data()));
        return out;
    });
}

JNIEXPORT jobjectArray JNICALL Java_dev_vkllm_Native_embedBatch(JNIEnv* env, jclass, jlong model,
                                                                 jobjectArray texts, jint normalize) {
    return guarded(env, jobjectArray(nullptr), [&]() -> jobjectArray {
        std::vector<std::string> c_texts;
        if (!utf8_strings_of(env, texts, c_texts, "texts")) return nullptr;
        const TextList list(c_texts);
        const size_t n = c_texts.size();
        size_t count = 0;
        // The size first (answered before anything runs), then the vectors, all in one call.
        vkllm_status st = vkllm_embed_batch(model_of(model), list.ptrs.data(), list.lens.data(), n, normalize,
                                            nullptr, 0, &count);
        std::vector<float> v(count);
        if (st == VKLLM_ERR_BUFFER_TOO_SMALL)
            st = vkllm_embed_batch(model_of(model), list.ptrs.data(), list.lens.data(), n, normalize, v.data(),
                                   v.size(), &count);
        if (st != VKLLM_OK) {
            throw_status(env, st);
            return nullptr;
        }
        const size_t dim = n > 0 ? count / n : 0;
        jclass float_array = env->FindClass("[F");
        if (!float_array) return nullptr;
        jobjectArray out = env->NewObjectArray(jsize(n), float_array, nullptr);
        env->DeleteLocalRef(float_array);
        if (!out) return nullptr;
        for (size_t i = 0; i < n; ++i) {
            jfloatArray row = env->NewFloatArray(jsize(dim));
            if (!row) return nullptr;
            if (dim > 0) env->SetFloatArrayRegion(row, 0, jsize(dim), v.data() + i * dim);
            env->SetObjectArrayElement(out, jsize(i), row);
            // One local reference per text would overflow the frame's table in a large batch.
            env->DeleteLocalRef(row);
            if (env->ExceptionCheck()) return nullptr;
        }
        return out;
    });
}

JNIEXPORT jfloatArray JNICALL Java_dev_vkllm_Native_rerank(JNIEnv* env, jclass, jlong model, jstring query,
                                                            jobjectArray documents) {
    return guarded(env, jfloatArray(nullptr), [&]() -> jfloatArray {
        std::string c_query;
        std::vector<std::string> c_documents;
        if (!query) {
            throw_java(env, "java/lang/NullPointerException", "query");
            return nullptr;
        }
        if (!utf8_of(env, query, c_query) || !utf8_strings_of(env, documents, c_documents, "documents"))
            return nullptr;
        const TextList list(c_documents);
        const size_t n = c_documents.size();
        std::vector<float> scores(n);
        const vkllm_status st = vkllm_rerank(model_of(model), c_query.data(), c_query.size(), list.ptrs.data(),
                                             list.lens.data(), n, scores.data());
        if (st != VKLLM_OK) {
            throw_status(env, st);
            return nullptr;
        }
        jfloatArray out = env->NewFloatArray(jsize(n));
        if (out && n > 0) env->SetFloatArrayRegion(out, 0, jsize(n), scores.data());
        return out;
    });
}

JNIEXPORT jstring JNICALL Java_dev_vkllm_Native_detokenize(JNIEnv* env, jclass, jlong model, jintArray tokens) {
    return guarded(env, jstring(nullptr), [&]() -> jstring {
        const jsize n = env->GetArrayLength(tokens);
        std::vector<int32_t> ids(size_t(n) + 1);
        env->GetIntArrayRegion(tokens, 0, n, reinterpret_cast<jint*>(ids.data()));
        if (env->ExceptionCheck()) return nullptr;
        const std::optional<std::string> text =
            fill_text(env, size_t(n) * 8 + 16, [&](char* buf, size_t capacity, size_t* len) {
                return vkllm_detokenize(model_of(model), ids.data(), size_t(n), buf, capacity, len);
            });
        return text ? new_string(env, *text) : nullptr;
    });
}

JNIEXPORT jstring JNICALL Java_dev_vkllm_Native_applyChatTemplate(JNIEnv* env, jclass, jlong model,
                                                                  jobjectArray roles, jobjectArray contents,
                                                                  jboolean add_generation_prompt) {
    return guarded(env, jstring(nullptr), [&]() -> jstring {
        std::vector<std::string> r, c;
        if (!c_strings_of(env, roles, r, "a message role") || !c_strings_of(env, contents, c, "a message content"))
            return nullptr;
        std::vector<vkllm_chat_message> messages(r.size());
        size_t guess = 64;
        for (size_t i = 0; i < r.size(); ++i) {
            messages[i] = {r[i].c_str(), c[i].c_str()};
            guess += r[i].size() + c[i].size() + 32;
        }
        const std::optional<std::string> text = fill_text(env, guess, [&](char* buf, size_t capacity, size_t* len) {
            return vkllm_apply_chat_template(model_of(model), messages.data(), messages.size(),
                                             add_generation_prompt == JNI_TRUE, buf, capacity, len);
        });
        return text ? new_string(env, *text) : nullptr;
    });
}

// ---- sessions --------------------------------------------------------------------------------

JNIEXPORT jlong JNICALL Java_dev_vkllm_Native_sessionNew(JNIEnv* env, jclass, jlong model, jboolean parse_special) {
    vkllm_session_params p = vkllm_session_default_params();
    p.parse_special = parse_special == JNI_TRUE;
    vkllm_session* session = nullptr;
    const vkllm_status st = vkllm_session_new(model_of(model), &p, &session);
    if (st != VKLLM_OK) {
        throw_status(env, st);
        return 0;
    }
    return handle_of(session);
}

JNIEXPORT void JNICALL Java_dev_vkllm_Native_sessionFree(JNIEnv*, jclass, jlong session) {
    vkllm_session_free(session_of(session));
}

JNIEXPORT void JNICALL Java_dev_vkllm_Native_sessionReset(JNIEnv* env, jclass, jlong session) {
    const vkllm_status st = vkllm_session_reset(session_of(session));
    if (st != VKLLM_OK) throw_status(env, st);
}

JNIEXPORT void JNICALL Java_dev_vkllm_Native_cancel(JNIEnv*, jclass, jlong session) {
    // Nothing to report: the Java side only calls it on a live handle, and a generation that
    // already ended is no failure.
    (void)vkllm_cancel(session_of(session));
}

JNIEXPORT jobject JNICALL Java_dev_vkllm_Native_stats(JNIEnv* env, jclass, jlong session) {
    vkllm_generation_stats s{};
    s.struct_size = sizeof(s);
    const vkllm_status st = vkllm_session_get_stats(session_of(session), &s);
    if (st != VKLLM_OK) {
        throw_status(env, st);
        return nullptr;
    }
    return env->NewObject(refs.generation_stats, refs.generation_stats_init, jint(s.prompt_tokens),
                          jint(s.cached_tokens), jint(s.generated_tokens), jint(s.n_past), jdouble(s.prompt_ms),
                          jdouble(s.generate_ms), jdouble(s.prompt_tokens_per_s), jdouble(s.generate_tokens_per_s),
                          jint(s.finish));
}

}  // extern "C"

namespace {

// GenerateParams read into a vkllm_sampling; the strings it points to live in `holder`. False with
// an exception pending when a string cannot be read.
struct SamplingHolder {
    std::vector<std::string> stops;
    std::vector<const char*> stop_ptrs;
    std::string gbnf, schema;
};
bool read_sampling(JNIEnv* env, jobject params, vkllm_sampling& smp, SamplingHolder& h) {
    jobjectArray stop = static_cast<jobjectArray>(env->GetObjectField(params, refs.sampling_stop));
    if (!c_strings_of(env, stop, h.stops, "a stop string")) return false;
    for (const std::string& s : h.stops) h.stop_ptrs.push_back(s.c_str());
    smp = vkllm_sampling_default();
    auto* base = reinterpret_cast<unsigned char*>(&smp);
    for (size_t i = 0; i < std::size(kSamplingFields); ++i) {
        const SamplingField& f = kSamplingFields[i];
        const jfieldID id = refs.sampling_fields[i];
        switch (f.kind) {
            case 'F': { const float v = env->GetFloatField(params, id); std::memcpy(base + f.offset, &v, sizeof v); break; }
            case 'I': { const int32_t v = env->GetIntField(params, id); std::memcpy(base + f.offset, &v, sizeof v); break; }
            case 'J': { const uint64_t v = uint64_t(env->GetLongField(params, id)); std::memcpy(base + f.offset, &v, sizeof v); break; }
            case 'Z': { const bool v = env->GetBooleanField(params, id) == JNI_TRUE; std::memcpy(base + f.offset, &v, sizeof v); break; }
        }
    }
    smp.stop = h.stop_ptrs.empty() ? nullptr : h.stop_ptrs.data();
    smp.n_stop = h.stop_ptrs.size();
    jstring jg = static_cast<jstring>(env->GetObjectField(params, refs.sampling_grammar));
    jstring js = static_cast<jstring>(env->GetObjectField(params, refs.sampling_json_schema));
    if (jg && !c_string_of(env, jg, h.gbnf, "grammar")) return false;
    if (js && !c_string_of(env, js, h.schema, "jsonSchema")) return false;
    smp.grammar = jg ? h.gbnf.c_str() : nullptr;
    smp.json_schema = js ? h.schema.c_str() : nullptr;
    return true;
}

// Runs `call(&sink)`, a generating C call whose pieces go to `callback`. Returns the generated
// text, also when cancelled (cancel(), or the callback returned false: no failure); else null with
// an exception pending: the callback's own, rethrown unchanged, or a VkllmException.
template <class Call>
jstring run_generation(JNIEnv* env, jobject callback, Call&& call) {
    PieceSink sink;
    sink.env = env;
    sink.callback = callback;
    const vkllm_status st = call(&sink);
    if (sink.error) {
        env->Throw(sink.error);
        return nullptr;
    }
    if (sink.out_of_memory) throw std::bad_alloc();
    if (st != VKLLM_OK && st != VKLLM_CANCELLED) {
        throw_status(env, st);
        return nullptr;
    }
    return new_string(env, sink.text);
}

}  // namespace

extern "C" {

JNIEXPORT jstring JNICALL Java_dev_vkllm_Native_generate(JNIEnv* env, jclass, jlong session, jstring prompt,
                                                         jobjectArray roles, jobjectArray contents, jobject params,
                                                         jobject callback) {
    return guarded(env, jstring(nullptr), [&]() -> jstring {
        std::string c_prompt;
        std::vector<std::string> r, c;
        if (prompt && !c_string_of(env, prompt, c_prompt, "prompt")) return nullptr;
        if (!prompt && (!c_strings_of(env, roles, r, "a message role") ||
                        !c_strings_of(env, contents, c, "a message content")))
            return nullptr;
        std::vector<vkllm_chat_message> messages(r.size());
        for (size_t i = 0; i < r.size(); ++i) messages[i] = {r[i].c_str(), c[i].c_str()};
        vkllm_sampling smp;
        SamplingHolder holder;
        if (!read_sampling(env, params, smp, holder)) return nullptr;

        return run_generation(env, callback, [&](PieceSink* sink) {
            return prompt ? vkllm_generate(session_of(session), c_prompt.c_str(), &smp, on_piece, sink)
                          : vkllm_chat(session_of(session), messages.data(), messages.size(), &smp, on_piece, sink);
        });
    });
}

JNIEXPORT jstring JNICALL Java_dev_vkllm_Native_chatJson(JNIEnv* env, jclass, jlong session, jstring messages,
                                                         jstring tools, jstring tool_choice, jboolean parallel,
                                                         jstring template_kwargs, jobject params, jobject callback) {
    return guarded(env, jstring(nullptr), [&]() -> jstring {
        std::string c_messages;
        OptionalCString c_tools, c_choice, c_kwargs;
        if (!c_string_of(env, messages, c_messages, "messagesJson") ||
            !optional_c_string_of(env, tools, c_tools, "toolsJson") ||
            !optional_c_string_of(env, tool_choice, c_choice, "toolChoice") ||
            !optional_c_string_of(env, template_kwargs, c_kwargs, "templateKwargsJson"))
            return nullptr;
        vkllm_chat_json_params p = vkllm_chat_json_default_params();
        p.messages = c_messages.c_str();
        p.tools = c_tools.c_str();
        p.tool_choice = c_choice.c_str();
        p.parallel_tool_calls = parallel == JNI_TRUE;
        p.template_kwargs = c_kwargs.c_str();
        vkllm_sampling smp;
        SamplingHolder holder;
        if (!read_sampling(env, params, smp, holder)) return nullptr;
        return run_generation(env, callback,
                              [&](PieceSink* sink) { return vkllm_chat_json(session_of(session), &p, &smp, on_piece, sink); });
    });
}

JNIEXPORT jstring JNICALL Java_dev_vkllm_Native_toolCalls(JNIEnv* env, jclass, jlong session) {
    return guarded(env, jstring(nullptr), [&]() -> jstring {
        const std::optional<std::string> text = fill_text(env, 256, [&](char* buf, size_t capacity, size_t* len) {
            return vkllm_session_get_tool_calls(session_of(session), buf, capacity, len);
        });
        return text ? new_string(env, *text) : nullptr;
    });
}

JNIEXPORT jstring JNICALL Java_dev_vkllm_Native_reasoning(JNIEnv* env, jclass, jlong session) {
    return guarded(env, jstring(nullptr), [&]() -> jstring {
        const std::optional<std::string> text = fill_text(env, 256, [&](char* buf, size_t capacity, size_t* len) {
            return vkllm_session_get_reasoning(session_of(session), buf, capacity, len);
        });
        return text ? new_string(env, *text) : nullptr;
    });
}

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
