package dev.vkllm;

/**
 * Receives the generated text piece by piece, on the thread that called generate() or chat(),
 * before that call returns.
 */
public interface TokenCallback {
    /**
     * A piece of the generated text: whole characters (a character the model produces over
     * several tokens arrives once complete). Return false to stop the generation; generate() then
     * returns the text so far. An exception thrown here stops the generation too and is rethrown
     * by generate() as it is.
     */
    boolean onToken(String piece);
}
