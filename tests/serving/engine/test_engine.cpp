// The continuous-batching engine on the real stories260K model: a lone greedy request reproduces
// the published story; requests running side by side give exactly the text each gives alone
// (batch invariance); a follow-up prompt reuses its slot's cache; cancellation, deadlines, a full
// queue and bad requests end the way the server relies on. Plus the text stream's stop strings
// and UTF-8 holding.
#include "support/test_context.h"

#include "support/engine_testing.h"
#include "support/model_test_util.h"
#include "serving/engine/engine.h"
#include "serving/engine/generate.h"
#include "serving/engine/text_stream.h"
#include "runtime/ops/get_rows.h"

#include <thread>

using namespace vkllm;
using namespace vkllm::engine;
using namespace std::chrono_literals;

namespace {

using test::collect;
using test::Outcome;

// stories260K and its tokenizer.
struct Stories {
    explicit Stories(const std::string& path) : m(test::open_model(path)), tok(make_tokenizer(m.file)) {}
    test::LoadedModel m;
    std::unique_ptr<Tokenizer> tok;
};

CompletionRequest greedy(const Tokenizer& tok, const std::string& prompt, int32_t max_tokens) {
    CompletionRequest r;
    r.prompt = tok.encode(prompt, true);
    r.max_tokens = max_tokens;
    r.sampler.temperature = 0;
    return r;
}

ModelOptions options(uint32_t n_seq) {
    ModelOptions o;
    o.n_ctx = 256;
    o.ubatch = 16;
    o.n_seq = n_seq;
    return o;
}

// What generate() (vkllm run: a one-slot engine) gives for the prompt on a single-sequence model.
std::string run_alone(Context& ctx, const Stories& s, const std::string& prompt, int32_t n) {
    ModelGpu g(ctx, s.m.file, s.m.cfg, options(1));
    GenerateParams p;
    p.n_predict = n;
    p.sampler.temperature = 0;
    std::string out;
    generate(g, *s.tok, s.tok->encode(prompt, true), p, [&](std::string_view piece) { out += piece; });
    return out;
}

}  // namespace

TEST_CASE("text stream: stop strings across pieces, held prefixes, whole UTF-8 characters") {
    TextStream t({"END", "\n\n"});
    CHECK(t.push("Hello E") == "Hello ");  // "E" may begin "END"
    CHECK(t.push("N") == "");
    CHECK(t.push("x") == "ENx");
    CHECK(t.push("\n") == "");
    CHECK(t.push("a\nEN") == "\na\n");
    CHECK(t.push("D tail") == "");
    CHECK(t.stopped());
    CHECK(t.push("more") == "");

    TextStream u({});
    CHECK(u.push("caf\xC3") == "caf");  // the first byte of "é" waits for the second
    CHECK(u.push("\xA9!") == "\xC3\xA9!");
    CHECK(u.push("\xE2\x82") == "");
    CHECK(u.flush() == "\xEF\xBF\xBD");  // an unfinished character at the end becomes U+FFFD
    CHECK(sanitize_utf8("a\xFF" "b\xC0\xAF") == "a\xEF\xBF\xBD" "b\xEF\xBF\xBD\xEF\xBF\xBD");
    CHECK(incomplete_utf8_tail("\xF0\x9F\x98") == 3);
    CHECK(incomplete_utf8_tail("\xF0\x9F\x98\x80") == 0);
}

TEST_CASE("engine: a lone greedy request reproduces the published stories260K story") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    VKLLM_REQUIRE_MODEL(path, "stories260K.gguf");
    const std::string expected = test::read_text_file(test::model_path("stories260K.greedy200.txt"));
    const Stories s(path);
    ModelOptions o = options(2);
    o.n_ctx = 512;
    ModelGpu g(ctx, s.m.file, s.m.cfg, o);
    Engine e(g, *s.tok, {.n_slots = 2});
    CompletionRequest r;
    r.prompt = {s.tok->bos_id()};
    r.max_tokens = 200;
    r.sampler.temperature = 0;
    auto t = e.submit(r);
    Outcome out = collect(*t);
    CHECK(out.text == expected);
    CHECK(out.done.prompt_tokens == 1);
    CHECK(out.text_events == out.done.completion_tokens);
}

TEST_CASE("engine: requests side by side give exactly the text each gives alone (batch invariance)") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    VKLLM_REQUIRE_MODEL(path, "stories260K.gguf");
    const Stories s(path);
    const std::vector<std::string> prompts = {"Once upon a time", "The cat sat", "Lily wanted to", "One day, a big",
                                              "Tom and his dog", "The sun was"};
    std::vector<std::string> alone;
    for (const auto& p : prompts) alone.push_back(run_alone(ctx, s, p, 40));

    ModelGpu g(ctx, s.m.file, s.m.cfg, options(4));
    Engine e(g, *s.tok, {.n_slots = 4});
    // Six greedy requests and two sampled ones on four slots: greedy requests meet different
    // company (and batch sizes) at every step, and two of them wait for a free slot.
    std::vector<std::unique_ptr<Ticket>> greedy_tickets, sampled;
    for (size_t i = 0; i < prompts.size(); ++i) {
        greedy_tickets.push_back(e.submit(greedy(*s.tok, prompts[i], 40)));
        if (i == 1 || i == 3) {
            CompletionRequest r = greedy(*s.tok, "A little bird", 30 + int32_t(i));
            r.sampler.temperature = 1.0f;
            r.sampler.seed = i;
            sampled.push_back(e.submit(r));
        }
    }
    for (size_t i = 0; i < prompts.size(); ++i) {
        CAPTURE(prompts[i]);
        Outcome o = collect(*greedy_tickets[i]);
        CHECK(o.text == alone[i]);
        CHECK(o.done.finish == FinishReason::Length);
        CHECK(o.done.completion_tokens == 40);
    }
    for (auto& t : sampled) CHECK(collect(*t).done.finish != FinishReason::Error);
    const EngineMetrics m = e.metrics();
    CHECK(m.requests_total == 8);
    CHECK(m.batch_size_sum > m.steps_total);  // some steps decoded several slots at once
    MESSAGE("decode steps " << m.steps_total << ", mean batch " << double(m.batch_size_sum) / double(m.steps_total));
}

TEST_CASE("engine: a follow-up prompt reuses its slot's cache and gives the same text as a fresh slot") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    VKLLM_REQUIRE_MODEL(path, "stories260K.gguf");
    const Stories s(path);
    ModelGpu g(ctx, s.m.file, s.m.cfg, options(2));
    Engine e(g, *s.tok, {.n_slots = 2});
    auto first = e.submit(greedy(*s.tok, "Once upon a time, there was a little girl named Lily.", 20));
    Outcome a = collect(*first);
    CHECK(a.done.cached_tokens == 0);
    // The next turn: the first prompt, its answer, and more text.
    const std::string turn2 = "Once upon a time, there was a little girl named Lily." + a.text + " She said";
    auto second = e.submit(greedy(*s.tok, turn2, 20));
    Outcome b = collect(*second);
    const size_t prompt1 = s.tok->encode("Once upon a time, there was a little girl named Lily.", true).size();
    CHECK(b.done.cached_tokens >= prompt1);
    CHECK(b.done.prompt_tokens == s.tok->encode(turn2, true).size());
    // The same prompt on a model that never saw the first turn.
    ModelGpu g2(ctx, s.m.file, s.m.cfg, options(1));
    Engine fresh(g2, *s.tok, {.n_slots = 1});
    auto third = fresh.submit(greedy(*s.tok, turn2, 20));
    Outcome c = collect(*third);
    CHECK(c.done.cached_tokens == 0);
    CHECK(b.text == c.text);
}

TEST_CASE("engine: slots share a prompt start another slot holds, and give the text they give alone") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    VKLLM_REQUIRE_MODEL(path, "stories260K.gguf");
    const Stories s(path);
    ModelGpu g(ctx, s.m.file, s.m.cfg, options(4));
    Engine e(g, *s.tok, {.n_slots = 4});
    const std::string system = "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun";
    auto pinned = [&](const std::string& prompt, int32_t slot) {
        CompletionRequest r = greedy(*s.tok, prompt, 12);
        r.slot = slot;
        return r;
    };
    Outcome first = collect(*e.submit(pinned(system + ".", 0)));
    CHECK(first.done.cached_tokens == 0);
    const std::vector<std::string> tails = {" with her dog.", " and the rain.", ". One day"};
    std::vector<std::unique_ptr<Ticket>> tickets;
    for (size_t i = 0; i < tails.size(); ++i) tickets.push_back(e.submit(pinned(system + tails[i], int32_t(i + 1))));
    const size_t shared = s.tok->encode(system, true).size() - 1;  // the tails may merge with its last token
    std::vector<Outcome> out;
    for (auto& t : tickets) out.push_back(collect(*t));
    // Four conversations, the system prompt held once: fewer blocks than four copies of it.
    const EngineMetrics m = e.metrics();
    e.shutdown();  // the device is the test's alone from here
    for (size_t i = 0; i < tails.size(); ++i) {
        CAPTURE(tails[i]);
        CHECK(out[i].done.cached_tokens >= shared);
        CHECK(out[i].text == run_alone(ctx, s, system + tails[i], 12));
    }
    const uint32_t prompt_blocks = uint32_t(shared / 8);
    CHECK(m.kv_blocks_used > 0);
    CHECK(m.kv_blocks_used + 3 * prompt_blocks <= 4 * (prompt_blocks + 4));
    CHECK(m.kv_blocks_total == 4 * (256 / 8));
    CHECK(m.kv_block_bytes > 0);
}

TEST_CASE("engine: a KV budget makes requests wait for room and lets idle slots' caches go") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    VKLLM_REQUIRE_MODEL(path, "stories260K.gguf");
    const Stories s(path);
    ModelOptions o = options(3);
    o.n_ctx = 64;
    o.kv_budget = 96;  // 12 blocks of 8: two requests of 6 at a time
    ModelGpu g(ctx, s.m.file, s.m.cfg, o);
    CHECK(g.kv_usage().blocks_total == 12);
    Engine e(g, *s.tok, {.n_slots = 3});
    const std::vector<std::string> prompts = {"Once upon a time, there was a little girl", "The cat sat on the mat and",
                                              "Tom and his friend went to the park"};
    std::vector<std::unique_ptr<Ticket>> tickets;
    std::vector<size_t> lengths;
    for (const std::string& p : prompts) {
        CompletionRequest r = greedy(*s.tok, p, int32_t(48 - s.tok->encode(p, true).size()));  // 48 rows: 6 blocks
        r.ignore_eos = true;
        r.slot = int32_t(tickets.size());  // the third in a slot of its own: the idle ones' caches must go
        lengths.push_back(size_t(r.max_tokens));
        tickets.push_back(e.submit(std::move(r)));
    }
    std::vector<Outcome> out;
    for (auto& t : tickets) out.push_back(collect(*t));
    for (size_t i = 0; i < prompts.size(); ++i) {
        CAPTURE(prompts[i]);
        CHECK(out[i].done.finish == FinishReason::Length);
        CHECK(out[i].done.completion_tokens == lengths[i]);
    }
    // The third waited for room: it started after one of the others ended.
    CHECK(out[2].done.queue_ms >= std::min(out[0].done.prompt_ms, out[1].done.prompt_ms));
    // Idle slots hold two conversations (12 blocks): a new request gets room by letting the oldest go.
    CompletionRequest more = greedy(*s.tok, "A little bird sang in the tree", 20);
    more.slot = 0;
    Outcome last = collect(*e.submit(std::move(more)));
    e.shutdown();
    CHECK(last.done.finish != FinishReason::Error);
    CHECK(last.text == run_alone(ctx, s, "A little bird sang in the tree", 20));
    // A --ctx larger than the budget is refused when the model is loaded.
    ModelOptions bad = o;
    bad.n_ctx = 128;
    CHECK_THROWS_AS(ModelGpu(ctx, s.m.file, s.m.cfg, bad), std::invalid_argument);
}

TEST_CASE("engine: cancellation, deadlines, stop strings, a full queue and bad requests") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    VKLLM_REQUIRE_MODEL(path, "stories260K.gguf");
    const Stories s(path);
    ModelGpu g(ctx, s.m.file, s.m.cfg, options(1));
    Engine e(g, *s.tok, {.n_slots = 1, .queue_limit = 1});

    SUBCASE("cancel frees the slot within a step") {
        CompletionRequest r = greedy(*s.tok, "Once upon a time", -1);
        r.ignore_eos = true;
        auto t = e.submit(r);
        REQUIRE(t->next(60s));  // the first token
        t->cancel();
        Outcome o = collect(*t);
        CHECK(o.done.finish == FinishReason::Cancelled);
        auto next = e.submit(greedy(*s.tok, "The cat", 3));
        CHECK(collect(*next).done.completion_tokens == 3);
        CHECK(e.metrics().slots_busy == 0);
    }
    SUBCASE("a dropped ticket cancels its request") {
        CompletionRequest r = greedy(*s.tok, "Once upon a time", -1);
        r.ignore_eos = true;
        auto t = e.submit(r);
        REQUIRE(t->next(60s));
        t.reset();  // the client went away mid-answer
        auto next = e.submit(greedy(*s.tok, "The cat", 3));
        CHECK(collect(*next).done.finish == FinishReason::Length);
        CHECK(e.metrics().requests_cancelled == 1);
    }
    SUBCASE("deadline") {
        CompletionRequest r = greedy(*s.tok, "Once upon a time", -1);
        r.ignore_eos = true;
        r.timeout = 50ms;
        auto t = e.submit(r);
        CHECK(collect(*t).done.finish == FinishReason::Timeout);
    }
    SUBCASE("stop string") {
        const std::string full = run_alone(ctx, s, "Once upon a time", 30);
        const size_t cut = full.find(' ', 8);
        REQUIRE(cut != std::string::npos);
        const std::string stop = full.substr(cut, 4);
        CompletionRequest r = greedy(*s.tok, "Once upon a time", 30);
        r.stop = {"zzzz-never", stop};
        Outcome o = collect(*e.submit(r));
        CHECK(o.text == full.substr(0, full.find(stop)));
        CHECK(o.done.finish == FinishReason::Stop);
    }
    SUBCASE("full queue, bad requests") {
        CompletionRequest r = greedy(*s.tok, "Once upon a time", -1);
        r.ignore_eos = true;
        auto running = e.submit(r);
        REQUIRE(running->next(60s));  // it holds the only slot now
        auto waiting = e.submit(greedy(*s.tok, "The cat", 3));
        CHECK_THROWS_AS(e.submit(greedy(*s.tok, "The dog", 3)), QueueFullError);
        running->cancel();
        CHECK(collect(*waiting).done.completion_tokens == 3);
        CompletionRequest empty;
        CHECK_THROWS_AS(e.submit(empty), std::invalid_argument);
        CompletionRequest too_long = greedy(*s.tok, "x", 1);
        too_long.prompt.assign(256, 5);
        VKLLM_CHECK_THROWS_WITH_SUBSTR(e.submit(too_long), std::invalid_argument, "256 tokens");
        CompletionRequest hot = greedy(*s.tok, "x", 1);
        hot.sampler.temperature = -1;
        CHECK_THROWS_AS(e.submit(hot), std::invalid_argument);
        CompletionRequest bad_id = greedy(*s.tok, "x", 1);
        bad_id.prompt.push_back(100000);
        CHECK_THROWS_AS(e.submit(bad_id), std::invalid_argument);
    }
    SUBCASE("a queued request ends when its client leaves or its deadline passes, without a slot") {
        CompletionRequest r = greedy(*s.tok, "Once upon a time", -1);
        r.ignore_eos = true;
        auto running = e.submit(r);
        REQUIRE(running->next(60s));  // it holds the only slot
        CompletionRequest late = greedy(*s.tok, "The cat", 3);
        late.timeout = 30ms;
        auto waiting = e.submit(late);
        Outcome o = collect(*waiting);
        CHECK(o.done.finish == FinishReason::Timeout);
        CHECK(o.done.completion_tokens == 0);
        auto gone = e.submit(greedy(*s.tok, "The dog", 3));  // the queue has room again
        gone->cancel();
        CHECK(collect(*gone).done.finish == FinishReason::Cancelled);
        const EngineMetrics m = e.metrics();
        CHECK(m.queued == 0);
        CHECK(m.slots_busy == 1);
        CHECK(m.requests_cancelled <= m.requests_total);
        running->cancel();
        CHECK(collect(*running).done.finish == FinishReason::Cancelled);
    }
    SUBCASE("max_tokens 0 evaluates the prompt only") {
        Outcome o = collect(*e.submit(greedy(*s.tok, "Once upon a time", 0)));
        CHECK(o.done.finish == FinishReason::Length);
        CHECK(o.done.completion_tokens == 0);
        CHECK(o.text.empty());
    }
    SUBCASE("a generation that fills the slot's context ends with Length") {
        CompletionRequest r = greedy(*s.tok, "Once upon a time", -1);
        r.ignore_eos = true;
        Outcome o = collect(*e.submit(r));
        CHECK(o.done.finish == FinishReason::Length);
        // options(): n_ctx 256. The last token needs no cache row (it is never evaluated).
        CHECK(o.done.prompt_tokens + o.done.completion_tokens == 257);
    }
    SUBCASE("shutdown ends running and queued requests") {
        CompletionRequest r = greedy(*s.tok, "Once upon a time", -1);
        r.ignore_eos = true;
        auto running = e.submit(r);
        REQUIRE(running->next(60s));
        auto queued = e.submit(greedy(*s.tok, "The cat", 3));
        e.shutdown();
        CHECK(collect(*running).done.finish == FinishReason::Cancelled);
        CHECK(collect(*queued).done.finish == FinishReason::Cancelled);
        CHECK_THROWS_AS(e.submit(greedy(*s.tok, "The dog", 3)), EngineStoppedError);
    }
}

TEST_CASE("engine: logprobs are log-softmax values of the raw logits, best alternatives first") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    VKLLM_REQUIRE_MODEL(path, "stories260K.gguf");
    const Stories s(path);
    ModelGpu g(ctx, s.m.file, s.m.cfg, options(1));
    Engine e(g, *s.tok, {.n_slots = 1});
    CompletionRequest r = greedy(*s.tok, "Once upon a time", 5);
    r.logprobs = true;
    r.top_logprobs = 3;
    auto t = e.submit(r);
    size_t n = 0;
    for (;;) {
        std::optional<Event> ev = t->next(60s);
        REQUIRE(ev);
        if (ev->kind == Event::Kind::Done) break;
        for (const TokenLogprob& lp : ev->logprobs) {
            ++n;
            REQUIRE(lp.top.size() == 3);
            CHECK(lp.logprob <= 0.0f);
            CHECK(lp.top[0].second == doctest::Approx(lp.logprob));  // greedy: the chosen is the best
            CHECK(lp.top[0].second >= lp.top[1].second);
            CHECK(lp.top[1].second >= lp.top[2].second);
        }
    }
    CHECK(n == 5);
}

namespace {

// A request whose tokens [first, first + n) are replaced by an "image" whose rows are exactly those
// tokens' embeddings (stories260K does not scale them): the engine must give the text of the tokens.
CompletionRequest with_image(const Stories& s, CompletionRequest r, uint32_t first, uint32_t n, uint64_t hash,
                             bool bidirectional) {
    const GgufTensorInfo& t = s.m.file.tensor("token_embd.weight");
    auto rows = std::make_shared<std::vector<float>>(size_t(n) * s.m.cfg.dim);
    ref::get_rows(t.type, s.m.file.tensor_data(t).data(), s.m.cfg.n_vocab, s.m.cfg.dim, r.prompt.data() + first, n,
                  rows->data());
    for (uint32_t i = 0; i < n; ++i) r.prompt[first + i] = image_token_id(hash, i);
    r.images.push_back({first, n, rows, bidirectional});
    return r;
}

}  // namespace

TEST_CASE("engine: an image's rows in the prompt; the prefix cache keys them by content and never cuts one") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    VKLLM_REQUIRE_MODEL(path, "stories260K.gguf");
    const Stories s(path);
    const std::string text = "Once upon a time, there was a little girl named Lily. She loved to play";
    const CompletionRequest plain = greedy(*s.tok, text, 16);
    REQUIRE(plain.prompt.size() > 12);
    ModelGpu g(ctx, s.m.file, s.m.cfg, options(1));
    Engine e(g, *s.tok, {.n_slots = 1});
    const Outcome want = collect(*e.submit(CompletionRequest(plain)));
    // Rows equal to the tokens' embeddings: the same text, causal or not for the last token's logits
    // only when causal (bidirectional rows see later rows, so only the causal case must match).
    const Outcome img = collect(*e.submit(with_image(s, plain, 3, 7, 42, false)));
    CHECK(img.text == want.text);
    CHECK(img.done.prompt_tokens == plain.prompt.size());
    // The same image again: its rows are reused (cached through its end); another image (another
    // hash) is not, and a prefix ending inside the image is moved back to its start.
    const Outcome again = collect(*e.submit(with_image(s, plain, 3, 7, 42, false)));
    CHECK(again.text == want.text);
    CHECK(again.done.cached_tokens >= 10);
    const Outcome other = collect(*e.submit(with_image(s, plain, 3, 7, 43, false)));
    CHECK(other.done.cached_tokens == 3);
    CHECK(other.text == want.text);
    // Bidirectional rows run (in one chunk) and differ from the causal text's prompt state.
    const Outcome bidir = collect(*e.submit(with_image(s, plain, 3, 7, 44, true)));
    CHECK(bidir.done.finish == FinishReason::Length);
    // A grid, which a model without M-RoPE ignores (its image goes in chunks): the same text.
    CompletionRequest gridded = with_image(s, plain, 3, 7, 47, false);
    gridded.images[0].grid = {7, 1};
    const Outcome by_grid = collect(*e.submit(std::move(gridded)));
    CHECK(by_grid.text == want.text);
    CHECK(by_grid.done.cached_tokens == 3);
    // Bad images are refused at submit.
    CompletionRequest bad_grid = with_image(s, plain, 3, 7, 48, false);
    bad_grid.images[0].grid = {2, 3};
    VKLLM_CHECK_THROWS_WITH_SUBSTR(e.submit(std::move(bad_grid)), std::invalid_argument, "2 x 3");
    CompletionRequest bad = with_image(s, plain, 3, 7, 45, false);
    bad.prompt[5] = 1;  // a text token inside the image
    VKLLM_CHECK_THROWS_WITH_SUBSTR(e.submit(std::move(bad)), std::invalid_argument, "placeholders");
    CompletionRequest loose = plain;
    loose.prompt[2] = image_token_id(7, 0);  // a placeholder with no image
    VKLLM_CHECK_THROWS_WITH_SUBSTR(e.submit(std::move(loose)), std::invalid_argument, "outside the vocabulary");
    CompletionRequest big = with_image(s, plain, 0, 12, 46, true);
    big.images[0].n_rows = 13;
    VKLLM_CHECK_THROWS_WITH_SUBSTR(e.submit(std::move(big)), std::invalid_argument, "not 13 rows");
}

TEST_CASE("engine: text after a prompt that ends with an image keeps its leading space; a reuse never ends inside an image") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    VKLLM_REQUIRE_MODEL(path, "stories260K.gguf");
    const Stories s(path);
    const std::string text = "Once upon a time, there was a little girl named Lily. She went";
    const CompletionRequest plain = greedy(*s.tok, text, 8);
    const size_t n = plain.prompt.size();
    ModelGpu g(ctx, s.m.file, s.m.cfg, options(1));
    Engine e(g, *s.tok, {.n_slots = 1});
    const Outcome want = collect(*e.submit(CompletionRequest(plain)));
    REQUIRE(!want.text.empty());
    REQUIRE(want.text[0] == ' ');
    // The prompt's last 6 tokens as an image: the first generated piece still starts with its space.
    const Outcome tail = collect(*e.submit(with_image(s, plain, uint32_t(n - 6), 6, 50, false)));
    CHECK(tail.text == want.text);
    // A prompt equal to the previous one up to the middle of its image, then different: the common
    // prefix ends inside the image, so the reuse stops at the image's start.
    CompletionRequest longer = greedy(*s.tok, text + " to the park", 4);
    const Outcome first = collect(*e.submit(with_image(s, longer, 5, 10, 60, true)));
    CHECK(first.done.finish == FinishReason::Length);
    CompletionRequest shifted = with_image(s, longer, 5, 10, 60, true);
    for (uint32_t i = 8; i < 10; ++i) shifted.prompt[5 + i] = image_token_id(61, i);  // the image's last rows differ
    const Outcome second = collect(*e.submit(std::move(shifted)));
    CHECK(second.done.cached_tokens == 5);
}
