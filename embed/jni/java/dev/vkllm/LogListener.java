package dev.vkllm;

/**
 * Receives a model's messages: warnings about its file, and Khronos validation messages when
 * ModelParams.validation() is on (on Android, send them to android.util.Log).
 *
 * <p>Called on any thread that works for the model, the library's own included, possibly from
 * several at once: keep it short and thread-safe. Nothing can catch an exception thrown here on
 * the library's threads, so one is printed (as an uncaught exception would be) and dropped.
 */
public interface LogListener {
    enum Level {
        INFO,
        WARNING,
        ERROR
    }

    void onLog(Level level, String message);
}
