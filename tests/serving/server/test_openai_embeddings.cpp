// The bodies of the endpoints that do not generate, on plain JSON: tokenize, detokenize and
// apply-template, embeddings and rerank, with every input form, the 400s and the response shapes.
#include "serving/server/openai_embeddings.h"

#include "serving/server/openai_requests.h"
#include "support/openai_testing.h"

#include <doctest/doctest.h>

using namespace vkllm;
using namespace vkllm::server;
using namespace vkllm::server::openai_testing;

TEST_CASE("protocol: tokenize, detokenize and apply-template bodies") {
    TokenizeRequest t = parse_tokenize_request(json{{"content", "Hello"}});
    CHECK(t.content == "Hello");
    CHECK_FALSE(t.add_special);
    CHECK(t.parse_special);
    t = parse_tokenize_request(json{{"content", "x"}, {"add_special", true}, {"parse_special", false}});
    CHECK(t.add_special);
    CHECK_FALSE(t.parse_special);
    CHECK(error_of([] { parse_tokenize_request(json{{"content", 5}}); }).param() == "content");
    CHECK(error_of([] { parse_tokenize_request(json::object()); }).param() == "content");

    CHECK(parse_detokenize_request(json{{"tokens", {1, 2}}}, 10) == std::vector<int32_t>{1, 2});
    CHECK(error_of([] { parse_detokenize_request(json{{"tokens", {1, 10}}}, 10); }).param() == "tokens[1]");
    CHECK(error_of([] { parse_detokenize_request(json{{"tokens", {-1}}}, 10); }).param() == "tokens[0]");
    CHECK(error_of([] { parse_detokenize_request(json{{"tokens", {"a"}}}, 10); }).param() == "tokens[0]");
    CHECK(error_of([] { parse_detokenize_request(json{{"tokens", "1 2"}}, 10); }).param() == "tokens");

    TemplateRequest a =
        parse_apply_template_request(chat_body({{"chat_template_kwargs", {{"enable_thinking", true}}}}));
    CHECK(a.messages.size() == 1);
    CHECK(a.template_kwargs["enable_thinking"] == true);
    CHECK(error_of([] { parse_apply_template_request(json::object()); }).param() == "messages");
}

TEST_CASE("protocol: embeddings requests: every input form, encodings, dimensions and the 400s") {
    auto parse = [](json body) { return parse_embeddings_request(body, 1000, 384); };
    EmbeddingsRequest r = parse({{"input", "hello"}, {"model", "m"}});
    CHECK(r.texts == std::vector<std::string>{"hello"});
    CHECK(r.token_ids.empty());
    CHECK_FALSE(r.base64);
    CHECK(r.model == "m");
    r = parse({{"input", {"a", "b", "c"}}, {"encoding_format", "base64"}, {"dimensions", 384}});
    CHECK(r.size() == 3);
    CHECK(r.base64);
    r = parse({{"input", {101, 5, 102}}});
    CHECK(r.token_ids == std::vector<std::vector<int32_t>>{{101, 5, 102}});
    r = parse({{"input", {{1, 2}, {3}}}});
    CHECK(r.token_ids == std::vector<std::vector<int32_t>>{{1, 2}, {3}});

    auto err = [&](json body) { return error_of([&] { parse(std::move(body)); }); };
    ApiError e = err({{"model", "m"}});
    CHECK(e.param() == "input");
    CHECK(err({{"input", ""}}).param() == "input");
    CHECK(err({{"input", json::array()}}).param() == "input");
    CHECK(std::string(err({{"input", {"a", ""}}}).what()).find("input[1]") != std::string::npos);
    CHECK(err({{"input", {"a", 3}}}).param() == "input[1]");
    CHECK(std::string(err({{"input", {1, 1000}}}).what())
              .find("1000 is not a token id (the vocabulary has 1000 tokens)") != std::string::npos);
    CHECK(std::string(err({{"input", {{1}, json::array()}}}).what()).find("input[1]") != std::string::npos);
    CHECK(err({{"input", 5}}).param() == "input");
    CHECK(std::string(err({{"input", std::vector<std::string>(2049, "x")}}).what()).find("at most 2048") !=
          std::string::npos);
    CHECK(err({{"input", "x"}, {"encoding_format", "int8"}}).param() == "encoding_format");
    e = err({{"input", "x"}, {"dimensions", 256}});
    CHECK(e.param() == "dimensions");
    CHECK(std::string(e.what()).find("have 384 dimensions and cannot be shortened") != std::string::npos);
    CHECK(embedding_length_error(2, 600, 512).code() == "context_length_exceeded");
}

TEST_CASE("protocol: embeddings responses, float and base64 (little-endian f32, RFC 4648)") {
    CHECK(base64_floats({1.0f}) == "AACAPw==");  // 00 00 80 3f
    CHECK(base64_floats({1.0f, -2.0f}) == "AACAPwAAAMA=");  // + 00 00 00 c0
    CHECK(base64_floats({0.0f, 0.0f, 0.0f}) == "AAAAAAAAAAAAAAAA");
    CHECK(base64_floats({}).empty());
    const json f = embeddings_response({{0.5f, -1.0f}, {2.0f, 0.0f}}, false, "bge", 7);
    CHECK(f["object"] == "list");
    CHECK(f["model"] == "bge");
    CHECK(f["data"][1]["index"] == 1);
    CHECK(f["data"][1]["object"] == "embedding");
    CHECK(f["data"][0]["embedding"] == json({0.5, -1.0}));
    CHECK(f["usage"] == json({{"prompt_tokens", 7}, {"total_tokens", 7}}));
    const json b = embeddings_response({{1.0f}}, true, "bge", 3);
    CHECK(b["data"][0]["embedding"] == "AACAPw==");
}

TEST_CASE("protocol: rerank requests (Jina / llama-server shape) and their 400s") {
    RerankRequest r = parse_rerank_request({{"query", "q"}, {"documents", {"a", "b"}}, {"model", "m"}});
    CHECK(r.query == "q");
    CHECK(r.documents == std::vector<std::string>{"a", "b"});
    CHECK(r.top_n == 0);
    CHECK_FALSE(r.return_documents);
    CHECK(r.model == "m");
    // llama-server's `texts`, Jina's {"text": ...} objects, top_n past the count, return_documents
    r = parse_rerank_request(
        {{"query", "q"}, {"texts", json::array({"a", {{"text", "b"}}})}, {"top_n", 5}, {"return_documents", true}});
    CHECK(r.documents == std::vector<std::string>{"a", "b"});
    CHECK(r.top_n == 2);
    CHECK(r.return_documents);

    auto err = [&](json body) { return error_of([&] { parse_rerank_request(std::move(body)); }); };
    CHECK(err({{"documents", {"a"}}}).param() == "query");
    CHECK(err({{"query", ""}, {"documents", {"a"}}}).param() == "query");
    CHECK(err({{"query", 3}, {"documents", {"a"}}}).param() == "query");
    CHECK(err({{"query", "q"}}).param() == "documents");
    CHECK(err({{"query", "q"}, {"documents", "a"}}).param() == "documents");
    CHECK(err({{"query", "q"}, {"documents", json::array()}}).param() == "documents");
    CHECK(err({{"query", "q"}, {"documents", {"a", ""}}}).param() == "documents[1]");
    CHECK(err({{"query", "q"}, {"documents", {"a", 7}}}).param() == "documents[1]");
    CHECK(err({{"query", "q"}, {"documents", json::array({{{"txt", "a"}}})}}).param() == "documents[0]");
    CHECK(std::string(err({{"query", "q"}, {"documents", std::vector<std::string>(2049, "x")}}).what())
              .find("at most 2048") != std::string::npos);
    CHECK(err({{"query", "q"}, {"documents", {"a"}}, {"top_n", 0}}).param() == "top_n");
    CHECK(err({{"query", "q"}, {"documents", {"a"}}, {"top_n", -1}}).param() == "top_n");
    CHECK(err({{"query", "q"}, {"documents", {"a"}}, {"top_n", 1.5}}).param() == "top_n");
    CHECK(parse_rerank_request({{"query", "q"}, {"documents", {"a"}}, {"top_n", UINT64_MAX}}).top_n == 1);
    // As a request body parses them: 0 and 2 are unsigned numbers there.
    CHECK(err(json::parse(R"({"query":"q","documents":["a"],"top_n":0})")).param() == "top_n");
    CHECK(parse_rerank_request(json::parse(R"({"query":"q","documents":["a","b","c"],"top_n":2})")).top_n == 2);
    CHECK(err({{"query", "q"}, {"documents", {"a"}}, {"return_documents", "yes"}}).param() == "return_documents");
    CHECK(rerank_length_error(1, 600, 512).code() == "context_length_exceeded");
}

TEST_CASE("protocol: rerank responses: by descending score, ties in input order, top_n, documents") {
    RerankRequest req;
    req.documents = {"a", "b", "c", "d"};
    const json all = rerank_response(req, {0.5f, 2.0f, -1.0f, 0.5f}, "rr", 11);
    CHECK(all["object"] == "list");
    CHECK(all["model"] == "rr");
    CHECK(all["usage"] == json({{"prompt_tokens", 11}, {"total_tokens", 11}}));
    REQUIRE(all["results"].size() == 4);
    std::vector<int> order;
    for (const json& x : all["results"]) order.push_back(x["index"].get<int>());
    CHECK(order == std::vector<int>{1, 0, 3, 2});
    CHECK(all["results"][0]["relevance_score"] == 2.0);
    CHECK_FALSE(all["results"][0].contains("document"));
    req.top_n = 2;
    req.return_documents = true;
    const json top = rerank_response(req, {0.5f, 2.0f, -1.0f, 0.5f}, "rr", 11);
    REQUIRE(top["results"].size() == 2);
    CHECK(top["results"][1]["index"] == 0);
    CHECK(top["results"][1]["document"] == json({{"text", "a"}}));
}
