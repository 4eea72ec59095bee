// The C API's callbacks into Java, and what each carries to them (the user_data of the C call).
//
// Callbacks run on the thread of the native method that made the C call (the C API promises
// that), so its JNIEnv is the right one to use. A Java exception in a callback is taken out of
// the way (ExceptionOccurred + ExceptionClear) and the callback asks the C API to stop; the
// native method rethrows that very object once the C call has returned. Leaving it pending
// instead would make every later JNI call in the callback undefined.
#pragma once

#include <jni.h>
#include <vkllm/vkllm.h>

#include <cstddef>
#include <string>
#include <vector>

namespace vkllm::jni {

struct PieceSink {
    JNIEnv* env = nullptr;
    jobject callback = nullptr;  // null: the text is only collected
    std::string text;  // everything generated, returned by generate()
    std::vector<jchar> scratch;
    jthrowable error = nullptr;  // thrown by the callback, or an OutOfMemoryError of ours
    bool out_of_memory = false;
};
// A vkllm_piece_fn: the piece is collected and, with a callback, handed to onToken.
int on_piece(const char* utf8, size_t len, void* user_data) noexcept;

struct ProgressSink {
    JNIEnv* env = nullptr;
    jobject listener = nullptr;
    jthrowable error = nullptr;
};
// A vkllm_progress_fn: the fraction to LoadProgress.onProgress.
int on_progress(float fraction, void* user_data) noexcept;

struct LogSink {
    jobject listener = nullptr;  // a global reference: used from any thread until the sink is freed
};
// A vkllm_log_fn, on any thread (see jni_callbacks.cpp): the message to LogListener.onLog.
void on_log(vkllm_log_level level, const char* message, void* user_data) noexcept;

}  // namespace vkllm::jni
