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

    // Made by the JNI library from vkllm_model_info.
    ModelInfo(String architecture, String device, String chatTemplate, int nVocab, int nLayers, int dim, int nHeads,
              int nKvHeads, int headDim, int nCtx, int nCtxTrain, int maxSessions, int bosToken, int eosToken,
              long weightsBytes, long kvCacheBytes, long scratchBytes) {
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

    @Override
    public String toString() {
        return architecture + " (" + nLayers + " layers, dim " + dim + ", vocab " + nVocab + ", context " + nCtx
            + ") on " + device;
    }
}
