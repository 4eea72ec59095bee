package dev.vkllm;

/** Reports the loading of a model's weights, on the thread that called Model.load(). */
public interface LoadProgress {
    /**
     * {@code fraction} goes from 0 to 1. Return false to stop loading: Model.load() then throws
     * VkllmException with status CANCELLED. An exception thrown here stops loading too and is
     * rethrown by Model.load() as it is.
     */
    boolean onProgress(float fraction);
}
