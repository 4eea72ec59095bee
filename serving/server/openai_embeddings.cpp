#include "serving/server/openai_embeddings.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace vkllm::server {

using detail::field;
using detail::get_bool;
using detail::get_string;
using detail::wrong_type;

TokenizeRequest parse_tokenize_request(const json& body) {
    TokenizeRequest r;
    auto c = body.find("content");
    if (c == body.end()) throw invalid_field("content", "Missing required parameter: 'content'.");
    if (!c->is_string()) wrong_type("content", "a string", *c);
    r.content = c->get<std::string>();
    r.add_special = get_bool(body, "add_special").value_or(false);
    r.parse_special = get_bool(body, "parse_special").value_or(true);
    return r;
}

std::vector<int32_t> parse_detokenize_request(const json& body, size_t n_vocab) {
    auto t = body.find("tokens");
    if (t == body.end()) throw invalid_field("tokens", "Missing required parameter: 'tokens'.");
    if (!t->is_array()) wrong_type("tokens", "an array of integers", *t);
    std::vector<int32_t> ids;
    for (size_t i = 0; i < t->size(); ++i) {
        const json& x = (*t)[i];
        if (!x.is_number_integer()) wrong_type(fmt::format("tokens[{}]", i), "an integer", x);
        bool ok = x.is_number_unsigned() ? x.get<uint64_t>() < n_vocab
                                         : x.get<int64_t>() >= 0 && uint64_t(x.get<int64_t>()) < n_vocab;
        if (!ok)
            throw invalid_field(fmt::format("tokens[{}]", i), fmt::format("Invalid 'tokens[{}]': {} is not a token id "
                                                                          "(the vocabulary has {} tokens).",
                                                                          i, x.dump(), n_vocab));
        ids.push_back(int32_t(x.get<int64_t>()));
    }
    return ids;
}

EmbeddingsRequest parse_embeddings_request(const json& body, size_t n_vocab, uint32_t width) {
    EmbeddingsRequest r;
    r.model = get_string(body, "model").value_or("");
    const auto in = body.find("input");
    if (in == body.end()) throw invalid_field("input", "Missing required parameter: 'input'.");
    constexpr size_t kMaxInputs = 2048;
    auto token_list = [&](const json& a, const std::string& where) {
        if (a.empty()) throw invalid_field("input", fmt::format("Invalid '{}': an input cannot be empty.", where));
        std::vector<int32_t> ids;
        for (size_t i = 0; i < a.size(); ++i) {
            const json& x = a[i];
            const std::string at = fmt::format("{}[{}]", where, i);
            if (!x.is_number_integer()) wrong_type(at, "an integer", x);
            const bool ok = x.is_number_unsigned() ? x.get<uint64_t>() < n_vocab
                                                   : x.get<int64_t>() >= 0 && uint64_t(x.get<int64_t>()) < n_vocab;
            if (!ok)
                throw invalid_field(
                    "input", fmt::format("Invalid '{}': {} is not a token id (the vocabulary has {} tokens).", at,
                                         x.dump(), n_vocab));
            ids.push_back(int32_t(x.get<int64_t>()));
        }
        return ids;
    };
    if (in->is_string()) {
        r.texts.push_back(in->get<std::string>());
    } else if (in->is_array() && !in->empty() && (*in)[0].is_number()) {
        r.token_ids.push_back(token_list(*in, "input"));
    } else if (in->is_array() && !in->empty()) {
        if (in->size() > kMaxInputs)
            throw invalid_field(
                "input", fmt::format("Invalid 'input': {} inputs; at most {} per request.", in->size(), kMaxInputs));
        const bool strings = (*in)[0].is_string();
        for (size_t i = 0; i < in->size(); ++i) {
            const json& x = (*in)[i];
            const std::string at = fmt::format("input[{}]", i);
            if (strings) {
                if (!x.is_string()) wrong_type(at, "a string (every input of the array alike)", x);
                r.texts.push_back(x.get<std::string>());
            } else {
                if (!x.is_array()) wrong_type(at, "a string or an array of token ids", x);
                r.token_ids.push_back(token_list(x, at));
            }
        }
    } else {
        if (in->is_array()) throw invalid_field("input", "Invalid 'input': an input cannot be empty.");
        wrong_type("input", "a string, an array of strings or an array of token ids", *in);
    }
    for (size_t i = 0; i < r.texts.size(); ++i)
        if (r.texts[i].empty())
            throw invalid_field("input", r.texts.size() == 1
                                             ? std::string("Invalid 'input': an input cannot be empty.")
                                             : fmt::format("Invalid 'input[{}]': an input cannot be empty.", i));
    const std::string format = get_string(body, "encoding_format").value_or("float");
    if (format != "float" && format != "base64")
        throw invalid_field("encoding_format",
                            fmt::format("Invalid 'encoding_format': '{}'; expected 'float' or 'base64'.", format));
    r.base64 = format == "base64";
    if (auto d = body.find("dimensions"); d != body.end() && !d->is_null()) {
        if (!d->is_number_integer()) wrong_type("dimensions", "an integer", *d);
        if (d->get<int64_t>() != int64_t(width))
            throw invalid_field("dimensions", fmt::format("Invalid 'dimensions': {}. This model's embeddings have {} "
                                                          "dimensions and cannot be shortened.",
                                                          d->dump(), width));
    }
    return r;
}

std::string base64_floats(const std::vector<float>& v) {
    static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string bytes(v.size() * 4, '\0');
    for (size_t i = 0; i < v.size(); ++i) {
        uint32_t u;
        std::memcpy(&u, &v[i], 4);
        for (int b = 0; b < 4; ++b) bytes[4 * i + b] = char((u >> (8 * b)) & 0xff);  // little-endian
    }
    std::string out;
    out.reserve((bytes.size() + 2) / 3 * 4);
    for (size_t i = 0; i < bytes.size(); i += 3) {
        const size_t n = std::min<size_t>(3, bytes.size() - i);
        uint32_t w = 0;
        for (size_t b = 0; b < 3; ++b) w = (w << 8) | (b < n ? static_cast<unsigned char>(bytes[i + b]) : 0u);
        for (size_t c = 0; c < 4; ++c) out += c <= n ? kAlphabet[(w >> (18 - 6 * c)) & 63] : '=';
    }
    return out;
}

json embeddings_response(const std::vector<std::vector<float>>& vectors, bool base64, const std::string& model,
                         uint64_t prompt_tokens) {
    json data = json::array();
    for (size_t i = 0; i < vectors.size(); ++i) {
        json e = {{"object", "embedding"}, {"index", i}};
        if (base64)
            e["embedding"] = base64_floats(vectors[i]);
        else
            e["embedding"] = vectors[i];
        data.push_back(std::move(e));
    }
    return {{"object", "list"},
            {"data", std::move(data)},
            {"model", model},
            {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}};
}

ApiError embedding_length_error(size_t index, size_t tokens, uint32_t limit) {
    return ApiError(400,
                    fmt::format("Input {} has {} tokens; this model takes at most {} tokens per input. Please "
                                "shorten the input.",
                                index, tokens, limit),
                    "invalid_request_error", "input", "context_length_exceeded");
}

RerankRequest parse_rerank_request(const json& body) {
    RerankRequest r;
    r.model = get_string(body, "model").value_or("");
    const std::optional<std::string> query = get_string(body, "query");
    if (!query) throw invalid_field("query", "Missing required parameter: 'query'.");
    if (query->empty()) throw invalid_field("query", "Invalid 'query': it cannot be empty.");
    r.query = *query;
    const char* name = field(body, "documents") ? "documents" : "texts";
    const json* docs = field(body, name);
    if (!docs) throw invalid_field("documents", "Missing required parameter: 'documents'.");
    if (!docs->is_array()) wrong_type(name, "an array of strings", *docs);
    constexpr size_t kMaxDocuments = 2048;
    if (docs->empty()) throw invalid_field(name, fmt::format("Invalid '{}': give at least one document.", name));
    if (docs->size() > kMaxDocuments)
        throw invalid_field(name, fmt::format("Invalid '{}': {} documents; at most {} per request.", name, docs->size(),
                                              kMaxDocuments));
    for (size_t i = 0; i < docs->size(); ++i) {
        const json& d = (*docs)[i];
        const std::string at = fmt::format("{}[{}]", name, i);
        const json* text = d.is_object() ? field(d, "text") : &d;
        if (!text || !text->is_string()) wrong_type(at, "a string or an object with a string 'text'", d);
        if (text->get_ref<const std::string&>().empty())
            throw invalid_field(at, fmt::format("Invalid '{}': a document cannot be empty.", at));
        r.documents.push_back(text->get<std::string>());
    }
    if (const json* n = field(body, "top_n")) {
        if (!n->is_number_integer()) wrong_type("top_n", "an integer", *n);
        // Parsed JSON holds non-negative integers as unsigned (above INT64_MAX too).
        if (n->is_number_unsigned() ? n->get<uint64_t>() == 0 : n->get<int64_t>() < 1)
            throw invalid_field("top_n", fmt::format("Invalid 'top_n': {}; expected a positive integer.", n->dump()));
        r.top_n = size_t(std::min<uint64_t>(n->get<uint64_t>(), r.documents.size()));
    }
    if (const json* b = field(body, "return_documents")) {
        if (!b->is_boolean()) wrong_type("return_documents", "a boolean", *b);
        r.return_documents = b->get<bool>();
    }
    return r;
}

json rerank_response(const RerankRequest& req, const std::vector<float>& scores, const std::string& model,
                     uint64_t prompt_tokens) {
    std::vector<size_t> order(scores.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] > scores[b]; });
    if (req.top_n) order.resize(std::min(order.size(), req.top_n));
    json results = json::array();
    for (size_t i : order) {
        json r = {{"index", i}, {"relevance_score", scores[i]}};
        if (req.return_documents) r["document"] = {{"text", req.documents.at(i)}};
        results.push_back(std::move(r));
    }
    return {{"object", "list"},
            {"results", std::move(results)},
            {"model", model},
            {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}};
}

ApiError rerank_length_error(size_t index, size_t tokens, uint32_t limit) {
    return ApiError(400,
                    fmt::format("The query and document {} are {} tokens together; this model takes at most {} "
                                "tokens per pair. Please shorten them.",
                                index, tokens, limit),
                    "invalid_request_error", "documents", "context_length_exceeded");
}

}  // namespace vkllm::server
