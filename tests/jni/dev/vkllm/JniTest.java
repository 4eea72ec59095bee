package dev.vkllm;

import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

/**
 * The Java binding on a real JVM: `java dev.vkllm.JniTest NAME MODELS_DIR` runs the test method
 * NAME. tests/CMakeLists.txt registers one CTest entry per @Test method (jni.NAME), run with
 * -Xcheck:jni so that JNI misuse (a pending exception ignored, local references piling up) fails
 * the test as well. In package dev.vkllm to reach the text conversions of Native.
 */
public final class JniTest {
    @Retention(RetentionPolicy.RUNTIME)
    @Target(ElementType.METHOD)
    @interface Test {}

    // Exit status CTest reads as "skipped" (SKIP_RETURN_CODE): the models folder is absent.
    static final int SKIPPED = 77;

    static Path modelsDir;

    static final class Skip extends RuntimeException {
        private static final long serialVersionUID = 1L;

        Skip(String why) {
            super(why);
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: JniTest TEST_NAME MODELS_DIR");
            System.exit(2);
        }
        modelsDir = Paths.get(args[1]);
        Method m = JniTest.class.getDeclaredMethod(args[0]);
        if (!m.isAnnotationPresent(Test.class)) throw new IllegalArgumentException(args[0] + " is not a test");
        try {
            m.invoke(null);
        } catch (InvocationTargetException e) {
            if (e.getCause() instanceof Skip) {
                System.out.println("skipped: " + e.getCause().getMessage());
                System.exit(SKIPPED);
            }
            throw e;
        }
        for (String line : logged) System.out.println("log " + line);
        if (!validationErrors.isEmpty()) {
            throw new AssertionError(validationErrors.size() + " validation errors, the first: " + validationErrors.get(0));
        }
        System.out.println(args[0] + ": ok");
    }

    // ---- helpers -------------------------------------------------------------------------------

    static void check(boolean ok, String what) {
        if (!ok) throw new AssertionError(what);
    }

    static void checkEquals(Object expected, Object actual, String what) {
        if (expected == null ? actual != null : !expected.equals(actual)) {
            throw new AssertionError(what + ": expected <" + expected + "> but got <" + actual + ">");
        }
    }

    interface Body {
        void run() throws Exception;
    }

    static <T extends Throwable> T expectThrows(Class<T> type, Body body, String what) throws Exception {
        try {
            body.run();
        } catch (Throwable t) {
            if (type.isInstance(t)) return type.cast(t);
            throw new AssertionError(what + ": expected " + type.getSimpleName() + " but got " + t, t);
        }
        throw new AssertionError(what + ": expected " + type.getSimpleName() + ", nothing was thrown");
    }

    static String modelPath(String file) {
        Path p = modelsDir.resolve(file);
        if (!Files.exists(p)) throw new Skip(p + " not found (the test models live in ../shared/models)");
        return p.toString();
    }

    static String expectedStory() throws Exception {
        return new String(Files.readAllBytes(Paths.get(modelPath("stories260K.greedy200.txt"))),
                          StandardCharsets.UTF_8);
    }

    // Every message the models of a test logged, and the validation errors among them (which
    // fail the test, as everywhere in the suite).
    static final List<String> logged = Collections.synchronizedList(new ArrayList<String>());
    static final List<String> validationErrors = Collections.synchronizedList(new ArrayList<String>());
    static final LogListener LOG = (level, message) -> {
        logged.add(level + ": " + message);
        if (level == LogListener.Level.ERROR) validationErrors.add(message);
    };

    // The Khronos validation layer on, its messages collected; no pipeline cache on disk: tests
    // leave nothing behind in the user's cache folder.
    static ModelParams params() {
        return new ModelParams().cacheDir("").validation(true).log(LOG);
    }

    static Model stories() {
        return Model.load(modelPath("stories260K.gguf"), params());
    }

    static GenerateParams greedy(int n) {
        return new GenerateParams().temperature(0f).nPredict(n);
    }

    // ---- tests ---------------------------------------------------------------------------------

    @Test
    static void greedy_story() throws Exception {
        String expected = expectedStory();
        try (Model model = stories(); Session s = model.newSession()) {
            StringBuilder pieces = new StringBuilder();
            AtomicInteger calls = new AtomicInteger();
            String text = s.generate("", greedy(200), piece -> {
                calls.incrementAndGet();
                pieces.append(piece);
                return true;
            });
            checkEquals(expected, text, "the published greedy story");
            checkEquals(text, pieces.toString(), "the pieces put together");
            check(calls.get() > 50, "one callback per piece, got " + calls.get());
            GenerationStats st = s.stats();
            check(st.generatedTokens() > 0 && st.generatedTokens() <= 200, "generated tokens: " + st);
            check(st.finish() == GenerationStats.Finish.STOP || st.finish() == GenerationStats.Finish.LENGTH,
                  "finish: " + st.finish());
            // reset(): the same story again, from BOS.
            s.reset();
            checkEquals(expected, s.generate("", greedy(200)), "after reset()");
        }
    }

    @Test
    static void speculative_decoding() throws Exception {
        String expected = expectedStory();
        // A draft model (stories260K drafting for itself) and prompt lookup: the published story.
        ModelParams[] ways = {params().draftModel(modelPath("stories260K.gguf")).draftMax(6), params().lookup(2)};
        for (ModelParams p : ways) {
            try (Model model = Model.load(modelPath("stories260K.gguf"), p); Session s = model.newSession()) {
                checkEquals(expected, s.generate("", greedy(200)), "the published story with drafts");
                GenerationStats st = s.stats();
                check(st.draftTokens() > 0 && st.acceptedTokens() > 0 && st.acceptedTokens() <= st.draftTokens(),
                      "drafts: " + st.acceptedTokens() + " of " + st.draftTokens());
            }
        }
        VkllmException e = expectThrows(VkllmException.class,
            () -> Model.load(modelPath("stories260K.gguf"), params().draftModel(modelPath("llama-2-tiny-random.gguf"))),
            "a draft of another vocabulary");
        check(e.getMessage().contains("it has 32000 tokens, the model 512"), e.getMessage());
        expectThrows(IllegalArgumentException.class, () -> params().lookup(-1), "a negative lookup");
    }

    @Test
    static void documents_blended_from_the_store() throws Exception {
        java.util.List<String> docs = java.util.List.of(" Lily had a red ball. She liked to throw it high in the sky.",
                                                        " Tom was a little dog who lived in a big house with a garden.");
        String plain;
        try (Model model = Model.load(modelPath("stories260K.gguf"), params()); Session s = model.newSession()) {
            plain = s.generateDocuments("Stories.", docs, " Who had a red ball? It was", greedy(8), null);
            check(!plain.isEmpty(), "documents evaluated as text");
        }
        try (Model model = Model.load(modelPath("stories260K.gguf"), params().blend(true).blendRatio(0.15f));
             Session s = model.newSession()) {
            String blended = s.generateDocuments("Stories.", docs, " Who had a red ball? It was", greedy(8), null);
            check(!blended.isEmpty(), "documents blended");
            checkEquals(8, s.stats().generatedTokens(), "generated tokens");
            checkEquals(2, s.stats().blendedDocuments(), "documents blended");
            check(s.stats().recomputedTokens() > 0 && s.stats().recomputedTokens() < s.stats().blendedTokens(),
                  "recomputed " + s.stats().recomputedTokens() + " of " + s.stats().blendedTokens());
            s.reset();
            String again = s.generateDocuments("Other stories.", java.util.List.of(docs.get(1), docs.get(0)),
                                               " Who was a dog? It was", greedy(8), null);
            check(!again.isEmpty(), "documents from the store, in another order");
            checkEquals(2, s.stats().storedDocuments(), "documents the store held");
        }
        expectThrows(IllegalArgumentException.class, () -> params().blendRatio(1.5f), "a ratio past 1");
        VkllmException e = expectThrows(VkllmException.class,
            () -> Model.load(modelPath("stories260K.gguf"), params().kvStore("/tmp")), "kvStore without blend");
        check(e.getMessage().contains("set blend too"), e.getMessage());
    }

    @Test
    static void defaults_and_fluent_params() throws Exception {
        GenerateParams g = new GenerateParams();
        checkEquals(0.8f, g.temperature(), "default temperature");
        checkEquals(40, g.topK(), "default top_k");
        checkEquals(128, g.nPredict(), "default n_predict");
        checkEquals(GenerateParams.SEED_RANDOM, g.seed(), "default seed");
        check(g.temperature(0f).nPredict(200).seed(1) == g, "the setters chain on the same object");
        checkEquals(0f, g.temperature(), "temperature set");
        checkEquals(200, g.nPredict(), "n_predict set");
        checkEquals(1L, g.seed(), "seed set");
        ModelParams m = new ModelParams();
        checkEquals(-1, m.deviceIndex(), "default device_index");
        checkEquals(1, m.maxSessions(), "default max_sessions");
        checkEquals(0, m.ubatch(), "default ubatch (0: 64, or an embedding model's context)");
        checkEquals(ModelParams.KvType.F16, m.kvType(), "default kv type");
        check(!new SessionParams().parseSpecial(), "default parse_special");
        check(Model.libraryVersion().matches("\\d+\\.\\d+\\.\\d+"), "version " + Model.libraryVersion());
    }

    // devices / split reach vkllm_model_params: a list of one device loads as that device, and a
    // split the library refuses comes back as a VkllmException naming the problem. (The split
    // itself over two devices: capi.test_capi_two_devices.)
    @Test
    static void devices_and_split() throws Exception {
        try (Model model = Model.load(modelPath("stories260K.gguf"), params().devices("0")); Session s = model.newSession()) {
            check(expectedStory().startsWith(s.generate("", greedy(20))), "the published story on devices \"0\"");
        }
        VkllmException twice = expectThrows(VkllmException.class,
            () -> Model.load(modelPath("stories260K.gguf"), params().devices("0,0")), "a device named twice");
        checkEquals(VkllmException.Status.INVALID_ARGUMENT, twice.status(), "status");
        check(twice.getMessage().contains("named twice"), "the message says so: " + twice.getMessage());
        VkllmException alone = expectThrows(VkllmException.class,
            () -> Model.load(modelPath("stories260K.gguf"), params().split("layer:1,1")), "split without devices");
        check(alone.getMessage().contains("devices is NULL"), "the message says so: " + alone.getMessage());
    }

    // kvBudget reaches vkllm_model_params: the sessions share a pool of that many tokens (which
    // also caps nCtx), and still tell the published story. (Eviction: capi.test_capi.)
    @Test
    static void kv_budget() throws Exception {
        try (Model model = Model.load(modelPath("stories260K.gguf"), params().maxSessions(2).kvBudget(64));
             Session a = model.newSession(); Session b = model.newSession()) {
            checkEquals(64, model.info().kvBudget(), "the pool's tokens");
            checkEquals(64, model.info().nCtx(), "a session's context, capped by the pool");
            check(expectedStory().startsWith(a.generate("", greedy(20))), "the published story in session a");
            check(expectedStory().startsWith(b.generate("", greedy(20))), "the published story in session b");
        }
        try (Model model = stories()) {
            checkEquals(model.info().nCtx(), model.info().kvBudget(), "one session's default pool: its context");
        }
        expectThrows(IllegalArgumentException.class,
            () -> Model.load(modelPath("stories260K.gguf"), params().kvBudget(-1)), "a negative kvBudget");
        VkllmException small = expectThrows(VkllmException.class,
            () -> Model.load(modelPath("stories260K.gguf"), params().kvBudget(64).nCtx(128)), "nCtx beyond the pool");
        checkEquals(VkllmException.Status.INVALID_ARGUMENT, small.status(), "status");
        check(small.getMessage().contains("KV budget"), "the message says so: " + small.getMessage());
    }

    @Test
    static void seeded_sampling_repeats() throws Exception {
        try (Model model = stories(); Session s = model.newSession()) {
            GenerateParams p = new GenerateParams().temperature(1.0f).nPredict(40).seed(1234);
            String a = s.generate("Once upon a time", p);
            s.reset();
            String b = s.generate("Once upon a time", p);
            checkEquals(a, b, "the same seed gives the same text");
            check(!a.isEmpty(), "some text");
        }
    }

    @Test
    static void grammar_and_json_schema() throws Exception {
        try (Model model = stories(); Session s = model.newSession()) {
            GenerateParams p = greedy(20).grammar("root ::= \" and \" (\"a cat\" | \"a dog\") \".\"");
            String text = s.generate("Once upon a time", p);
            check(text.equals(" and a cat.") || text.equals(" and a dog."), "grammar output: " + text);
            s.reset();
            String json = s.generate("Once upon a time", new GenerateParams().temperature(0.9f).seed(5).nPredict(60)
                    .jsonSchema("{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":1,"
                            + "\"maximum\":9}},\"required\":[\"n\"],\"additionalProperties\":false}"));
            check(json.replaceAll("\\s", "").matches("\\{\"n\":[1-9]\\}"), "json output: " + json);
            VkllmException e = expectThrows(VkllmException.class,
                    () -> s.generate("x", greedy(4).jsonSchema("{\"not\":{}}")), "an unsupported schema");
            checkEquals(VkllmException.Status.INVALID_ARGUMENT, e.status(), "status");
            check(e.getMessage().contains("'not'"), "names the keyword: " + e.getMessage());
        }
    }

    @Test
    static void chat_json_forces_tool_calls() throws Exception {
        String tools = "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{"
                + "\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":12}},"
                + "\"required\":[\"city\"],\"additionalProperties\":false}}}]";
        String messages = "[{\"role\":\"user\",\"content\":\"Tell me a story.\"}]";
        try (Model model = stories(); Session s = model.newSession()) {
            StringBuilder pieces = new StringBuilder();
            String content = s.chatJson(messages, tools, "required", false,
                    new GenerateParams().temperature(0.9f).seed(11).nPredict(200), piece -> {
                        pieces.append(piece);
                        return true;
                    });
            checkEquals("", content, "the answer is the call alone");
            checkEquals("", pieces.toString(), "no markup reaches the callback");
            String calls = s.toolCalls();
            check(calls.matches("\\[\\{\"id\":\"call_[A-Za-z0-9]{24}\",\"type\":\"function\",\"function\":"
                    + "\\{\"name\":\"get_weather\",\"arguments\":\"\\{\\\\\"city\\\\\":.*\\}\"\\}\\}\\]"),
                  "one get_weather call: " + calls);
            VkllmException e = expectThrows(VkllmException.class,
                    () -> s.chatJson(messages, tools, "nope", true, greedy(4), null), "an unknown tool");
            checkEquals(VkllmException.Status.INVALID_ARGUMENT, e.status(), "status");
            check(e.getMessage().contains("nope"), "names the tool: " + e.getMessage());
        }
    }

    @Test
    static void chat_json_splits_reasoning() throws Exception {
        // A template that opens the reasoning block for the model, as QwQ's does.
        java.nio.file.Path tmpl = java.nio.file.Files.createTempFile("vkllm_think", ".jinja");
        java.nio.file.Files.writeString(tmpl,
                "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant: <think>\n");
        try (Model model = Model.load(modelPath("stories260K.gguf"), params().chatTemplate(tmpl.toString()));
             Session s = model.newSession()) {
            StringBuilder pieces = new StringBuilder();
            // stories260K never closes a block by itself: a grammar writes it.
            String content = s.chatJson("[{\"role\":\"user\",\"content\":\"Hi.\"}]", null, null, true,
                    greedy(40).grammar("root ::= \"Cats like fish.\" \"</think>\" \"A cat.\""), piece -> {
                        pieces.append(piece);
                        return true;
                    });
            checkEquals("A cat.", content, "the content");
            checkEquals("A cat.", pieces.toString(), "the callback gets the content only");
            checkEquals("Cats like fish.", s.reasoning(), "the reasoning");
        } finally {
            java.nio.file.Files.deleteIfExists(tmpl);
        }
    }

    @Test
    static void model_info_and_tokens() throws Exception {
        try (Model model = stories()) {
            ModelInfo info = model.info();
            checkEquals("llama", info.architecture(), "architecture");
            checkEquals(512, info.nVocab(), "vocabulary");
            checkEquals(5, info.nLayers(), "layers");
            checkEquals(64, info.dim(), "dim");
            check(!info.device().isEmpty(), "device name");
            int[] ids = model.tokenize("Once upon a time", true, false);
            checkEquals(info.bosToken(), ids[0], "BOS first");
            checkEquals("Once upon a time", model.detokenize(Arrays.copyOfRange(ids, 1, ids.length)).trim(),
                        "detokenize(tokenize(text))");
        }
    }

    // Text crosses JNI as real UTF-8: characters outside the BMP (emoji) are where JNI's own
    // "modified UTF-8" functions break. The conversions are checked against Java's own UTF-8
    // codec, on chosen cases and on random bytes and strings; then through a model.
    @Test
    static void utf8_text() throws Exception {
        List<byte[]> cases = new ArrayList<byte[]>();
        for (String s : new String[] {"", "plain ascii", "h\u00e9llo w\u00f6rld", "\u65e5\u672c\u8a9e",
                                      "\ud83d\ude00 emoji \ud83e\udd99", "nul\u0000inside"}) {
            cases.add(s.getBytes(StandardCharsets.UTF_8));
        }
        int[][] raw = {
            {0xF0, 0x9F, 0x98, 0x80},        // U+1F600, 4 bytes
            {0xF0, 0x9F, 0x98},              // truncated at the end
            {0xF0, 0x9F, 0x41},              // broken by ASCII
            {0xC0, 0x80},                    // overlong NUL (modified UTF-8's NUL)
            {0xED, 0xA0, 0xBD, 0xED, 0xB8, 0x80},  // surrogates encoded as 3 bytes (modified UTF-8's emoji)
            {0xF4, 0x90, 0x80, 0x80},        // above U+10FFFF
            {0xE0, 0x80, 0xAF},              // overlong
            {0x80, 0xBF, 0xFE, 0xFF},        // stray continuation bytes, never-valid bytes
            {0xE2, 0x82},                    // truncated 3-byte
            {0xF8, 0x88, 0x80, 0x80, 0x80},  // 5-byte form
        };
        for (int[] r : raw) {
            byte[] b = new byte[r.length];
            for (int i = 0; i < r.length; ++i) b[i] = (byte) r[i];
            cases.add(b);
        }
        Random rnd = new Random(42);
        byte[] interesting = {0x41, 0x00, (byte) 0x80, (byte) 0x8F, (byte) 0x90, (byte) 0x9F, (byte) 0xA0,
                              (byte) 0xBF, (byte) 0xC0, (byte) 0xC2, (byte) 0xDF, (byte) 0xE0, (byte) 0xED,
                              (byte) 0xEF, (byte) 0xF0, (byte) 0xF4, (byte) 0xF5, (byte) 0xFF};
        for (int n = 0; n < 20000; ++n) {
            byte[] b = new byte[rnd.nextInt(12)];
            for (int i = 0; i < b.length; ++i) {
                b[i] = rnd.nextBoolean() ? interesting[rnd.nextInt(interesting.length)] : (byte) rnd.nextInt(256);
            }
            cases.add(b);
        }
        for (byte[] b : cases) {
            checkEquals(new String(b, StandardCharsets.UTF_8), Native.decodeUtf8(b),
                        "UTF-8 -> String of " + Arrays.toString(b));
        }
        for (int n = 0; n < 20000; ++n) {
            char[] c = new char[rnd.nextInt(8)];
            for (int i = 0; i < c.length; ++i) {
                int k = rnd.nextInt(4);
                c[i] = k == 0 ? (char) rnd.nextInt(0x80)
                     : k == 1 ? (char) (0xD800 + rnd.nextInt(0x800))  // surrogates, paired or not
                     : (char) rnd.nextInt(0x10000);
            }
            String s = new String(c);
            check(Arrays.equals(s.getBytes(StandardCharsets.UTF_8), Native.encodeUtf8(s)),
                  "String -> UTF-8 of " + Arrays.toString(c));
        }
        // Through the model: stories260K falls back to byte tokens for what its 512 pieces lack,
        // so an emoji becomes 4 byte tokens and comes back whole.
        try (Model model = stories()) {
            String text = "h\u00e9llo \ud83d\ude00 \u65e5\u672c";
            checkEquals(text, model.detokenize(model.tokenize(text, false, false)).trim(),
                        "detokenize(tokenize()) of non-ASCII text");
        }
    }

    @Test
    static void cancel_from_another_thread() throws Exception {
        try (Model model = stories(); Session s = model.newSession()) {
            CountDownLatch reached = new CountDownLatch(1);
            CountDownLatch cancelled = new CountDownLatch(1);
            AtomicInteger pieces = new AtomicInteger();
            AtomicInteger afterCancel = new AtomicInteger(-1);
            Thread ui = new Thread(() -> {
                try {
                    reached.await();
                    s.cancel();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                } finally {
                    cancelled.countDown();
                }
            });
            ui.start();
            String text = s.generate("Once upon a time", greedy(400).ignoreEos(true), piece -> {
                int n = pieces.incrementAndGet();
                if (afterCancel.get() >= 0) afterCancel.incrementAndGet();
                if (n == 10) {
                    // Hold this generation until the other thread has cancelled it: from here on
                    // at most one more piece may come.
                    reached.countDown();
                    try {
                        check(cancelled.await(60, TimeUnit.SECONDS), "cancel() returned");
                    } catch (InterruptedException e) {
                        throw new IllegalStateException(e);
                    }
                    afterCancel.set(0);
                }
                return true;
            });
            ui.join();
            check(afterCancel.get() >= 0, "the generation reached the cancel point");
            check(afterCancel.get() <= 1, "pieces after cancel(): " + afterCancel.get());
            checkEquals(GenerationStats.Finish.CANCELLED, s.stats().finish(), "finish");
            check(!text.isEmpty(), "the text so far is returned");
            // The session goes on after a cancel, and cancel() with nothing running is harmless.
            s.cancel();
            check(!s.generate(" The end.", greedy(8)).isEmpty(), "a generation after the cancelled one");
        }
    }

    @Test
    static void callback_false_stops() throws Exception {
        try (Model model = stories(); Session s = model.newSession()) {
            StringBuilder seen = new StringBuilder();
            AtomicInteger calls = new AtomicInteger();
            String text = s.generate("", greedy(200), piece -> {
                seen.append(piece);
                return calls.incrementAndGet() < 5;
            });
            checkEquals(5, calls.get(), "callbacks until false");
            checkEquals(seen.toString(), text, "the text so far");
            check(expectedStory().startsWith(text), "the start of the story");
            checkEquals(GenerationStats.Finish.CANCELLED, s.stats().finish(), "finish");
        }
    }

    static final class MyFailure extends RuntimeException {
        private static final long serialVersionUID = 1L;

        MyFailure(String m) {
            super(m);
        }
    }

    @Test
    static void callback_exception_reaches_caller() throws Exception {
        try (Model model = stories(); Session s = model.newSession()) {
            AtomicInteger calls = new AtomicInteger();
            AtomicReference<MyFailure> thrown = new AtomicReference<MyFailure>();
            MyFailure caught = expectThrows(MyFailure.class, () -> s.generate("", greedy(200), piece -> {
                if (calls.incrementAndGet() == 3) {
                    thrown.set(new MyFailure("stop here"));
                    throw thrown.get();
                }
                return true;
            }), "generate() with a throwing callback");
            check(caught == thrown.get(), "the very exception object, not a wrapper");
            checkEquals(3, calls.get(), "no callback after the exception");
            // An Error too (a failed assertion in a callback).
            AssertionError err = expectThrows(AssertionError.class, () -> s.generate("", greedy(10), piece -> {
                throw new AssertionError("from the callback");
            }), "generate() with a callback that throws an Error");
            checkEquals("from the callback", err.getMessage(), "the Error's message");
            // The session still works.
            s.reset();
            checkEquals(expectedStory(), s.generate("", greedy(200)), "the story after the exceptions");
        }
    }

    @Test
    static void close_twice_and_use_after_close() throws Exception {
        Model model = stories();
        Session a = model.newSession();
        a.close();
        a.close();
        check(a.isClosed(), "isClosed()");
        IllegalStateException e = expectThrows(IllegalStateException.class, () -> a.generate("x"),
                                               "generate() on a closed session");
        check(e.getMessage().contains("closed"), "message: " + e.getMessage());
        expectThrows(IllegalStateException.class, a::reset, "reset() on a closed session");
        expectThrows(IllegalStateException.class, a::stats, "stats() on a closed session");
        a.cancel();  // nothing runs: harmless, also when closed

        // Model.close() with a session still open closes it; the Java object notices.
        Session b = model.newSession();
        model.close();
        model.close();
        check(b.isClosed(), "the model's open session is closed with it");
        expectThrows(IllegalStateException.class, () -> b.generate("x"), "generate() on a session of a closed model");
        b.close();
        expectThrows(IllegalStateException.class, model::newSession, "newSession() on a closed model");
        expectThrows(IllegalStateException.class, model::info, "info() on a closed model");
        expectThrows(IllegalStateException.class, () -> model.tokenize("x", true, false), "tokenize() on a closed model");
    }

    @Test
    static void close_while_generating() throws Exception {
        try (Model model = stories()) {
            // Session.close() from another thread: cancels, waits for generate() to return, frees.
            Session s = model.newSession();
            CountDownLatch started = new CountDownLatch(1);
            AtomicReference<Object> result = new AtomicReference<Object>();
            Thread gen = new Thread(() -> {
                try {
                    result.set(s.generate("", greedy(2000).ignoreEos(true), piece -> {
                        started.countDown();
                        return true;
                    }));
                } catch (Throwable t) {
                    result.set(t);
                }
            });
            gen.start();
            check(started.await(60, TimeUnit.SECONDS), "the generation started");
            s.close();
            gen.join(60000);
            check(!gen.isAlive(), "generate() returned");
            check(result.get() instanceof String, "generate() returned the text so far: " + result.get());
            check(s.isClosed(), "closed");

            // Model.close() from another thread while one of its sessions generates.
            Session t = model.newSession();
            CountDownLatch started2 = new CountDownLatch(1);
            Thread gen2 = new Thread(() -> {
                try {
                    result.set(t.generate("", greedy(2000).ignoreEos(true), piece -> {
                        started2.countDown();
                        return true;
                    }));
                } catch (Throwable e) {
                    result.set(e);
                }
            });
            gen2.start();
            check(started2.await(60, TimeUnit.SECONDS), "the second generation started");
            model.close();
            gen2.join(60000);
            check(!gen2.isAlive(), "generate() returned after Model.close()");
            check(result.get() instanceof String, "generate() returned the text so far: " + result.get());
            check(t.isClosed() && model.isClosed(), "both closed");
        }
    }

    @Test
    static void close_inside_callback_is_refused() throws Exception {
        try (Model model = stories(); Session s = model.newSession()) {
            IllegalStateException e = expectThrows(IllegalStateException.class, () -> s.generate("", greedy(20), p -> {
                s.close();
                return true;
            }), "close() inside the session's own callback");
            check(e.getMessage().contains("callback"), "message: " + e.getMessage());
            expectThrows(IllegalStateException.class, () -> s.generate("", greedy(20), p -> {
                model.close();
                return true;
            }), "Model.close() inside a session's callback");
            check(!s.isClosed() && !model.isClosed(), "still open");
            check(!s.generate("", greedy(5)).isEmpty(), "still usable");
        }
    }

    @Test
    static void one_generation_at_a_time() throws Exception {
        try (Model model = stories(); Session s = model.newSession()) {
            AtomicReference<Throwable> second = new AtomicReference<Throwable>();
            s.generate("", greedy(20), piece -> {
                if (second.get() == null) {
                    Thread t = new Thread(() -> {
                        try {
                            s.generate("x", greedy(5));
                            second.set(new AssertionError("a second generate() ran"));
                        } catch (Throwable e) {
                            second.set(e);
                        }
                    });
                    t.start();
                    try {
                        t.join();
                    } catch (InterruptedException e) {
                        throw new IllegalStateException(e);
                    }
                }
                return true;
            });
            check(second.get() instanceof VkllmException, "BUSY from the second generate(): " + second.get());
            checkEquals(VkllmException.Status.BUSY, ((VkllmException) second.get()).status(), "status");
        }
    }

    @Test
    static void sessions_on_two_threads() throws Exception {
        String expected = expectedStory();
        try (Model model = Model.load(modelPath("stories260K.gguf"), params().maxSessions(2))) {
            String[] out = new String[2];
            Thread[] threads = new Thread[2];
            for (int i = 0; i < 2; ++i) {
                final int k = i;
                threads[i] = new Thread(() -> {
                    try (Session s = model.newSession()) {
                        out[k] = s.generate("", greedy(200));
                    }
                });
                threads[i].start();
            }
            for (Thread t : threads) t.join();
            checkEquals(expected, out[0], "thread 0");
            checkEquals(expected, out[1], "thread 1");
            // max_sessions reached: BUSY, with the library's message.
            try (Session a = model.newSession(); Session b = model.newSession()) {
                VkllmException e = expectThrows(VkllmException.class, model::newSession, "a third session");
                checkEquals(VkllmException.Status.BUSY, e.status(), "status");
                check(e.getMessage().contains("max_sessions"), "message: " + e.getMessage());
            }
        }
    }

    @Test
    static void chat_with_messages() throws Exception {
        // stories260K has no chat template of its own: ChatML, built in.
        try (Model model = Model.load(modelPath("stories260K.gguf"), params().chatTemplate("chatml"))) {
            List<ChatMessage> conversation = new ArrayList<ChatMessage>();
            conversation.add(ChatMessage.system("You tell stories."));
            conversation.add(ChatMessage.user("Tell me about a cat \ud83d\udc31."));
            String prompt = model.applyChatTemplate(conversation, true);
            check(prompt.contains("<|im_start|>user\nTell me about a cat \ud83d\udc31.<|im_end|>"), "rendered: " + prompt);
            check(prompt.endsWith("<|im_start|>assistant\n"), "the assistant's turn is open: " + prompt);
            String answer;
            try (Session s = model.newSession()) {
                StringBuilder pieces = new StringBuilder();
                answer = s.chat(conversation, greedy(30), p -> {
                    pieces.append(p);
                    return true;
                });
                checkEquals(answer, pieces.toString(), "the pieces put together");
                // The next turn: the conversation so far is reused from the session's cache.
                conversation.add(ChatMessage.assistant(answer));
                conversation.add(ChatMessage.user("And then?"));
                s.chat(conversation, greedy(10));
                GenerationStats st = s.stats();
                check(st.cachedTokens() > 0, "the first turn's tokens are reused: " + st);
            }
            // chat() is generate() of the rendered prompt, control tokens parsed.
            try (Session s = model.newSession(new SessionParams().parseSpecial(true))) {
                checkEquals(answer, s.generate(prompt, greedy(30)), "generate() of the rendered prompt");
            }
        }
    }

    @Test
    static void bad_input_is_a_vkllm_exception() throws Exception {
        String missing = modelsDir.resolve("no-such-model.gguf").toString();
        VkllmException e = expectThrows(VkllmException.class, () -> Model.load(missing, params()), "a missing file");
        checkEquals(VkllmException.Status.FILE, e.status(), "status");
        check(e.getMessage().contains(missing), "the message names the file: " + e.getMessage());

        // Not a GGUF file: the published story itself.
        String story = modelPath("stories260K.greedy200.txt");
        VkllmException m = expectThrows(VkllmException.class, () -> Model.load(story, params()), "a text file");
        checkEquals(VkllmException.Status.MODEL, m.status(), "status");
        check(m.getMessage().contains("stories260K.greedy200.txt"), "the message names the file: " + m.getMessage());

        // A non-ASCII path reaches the library intact (and is named in the message).
        String odd = modelsDir.resolve("mod\u00e8le \ud83d\ude00.gguf").toString();
        VkllmException o = expectThrows(VkllmException.class, () -> Model.load(odd, params()), "a non-ASCII path");
        check(o.getMessage().contains(odd), "the message names the file: " + o.getMessage());

        try (Model model = stories(); Session s = model.newSession()) {
            VkllmException n = expectThrows(VkllmException.class, () -> s.generate("x", greedy(-5)), "n_predict -5");
            checkEquals(VkllmException.Status.INVALID_ARGUMENT, n.status(), "status");
            check(n.getMessage().contains("n_predict"), "the message names the parameter: " + n.getMessage());
            expectThrows(IllegalArgumentException.class, () -> s.generate("a\u0000b", greedy(5)), "a NUL in the prompt");
            expectThrows(NullPointerException.class, () -> s.generate(null, greedy(5)), "a null prompt");
            check(!s.generate("", greedy(5)).isEmpty(), "still usable");
        }
    }

    @Test
    static void load_progress() throws Exception {
        List<Float> seen = new ArrayList<Float>();
        try (Model model = Model.load(modelPath("stories260K.gguf"), params().progress(f -> {
                 seen.add(f);
                 return true;
             }))) {
            check(!seen.isEmpty(), "progress reported");
            checkEquals(1.0f, seen.get(seen.size() - 1), "ends at 1");
        }
        VkllmException c = expectThrows(VkllmException.class,
                                        () -> Model.load(modelPath("stories260K.gguf"), params().progress(f -> false)),
                                        "progress returning false");
        checkEquals(VkllmException.Status.CANCELLED, c.status(), "status");
        MyFailure thrown = new MyFailure("no thanks");
        MyFailure caught = expectThrows(MyFailure.class, () -> Model.load(modelPath("stories260K.gguf"), params().progress(f -> {
            throw thrown;
        })), "progress throwing");
        check(caught == thrown, "the very exception object");
    }

    // Messages come on whatever thread the library logs from, the engine's own included (attached
    // to the JVM for it). The Khronos layer's best-practices checks (VK_LAYER_ENABLES, set for
    // this test by CTest) make sure there are some; a listener that throws loses its message only.
    @Test
    static void log_listener() throws Exception {
        List<String> threads = Collections.synchronizedList(new ArrayList<String>());
        AtomicInteger warnings = new AtomicInteger();
        LogListener listener = (level, message) -> {
            threads.add(Thread.currentThread().getName());
            if (level == LogListener.Level.WARNING) warnings.incrementAndGet();
            if (level == LogListener.Level.ERROR) validationErrors.add(message);
            throw new IllegalStateException("a listener that throws");
        };
        String text;
        try (Model model = Model.load(modelPath("stories260K.gguf"), params().log(listener));
             Session s = model.newSession()) {
            text = s.generate("", greedy(200));
        }
        checkEquals(expectedStory(), text, "the story, whatever the listener does");
        check(warnings.get() > 0, "best-practices warnings were logged");
        System.out.println("log messages came on threads " + new java.util.TreeSet<String>(threads));
    }

    // Long generations must not pile up JNI local references (one String per piece): under
    // -Xcheck:jni the JVM warns past its local reference capacity, which fails this test.
    @Test
    static void long_generation() throws Exception {
        try (Model model = stories(); Session s = model.newSession()) {
            AtomicInteger calls = new AtomicInteger();
            s.generate("", greedy(1500).ignoreEos(true), piece -> {
                calls.incrementAndGet();
                return true;
            });
            check(calls.get() > 1000, "pieces: " + calls.get());
        }
    }

    // A random model written by `vkllm gen-model` (the executable's path comes as the system
    // property dev.vkllm.test.exe) with the bge WordPiece vocab, as `out`.
    static void genBert(String out, String... args) throws Exception {
        List<String> cmd = new ArrayList<String>(Arrays.asList(System.getProperty("dev.vkllm.test.exe"), "gen-model",
                "--arch", "bert", "--vocab-from", modelPath("ggml-vocab-bert-bge.gguf")));
        cmd.addAll(Arrays.asList(args));
        cmd.add("-o");
        cmd.add(out);
        Process gen = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        gen.getInputStream().readAllBytes();
        checkEquals(0, gen.waitFor(), "gen-model's exit status");
    }

    // A picture as PNG bytes, written by the JDK's own encoder.
    static byte[] png(int w, int h) throws Exception {
        java.awt.image.BufferedImage img = new java.awt.image.BufferedImage(w, h, java.awt.image.BufferedImage.TYPE_INT_RGB);
        for (int y = 0; y < h; ++y)
            for (int x = 0; x < w; ++x) img.setRGB(x, y, ((x * 131 + y * 71) & 255) << 16 | ((x * 7) & 255) << 8 | (y * 5) & 255);
        java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
        javax.imageio.ImageIO.write(img, "png", out);
        return out.toByteArray();
    }

    // Pictures in a chat: a random gemma3 model with a random mmproj (gen-model --mmproj).
    @Test
    static void chat_with_images() throws Exception {
        Path dir = Files.createTempDirectory("vkllm-jni-vision");
        String text = dir.resolve("vision.gguf").toString();
        Process gen = new ProcessBuilder(System.getProperty("dev.vkllm.test.exe"), "gen-model", "--arch", "gemma3", "--dim",
                "64", "--layers", "2", "--heads", "4", "--ffn", "128", "--vocab", "512", "--type", "f16", "--seed", "55",
                "--mmproj", "gemma3", "-o", text).redirectErrorStream(true).start();
        gen.getInputStream().readAllBytes();
        checkEquals(0, gen.waitFor(), "gen-model's exit status");
        String mmproj = dir.resolve("vision-mmproj.gguf").toString();
        byte[] picture = png(97, 61);
        try (Model model = Model.load(text, params().chatTemplate("chatml").mmproj(mmproj)); Session s = model.newSession()) {
            check(model.info().vision(), "info().vision()");
            String answer = s.chat(List.of(ChatMessage.user("What is this?", picture)), greedy(4));
            GenerationStats st = s.stats();
            check(st.promptTokens() > 4, "the picture's rows are in the prompt: " + st.promptTokens());
            s.chat(List.of(ChatMessage.user("What is this?", picture), ChatMessage.assistant(answer),
                    ChatMessage.user("Sure?")), greedy(4));
            check(s.stats().cachedTokens() >= st.promptTokens() - 1, "the picture is reused: " + s.stats().cachedTokens());
            VkllmException bad = expectThrows(VkllmException.class,
                    () -> s.chat(List.of(ChatMessage.user("x", new byte[] {1, 2, 3})), greedy(1)), "not an image");
            checkEquals(VkllmException.Status.INVALID_ARGUMENT, bad.status(), "status");
            check(bad.getMessage().contains("images[0]"), bad.getMessage());
        }
        try (Model plain = Model.load(text, params().chatTemplate("chatml")); Session s = plain.newSession()) {
            check(!plain.info().vision(), "no vision without mmproj");
            VkllmException none = expectThrows(VkllmException.class,
                    () -> s.chat(List.of(ChatMessage.user("x", picture)), greedy(1)), "no vision encoder");
            check(none.getMessage().contains("without a vision encoder"), none.getMessage());
        }
    }

    static double norm(float[] v) {
        double n = 0;
        for (float x : v) n += (double) x * x;
        return Math.sqrt(n);
    }

    // An embedding model: a random BERT.
    @Test
    static void embeddings() throws Exception {
        modelPath("ggml-vocab-bert-bge.gguf");
        Path dir = Files.createTempDirectory("vkllm-jni-embed");
        String bert = dir.resolve("bert.gguf").toString();
        genBert(bert, "--dim", "64", "--layers", "2", "--heads", "4", "--ffn", "128", "--ctx", "32", "--type", "f16");
        try (Model model = Model.load(bert, params())) {
            ModelInfo info = model.info();
            check(info.embeddings(), "an embedding model");
            checkEquals(64, info.embeddingDim(), "embeddingDim");
            checkEquals(32, info.maxEmbedTokens(), "maxEmbedTokens (the default ubatch of an encoder is its context)");
            checkEquals("mean", info.pooling(), "pooling (an encoder's default)");
            String[] texts = {"The giant panda is a bear.", "what is a panda?", "The giant panda is a bear."};
            float[][] v = model.embed(texts);
            checkEquals(3, v.length, "one vector per text");
            double diff = 0;
            for (int i = 0; i < 64; ++i) diff += Math.abs(v[0][i] - v[2][i]);
            check(v[0].length == 64 && v[1].length == 64 && v[2].length == 64, "64 values each");
            check(Math.abs(norm(v[0]) - 1) < 1e-5, "unit length: " + norm(v[0]));
            check(diff == 0, "the same text gives the same vector: " + diff);
            // The batch (one native call) gives what the texts give one at a time.
            for (int t = 0; t < 3; ++t) {
                float[][] one = model.embed(texts[t]);
                checkEquals(1, one.length, "one text, one vector");
                for (int i = 0; i < 64; ++i) {
                    check(Math.abs(one[0][i] - v[t][i]) < 1e-5,
                          "texts[" + t + "][" + i + "]: alone " + one[0][i] + ", in the batch " + v[t][i]);
                }
            }
            checkEquals(0, model.embed().length, "no texts, no vectors");
            float[][] raw = model.embed(-1, "The giant panda is a bear.");
            check(Math.abs(raw[0][0] / v[0][0] - raw[0][1] / v[0][1]) < 1e-3 * Math.abs(raw[0][0] / v[0][0]),
                  "without normalisation: a multiple of the unit vector");
            StringBuilder longText = new StringBuilder();
            for (int i = 0; i < 40; ++i) longText.append("panda ");
            VkllmException e = expectThrows(VkllmException.class, () -> model.embed(longText.toString()), "a long text");
            checkEquals(VkllmException.Status.CONTEXT_FULL, e.status(), "its status");
            VkllmException empty = expectThrows(VkllmException.class, () -> model.embed("a panda", "", "a bear"),
                                                "an empty text");
            checkEquals(VkllmException.Status.INVALID_ARGUMENT, empty.status(), "its status");
            check(empty.getMessage().contains("texts[1]"), "the message names the text: " + empty.getMessage());
            expectThrows(VkllmException.class, model::newSession, "an embedding model has no sessions");
            expectThrows(NullPointerException.class, () -> model.embed((String) null), "a null text");
            expectThrows(NullPointerException.class, () -> model.embed("a", null), "a null text among others");
            VkllmException rr = expectThrows(VkllmException.class, () -> model.rerank("a", "b"),
                                             "an embedding model is no reranker");
            checkEquals(VkllmException.Status.INVALID_ARGUMENT, rr.status(), "its status");
        } finally {
            Files.deleteIfExists(Paths.get(bert));
            Files.deleteIfExists(dir);
        }
        try (Model model = stories()) {
            ModelInfo info = model.info();
            check(!info.embeddings(), "a decoder whose file names no pooling makes no embeddings");
            checkEquals(0, info.embeddingDim(), "embeddingDim of a decoder");
            checkEquals(0, info.maxEmbedTokens(), "maxEmbedTokens of a decoder");
            checkEquals("none", info.pooling(), "pooling of a decoder");
            expectThrows(VkllmException.class, () -> model.embed("x"), "a decoder makes no embeddings");
        }
    }

    // A decoder made an embedding model by ModelParams.pooling, as llama-server --embeddings --pooling.
    @Test
    static void decoder_pooling_param() throws Exception {
        try (Model model = Model.load(modelPath("stories260K.gguf"), params().pooling("mean"))) {
            ModelInfo info = model.info();
            check(info.embeddings(), "an embedding model by the params");
            checkEquals("mean", info.pooling(), "pooling");
            checkEquals(64, info.embeddingDim(), "embeddingDim");
            check(info.maxEmbedTokens() > 0, "maxEmbedTokens: " + info.maxEmbedTokens());
            float[][] v = model.embed("Once upon a time", "there was a cat");
            checkEquals(2, v.length, "one vector per text");
            checkEquals(64, v[0].length, "64 values");
            check(Math.abs(norm(v[0]) - 1) < 1e-5 && Math.abs(norm(v[1]) - 1) < 1e-5, "unit length");
            expectThrows(VkllmException.class, model::newSession, "an embedding model has no sessions");
        }
        VkllmException e = expectThrows(VkllmException.class,
                () -> Model.load(modelPath("stories260K.gguf"), params().pooling("rank")), "pooling rank on a decoder");
        checkEquals(VkllmException.Status.INVALID_ARGUMENT, e.status(), "its status");
        check(e.getMessage().contains("rank"), "the message names the pooling: " + e.getMessage());
        expectThrows(IllegalArgumentException.class,
                () -> Model.load(modelPath("stories260K.gguf"), params().pooling("me\u0000an")), "a NUL in pooling");
    }

    // A reranker: a random BERT with a classification head (pooling rank).
    @Test
    static void rerank() throws Exception {
        modelPath("ggml-vocab-bert-bge.gguf");
        Path dir = Files.createTempDirectory("vkllm-jni-rerank");
        String rr = dir.resolve("rerank.gguf").toString();
        genBert(rr, "--dim", "64", "--layers", "2", "--heads", "4", "--ffn", "128", "--ctx", "64", "--type", "f16",
                "--pooling", "rank");
        try (Model model = Model.load(rr, params())) {
            ModelInfo info = model.info();
            checkEquals("rank", info.pooling(), "pooling");
            check(info.embeddings(), "a reranker counts as an embedding model");
            checkEquals(64, info.maxEmbedTokens(), "maxEmbedTokens: query and document together");
            String query = "what is a panda?";
            float[] scores = model.rerank(query, "The giant panda is a bear.", "hello", "pandas eat bamboo");
            checkEquals(3, scores.length, "one score per document");
            for (float x : scores) check(!Float.isNaN(x) && !Float.isInfinite(x), "a finite score: " + x);
            checkEquals(0, model.rerank(query).length, "no documents, no scores");
            VkllmException q = expectThrows(VkllmException.class, () -> model.rerank("", "hello"), "an empty query");
            checkEquals(VkllmException.Status.INVALID_ARGUMENT, q.status(), "its status");
            VkllmException d = expectThrows(VkllmException.class, () -> model.rerank(query, "hello", ""),
                                            "an empty document");
            checkEquals(VkllmException.Status.INVALID_ARGUMENT, d.status(), "its status");
            check(d.getMessage().contains("documents[1]"), "the message names the document: " + d.getMessage());
            StringBuilder longDoc = new StringBuilder();
            for (int i = 0; i < 80; ++i) longDoc.append("panda ");
            VkllmException c = expectThrows(VkllmException.class, () -> model.rerank(query, longDoc.toString()),
                                            "a long document");
            checkEquals(VkllmException.Status.CONTEXT_FULL, c.status(), "its status");
            VkllmException em = expectThrows(VkllmException.class, () -> model.embed("x"),
                                             "a reranker makes no embeddings");
            checkEquals(VkllmException.Status.INVALID_ARGUMENT, em.status(), "its status");
            expectThrows(NullPointerException.class, () -> model.rerank(null, "x"), "a null query");
            expectThrows(NullPointerException.class, () -> model.rerank(query, "x", null), "a null document");
        } finally {
            Files.deleteIfExists(Paths.get(rr));
            Files.deleteIfExists(dir);
        }
        try (Model model = stories()) {
            VkllmException e = expectThrows(VkllmException.class, () -> model.rerank("a", "b"),
                                            "a decoder is no reranker");
            checkEquals(VkllmException.Status.INVALID_ARGUMENT, e.status(), "its status");
        }
    }
}
