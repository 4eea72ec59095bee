#include "embed/jni/jni_support.h"

#include "embed/jni/jni_text.h"

#include <cstring>
#include <string>

namespace vkllm::jni {

JavaRefs refs;
JavaVM* java_vm = nullptr;

void throw_java(JNIEnv* env, const char* class_name, const char* message) {
    if (env->ExceptionCheck()) return;  // the first problem is the one to report
    jclass c = env->FindClass(class_name);
    if (c) env->ThrowNew(c, message);
}

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

}  // namespace vkllm::jni

using namespace vkllm::jni;

namespace {

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
                                            "ZIILjava/lang/String;IZ)V");
    refs.generation_stats_init = env->GetMethodID(refs.generation_stats, "<init>", "(IIIIDDDDIIIIIII)V");
    refs.on_token = method_of(env, "dev/vkllm/TokenCallback", "onToken", "(Ljava/lang/String;)Z");
    refs.on_progress = method_of(env, "dev/vkllm/LoadProgress", "onProgress", "(F)Z");
    refs.on_log =
        method_of(env, "dev/vkllm/LogListener", "onLog", "(Ldev/vkllm/LogListener$Level;Ljava/lang/String;)V");
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
            case 'F': {
                float v;
                std::memcpy(&v, base + f.offset, sizeof v);
                env->SetFloatField(params, id, v);
                break;
            }
            case 'I': {
                int32_t v;
                std::memcpy(&v, base + f.offset, sizeof v);
                env->SetIntField(params, id, v);
                break;
            }
            case 'J': {
                uint64_t v;
                std::memcpy(&v, base + f.offset, sizeof v);
                env->SetLongField(params, id, jlong(v));
                break;
            }
            case 'Z': {
                bool v;
                std::memcpy(&v, base + f.offset, sizeof v);
                env->SetBooleanField(params, id, v ? JNI_TRUE : JNI_FALSE);
                break;
            }
        }
    }
}

JNIEXPORT jintArray JNICALL Java_dev_vkllm_Native_modelDefaultInts(JNIEnv* env, jclass) {
    const vkllm_model_params d = vkllm_model_default_params();
    const jint v[] = {d.device_index,  jint(d.n_ctx),  jint(d.max_sessions),
                      jint(d.kv_type), jint(d.ubatch), d.validation ? 1 : 0};
    jintArray a = env->NewIntArray(6);
    if (a) env->SetIntArrayRegion(a, 0, 6, v);
    return a;
}

JNIEXPORT jboolean JNICALL Java_dev_vkllm_Native_sessionDefaultParseSpecial(JNIEnv*, jclass) {
    return vkllm_session_default_params().parse_special ? JNI_TRUE : JNI_FALSE;
}

}  // extern "C"
