package dev.vkllm;

/** One message of a conversation, for Session.chat() and Model.applyChatTemplate(). */
public final class ChatMessage {
    private final String role;
    private final String content;

    /** {@code role}: "system", "user", "assistant", or whatever else the chat template knows. */
    public ChatMessage(String role, String content) {
        if (role == null || content == null) throw new NullPointerException("role and content must not be null");
        this.role = role;
        this.content = content;
    }

    public static ChatMessage system(String content) {
        return new ChatMessage("system", content);
    }

    public static ChatMessage user(String content) {
        return new ChatMessage("user", content);
    }

    public static ChatMessage assistant(String content) {
        return new ChatMessage("assistant", content);
    }

    public String role() {
        return role;
    }

    public String content() {
        return content;
    }

    @Override
    public String toString() {
        return role + ": " + content;
    }
}
