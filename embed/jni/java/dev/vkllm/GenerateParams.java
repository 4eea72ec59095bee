package dev.vkllm;

/**
 * Sampling and stopping for Session.generate() and chat(). {@code new GenerateParams()} holds the
 * C API's defaults; the setters return this, to chain:
 * {@code new GenerateParams().temperature(0f).nPredict(200).seed(1)}. Values are checked by the
 * library when a generation starts (VkllmException with status INVALID_ARGUMENT).
 */
public final class GenerateParams {
    /** seed(SEED_RANDOM) (the default): a new seed for each generation. */
    public static final long SEED_RANDOM = -1L;  // the C API's UINT64_MAX

    private static final String[] NO_STOP = new String[0];

    // vkllm_sampling's fields: the native side reads them by name (jni_support.h, kSamplingFields),
    // so a renamed field must be renamed there too.
    private float temperature;
    private int topK;
    private float topP;
    private float minP;
    private float repeatPenalty;
    private int repeatLastN;
    private float presencePenalty;
    private float frequencyPenalty;
    private int nPredict;
    private long seed;
    private String[] stop = NO_STOP;
    private boolean ignoreEos;
    private String grammar;     // null: free text
    private String jsonSchema;  // null: free text

    public GenerateParams() {
        Native.samplingDefaults(this);
    }

    /** 0: greedy (argmax); default 0.8. */
    public GenerateParams temperature(float t) {
        temperature = t;
        return this;
    }

    /** <= 0: off; default 40. */
    public GenerateParams topK(int k) {
        topK = k;
        return this;
    }

    /** 1: off; default 0.95. */
    public GenerateParams topP(float p) {
        topP = p;
        return this;
    }

    /** 0: off; default 0.05. */
    public GenerateParams minP(float p) {
        minP = p;
        return this;
    }

    /** 1: off (default). */
    public GenerateParams repeatPenalty(float penalty) {
        repeatPenalty = penalty;
        return this;
    }

    /** Tokens the repeat penalty looks back over; default 64. */
    public GenerateParams repeatLastN(int n) {
        repeatLastN = n;
        return this;
    }

    /** -2..2 over the generated tokens, 0: off (default). */
    public GenerateParams presencePenalty(float penalty) {
        presencePenalty = penalty;
        return this;
    }

    /** -2..2 over the generated tokens, 0: off (default). */
    public GenerateParams frequencyPenalty(float penalty) {
        frequencyPenalty = penalty;
        return this;
    }

    /** Tokens to generate; default 128; -1: until an end token or a full context. */
    public GenerateParams nPredict(int n) {
        nPredict = n;
        return this;
    }

    /** The same seed, prompt and parameters give the same text; default SEED_RANDOM. */
    public GenerateParams seed(long seed) {
        this.seed = seed;
        return this;
    }

    /** Stop strings: the generation ends before the first of them (it is not part of the text). */
    public GenerateParams stop(String... strings) {
        if (strings == null) {
            stop = NO_STOP;
            return this;
        }
        for (String s : strings) {
            if (s == null) throw new NullPointerException("a stop string is null");
        }
        stop = strings.clone();
        return this;
    }

    /** Go on past end-of-generation tokens; default false. */
    public GenerateParams ignoreEos(boolean on) {
        ignoreEos = on;
        return this;
    }

    public float temperature() {
        return temperature;
    }

    public int topK() {
        return topK;
    }

    public float topP() {
        return topP;
    }

    public float minP() {
        return minP;
    }

    public float repeatPenalty() {
        return repeatPenalty;
    }

    public int repeatLastN() {
        return repeatLastN;
    }

    public float presencePenalty() {
        return presencePenalty;
    }

    public float frequencyPenalty() {
        return frequencyPenalty;
    }

    public int nPredict() {
        return nPredict;
    }

    public long seed() {
        return seed;
    }

    public String[] stop() {
        return stop.clone();
    }

    /**
     * The output must be a sentence of this GBNF grammar (llama.cpp's syntax); null (the default):
     * free text. At most one of grammar and jsonSchema; one that cannot be enforced is a
     * VkllmException (INVALID_ARGUMENT) naming the line and column when the generation starts.
     */
    public GenerateParams grammar(String gbnf) {
        grammar = gbnf;
        return this;
    }

    /** The output must be JSON valid against this schema (docs/structured-output.md has the subset); null: free text. */
    public GenerateParams jsonSchema(String schema) {
        jsonSchema = schema;
        return this;
    }

    public String grammar() {
        return grammar;
    }

    public String jsonSchema() {
        return jsonSchema;
    }

    public boolean ignoreEos() {
        return ignoreEos;
    }
}
