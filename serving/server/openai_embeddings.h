// The bodies of the endpoints that read text without generating it, as data: /v1/embeddings and
// /v1/rerank (embedding and reranking models), and /tokenize and /detokenize, parsed and checked,
// and their responses and errors in the shapes clients expect. No HTTP and no model here, so all of
// it is unit-tested on plain JSON (tests/serving/server/test_openai_embeddings.cpp).
#pragma once

#include "serving/server/openai_requests.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace vkllm::server {

struct TokenizeRequest {
    std::string content;
    bool add_special = false;  // BOS / EOS as the vocabulary asks
    bool parse_special = true;  // control-token texts become those tokens
};
TokenizeRequest parse_tokenize_request(const json& body);
// Token ids, each checked against the vocabulary size.
std::vector<int32_t> parse_detokenize_request(const json& body, size_t n_vocab);

// POST /v1/embeddings. `input`: a string, an array of strings, an array of token ids, or an array of
// arrays of token ids (at most 2048 inputs, none empty); `encoding_format` "float" (default) or
// "base64" (little-endian f32 bytes, what the official clients ask for by default); `dimensions`
// only equal to the model's width: it cannot truncate, so any other value is a 400 naming it.
struct EmbeddingsRequest {
    std::vector<std::string> texts;  // string inputs, or
    std::vector<std::vector<int32_t>> token_ids;  // token-id inputs (checked against the vocabulary)
    bool base64 = false;
    std::string model;
    size_t size() const { return texts.empty() ? token_ids.size() : texts.size(); }
};
EmbeddingsRequest parse_embeddings_request(const json& body, size_t n_vocab, uint32_t width);
// {"object": "list", "data": [{"object": "embedding", "index", "embedding"}], "model", "usage"}.
json embeddings_response(const std::vector<std::vector<float>>& vectors, bool base64, const std::string& model,
                         uint64_t prompt_tokens);
// Standard base64 (RFC 4648, padded) of the vector's little-endian f32 bytes.
std::string base64_floats(const std::vector<float>& v);
// The 400 for an embedding input longer than the model takes (code context_length_exceeded).
ApiError embedding_length_error(size_t index, size_t tokens, uint32_t limit);

// POST /v1/rerank (Jina's and llama-server's shape): `query` a non-empty string; `documents` (or
// llama-server's `texts`) 1..2048 non-empty strings or {"text": string} objects; `top_n` a positive
// integer (default all); `return_documents` (default false) adds each document's text.
struct RerankRequest {
    std::string query;
    std::vector<std::string> documents;
    size_t top_n = 0;  // 0: every document
    bool return_documents = false;
    std::string model;
};
RerankRequest parse_rerank_request(const json& body);
// {"object": "list", "results": [{"index", "relevance_score"(, "document": {"text"})}] by descending
// score (ties in input order), at most top_n of them, "model", "usage"}.
json rerank_response(const RerankRequest& req, const std::vector<float>& scores, const std::string& model,
                     uint64_t prompt_tokens);
// The 400 for a query and document longer together than the model takes (context_length_exceeded).
ApiError rerank_length_error(size_t index, size_t tokens, uint32_t limit);

}  // namespace vkllm::server
