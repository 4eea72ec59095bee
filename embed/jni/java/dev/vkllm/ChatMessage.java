package dev.vkllm;

/** One message of a conversation, for Session.chat() and Model.applyChatTemplate(). */
public final class ChatMessage {
    private final String role;
    private final String content;
    private final java.util.List<byte[]> images;

    /** {@code role}: "system", "user", "assistant", or whatever else the chat template knows. */
    public ChatMessage(String role, String content) {
        this(role, content, java.util.Collections.<byte[]>emptyList());
    }

    /**
     * A message with pictures: the bytes of PNG, JPEG, WebP, GIF or BMP files, placed before the
     * text, or at its {@code <__media__>} markers (one per image). Needs a model loaded with a vision
     * encoder (ModelParams.mmproj).
     */
    public ChatMessage(String role, String content, java.util.List<byte[]> images) {
        if (role == null || content == null || images == null)
            throw new NullPointerException("role, content and images must not be null");
        for (byte[] b : images)
            if (b == null) throw new NullPointerException("an image must not be null");
        this.role = role;
        this.content = content;
        this.images = java.util.Collections.unmodifiableList(new java.util.ArrayList<byte[]>(images));
    }

    /** A user message with pictures (see the constructor). */
    public static ChatMessage user(String content, byte[]... images) {
        return new ChatMessage("user", content, java.util.Arrays.asList(images));
    }

    /** The message's pictures (file bytes), in order; empty for a text message. */
    public java.util.List<byte[]> images() {
        return images;
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
