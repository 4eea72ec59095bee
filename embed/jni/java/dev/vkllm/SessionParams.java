package dev.vkllm;

/** How Model.newSession() opens a session; {@code new SessionParams()} holds the C API's defaults. */
public final class SessionParams {
    private boolean parseSpecial;

    public SessionParams() {
        parseSpecial = Native.sessionDefaultParseSpecial();
    }

    /** generate(): control-token texts in the prompt ("<|im_start|>") become control tokens; default false. */
    public SessionParams parseSpecial(boolean on) {
        parseSpecial = on;
        return this;
    }

    public boolean parseSpecial() {
        return parseSpecial;
    }
}
