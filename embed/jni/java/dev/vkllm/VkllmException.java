package dev.vkllm;

/**
 * A failure reported by libvkllm: the message is the library's own (vkllm_last_error), which
 * names the problem, e.g. the file that does not exist.
 *
 * <p>Unchecked, like IllegalStateException, so that Kotlin and lambda-heavy code need no
 * boilerplate. Using a closed Model or Session throws IllegalStateException instead: that is a
 * mistake in the calling code, not something the library reported.
 */
public class VkllmException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    /** The kinds of failure, one for each vkllm_status of the C API. */
    public enum Status {
        OK(0),
        CANCELLED(1),
        INVALID_ARGUMENT(2),
        INVALID_HANDLE(3),
        FILE(4),
        MODEL(5),
        DEVICE(6),
        OUT_OF_MEMORY(7),
        CONTEXT_FULL(8),
        BUSY(9),
        TEMPLATE(10),
        BUFFER_TOO_SMALL(11),
        INTERNAL(12);

        private final int code;

        Status(int code) {
            this.code = code;
        }

        /** The vkllm_status value. */
        public int code() {
            return code;
        }

        static Status of(int code) {
            for (Status s : values()) {
                if (s.code == code) return s;
            }
            // A newer libvkllm may add codes; they still mean failure.
            return INTERNAL;
        }
    }

    private final int code;

    public VkllmException(String message, Status status) {
        this(message, status.code());
    }

    // Called by the JNI library with the raw vkllm_status.
    VkllmException(String message, int code) {
        super(message);
        this.code = code;
    }

    public Status status() {
        return Status.of(code);
    }

    /** The raw vkllm_status, also for codes this jar does not know. */
    public int statusCode() {
        return code;
    }
}
