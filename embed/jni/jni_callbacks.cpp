#include "embed/jni/jni_callbacks.h"

#include "embed/jni/jni_support.h"
#include "embed/jni/jni_text.h"

#include <cstring>

namespace vkllm::jni {

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

namespace {

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

}  // namespace

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

}  // namespace vkllm::jni
