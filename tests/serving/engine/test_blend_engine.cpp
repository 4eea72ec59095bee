// CacheBlend in the engine (serving/engine/blender.h) on the real stories260K: a request's documents
// are computed alone and stored the first time, taken from the store the next (in another order),
// and with every token evaluated again the first token's distribution is the plain prefill's.
// Documents with nothing after them, and models that cannot blend, take the plain prefill.
#include "support/test_context.h"

#include "model/arch/architecture.h"
#include "model/forward/model_gpu.h"
#include "model/testgen/model_shape.h"
#include "serving/engine/blender.h"
#include "serving/engine/engine.h"
#include "support/engine_testing.h"
#include "support/model_test_util.h"

#include <cmath>

using namespace vkllm;
using namespace vkllm::engine;

namespace {

using test::collect;
using test::Outcome;

constexpr uint32_t kSlots = 2;

ModelOptions options() {
    ModelOptions o;
    o.n_ctx = 256;
    o.ubatch = 16;
    o.n_seq = kSlots + 1;  // the blender's scratch sequence after the slots
    o.spare_seqs = 1;  // which borrows the slots' blocks
    return o;
}

struct Prompt {
    std::vector<int32_t> ids;
    std::vector<DocumentSpan> documents;
};

// BOS + prefix, the documents in `order`, the question.
Prompt make_prompt(const Tokenizer& tok, const std::string& prefix, const std::vector<std::vector<int32_t>>& docs,
                   const std::vector<size_t>& order, bool question = true) {
    Prompt p;
    p.ids = tok.encode(prefix, true);
    for (size_t d : order) {
        p.documents.push_back({p.ids.size(), docs[d].size()});
        p.ids.insert(p.ids.end(), docs[d].begin(), docs[d].end());
    }
    if (question) {
        const std::vector<int32_t> q = tok.encode(" Who had a red ball? It was", false);
        p.ids.insert(p.ids.end(), q.begin(), q.end());
    }
    return p;
}

Outcome generate(Engine& e, const Prompt& p) {
    CompletionRequest r;
    r.prompt = p.ids;
    r.documents = p.documents;
    r.max_tokens = 8;
    r.sampler.temperature = 0;
    r.logprobs = true;
    r.top_logprobs = 5;
    auto t = e.submit(r);
    Outcome o = collect(*t);
    REQUIRE(o.done.finish != FinishReason::Error);
    return o;
}

}  // namespace

TEST_CASE("blend engine: documents stored once, reused in another order; all recomputed is the prefill") {
    VKLLM_REQUIRE_MODEL(path, "stories260K.gguf");
    test::ValidationGuard guard;
    Context& ctx = test::context();
    const test::LoadedModel m = test::open_model(path);
    const std::unique_ptr<Tokenizer> tok = make_tokenizer(m.file);
    std::vector<std::vector<int32_t>> docs;
    for (const char* t : {" Lily had a red ball. She liked to throw it high in the sky.",
                          " Tom was a little dog who lived in a big house with a garden.",
                          " The sun was hot, so Ben went to the lake to swim with his mom."})
        docs.push_back(tok->encode(t, false));
    // The same prefix: the second prompt's slot holds it and the first token of its first document
    // (its documents begin alike), which is given up so that the document is blended whole.
    const Prompt first = make_prompt(*tok, "Here are some stories.", docs, {0, 1, 2}),
                 second = make_prompt(*tok, "Here are some stories.", docs, {2, 0, 1});

    ModelGpu g(ctx, m.file, m.cfg, options());
    // The plain prefill's first token and its log-probability, per prompt.
    std::vector<Outcome> plain;
    {
        Engine e(g, *tok, {.n_slots = kSlots});
        plain = {generate(e, first), generate(e, second)};
    }
    auto blender = std::make_shared<Blender>(g, kSlots, BlendOptions{.ratio = 1.0f});
    {
        Engine e(g, *tok, {.n_slots = kSlots, .blender = blender});
        for (size_t i = 0; i < 2; ++i) {
            const Outcome o = generate(e, i == 0 ? first : second);
            CAPTURE(i);
            // Every token evaluated again: the full prefill's distribution up to rounding.
            REQUIRE(!o.logprobs.empty());
            CHECK(o.logprobs[0].token == plain[i].logprobs[0].token);
            CHECK(std::abs(o.logprobs[0].logprob - plain[i].logprobs[0].logprob) < 1e-3);
            CHECK(o.done.prompt_tokens == (i == 0 ? first : second).ids.size());
            CHECK(o.done.blended_documents == 3);
            CHECK(o.done.stored_documents == (i == 0 ? 0u : 3u));
            CHECK(o.done.recomputed_tokens == o.done.blended_tokens);
            if (i == 1) CHECK(o.done.cached_tokens == second.documents[0].first);  // the prefix, exactly
        }
        // The same prompt again: its slot's cache holds it exactly, which wins over blending.
        const Outcome again = generate(e, second);
        CHECK(again.done.blended_documents == 0);
        CHECK(again.done.cached_tokens == second.ids.size() - 1);
    }
    const BlendStats s = blender->stats();
    CHECK(s.documents == 6);
    CHECK(s.from_store == 3);  // the second prompt's three, in another order
    CHECK(s.fallbacks == 0);
    CHECK(s.recomputed_tokens == s.document_tokens);
    CHECK(s.store.host_entries == 3);

    // The paper's share: fewer tokens again, the store already full; the answer stays close.
    auto partial = std::make_shared<Blender>(g, kSlots, BlendOptions{.ratio = 0.15f});
    {
        Engine e(g, *tok, {.n_slots = kSlots, .blender = partial});
        const Outcome o = generate(e, second);
        CHECK(o.logprobs[0].token == plain[1].logprobs[0].token);
        // Documents with no text after them: nothing to fuse the recompute with, a plain prefill.
        const Prompt last = make_prompt(*tok, "Two stories.", docs, {1, 0}, false);
        const Outcome a = generate(e, last);
        CHECK(a.done.completion_tokens > 0);
        CHECK(a.done.blended_documents == 0);
        // A slot that holds most of a document: those rows are kept, the rest of it is text.
        Prompt most;
        most.ids = tok->encode("A story.", true);
        const size_t at = most.ids.size(), part = docs[2].size() * 3 / 4;
        most.ids.insert(most.ids.end(), docs[2].begin(), docs[2].begin() + long(part));
        (void)generate(e, most);
        Prompt whole = make_prompt(*tok, "A story.", docs, {2});
        REQUIRE(whole.documents[0].first == at);
        const Outcome w = generate(e, whole);
        CHECK(w.done.blended_documents == 0);
        CHECK(w.done.cached_tokens >= at + part);
    }
    const BlendStats ps = partial->stats();
    CHECK(ps.documents == 3);
    CHECK(ps.recomputed_tokens * 4 < ps.document_tokens);
    CHECK(ps.recomputed_tokens > 0);

    // Bad document spans are refused when submitted.
    Engine e(g, *tok, {.n_slots = kSlots, .blender = partial});
    CompletionRequest bad;
    bad.prompt = first.ids;
    bad.documents = {{5, 4}, {7, 3}};  // overlapping
    CHECK_THROWS_AS(e.submit(bad), std::invalid_argument);
    bad.documents = {{first.ids.size() - 2, 5}};  // past the prompt
    CHECK_THROWS_AS(e.submit(bad), std::invalid_argument);
}

TEST_CASE("blend engine: a model that cannot blend is refused by name") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    ModelShape s = test_shape(*find_arch("gemma3"));  // the architecture's test row: sliding windows of 8
    s.weight_type = TensorType::F16;
    s.name = "blend-gemma3";
    const test::LoadedModel m = test::open_model(test::write_model(s.name, s));
    ModelOptions o;
    o.n_ctx = 256;
    o.ubatch = 16;
    o.n_seq = 2;
    ModelGpu g(ctx, m.file, m.cfg, o);
    CHECK(blend_refusal(g).find("sliding-window") != std::string::npos);
    CHECK_THROWS_WITH_AS(Blender(g, 1, {}), doctest::Contains("cannot serve this gemma3 model"), std::invalid_argument);
}
