package dev.vkllm;

import java.util.Locale;

/** Session.stats(): counts and timings of the session's last finished generation. */
public final class GenerationStats {
    /** Why the generation ended. */
    public enum Finish {
        /** No generation finished yet. */
        NONE,
        /** An end-of-generation token or a stop string. */
        STOP,
        /** nPredict tokens, or the context is full. */
        LENGTH,
        /** cancel(), a callback that returned false or threw. */
        CANCELLED,
        ERROR
    }

    private final int promptTokens;
    private final int cachedTokens;
    private final int generatedTokens;
    private final int nPast;
    private final double promptMs;
    private final double generateMs;
    private final double promptTokensPerS;
    private final double generateTokensPerS;
    private final Finish finish;
    private final int draftTokens;
    private final int acceptedTokens;
    private final int blendedDocuments, storedDocuments, blendedTokens, recomputedTokens;

    // Made by the JNI library from vkllm_generation_stats.
    GenerationStats(int promptTokens, int cachedTokens, int generatedTokens, int nPast, double promptMs,
                    double generateMs, double promptTokensPerS, double generateTokensPerS, int finish,
                    int draftTokens, int acceptedTokens, int blendedDocuments, int storedDocuments,
                    int blendedTokens, int recomputedTokens) {
        this.promptTokens = promptTokens;
        this.cachedTokens = cachedTokens;
        this.generatedTokens = generatedTokens;
        this.nPast = nPast;
        this.promptMs = promptMs;
        this.generateMs = generateMs;
        this.promptTokensPerS = promptTokensPerS;
        this.generateTokensPerS = generateTokensPerS;
        Finish[] all = Finish.values();
        this.finish = finish >= 0 && finish < all.length ? all[finish] : Finish.ERROR;
        this.draftTokens = draftTokens;
        this.acceptedTokens = acceptedTokens;
        this.blendedDocuments = blendedDocuments;
        this.storedDocuments = storedDocuments;
        this.blendedTokens = blendedTokens;
        this.recomputedTokens = recomputedTokens;
    }

    /** CacheBlend (ModelParams.blend, Session.generateDocuments): documents blended in rather than evaluated. */
    public int blendedDocuments() {
        return blendedDocuments;
    }

    /** Of blendedDocuments, those the document store held. */
    public int storedDocuments() {
        return storedDocuments;
    }

    /** The blended documents' tokens. */
    public int blendedTokens() {
        return blendedTokens;
    }

    /** Of blendedTokens, those evaluated again. */
    public int recomputedTokens() {
        return recomputedTokens;
    }

    /** Speculative decoding (ModelParams.draftModel, lookup): tokens drafted and verified. */
    public int draftTokens() {
        return draftTokens;
    }

    /** Of draftTokens, those the model kept (each a token without a forward pass of its own). */
    public int acceptedTokens() {
        return acceptedTokens;
    }

    /** Tokens of the prompt, the conversation before it included. */
    public int promptTokens() {
        return promptTokens;
    }

    /** Of promptTokens, those reused from the session's cache. */
    public int cachedTokens() {
        return cachedTokens;
    }

    public int generatedTokens() {
        return generatedTokens;
    }

    /** Tokens in the session's conversation now. */
    public int nPast() {
        return nPast;
    }

    public double promptMs() {
        return promptMs;
    }

    public double generateMs() {
        return generateMs;
    }

    public double promptTokensPerS() {
        return promptTokensPerS;
    }

    public double generateTokensPerS() {
        return generateTokensPerS;
    }

    public Finish finish() {
        return finish;
    }

    @Override
    public String toString() {
        return String.format(Locale.ROOT, "%d prompt tokens (%d cached), %d generated, %.1f tokens/s, %s", promptTokens,
                             cachedTokens, generatedTokens, generateTokensPerS, finish);
    }
}
