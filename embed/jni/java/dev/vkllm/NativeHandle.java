package dev.vkllm;

import java.util.ArrayList;
import java.util.function.LongConsumer;

/**
 * A C handle and the threads using it, so that close() never frees it under a running call.
 *
 * <p>Calls take the handle with use() and give it back with done(); no lock is held in between,
 * so that cancel() (withLive) stays callable while a generation runs. close() stops new uses,
 * stops the running ones (cancel) and waits for them before the handle is freed.
 */
final class NativeHandle {
    private final String what;
    private long value;
    private boolean closing;
    // The threads inside a call, one entry per call: close() from one of them (a callback) would
    // wait for itself.
    private final ArrayList<Thread> users = new ArrayList<Thread>();

    NativeHandle(String what, long value) {
        this.what = what;
        this.value = value;
    }

    synchronized long use() {
        if (closing) throw new IllegalStateException("this vkllm " + what + " is closed");
        users.add(Thread.currentThread());
        return value;
    }

    synchronized void done() {
        users.remove(Thread.currentThread());
        if (users.isEmpty()) notifyAll();
    }

    /** Runs op on the handle unless it is freed; under the lock, so close() cannot free it meanwhile. */
    synchronized void withLive(LongConsumer op) {
        if (value != 0) op.accept(value);
    }

    synchronized boolean usedByThisThread() {
        return users.contains(Thread.currentThread());
    }

    synchronized boolean isClosed() {
        return closing;
    }

    /**
     * Stops new uses and waits for the running ones, calling stop on the handle every 50 ms while
     * they run. Returns the handle for the caller to free and then call freed(), or 0 when it is
     * closed already (after waiting for a close running on another thread to finish).
     */
    synchronized long close(LongConsumer stop) {
        if (value == 0) return 0;
        if (users.contains(Thread.currentThread())) {
            throw new IllegalStateException("a vkllm " + what + " cannot be closed from inside one of its own calls "
                                            + "(a callback): cancel() there, and close() after the call returns");
        }
        boolean interrupted = false;
        try {
            if (closing) {
                while (value != 0) {
                    try {
                        wait();
                    } catch (InterruptedException e) {
                        interrupted = true;
                    }
                }
                return 0;
            }
            closing = true;
            while (!users.isEmpty()) {
                if (stop != null) stop.accept(value);
                try {
                    wait(50);
                } catch (InterruptedException e) {
                    // The handle must still be freed: finish, and keep the interrupt for the caller.
                    interrupted = true;
                }
            }
            return value;
        } finally {
            if (interrupted) Thread.currentThread().interrupt();
        }
    }

    synchronized void freed() {
        value = 0;
        notifyAll();
    }
}
