package dev.vkllm;

import java.util.List;
import java.util.function.LongConsumer;

/**
 * A conversation with its own KV cache: each generate() continues the text of the ones before
 * it (only the new tokens are evaluated) until reset().
 *
 * <p>One generation at a time, on the calling thread: the callback runs on that thread before
 * generate() returns (on Android: call it from a background thread, post the pieces to the UI).
 * A second generate() while one runs on another thread throws VkllmException with status BUSY.
 * cancel() may be called from any thread at any time, also while generate() runs. close() from
 * another thread cancels a running generation and waits for it; calls on a closed session throw
 * IllegalStateException, and Model.close() closes the model's sessions.
 */
public final class Session implements AutoCloseable {
    private final Model model;
    private final NativeHandle handle;

    Session(Model model, long handle) {
        this.model = model;
        this.handle = new NativeHandle("session", handle);
    }

    public Model model() {
        return model;
    }

    /** Continues the text with {@code prompt} and returns what the model generates after it. */
    public String generate(String prompt) {
        return generate(prompt, null, null);
    }

    public String generate(String prompt, GenerateParams p) {
        return generate(prompt, p, null);
    }

    /**
     * Continues the session's text with {@code prompt} and generates after it, passing each piece
     * of the generated text (never the prompt) to {@code cb} (may be null). On a new or reset
     * session the prompt starts with BOS where the vocabulary wants one; "" then means BOS only.
     * Stops at an end-of-generation token, a stop string, nPredict tokens, a full context, on
     * cancel(), or when cb returns false or throws (the exception is rethrown as it is).
     *
     * @return the generated text, also when cancelled (then the text so far)
     * @throws VkllmException the prompt does not fit the context, a device error, BUSY, ...
     */
    public String generate(String prompt, GenerateParams p, TokenCallback cb) {
        if (prompt == null) throw new NullPointerException("prompt");
        return run(prompt, null, null, p, cb);
    }

    /**
     * generate() of a prompt made of parts: {@code prefix}, each of {@code documents}, then
     * {@code question}, each tokenized on its own (a document has the same tokens wherever it
     * appears). On a model loaded with ModelParams.blend(true) the documents come from the model's
     * document store (evaluated alone and stored the first time) and are blended in when a question
     * follows them; else they are evaluated as the rest of the prompt.
     *
     * @return the generated text
     * @throws VkllmException as generate()
     */
    public String generateDocuments(String prefix, List<String> documents, String question, GenerateParams p,
                                    TokenCallback cb) {
        if (prefix == null) throw new NullPointerException("prefix");
        if (documents == null) throw new NullPointerException("documents");
        if (question == null) throw new NullPointerException("question");
        String[] docs = documents.toArray(new String[0]);
        for (int i = 0; i < docs.length; ++i)
            if (docs[i] == null) throw new NullPointerException("documents[" + i + "]");
        if (p == null) p = new GenerateParams();
        long s = handle.use();
        try {
            return Native.generateDocuments(s, prefix, docs, question, p, cb);
        } finally {
            handle.done();
        }
    }

    public String chat(List<ChatMessage> messages) {
        return chat(messages, null, null);
    }

    public String chat(List<ChatMessage> messages, GenerateParams p) {
        return chat(messages, p, null);
    }

    /**
     * Answers a conversation: {@code messages} is the whole conversation so far, oldest first.
     * It is rendered with the model's chat template, the assistant's turn is opened and the answer
     * generated as generate() does. When the next call passes the same messages plus the answer
     * and a new message, only the new tokens are evaluated.
     */
    public String chat(List<ChatMessage> messages, GenerateParams p, TokenCallback cb) {
        String[][] rc = Model.split(messages);
        // Messages with pictures (ChatMessage's images): vkllm_chat_images, each image with its message's index.
        java.util.List<byte[]> images = new java.util.ArrayList<>();
        java.util.List<Integer> owners = new java.util.ArrayList<>();
        for (int i = 0; i < messages.size(); ++i)
            for (byte[] b : messages.get(i).images()) {
                images.add(b);
                owners.add(i);
            }
        if (images.isEmpty()) return run(null, rc[0], rc[1], p, cb);
        if (p == null) p = new GenerateParams();
        int[] owner = owners.stream().mapToInt(Integer::intValue).toArray();
        long s = handle.use();
        try {
            return Native.chatImages(s, rc[0], rc[1], owner, images.toArray(new byte[0][]), p, cb);
        } finally {
            handle.done();
        }
    }

    /**
     * Answers a conversation given in OpenAI's JSON shapes, with tools: {@code messagesJson} is the
     * messages array (contents as strings or text parts, which are joined by newlines; assistant
     * turns with tool_calls, "tool" turns with tool_call_id; checked as vkllm serve checks them),
     * {@code toolsJson} the tools array (null: none), {@code toolChoice} null or "auto", "none",
     * "required" or a tool's name. The callback and the returned text are the answer's content
     * only: tool-call markup never reaches them; the calls it made are read with toolCalls(). Where
     * the template writes reasoning blocks ({@code <think>}), the answer's block is split off too
     * and read with reasoning(). A required call follows the tool's parameter schema.
     *
     * @throws VkllmException INVALID_ARGUMENT naming the field for bad JSON, tools the model's
     *     format cannot parse, or a choice it cannot force
     */
    public String chatJson(String messagesJson, String toolsJson, String toolChoice, boolean parallelToolCalls,
                           GenerateParams p, TokenCallback cb) {
        if (messagesJson == null) throw new NullPointerException("messagesJson");
        if (p == null) p = new GenerateParams();
        long s = handle.use();
        try {
            return Native.chatJson(s, messagesJson, toolsJson, toolChoice, parallelToolCalls, null, p, cb);
        } finally {
            handle.done();
        }
    }

    /**
     * The tool calls of the last chatJson() answer, as OpenAI's tool_calls JSON array ("[]" when
     * it made none).
     */
    public String toolCalls() {
        long s = handle.use();
        try {
            return Native.toolCalls(s);
        } finally {
            handle.done();
        }
    }

    /**
     * The reasoning block of the last chatJson() answer, without its tags ("" when it had none).
     */
    public String reasoning() {
        long s = handle.use();
        try {
            return Native.reasoning(s);
        } finally {
            handle.done();
        }
    }

    private String run(String prompt, String[] roles, String[] contents, GenerateParams p, TokenCallback cb) {
        if (p == null) p = new GenerateParams();
        long s = handle.use();
        try {
            return Native.generate(s, prompt, roles, contents, p, cb);
        } finally {
            handle.done();
        }
    }

    /**
     * Stops the running generation within one token (generate() returns the text so far);
     * nothing when none runs or the session is closed. Any thread, also from the callback.
     */
    public void cancel() {
        handle.withLive(CANCEL);
    }

    private static final LongConsumer CANCEL = Native::cancel;

    /** Forgets the conversation: the next generate() starts a new text (with BOS). */
    public void reset() {
        long s = handle.use();
        try {
            Native.sessionReset(s);
        } finally {
            handle.done();
        }
    }

    /** Counts and timings of the last finished generation. */
    public GenerationStats stats() {
        long s = handle.use();
        try {
            return Native.stats(s);
        } finally {
            handle.done();
        }
    }

    public boolean isClosed() {
        return handle.isClosed();
    }

    /**
     * Frees the session; a generation running on another thread is cancelled and waited for
     * first. A second call does nothing. Not from this session's own callback
     * (IllegalStateException): cancel() there instead.
     */
    @Override
    public void close() {
        long s = handle.close(CANCEL);
        if (s == 0) return;
        Native.sessionFree(s);
        handle.freed();
        model.forget(this);
    }

    boolean inCallOnThisThread() {
        return handle.usedByThisThread();
    }
}
