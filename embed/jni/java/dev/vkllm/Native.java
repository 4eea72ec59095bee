package dev.vkllm;

/**
 * The JNI functions of libvkllm_jni.so, one for each C API call the classes of this package
 * make. Handles are the C pointers as long; 0 is never a live handle.
 */
final class Native {
    static {
        // An absolute path lets a program pick the library without -Djava.library.path (tests
        // of a build tree, apps that unpack it themselves); Android and installs use the name.
        String path = System.getProperty("dev.vkllm.jni.library");
        if (path != null && !path.isEmpty()) {
            System.load(path);
        } else {
            System.loadLibrary("vkllm_jni");
        }
    }

    private Native() {}

    static native String version();

    // The C API's defaults, so that this jar never disagrees with the library it runs on: written
    // into the fields of `params` (the native side reads and writes them by name).
    static native void samplingDefaults(GenerateParams params);
    // {device_index, n_ctx, max_sessions, kv_type, ubatch, validation}
    static native int[] modelDefaultInts();
    static native boolean sessionDefaultParseSpecial();

    static native long modelLoad(String path, int deviceIndex, String deviceName, String caps, int nCtx,
                                 int maxSessions, int kvType, int ubatch, String chatTemplate, String cacheDir,
                                 boolean validation, LoadProgress progress, long logSink, String pooling,
                                 String devices, String split, int kvBudget, String mmproj, long imageMaxPixels,
                                 String draftModel, int lookup, int draftMax, int draftMin, boolean blend,
                                 float blendRatio, String kvStore, int kvStoreMib);
    static native void modelFree(long model);
    // The native side of a LogListener: a global reference the library's threads can call. It
    // must outlive the model (freed after modelFree), as messages may come until then.
    static native long logSinkNew(LogListener listener);
    static native void logSinkFree(long sink);
    static native ModelInfo modelInfo(long model);
    static native int[] tokenize(long model, String text, boolean addSpecial, boolean parseSpecial);
    static native String detokenize(long model, int[] tokens);
    // vkllm_embed_batch: one vector per text, in one call.
    static native float[][] embedBatch(long model, String[] texts, int normalize);
    // vkllm_rerank: one score per document.
    static native float[] rerank(long model, String query, String[] documents);
    static native String applyChatTemplate(long model, String[] roles, String[] contents, boolean addGenerationPrompt);

    static native long sessionNew(long model, boolean parseSpecial);
    // vkllm_generate_documents.
    static native String generateDocuments(long session, String prefix, String[] documents, String question,
                                           GenerateParams params, TokenCallback callback);
    static native void sessionFree(long session);
    static native void sessionReset(long session);
    // vkllm_chat_images: image i (file bytes) belongs to message owner[i].
    static native String chatImages(long session, String[] roles, String[] contents, int[] owner, byte[][] images,
                                    GenerateParams params, TokenCallback callback);
    static native void cancel(long session);
    static native GenerationStats stats(long session);

    // vkllm_generate when roles is null, else vkllm_chat with the messages (roles[i], contents[i]).
    // The sampling parameters are read from the fields of `params`.
    static native String generate(long session, String prompt, String[] roles, String[] contents,
                                  GenerateParams params, TokenCallback callback);

    // vkllm_chat_json; toolCalls: vkllm_session_get_tool_calls; reasoning: vkllm_session_get_reasoning.
    static native String chatJson(long session, String messagesJson, String toolsJson, String toolChoice,
                                  boolean parallelToolCalls, String templateKwargsJson, GenerateParams params,
                                  TokenCallback callback);
    static native String toolCalls(long session);
    static native String reasoning(long session);

    // The text conversions every call above uses, exposed for the tests to compare with Java's
    // own: UTF-8 bytes to a String, and a String to UTF-8 bytes.
    static native String decodeUtf8(byte[] utf8);
    static native byte[] encodeUtf8(String text);
}
