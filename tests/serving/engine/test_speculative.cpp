// Speculative decoding in the engine: whatever a drafter proposes (a draft model that agrees, one
// that rarely does, prompt lookup, scripted drafts with planted mistakes), the text and tokens are
// plain decoding's: greedy, sampled with a seed and penalties, with logprobs, and ending at
// max_tokens or a stop string inside a verified run. Plus the lookup drafter's proposals and the
// checks on draft models.
#include "support/test_context.h"

#include "model/forward/model_gpu.h"
#include "model/testgen/model_shape.h"
#include "serving/engine/drafter.h"
#include "serving/engine/engine.h"
#include "model/grammar/grammar.h"
#include "support/engine_testing.h"
#include "support/model_test_util.h"

#include <fmt/format.h>

using namespace vkllm;
using namespace vkllm::engine;
using namespace std::chrono_literals;

namespace {

using test::collect;
using test::Outcome;

ModelShape shape(uint32_t dim, uint32_t layers, uint64_t seed) {
    ModelShape s;
    s.dim = dim;
    s.ffn_dim = 2 * dim;
    s.n_layers = layers;
    s.n_heads = 4;
    s.n_kv_heads = 2;
    s.n_vocab = 512;  // random vocabs of one size are the same vocabulary
    s.n_ctx = 256;
    s.weight_type = TensorType::F16;
    s.seed = seed;
    s.name = fmt::format("spec-{}x{}-{}", dim, layers, seed);
    return s;
}

struct Loaded {
    explicit Loaded(const ModelShape& s) : m(test::open_model(test::write_model(s.name, s))), tok(make_tokenizer(m.file)) {}
    test::LoadedModel m;
    std::unique_ptr<Tokenizer> tok;
};

ModelOptions options(uint32_t n_seq, uint32_t draft_rows) {
    ModelOptions o;
    o.n_ctx = 256;
    o.ubatch = 16;
    o.n_seq = n_seq;
    o.draft_rows = draft_rows;
    return o;
}

// Proposes the known continuation with every period-th token (by position) wrong.
class ScriptedDrafter final : public Drafter {
public:
    ScriptedDrafter(std::vector<std::vector<int32_t>> texts, uint32_t period, int32_t n_vocab)
        : texts_(std::move(texts)), period_(period), n_vocab_(n_vocab) {}
    void propose(std::span<DraftRequest> reqs) override {
        for (DraftRequest& r : reqs) {
            r.draft.clear();
            for (const std::vector<int32_t>& t : texts_) {
                if (t.size() < r.context.size() || !std::equal(r.context.begin(), r.context.end(), t.begin())) continue;
                for (size_t p = r.context.size(); p < t.size() && r.draft.size() < r.max; ++p)
                    r.draft.push_back(p % period_ == 0 ? (t[p] + 1) % n_vocab_ : t[p]);
                break;
            }
        }
    }

private:
    std::vector<std::vector<int32_t>> texts_;
    uint32_t period_;
    int32_t n_vocab_;
};

std::vector<CompletionRequest> requests(const Tokenizer& tok, int32_t max_tokens) {
    std::vector<CompletionRequest> out;
    for (const char* p : {"the quick brown fox", "a b c a b c a b", "hello", "one two three four five six"}) {
        CompletionRequest r;
        r.prompt = tok.encode(p, true);
        r.max_tokens = max_tokens;
        r.sampler.temperature = 0;
        out.push_back(std::move(r));
    }
    return out;
}

// Every request side by side on a model of `n_seq` slots, with the drafter (or none).
std::vector<Outcome> serve(Context& ctx, const Loaded& target, const std::vector<CompletionRequest>& reqs,
                           std::shared_ptr<Drafter> drafter, uint32_t draft_max = 6) {
    ModelGpu g(ctx, target.m.file, target.m.cfg, options(uint32_t(reqs.size()), drafter ? draft_max : 0));
    EngineOptions eo{.n_slots = uint32_t(reqs.size())};
    eo.drafter = std::move(drafter);
    eo.draft_max = draft_max;
    Engine e(g, *target.tok, eo);
    std::vector<std::unique_ptr<Ticket>> tickets;
    for (const CompletionRequest& r : reqs) tickets.push_back(e.submit(r));
    std::vector<Outcome> out;
    for (auto& t : tickets) out.push_back(collect(*t));
    const EngineMetrics m = e.metrics();
    uint64_t drafted = 0, accepted = 0;
    for (const Outcome& o : out) {
        drafted += o.done.draft_tokens;
        accepted += o.done.accepted_tokens;
    }
    CHECK(m.draft_tokens_total == drafted);
    CHECK(m.accepted_tokens_total == accepted);
    return out;
}

void check_same(const std::vector<Outcome>& got, const std::vector<Outcome>& want) {
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
        CAPTURE(i);
        CHECK(got[i].done.finish == want[i].done.finish);
        CHECK(got[i].tokens == want[i].tokens);
        CHECK(got[i].text == want[i].text);
        CHECK(got[i].done.completion_tokens == want[i].done.completion_tokens);
        REQUIRE(got[i].logprobs.size() == want[i].logprobs.size());
        for (size_t j = 0; j < got[i].logprobs.size(); ++j) {
            CHECK(got[i].logprobs[j].token == want[i].logprobs[j].token);
            CHECK(got[i].logprobs[j].logprob == want[i].logprobs[j].logprob);
            CHECK(got[i].logprobs[j].top_ids == want[i].logprobs[j].top_ids);
        }
    }
}

}  // namespace

TEST_CASE("speculative decoding: greedy text is plain decoding's with good and bad draft models, lookup and "
          "planted mistakes") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    const Loaded target(shape(128, 2, 1)), bad(shape(64, 1, 7));
    const std::vector<CompletionRequest> reqs = requests(*target.tok, 40);
    const std::vector<Outcome> plain = serve(ctx, target, reqs, nullptr);
    for (const Outcome& o : plain) REQUIRE(o.done.finish == FinishReason::Length);

    // The target as its own draft: every draft right (the draft decodes one token per pass, as the
    // target alone would).
    ModelGpu same(ctx, target.m.file, target.m.cfg, options(4, 1));
    ModelGpu other(ctx, bad.m.file, bad.m.cfg, options(4, 1));
    std::vector<std::vector<int32_t>> texts;
    for (size_t i = 0; i < reqs.size(); ++i) {
        texts.push_back(reqs[i].prompt);
        texts.back().insert(texts.back().end(), plain[i].tokens.begin(), plain[i].tokens.end());
    }
    struct Case {
        const char* name;
        std::shared_ptr<Drafter> drafter;
    };
    const Case cases[] = {
        {"good draft model", std::make_shared<ModelDrafter>(same, *target.tok)},
        {"bad draft model", std::make_shared<ModelDrafter>(other, *target.tok)},
        {"prompt lookup", std::make_shared<LookupDrafter>(3)},
        {"every third token wrong", std::make_shared<ScriptedDrafter>(texts, 3, 512)},
        {"every token right", std::make_shared<ScriptedDrafter>(texts, 1000000, 512)},
    };
    for (const Case& c : cases) {
        const std::string name = c.name;
        CAPTURE(name);
        const std::vector<Outcome> spec = serve(ctx, target, reqs, c.drafter);
        check_same(spec, plain);
        uint32_t drafted = 0, accepted = 0, steps = 0, tokens = 0;
        for (const Outcome& o : spec) {
            drafted += o.done.draft_tokens;
            accepted += o.done.accepted_tokens;
            steps += o.done.decode_steps;
            tokens += o.done.completion_tokens;
        }
        MESSAGE(name << ": " << accepted << " of " << drafted << " drafts kept, " << steps << " steps for "
                       << tokens << " tokens");
        CHECK(accepted <= drafted);
        if (name == "good draft model" || name == "every token right") {
            CHECK(accepted == drafted);  // the target agrees with itself
            CHECK(steps * 3 < tokens);
        }
        if (name == "bad draft model" || name == "every third token wrong") CHECK(accepted < drafted);
        if (name != "bad draft model") CHECK(accepted > 0);
    }
}

TEST_CASE("speculative decoding: seeded sampling with penalties and logprobs gives plain decoding's text") {
    // Each emitted token is one draw of the request's sampler from logits that verification leaves
    // bit for bit as they were, so the seed's sequence of draws is unchanged.
    test::ValidationGuard guard;
    Context& ctx = test::context();
    const Loaded target(shape(128, 2, 1));
    std::vector<CompletionRequest> reqs = requests(*target.tok, 32);
    for (size_t i = 0; i < reqs.size(); ++i) {
        reqs[i].sampler.temperature = 0.5f + 0.25f * float(i);
        reqs[i].sampler.seed = 42 + i;
        reqs[i].sampler.top_k = i == 1 ? 20 : 0;
        reqs[i].sampler.repeat_penalty = i == 2 ? 1.3f : 1.0f;
        reqs[i].logprobs = i == 3;
        reqs[i].top_logprobs = i == 3 ? 3 : 0;
    }
    const std::vector<Outcome> plain = serve(ctx, target, reqs, nullptr);
    ModelGpu same(ctx, target.m.file, target.m.cfg, options(4, 1));
    const std::vector<Outcome> spec = serve(ctx, target, reqs, std::make_shared<ModelDrafter>(same, *target.tok));
    check_same(spec, plain);
    uint32_t accepted = 0;
    for (const Outcome& o : spec) accepted += o.done.accepted_tokens;
    CHECK(accepted > 0);  // at low temperature the greedy drafts are often drawn
}

TEST_CASE("speculative decoding: max_tokens and stop strings inside a verified run end where plain decoding does") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    const Loaded target(shape(128, 2, 1));
    ModelGpu same(ctx, target.m.file, target.m.cfg, options(4, 1));
    auto drafter = std::make_shared<ModelDrafter>(same, *target.tok);
    // max_tokens below and between draft runs: 1, 5 (inside the first run of 6), 7 (one past it).
    std::vector<CompletionRequest> reqs = requests(*target.tok, 5);
    reqs[0].max_tokens = 1;
    reqs[2].max_tokens = 7;
    const std::vector<Outcome> plain = serve(ctx, target, reqs, nullptr);
    const std::vector<Outcome> spec = serve(ctx, target, reqs, drafter);
    check_same(spec, plain);
    for (size_t i = 0; i < reqs.size(); ++i) CHECK(spec[i].done.completion_tokens == uint32_t(reqs[i].max_tokens));
    // A stop string in the middle of the text: found inside a verified run, it ends the request there.
    std::vector<CompletionRequest> long_reqs = requests(*target.tok, 40);
    const std::vector<Outcome> full = serve(ctx, target, long_reqs, nullptr);
    for (size_t i = 0; i < long_reqs.size(); ++i)
        if (full[i].text.size() > 24) long_reqs[i].stop = {full[i].text.substr(full[i].text.size() / 2, 3)};
    check_same(serve(ctx, target, long_reqs, drafter), serve(ctx, target, long_reqs, nullptr));
}

// Fails every other call, before or after filling drafts: the engine must decode those steps plainly.
class FlakyDrafter final : public Drafter {
public:
    explicit FlakyDrafter(std::shared_ptr<Drafter> inner) : inner_(std::move(inner)) {}
    void propose(std::span<DraftRequest> reqs) override {
        inner_->propose(reqs);
        if (++calls_ % 2 == 0) throw std::runtime_error("the draft model's device is gone");
    }

private:
    std::shared_ptr<Drafter> inner_;
    int calls_ = 0;
};

TEST_CASE("speculative decoding: a failing drafter, a draft model with a smaller vocabulary, a lazy grammar "
          "starting inside a verified run") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    const Loaded target(shape(128, 2, 1));
    const std::vector<CompletionRequest> reqs = requests(*target.tok, 40);
    const std::vector<Outcome> plain = serve(ctx, target, reqs, nullptr);
    std::vector<std::vector<int32_t>> texts;
    for (size_t i = 0; i < reqs.size(); ++i) {
        texts.push_back(reqs[i].prompt);
        texts.back().insert(texts.back().end(), plain[i].tokens.begin(), plain[i].tokens.end());
    }
    {  // a drafter that throws costs its steps their drafts, never a request
        auto flaky = std::make_shared<FlakyDrafter>(std::make_shared<ScriptedDrafter>(texts, 1000000, 512));
        const std::vector<Outcome> spec = serve(ctx, target, reqs, flaky);
        check_same(spec, plain);
        uint32_t accepted = 0;
        for (const Outcome& o : spec) accepted += o.done.accepted_tokens;
        CHECK(accepted > 0);
    }
    {  // a draft model of 300 ids beside a 512-id target: contexts holding ids it lacks get no drafts
        ModelShape small = shape(64, 1, 7);
        small.n_vocab = 300;
        small.name = "spec-draft-vocab300";
        const Loaded d(small);
        ModelGpu draft(ctx, d.m.file, d.m.cfg, options(4, 1));
        std::vector<CompletionRequest> wide = reqs;
        wide[1].prompt.push_back(450);  // an id past the draft's vocabulary, in the prompt
        check_same(serve(ctx, target, wide, std::make_shared<ModelDrafter>(draft, *target.tok)),
                   serve(ctx, target, wide, nullptr));
    }
    {  // a lazy grammar whose trigger is a token inside a run of right drafts: the rows after it must be
       // chosen under the grammar (host sampling), as plain decoding chooses them
        const Outcome& o = plain[0];
        std::string trigger;
        for (size_t k = 6; k < o.tokens.size() && trigger.empty(); ++k) {
            const std::string piece = target.tok->token_to_piece(o.tokens[k], false);
            if (piece.size() >= 2 && std::all_of(piece.begin(), piece.end(), [](char c) { return c >= 'a' && c <= 'z'; }))
                trigger = piece;
        }
        REQUIRE(!trigger.empty());
        CompletionRequest r = reqs[0];
        r.grammar = std::make_shared<const grammar::Grammar>(grammar::Grammar::parse("root ::= \"" + trigger + "\" \"qqqq\" \"q\"*"));
        r.grammar_start.triggers = {{trigger, false}};
        const std::vector<CompletionRequest> one{r};
        const std::vector<Outcome> want = serve(ctx, target, one, nullptr);
        CAPTURE(trigger);
        CAPTURE(want[0].text);
        REQUIRE(want[0].done.finish != FinishReason::Error);
        REQUIRE(want[0].text.find(trigger + "qqqq") != std::string::npos);  // the grammar held
        check_same(serve(ctx, target, one, std::make_shared<ScriptedDrafter>(texts, 1000000, 512)), want);
    }
}

TEST_CASE("speculative decoding: lookup proposals, draft vocabularies and limits") {
    LookupDrafter lookup(3);
    const std::vector<int32_t> ctx1{5, 6, 7, 8, 9, 1, 5, 6, 7};  // "5 6 7" occurred: 8 9 1 followed
    const std::vector<int32_t> ctx2{1, 2, 3, 4};  // nothing repeats
    const std::vector<int32_t> ctx3{4, 1, 9, 4, 2, 9, 4};  // "9 4" latest earlier at 2: 2 9 4 follow
    const std::vector<int32_t> ctx4{3, -5, -6, 3};  // an image's placeholders are never proposed
    std::vector<DraftRequest> reqs{{0, ctx1, 4, {}}, {1, ctx2, 4, {}}, {2, ctx3, 2, {}}, {3, ctx4, 4, {}}};
    lookup.propose(reqs);
    CHECK(reqs[0].draft == std::vector<int32_t>{8, 9, 1, 5});
    CHECK(reqs[1].draft.empty());
    CHECK(reqs[2].draft == std::vector<int32_t>{2, 9});
    CHECK(reqs[3].draft.empty());
    CHECK_THROWS_AS(LookupDrafter(2, 3), std::invalid_argument);

    // Vocabularies: the same one passes; another size or tokenizer is named.
    VKLLM_REQUIRE_MODEL(stories, "stories260K.gguf");
    VKLLM_REQUIRE_MODEL(spm, "ggml-vocab-llama-spm.gguf");
    VKLLM_REQUIRE_MODEL(gpt2, "ggml-vocab-gpt-2.gguf");
    const GgufFile fa = GgufFile::open(stories), fb = GgufFile::open(spm), fc = GgufFile::open(gpt2);
    const auto a = make_tokenizer(fa), b = make_tokenizer(fb), c = make_tokenizer(fc);
    CHECK_NOTHROW(check_draft_vocab(*a, *a));
    CHECK_THROWS_WITH_AS(check_draft_vocab(*a, *b), doctest::Contains("it has 32000 tokens, the model 512"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(check_draft_vocab(*b, *c), doctest::Contains("its tokenizer is gpt2, the model's llama"),
                         std::invalid_argument);

    // An engine cannot verify more drafts than its model was loaded for.
    test::ValidationGuard guard;
    Context& ctx = test::context();
    const Loaded target(shape(128, 2, 1));
    ModelGpu g(ctx, target.m.file, target.m.cfg, options(1, 2));
    EngineOptions eo{.n_slots = 1};
    eo.drafter = std::make_shared<LookupDrafter>(3);
    eo.draft_max = 3;
    CHECK_THROWS_WITH_AS(Engine(g, *target.tok, eo), doctest::Contains("loaded for 2"), std::invalid_argument);
}
