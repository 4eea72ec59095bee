package dev.vkllm;

import java.util.ArrayList;
import java.util.List;

/**
 * A model loaded on a Vulkan device: its weights on the device, its tokenizer and chat template.
 * Generation happens in sessions (newSession()).
 *
 * <p>Thread-safe: any thread may call any method, also at once. close() closes the model's open
 * sessions first (cancelling their generations and waiting for them), then frees the model;
 * calls on a closed model or one of its closed sessions throw IllegalStateException. There is no
 * finalizer or Cleaner: close() it (try-with-resources, Kotlin's use {}), as the device memory it
 * holds is too large to leave to the garbage collector.
 */
public final class Model implements AutoCloseable {
    private final NativeHandle handle;
    private final String path;
    // Open sessions, closed before the model is freed (vkllm_model_free frees them in C).
    private final List<Session> sessions = new ArrayList<Session>();

    private final long logSink;  // 0: none

    private Model(long handle, long logSink, String path) {
        this.handle = new NativeHandle("model", handle);
        this.logSink = logSink;
        this.path = path;
    }

    /** Loads a GGUF file with the default parameters. */
    public static Model load(String path) {
        return load(path, new ModelParams());
    }

    /**
     * Opens a GGUF file, picks the device, checks that the model fits and uploads the weights
     * (seconds for a large model: call it off the UI thread).
     *
     * @throws VkllmException the file does not exist or is not a model vkllm runs (the message
     *     names the file), no Vulkan loader or device, not enough device memory, ...
     */
    public static Model load(String path, ModelParams p) {
        if (path == null) throw new NullPointerException("path");
        if (p == null) p = new ModelParams();
        long sink = p.log() != null ? Native.logSinkNew(p.log()) : 0;
        try {
            long h = Native.modelLoad(path, p.deviceIndex(), p.deviceName(), p.caps(), p.nCtx(), p.maxSessions(),
                                      p.kvType().ordinal(), p.ubatch(), p.chatTemplate(), p.cacheDir(),
                                      p.validation(), p.progress(), sink, p.pooling(), p.devices(), p.split(),
                                      p.kvBudget(), p.mmproj(), p.imageMaxPixels(), p.draftModel(), p.lookup(),
                                      p.draftMax(), p.draftMin(), p.blend(), p.blendRatio(), p.kvStore(),
                                      p.kvStoreMib());
            return new Model(h, sink, path);
        } catch (RuntimeException | Error e) {
            Native.logSinkFree(sink);
            throw e;
        }
    }

    /** libvkllm's version, "MAJOR.MINOR.PATCH". */
    public static String libraryVersion() {
        return Native.version();
    }

    /** The path the model was loaded from. */
    public String path() {
        return path;
    }

    public Session newSession() {
        return newSession(new SessionParams());
    }

    /**
     * A new conversation with its own KV cache; at most ModelParams.maxSessions() at once
     * (VkllmException with status BUSY beyond).
     */
    public Session newSession(SessionParams p) {
        if (p == null) p = new SessionParams();
        long m = handle.use();
        try {
            Session s = new Session(this, Native.sessionNew(m, p.parseSpecial()));
            synchronized (sessions) {
                sessions.add(s);
            }
            return s;
        } finally {
            handle.done();
        }
    }

    public ModelInfo info() {
        long m = handle.use();
        try {
            return Native.modelInfo(m);
        } finally {
            handle.done();
        }
    }

    /**
     * The token ids of {@code text}. addSpecial: BOS/EOS as the vocabulary asks; parseSpecial: the
     * text of control tokens becomes those tokens.
     */
    public int[] tokenize(String text, boolean addSpecial, boolean parseSpecial) {
        if (text == null) throw new NullPointerException("text");
        long m = handle.use();
        try {
            return Native.tokenize(m, text, addSpecial, parseSpecial);
        } finally {
            handle.done();
        }
    }

    /**
     * The embeddings of {@code texts} with an embedding model ({@code info().embeddings()}): an
     * encoder ({@code info().architecture()} "bert" (bge, all-MiniLM, e5), "nomic-bert",
     * "jina-bert-v2", "t5encoder", ...) or a decoder embedding model (a decoder whose file names a
     * pooling type, e.g. Qwen3-Embedding, or one loaded with {@link ModelParams#pooling(String)}).
     * One vector of {@code info().embeddingDim()} values per text, in order, pooled as the model
     * says ({@code info().pooling()}) and of unit length (L2), ready for cosine similarity; all
     * texts in one call, in as few forward passes as the model allows. VkllmException with
     * Status.CONTEXT_FULL for a text longer than {@code info().maxEmbedTokens()} tokens,
     * INVALID_ARGUMENT for a model that makes no embeddings (a decoder, a reranker) or an empty
     * text; the message names the text's index.
     */
    public float[][] embed(String... texts) {
        return embed(2, texts);
    }

    /**
     * embed() with llama.cpp's normalisation {@code normalize}: -1 none, 0 max-abs scaled to the
     * int16 range, 1 taxicab, 2 Euclidean (unit length), p > 2 the p-norm.
     */
    public float[][] embed(int normalize, String... texts) {
        if (texts == null) throw new NullPointerException("texts");
        for (int i = 0; i < texts.length; ++i) {
            if (texts[i] == null) throw new NullPointerException("texts[" + i + "] is null");
        }
        long m = handle.use();
        try {
            return Native.embedBatch(m, texts, normalize);
        } finally {
            handle.done();
        }
    }

    /**
     * The relevance of each of {@code documents} to {@code query} with a reranker ({@code
     * info().pooling()} "rank", e.g. bge-reranker): one score per document, in document order, each
     * the model's unnormalised logit (higher: more relevant; llama-server's /v1/rerank
     * relevance_score). VkllmException with Status.INVALID_ARGUMENT for a model that is not a
     * reranker or an empty query or document, CONTEXT_FULL when a query and document together are
     * longer than {@code info().maxEmbedTokens()} tokens.
     */
    public float[] rerank(String query, String... documents) {
        if (query == null) throw new NullPointerException("query");
        if (documents == null) throw new NullPointerException("documents");
        for (int i = 0; i < documents.length; ++i) {
            if (documents[i] == null) throw new NullPointerException("documents[" + i + "] is null");
        }
        long m = handle.use();
        try {
            return Native.rerank(m, query, documents);
        } finally {
            handle.done();
        }
    }

    /** The text of token ids. */
    public String detokenize(int[] tokens) {
        if (tokens == null) throw new NullPointerException("tokens");
        long m = handle.use();
        try {
            return Native.detokenize(m, tokens);
        } finally {
            handle.done();
        }
    }

    /**
     * The prompt text the chat template makes of {@code messages}, with the assistant's turn
     * opened when addGenerationPrompt.
     */
    public String applyChatTemplate(List<ChatMessage> messages, boolean addGenerationPrompt) {
        String[][] rc = split(messages);
        long m = handle.use();
        try {
            return Native.applyChatTemplate(m, rc[0], rc[1], addGenerationPrompt);
        } finally {
            handle.done();
        }
    }

    public boolean isClosed() {
        return handle.isClosed();
    }

    /**
     * Closes the open sessions of this model (a generation running in one is cancelled and
     * waited for), then frees the model. A second call does nothing. Must not be called from a
     * callback of one of its sessions (IllegalStateException): cancel there instead.
     */
    @Override
    public void close() {
        synchronized (sessions) {
            for (Session s : sessions) {
                if (s.inCallOnThisThread()) {
                    throw new IllegalStateException("a vkllm model cannot be closed from inside a call of one of its "
                                                    + "sessions (a callback): cancel() there, and close() after it returns");
                }
            }
        }
        long m = handle.close(null);
        if (m == 0) return;
        // No newSession() runs now (close() waited for the model's calls), so the list is complete.
        List<Session> open;
        synchronized (sessions) {
            open = new ArrayList<Session>(sessions);
        }
        for (Session s : open) s.close();
        Native.modelFree(m);
        Native.logSinkFree(logSink);
        handle.freed();
    }

    void forget(Session s) {
        synchronized (sessions) {
            sessions.remove(s);
        }
    }

    static String[][] split(List<ChatMessage> messages) {
        if (messages == null) throw new NullPointerException("messages");
        String[] roles = new String[messages.size()];
        String[] contents = new String[messages.size()];
        int i = 0;
        for (ChatMessage msg : messages) {
            if (msg == null) throw new NullPointerException("messages[" + i + "] is null");
            roles[i] = msg.role();
            contents[i] = msg.content();
            ++i;
        }
        return new String[][] {roles, contents};
    }
}
