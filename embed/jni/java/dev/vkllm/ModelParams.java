package dev.vkllm;

/**
 * How Model.load() opens a model. {@code new ModelParams()} holds the C API's defaults; the setters
 * return this, to chain: {@code new ModelParams().nCtx(2048).cacheDir(dir)}.
 */
public final class ModelParams {
    /** The KV cache's element type. */
    public enum KvType {
        F16,
        F32,
        /** Blocks of 32 int8 values and a float scale: 0.56x the memory of F16. */
        Q8_0
    }

    private int deviceIndex;
    private String deviceName;
    private String caps;
    private int nCtx;
    private int maxSessions;
    private KvType kvType;
    private int ubatch;
    private String chatTemplate;
    private String cacheDir;
    private String pooling;
    private String devices;
    private String split;
    private int kvBudget;
    private String mmproj;
    private long imageMaxPixels;
    private String draftModel;
    private int lookup, draftMax, draftMin;
    private boolean blend;
    private float blendRatio;
    private String kvStore;
    private int kvStoreMib;
    private boolean validation;
    private LoadProgress progress;
    private LogListener log;

    public ModelParams() {
        int[] d = Native.modelDefaultInts();
        deviceIndex = d[0];
        nCtx = d[1];
        maxSessions = d[2];
        kvType = KvType.values()[d[3]];
        ubatch = d[4];
        validation = d[5] != 0;
    }

    /** -1 (default): the first device vkllm can use; else an index as `vkllm devices` lists them. */
    public ModelParams deviceIndex(int index) {
        deviceIndex = index;
        return this;
    }

    /** A substring of a device's name; overrides deviceIndex. null (default): none. */
    public ModelParams deviceName(String name) {
        deviceName = name;
        return this;
    }

    /** Capability overrides as `vkllm --caps` takes them, e.g. "no-fp16". null (default): none. */
    public ModelParams caps(String caps) {
        this.caps = caps;
        return this;
    }

    /** Tokens of context per session; 0 (default): the model's, capped by memory. */
    public ModelParams nCtx(int tokens) {
        nCtx = tokens;
        return this;
    }

    /** Sessions open at once, each with its own KV cache; default 1. */
    public ModelParams maxSessions(int n) {
        maxSessions = n;
        return this;
    }

    public ModelParams kvType(KvType type) {
        if (type == null) throw new NullPointerException("kvType");
        kvType = type;
        return this;
    }

    /**
     * Prompt tokens per forward pass; default 0: 64, or for an embedding model its context (each
     * text is evaluated at once, so none may be longer).
     */
    public ModelParams ubatch(int tokens) {
        ubatch = tokens;
        return this;
    }

    /** null (default): the model's own; else a built-in name ("chatml", ...) or a Jinja file. */
    public ModelParams chatTemplate(String template) {
        chatTemplate = template;
        return this;
    }

    /**
     * The pipeline cache folder; null (default): the user's cache folder, "": none on disk. On
     * Android pass the app's cache folder (context.getCacheDir()).
     */
    public ModelParams cacheDir(String dir) {
        cacheDir = dir;
        return this;
    }

    /**
     * null (default): the file's pooling type; "mean", "cls" or "last": the pooling of
     * Model.embed(), which also makes a decoder whose file names none an embedding model (as
     * llama-server --embeddings --pooling).
     */
    public ModelParams pooling(String type) {
        pooling = type;
        return this;
    }

    /**
     * null (default): one device (deviceIndex / deviceName); else the model's layers split over
     * these devices, indices or name substrings, comma-separated ("0,1"), as vkllm --devices.
     */
    public ModelParams devices(String list) {
        devices = list;
        return this;
    }

    /** With devices: null (default) splits the layers by each device's memory; "layer:3,1" in these ratios. */
    public ModelParams split(String spec) {
        split = spec;
        return this;
    }

    /**
     * Tokens of KV cache that all sessions share (one paged pool); 0 (default): maxSessions x nCtx.
     * Smaller lets many sessions stay open in little memory: a turn waits while running turns'
     * reservations fill the pool, and idle sessions' cached conversations are dropped (their next
     * turn evaluates them again). nCtx defaults to at most it.
     */
    public ModelParams kvBudget(int tokens) {
        kvBudget = tokens;
        return this;
    }

    /**
     * The model's vision encoder, llama.cpp's mmproj GGUF (gemma3, idefics3, mlp projectors), loaded
     * on the same device: chat messages may then carry images (ChatMessage with images). null
     * (default): none.
     */
    public ModelParams mmproj(String path) {
        mmproj = path;
        return this;
    }

    /** The largest image (width x height) decoded, checked before decoding; 0 (default): 8192 x 8192. */
    public ModelParams imageMaxPixels(long pixels) {
        if (pixels < 0) throw new IllegalArgumentException("imageMaxPixels must not be negative");
        imageMaxPixels = pixels;
        return this;
    }

    /**
     * Speculative decoding with this draft model, a smaller model of the same vocabulary on the same
     * device: the text is what plain decoding gives, sooner where the draft guesses right. null
     * (default): none. Not with lookup.
     */
    public ModelParams draftModel(String path) {
        draftModel = path;
        return this;
    }

    /**
     * Speculative decoding by prompt lookup: drafts copied from where the context's last n-gram (up to
     * this many tokens, at most 8) occurred before. 0 (default): off. Not with draftModel.
     */
    public ModelParams lookup(int ngram) {
        if (ngram < 0) throw new IllegalArgumentException("lookup must not be negative");
        lookup = ngram;
        return this;
    }

    /** Tokens drafted and verified per step: 0 (default) means 8; at most 32. */
    public ModelParams draftMax(int tokens) {
        if (tokens < 0) throw new IllegalArgumentException("draftMax must not be negative");
        draftMax = tokens;
        return this;
    }

    /** Drafts shorter than this are not verified: 0 (default) means 1. */
    public ModelParams draftMin(int tokens) {
        if (tokens < 0) throw new IllegalArgumentException("draftMin must not be negative");
        draftMin = tokens;
        return this;
    }

    /**
     * CacheBlend: the documents of Session.generateDocuments() reused from a document store wherever
     * they appear, a share of their tokens evaluated again (the answer is close to, not the same as,
     * a full evaluation's). Default false: documents are evaluated as text. A model that cannot blend
     * fails to load, naming why.
     */
    public ModelParams blend(boolean on) {
        blend = on;
        return this;
    }

    /** CacheBlend: the share of each document's tokens evaluated again; 0 (default) means 0.15; at most 1. */
    public ModelParams blendRatio(float ratio) {
        if (!(ratio >= 0 && ratio <= 1)) throw new IllegalArgumentException("blendRatio must be within 0..1");
        blendRatio = ratio;
        return this;
    }

    /** CacheBlend: a directory where the document store keeps what leaves memory; null (default): memory only. */
    public ModelParams kvStore(String directory) {
        kvStore = directory;
        return this;
    }

    /** CacheBlend: the document store's memory budget in MiB; 0 (default) means 1024. */
    public ModelParams kvStoreMib(int mib) {
        if (mib < 0) throw new IllegalArgumentException("kvStoreMib must not be negative");
        kvStoreMib = mib;
        return this;
    }

    /** The Khronos validation layer (slow; for debugging); default false. */
    public ModelParams validation(boolean on) {
        validation = on;
        return this;
    }

    /** Called as the weights load; null (default): none. */
    public ModelParams progress(LoadProgress listener) {
        progress = listener;
        return this;
    }

    /** Receives the model's warnings and validation messages; null (default): they are dropped. */
    public ModelParams log(LogListener listener) {
        log = listener;
        return this;
    }

    public int deviceIndex() {
        return deviceIndex;
    }

    public String deviceName() {
        return deviceName;
    }

    public String caps() {
        return caps;
    }

    public int nCtx() {
        return nCtx;
    }

    public int maxSessions() {
        return maxSessions;
    }

    public KvType kvType() {
        return kvType;
    }

    public int ubatch() {
        return ubatch;
    }

    public String chatTemplate() {
        return chatTemplate;
    }

    public String cacheDir() {
        return cacheDir;
    }

    public String pooling() {
        return pooling;
    }

    public String devices() {
        return devices;
    }

    public String split() {
        return split;
    }

    public int kvBudget() {
        return kvBudget;
    }

    public String mmproj() {
        return mmproj;
    }

    public long imageMaxPixels() {
        return imageMaxPixels;
    }

    public String draftModel() {
        return draftModel;
    }

    public int lookup() {
        return lookup;
    }

    public int draftMax() {
        return draftMax;
    }

    public int draftMin() {
        return draftMin;
    }

    public boolean blend() {
        return blend;
    }

    public float blendRatio() {
        return blendRatio;
    }

    public String kvStore() {
        return kvStore;
    }

    public int kvStoreMib() {
        return kvStoreMib;
    }

    public boolean validation() {
        return validation;
    }

    public LoadProgress progress() {
        return progress;
    }

    public LogListener log() {
        return log;
    }
}
