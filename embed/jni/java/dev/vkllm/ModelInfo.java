package dev.vkllm;

/** What Model.info() reports: the model's shape, the device it runs on, its memory. */
public final class ModelInfo {
    private final String architecture;
    private final String device;
    private final String chatTemplate;
    private final int nVocab;
    private final int nLayers;
    private final int dim;
    private final int nHeads;
    private final int nKvHeads;
    private final int headDim;
    private final int nCtx;
    private final int nCtxTrain;
    private final int maxSessions;
    private final int bosToken;
    private final int eosToken;
    private final long weightsBytes;
    private final long kvCacheBytes;
    private final long scratchBytes;
    private final boolean embeddings;
    private final int embeddingDim;
    private final int maxEmbedTokens;
    private final String pooling;
    private final int kvBudget;
    private final boolean vision;

    // Made by the JNI library from vkllm_model_info.
    ModelInfo(String architecture, String device, String chatTemplate, int nVocab, int nLayers, int dim, int nHeads,
              int nKvHeads, int headDim, int nCtx, int nCtxTrain, int maxSessions, int bosToken, int eosToken,
              long weightsBytes, long kvCacheBytes, long scratchBytes, boolean embeddings, int embeddingDim,
              int maxEmbedTokens, String pooling, int kvBudget, boolean vision) {
        this.architecture = architecture;
        this.device = device;
        this.chatTemplate = chatTemplate;
        this.nVocab = nVocab;
        this.nLayers = nLayers;
        this.dim = dim;
        this.nHeads = nHeads;
        this.nKvHeads = nKvHeads;
        this.headDim = headDim;
        this.nCtx = nCtx;
        this.nCtxTrain = nCtxTrain;
        this.maxSessions = maxSessions;
        this.bosToken = bosToken;
        this.eosToken = eosToken;
        this.weightsBytes = weightsBytes;
        this.kvCacheBytes = kvCacheBytes;
        this.scratchBytes = scratchBytes;
        this.embeddings = embeddings;
        this.embeddingDim = embeddingDim;
        this.maxEmbedTokens = maxEmbedTokens;
        this.pooling = pooling;
        this.kvBudget = kvBudget;
        this.vision = vision;
    }

    /** "llama", "qwen2", "gemma3", ... */
    public String architecture() {
        return architecture;
    }

    /** The device the model runs on. */
    public String device() {
        return device;
    }

    /** "model" for the file's own template, else the built-in or file name. */
    public String chatTemplate() {
        return chatTemplate;
    }

    public int nVocab() {
        return nVocab;
    }

    public int nLayers() {
        return nLayers;
    }

    public int dim() {
        return dim;
    }

    public int nHeads() {
        return nHeads;
    }

    public int nKvHeads() {
        return nKvHeads;
    }

    public int headDim() {
        return headDim;
    }

    /** Tokens of context per session. */
    public int nCtx() {
        return nCtx;
    }

    public int nCtxTrain() {
        return nCtxTrain;
    }

    public int maxSessions() {
        return maxSessions;
    }

    /** -1 when the vocabulary has none. */
    public int bosToken() {
        return bosToken;
    }

    /** -1 when the vocabulary has none. */
    public int eosToken() {
        return eosToken;
    }

    public long weightsBytes() {
        return weightsBytes;
    }

    public long kvCacheBytes() {
        return kvCacheBytes;
    }

    public long scratchBytes() {
        return scratchBytes;
    }

    /**
     * An embedding model or a reranker (an encoder such as BERT, or a decoder whose file or
     * ModelParams.pooling() names a pooling, as Qwen3-Embedding): Model.embed() (or, for pooling
     * "rank", Model.rerank()) works, sessions do not.
     */
    public boolean embeddings() {
        return embeddings;
    }

    /** Values per embedding; 0 for a model that makes none. */
    public int embeddingDim() {
        return embeddingDim;
    }

    /**
     * The longest input Model.embed() takes, in tokens, [CLS] and [SEP] included (a reranker: query
     * and document together).
     */
    public int maxEmbedTokens() {
        return maxEmbedTokens;
    }

    /**
     * How an embedding is pooled: "mean", "cls", "last", "none" (one vector per token: embed()
     * refuses) or "rank" (a reranker: Model.rerank()).
     */
    public String pooling() {
        return pooling;
    }

    /** Tokens the sessions' shared KV pool holds (ModelParams.kvBudget in whole blocks, or maxSessions x nCtx); 0 for an embedding model. */
    public int kvBudget() {
        return kvBudget;
    }

    /** Loaded with a vision encoder (ModelParams.mmproj): chat messages may carry images. */
    public boolean vision() {
        return vision;
    }

    @Override
    public String toString() {
        return architecture + " (" + nLayers + " layers, dim " + dim + ", vocab " + nVocab + ", context " + nCtx
            + ") on " + device;
    }
}
