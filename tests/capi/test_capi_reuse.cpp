// The C API's ways of not paying twice for the same tokens, through libvkllm.so alone: speculative
// decoding (a draft model, prompt lookup) and CacheBlend (vkllm_generate_documents).
#include "capi_testing.h"

#include <string>

using namespace capi_test;

TEST_CASE("capi: speculative decoding (a draft model, prompt lookup) tells the published story; bad params named") {
    const std::string draft = model_path("stories260K.gguf");
    for (const bool lookup : {false, true}) {
        CAPTURE(lookup);
        vkllm_model_params p = test_params();
        if (lookup)
            p.lookup = 2;
        else
            p.draft_model = draft.c_str();
        p.draft_max = 6;
        Model model("stories260K.gguf", p);
        Session session(model.m);
        const vkllm_sampling s = greedy(200);
        Collected out;
        REQUIRE(vkllm_generate(session.s, "", &s, collect, &out) == VKLLM_OK);
        CHECK(out.text == read_file(model_path("stories260K.greedy200.txt")));
        const vkllm_generation_stats st = stats_of(session.s);
        CHECK(st.generated_tokens == 200);
        CHECK(st.draft_tokens > 0);
        CHECK(st.accepted_tokens > 0);
        if (!lookup) CHECK(st.accepted_tokens == st.draft_tokens);  // the model drafting for itself
    }
    const std::string other = model_path("llama-2-tiny-random.gguf");
    struct Bad {
        const char* draft;
        uint32_t lookup, draft_max, draft_min;
        vkllm_status status;
        const char* message;
    };
    const Bad bad[] = {
        {draft.c_str(), 2, 0, 0, VKLLM_ERR_INVALID_ARGUMENT, "give only one"},
        {nullptr, 2, 33, 0, VKLLM_ERR_INVALID_ARGUMENT, "draft_max 33"},
        {nullptr, 2, 4, 5, VKLLM_ERR_INVALID_ARGUMENT, "draft_min 5 is more than draft_max 4"},
        {nullptr, 9, 0, 0, VKLLM_ERR_INVALID_ARGUMENT, "lookup 9"},
        {"/nonexistent/draft.gguf", 0, 0, 0, VKLLM_ERR_FILE, "draft_model"},
        {other.c_str(), 0, 0, 0, VKLLM_ERR_MODEL, "it has 32000 tokens, the model 512"},
    };
    for (const Bad& b : bad) {
        CAPTURE(b.message);
        vkllm_model_params p = test_params();
        p.draft_model = b.draft;
        p.lookup = b.lookup;
        p.draft_max = b.draft_max;
        p.draft_min = b.draft_min;
        vkllm_model* m = nullptr;
        CHECK(vkllm_model_load(model_path("stories260K.gguf").c_str(), &p, &m) == b.status);
        CHECK(m == nullptr);
        CHECK(contains(vkllm_last_error(), b.message));
    }
}

TEST_CASE("capi: vkllm_generate_documents with and without CacheBlend; bad params named") {
    const char* docs[] = {" Lily had a red ball. She liked to throw it high in the sky.",
                          " Tom was a little dog who lived in a big house with a garden."};
    const char* reversed[] = {docs[1], docs[0]};
    const vkllm_sampling s = greedy(8);
    // Without blend: the parts evaluated as text.
    Collected plain;
    {
        Model model;
        Session session(model.m);
        REQUIRE(vkllm_generate_documents(session.s, "Stories.", docs, 2, " Who had a red ball? It was", &s, collect,
                                         &plain) == VKLLM_OK);
        CHECK(!plain.text.empty());
        CHECK(stats_of(session.s).blended_documents == 0);
    }
    // Every token evaluated again: the same first piece as the plain evaluation.
    vkllm_model_params p = test_params();
    p.blend = true;
    p.blend_ratio = 1.0f;
    {
        Model model("stories260K.gguf", p);
        Session session(model.m);
        Collected all;
        REQUIRE(vkllm_generate_documents(session.s, "Stories.", docs, 2, " Who had a red ball? It was", &s, collect,
                                         &all) == VKLLM_OK);
        REQUIRE(!all.pieces.empty());
        CHECK(all.pieces[0] == plain.pieces.at(0));
        const vkllm_generation_stats st = stats_of(session.s);
        CHECK(st.generated_tokens == 8);
        CHECK(st.blended_documents == 2);
        CHECK(st.stored_documents == 0);
        CHECK(st.recomputed_tokens == st.blended_tokens);  // ratio 1
        CHECK(st.blended_tokens > 20);
        // Another order after a reset: the documents come from the store.
        REQUIRE(vkllm_session_reset(session.s) == VKLLM_OK);
        Collected again;
        CHECK(vkllm_generate_documents(session.s, "Other stories.", reversed, 2, " Who was a dog? It was", &s, collect,
                                       &again) == VKLLM_OK);
        CHECK(!again.text.empty());
        CHECK(stats_of(session.s).stored_documents == 2);
        // Misuse.
        CHECK(vkllm_generate_documents(session.s, nullptr, docs, 2, "q", &s, collect, &again) ==
              VKLLM_ERR_INVALID_ARGUMENT);
        CHECK(contains(vkllm_last_error(), "prefix is NULL"));
        CHECK(vkllm_generate_documents(session.s, "p", nullptr, 2, "q", &s, collect, &again) ==
              VKLLM_ERR_INVALID_ARGUMENT);
        const char* with_null[] = {docs[0], nullptr};
        CHECK(vkllm_generate_documents(session.s, "p", with_null, 2, "q", &s, collect, &again) ==
              VKLLM_ERR_INVALID_ARGUMENT);
        CHECK(contains(vkllm_last_error(), "documents[1] is NULL"));
    }
    struct Bad {
        bool blend;
        float ratio;
        const char* store;
        const char* message;
    };
    const Bad bad[] = {
        {true, 1.5f, nullptr, "blend_ratio 1.5"},
        {false, 0.2f, nullptr, "set blend too"},
        {false, 0.0f, "/tmp", "set blend too"},
        {true, 0.0f, "/proc/vkllm-no-such-dir", "/proc/vkllm-no-such-dir"},
    };
    for (const Bad& b : bad) {
        CAPTURE(b.message);
        vkllm_model_params q = test_params();
        q.blend = b.blend;
        q.blend_ratio = b.ratio;
        q.kv_store = b.store;
        vkllm_model* m = nullptr;
        CHECK(vkllm_model_load(model_path("stories260K.gguf").c_str(), &q, &m) == VKLLM_ERR_INVALID_ARGUMENT);
        CHECK(m == nullptr);
        CHECK(contains(vkllm_last_error(), b.message));
    }
}
