// The C API's embeddings and reranking from C++ through libvkllm.so alone: vkllm_embed,
// vkllm_embed_batch and vkllm_rerank against what `vkllm embed` prints, and their errors.
#include "capi_testing.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <sstream>
#include <span>
#include <string>
#include <thread>
#include <vector>

using namespace capi_test;

TEST_CASE("capi: vkllm_embed on an embedding model: info, the vectors `vkllm embed` prints, and its errors") {
    const std::string bert = gen_capi_model("capi-bert.gguf", "ggml-vocab-bert-bge.gguf",
                                            "--arch bert --dim 64 --layers 2 --heads 4 --ffn 128 --ctx 48 --type f16");
    if (bert.empty()) return;
    vkllm_model_params p = test_params();
    vkllm_model* m = nullptr;
    p.kv_budget = 64;  // an embedding model keeps no conversations
    CHECK(vkllm_model_load(bert.c_str(), &p, &m) == VKLLM_ERR_INVALID_ARGUMENT);
    CHECK(contains(vkllm_last_error(), "kv_budget"));
    p.kv_budget = 0;
    REQUIRE(vkllm_model_load(bert.c_str(), &p, &m) == VKLLM_OK);
    const vkllm_model_info info = model_info(m);
    CHECK(info.embeddings);
    CHECK(info.kv_budget == 0);
    CHECK(info.embedding_dim == 64);
    CHECK(info.max_embed_tokens == 48);  // the default ubatch of an embedding model is its context
    CHECK(std::string(info.pooling) == "mean");
    CHECK(std::string(info.architecture) == "bert");

    const std::string text = "The giant panda is a bear.";
    std::vector<float> v(64);
    size_t n = 0;
    REQUIRE(vkllm_embed(m, text.data(), text.size(), 2, v.data(), v.size(), &n) == VKLLM_OK);
    CHECK(n == 64);
    double norm = 0;
    for (float x : v) norm += double(x) * x;
    CHECK(norm == doctest::Approx(1.0).epsilon(1e-5));
    // The same vector as the command line prints.
    const std::vector<float> cli = command_floats(std::string(VKLLM_EXE) + " embed -m " + bert + " -p '" + text + "'");
    REQUIRE(cli.size() == 64);
    for (size_t i = 0; i < 64; ++i) CHECK(v[i] == doctest::Approx(cli[i]).epsilon(1e-4));

    // The size query, a small buffer, no normalisation, and the errors.
    CHECK(vkllm_embed(m, text.data(), text.size(), 2, nullptr, 0, &n) == VKLLM_ERR_BUFFER_TOO_SMALL);
    CHECK(n == 64);
    std::vector<float> raw(64);
    REQUIRE(vkllm_embed(m, text.data(), text.size(), -1, raw.data(), raw.size(), &n) == VKLLM_OK);
    CHECK(std::fabs(raw[0] / v[0] - raw[1] / v[1]) < 1e-3 * std::fabs(raw[0] / v[0]));  // a multiple of it
    CHECK(vkllm_embed(m, "", 0, 2, v.data(), v.size(), &n) == VKLLM_ERR_INVALID_ARGUMENT);
    CHECK(vkllm_embed(m, text.data(), text.size(), -2, v.data(), v.size(), &n) == VKLLM_ERR_INVALID_ARGUMENT);
    std::string long_text;
    for (int i = 0; i < 60; ++i) long_text += "panda ";
    CHECK(vkllm_embed(m, long_text.data(), long_text.size(), 2, v.data(), v.size(), &n) == VKLLM_ERR_CONTEXT_FULL);
    CHECK(std::string(vkllm_last_error()).find("more than the 48 this model takes at once") != std::string::npos);
    REQUIRE(vkllm_embed(m, text.data(), text.size(), 2, v.data(), v.size(), &n) == VKLLM_OK);  // still usable
    vkllm_session* s = nullptr;
    CHECK(vkllm_session_new(m, nullptr, &s) == VKLLM_ERR_INVALID_ARGUMENT);
    CHECK(std::string(vkllm_last_error()).find("embedding model: it has no sessions") != std::string::npos);
    vkllm_model_free(m);
    // A decoder makes no embeddings.
    Model dec;
    CHECK(vkllm_embed(dec.m, "x", 1, 2, v.data(), v.size(), &n) == VKLLM_ERR_INVALID_ARGUMENT);
    CHECK(std::string(vkllm_last_error()).find("makes no embeddings") != std::string::npos);
    CHECK(validation_errors == 0);
}


TEST_CASE("capi: vkllm_embed_batch equals vkllm_embed per text, and names the text it refuses") {
    const std::string bert = gen_capi_model("capi-bert-batch.gguf", "ggml-vocab-bert-bge.gguf",
                                            "--arch bert --dim 64 --layers 2 --heads 4 --ffn 128 --ctx 48 --type q8_0 --pooling cls");
    if (bert.empty()) return;
    vkllm_model_params p = test_params();
    vkllm_model* m = nullptr;
    REQUIRE(vkllm_model_load(bert.c_str(), &p, &m) == VKLLM_OK);
    // Texts of different lengths, so that one pass packs several and the last is partly full.
    const std::vector<std::string> texts = {"The giant panda is a bear.", "a", "bamboo forests of Sichuan and Shaanxi",
                                            "pandas eat bamboo, mostly", "?", "the red panda is no bear at all"};
    std::vector<const char*> ptrs;
    std::vector<size_t> lens;
    for (const std::string& t : texts) {
        ptrs.push_back(t.data());
        lens.push_back(t.size());
    }
    size_t n = 0;
    CHECK(vkllm_embed_batch(m, ptrs.data(), lens.data(), texts.size(), 2, nullptr, 0, &n) == VKLLM_ERR_BUFFER_TOO_SMALL);
    CHECK(n == 64 * texts.size());
    std::vector<float> all(n);
    REQUIRE(vkllm_embed_batch(m, ptrs.data(), lens.data(), texts.size(), 2, all.data(), all.size(), &n) == VKLLM_OK);
    for (size_t i = 0; i < texts.size(); ++i) {
        std::vector<float> one(64);
        REQUIRE(vkllm_embed(m, texts[i].data(), texts[i].size(), 2, one.data(), one.size(), &n) == VKLLM_OK);
        for (size_t d = 0; d < 64; ++d) CHECK(all[i * 64 + d] == doctest::Approx(one[d]).epsilon(1e-5));
    }
    CHECK(vkllm_embed_batch(m, ptrs.data(), lens.data(), 0, 2, nullptr, 0, &n) == VKLLM_OK);
    CHECK(n == 0);
    // Errors name the text; nothing runs.
    lens[3] = 0;
    n = 12345;
    CHECK(vkllm_embed_batch(m, ptrs.data(), lens.data(), texts.size(), 2, all.data(), all.size(), &n) ==
          VKLLM_ERR_INVALID_ARGUMENT);
    CHECK(contains(vkllm_last_error(), "texts[3] is empty"));
    CHECK(n == 12345);  // untouched on an error, also by a size query
    CHECK(vkllm_embed_batch(m, ptrs.data(), lens.data(), texts.size(), 2, nullptr, 0, &n) == VKLLM_ERR_INVALID_ARGUMENT);
    CHECK(n == 12345);
    std::string long_text;
    for (int i = 0; i < 60; ++i) long_text += "panda ";
    ptrs[3] = long_text.data();
    lens[3] = long_text.size();
    CHECK(vkllm_embed_batch(m, ptrs.data(), lens.data(), texts.size(), 2, all.data(), all.size(), &n) ==
          VKLLM_ERR_CONTEXT_FULL);
    CHECK(contains(vkllm_last_error(), "texts[3] has"));
    ptrs[2] = nullptr;
    CHECK(vkllm_embed_batch(m, ptrs.data(), lens.data(), texts.size(), 2, all.data(), all.size(), &n) ==
          VKLLM_ERR_INVALID_ARGUMENT);
    CHECK(contains(vkllm_last_error(), "texts[2] is NULL"));
    CHECK(vkllm_embed_batch(m, nullptr, nullptr, 2, 2, all.data(), all.size(), &n) == VKLLM_ERR_INVALID_ARGUMENT);
    // Not a reranker.
    float score = 0;
    CHECK(vkllm_rerank(m, "q", 1, ptrs.data(), lens.data(), 1, &score) == VKLLM_ERR_INVALID_ARGUMENT);
    CHECK(contains(vkllm_last_error(), "not a reranker"));
    vkllm_model_free(m);
    CHECK(validation_errors == 0);
}

TEST_CASE("capi: a decoder embedding model: pooling from the file or the params, inputs longer than a ubatch") {
    // As Qwen3-Embedding: a decoder whose file names pooling last.
    const std::string qwen = gen_capi_model("capi-qwen3-embed.gguf", "ggml-vocab-llama-spm.gguf",
                                            "--arch qwen3 --dim 64 --layers 2 --heads 4 --kv-heads 2 --head-dim 32 "
                                            "--ffn 128 --ctx 256 --type f16 --pooling last --seed 7");
    if (qwen.empty()) return;
    std::string text;
    for (int i = 0; i < 12; ++i) text += "The giant panda is a bear species endemic to China. ";
    vkllm_model_params p = test_params();
    vkllm_model* m = nullptr;
    REQUIRE(vkllm_model_load(qwen.c_str(), &p, &m) == VKLLM_OK);
    const vkllm_model_info info = model_info(m);
    CHECK(info.embeddings);
    CHECK(info.embedding_dim == 64);
    CHECK(info.max_embed_tokens == 256);  // a decoder's context: it runs an input in ubatch chunks
    CHECK(info.max_sessions == 0);
    CHECK(std::string(info.pooling) == "last");
    std::vector<float> v(64);
    size_t n = 0;
    REQUIRE(vkllm_embed(m, text.data(), text.size(), 2, v.data(), v.size(), &n) == VKLLM_OK);
    const std::vector<float> cli = command_floats(std::string(VKLLM_EXE) + " embed -m " + qwen + " -p '" + text + "'");
    REQUIRE(cli.size() == 64);
    for (size_t i = 0; i < 64; ++i) CHECK(v[i] == doctest::Approx(cli[i]).epsilon(1e-4));
    vkllm_session* s = nullptr;
    CHECK(vkllm_session_new(m, nullptr, &s) == VKLLM_ERR_INVALID_ARGUMENT);
    vkllm_model_free(m);

    // The same text in chunks of 16 tokens through the KV cache gives the same vector; mean pooling
    // reads every chunk's rows.
    for (const char* pooling : {"last", "mean"}) {
        CAPTURE(pooling);
        std::vector<float> whole(64), chunked(64);
        for (uint32_t ubatch : {256u, 16u}) {
            vkllm_model_params q = test_params();
            q.ubatch = ubatch;
            q.pooling = pooling;
            REQUIRE(vkllm_model_load(qwen.c_str(), &q, &m) == VKLLM_OK);
            std::vector<float>& out = ubatch == 16 ? chunked : whole;
            REQUIRE(vkllm_embed(m, text.data(), text.size(), 2, out.data(), out.size(), &n) == VKLLM_OK);
            vkllm_model_free(m);
        }
        double dot = 0;  // both unit length
        for (size_t i = 0; i < 64; ++i) dot += double(chunked[i]) * whole[i];
        CHECK(dot > 0.99999);
        if (std::string(pooling) == "last")
            for (size_t i = 0; i < 64; ++i) CHECK(whole[i] == doctest::Approx(v[i]).epsilon(1e-5));
    }

    // A decoder whose file names no pooling generates, unless the params give one.
    Model dec;
    CHECK_FALSE(model_info(dec.m).embeddings);
    vkllm_model_params q = test_params();
    q.pooling = "mean";
    REQUIRE(vkllm_model_load(model_path("stories260K.gguf").c_str(), &q, &m) == VKLLM_OK);
    const vkllm_model_info dinfo = model_info(m);
    CHECK(dinfo.embeddings);
    CHECK(std::string(dinfo.pooling) == "mean");
    CHECK(vkllm_embed(m, "Once upon a time", 16, 2, v.data(), v.size(), &n) == VKLLM_OK);
    vkllm_model_free(m);
    q.pooling = "rank";
    CHECK(vkllm_model_load(model_path("stories260K.gguf").c_str(), &q, &m) == VKLLM_ERR_INVALID_ARGUMENT);
    CHECK(contains(vkllm_last_error(), "pooling 'rank'"));
    // A decoder whose file says rank (Qwen3-Reranker style) is refused before the upload.
    // (gen-model writes rank for encoders only: its pooling 'last' (3) becomes 'rank' (4) in place,
    // the u32 after the key's name and type.)
    const std::string qrank = gen_capi_model("capi-qwen3-rank.gguf", "ggml-vocab-llama-spm.gguf",
                                             "--arch qwen3 --dim 64 --layers 1 --heads 4 --kv-heads 2 --head-dim 32 "
                                             "--ffn 128 --ctx 64 --type f16 --pooling last");
    {
        std::fstream f(qrank, std::ios::in | std::ios::out | std::ios::binary);
        std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        const std::string key = "qwen3.pooling_type";
        const size_t at = bytes.find(key);
        REQUIRE(at != std::string::npos);
        const size_t value = at + key.size() + 4;
        REQUIRE(bytes[value] == 3);
        f.seekp(std::streamoff(value));
        f.put(4);
    }
    vkllm_model_params r = test_params();
    CHECK(vkllm_model_load(qrank.c_str(), &r, &m) == VKLLM_ERR_MODEL);
    CHECK(contains(vkllm_last_error(), "pooling 'rank' on a decoder"));
    CHECK(validation_errors == 0);
}

TEST_CASE("capi: vkllm_rerank scores as `vkllm embed --rerank`, and its errors") {
    const std::string rr = gen_capi_model("capi-rerank.gguf", "ggml-vocab-bert-bge.gguf",
                                          "--arch bert --dim 64 --layers 2 --heads 4 --ffn 128 --ctx 64 --type f16 --pooling rank");
    if (rr.empty()) return;
    vkllm_model_params p = test_params();
    vkllm_model* m = nullptr;
    REQUIRE(vkllm_model_load(rr.c_str(), &p, &m) == VKLLM_OK);
    const vkllm_model_info info = model_info(m);
    CHECK(info.embeddings);
    CHECK(std::string(info.pooling) == "rank");
    const std::string query = "what is a panda?";
    const std::vector<std::string> docs = {"The giant panda is a bear.", "hello", "pandas eat bamboo"};
    std::vector<const char*> ptrs;
    std::vector<size_t> lens;
    for (const std::string& d : docs) {
        ptrs.push_back(d.data());
        lens.push_back(d.size());
    }
    std::vector<float> scores(docs.size());
    REQUIRE(vkllm_rerank(m, query.data(), query.size(), ptrs.data(), lens.data(), docs.size(), scores.data()) == VKLLM_OK);
    // `vkllm embed --rerank` prints "index score" per document.
    std::string cmd = std::string(VKLLM_EXE) + " embed -m " + rr + " --rerank '" + query + "' --batch-lines -f <(printf '";
    for (const std::string& d : docs) cmd += d + "\\n";
    cmd += "')";
    const std::vector<float> cli = command_floats("bash -c \"" + cmd + "\"");
    REQUIRE(cli.size() == 2 * docs.size());
    for (size_t i = 0; i < docs.size(); ++i) {
        CHECK(cli[2 * i] == float(i));
        CHECK(scores[i] == doctest::Approx(cli[2 * i + 1]).epsilon(1e-4));
    }
    size_t n = 0;
    std::vector<float> v(64);
    CHECK(vkllm_embed(m, "x", 1, 2, v.data(), v.size(), &n) == VKLLM_ERR_INVALID_ARGUMENT);
    CHECK(contains(vkllm_last_error(), "reranker"));
    CHECK(vkllm_rerank(m, "", 0, ptrs.data(), lens.data(), docs.size(), scores.data()) == VKLLM_ERR_INVALID_ARGUMENT);
    CHECK(contains(vkllm_last_error(), "query is empty"));
    lens[1] = 0;
    CHECK(vkllm_rerank(m, query.data(), query.size(), ptrs.data(), lens.data(), docs.size(), scores.data()) ==
          VKLLM_ERR_INVALID_ARGUMENT);
    CHECK(contains(vkllm_last_error(), "documents[1] is empty"));
    std::string long_doc;
    for (int i = 0; i < 80; ++i) long_doc += "panda ";
    ptrs[1] = long_doc.data();
    lens[1] = long_doc.size();
    CHECK(vkllm_rerank(m, query.data(), query.size(), ptrs.data(), lens.data(), docs.size(), scores.data()) ==
          VKLLM_ERR_CONTEXT_FULL);
    CHECK(contains(vkllm_last_error(), "documents[1]"));
    CHECK(vkllm_rerank(m, query.data(), query.size(), ptrs.data(), lens.data(), 0, nullptr) == VKLLM_OK);
    vkllm_model_free(m);
    // A decoder is no reranker.
    Model dec;
    float score = 0;
    CHECK(vkllm_rerank(dec.m, "q", 1, ptrs.data(), lens.data(), 1, &score) == VKLLM_ERR_INVALID_ARGUMENT);
    CHECK(validation_errors == 0);
}
