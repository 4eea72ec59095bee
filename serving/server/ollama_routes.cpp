// Ollama's routes on the same port as the OpenAI API: /api/chat and /api/generate (newline-delimited
// JSON streams unless `stream` is false), /api/embed and /api/embeddings, /api/tags, /api/show,
// /api/ps and /api/version; pull, push, create, copy and delete answer that this server serves one
// model file. Every error is Ollama's {"error": "..."}.
#include "serving/server/ollama_models.h"
#include "serving/server/ollama_requests.h"
#include "serving/server/ollama_responses.h"
#include "serving/server/request_plan.h"
#include "serving/server/server_core.h"

#include <fmt/format.h>

#include <chrono>
#include <random>

namespace vkllm::server {

namespace {

using Request = ServerCore::Request;
using Response = ServerCore::Response;
using Clock = std::chrono::steady_clock;
constexpr ErrorStyle kStyle = ErrorStyle::Ollama;

// Ollama's NDJSON: one object a line, the last with done: true and the statistics.
class OllamaStream final : public StreamEncoder {
public:
    explicit OllamaStream(ollama::Responder r) : r_(std::move(r)) {}
    const char* content_type() const override { return "application/x-ndjson"; }
    std::string start() override { return {}; }
    std::string text(size_t, const engine::Event& ev) override { return r_.stream_text(ev); }
    std::string finish(size_t, const engine::Event& done) override { return r_.stream_done(done); }
    std::string end(const std::vector<engine::Event>&) override { return {}; }
    std::string error(const ApiError& e) override { return ollama::ndjson(ollama::error_json(e.what())); }
    // NDJSON has no comment line, but whitespace before the next object is allowed by every JSON
    // reader: a space finds a client gone while its request waits.
    std::string ping() const override { return " "; }

private:
    ollama::Responder r_;
};

json read_body(const std::string& body) {
    if (body.find_first_not_of(" \t\r\n") == std::string::npos) throw ApiError(400, "missing request body");
    return parse_body(body);
}

std::shared_ptr<const ServedModel> named_model(ServerCore& core, const std::string& name) {
    std::shared_ptr<const ServedModel> m = core.ready_model();
    ollama::check_model_name(name, *m);
    return m;
}

// The prompt's token ids, the request prepared as the OpenAI chat route prepares one (tools in the
// template's family, Harmony's markers shown to its parser, the reasoning block split off), within
// `limit` tokens with room for one more.
std::vector<int32_t> prepare(ollama::Request& r, const ServedModel& m, uint32_t limit) {
    ParsedRequest& req = r.parsed;
    ollama::apply_think(r, m.reasoning_switch.thinks, m.harmony);
    std::vector<int32_t> ids = std::move(prepare_generation(req, m, limit, "think").at(0));
    req.engine.documents = req.prompt_documents.at(0);
    if (!r.context.empty()) {
        // The documents move with the text the context goes in front of.
        const size_t shift = r.context.size() - (!ids.empty() && ids[0] == m.tokenizer->bos_id() ? 1 : 0);
        for (engine::DocumentSpan& d : req.engine.documents) d.first += shift;
        // A generate that continues an earlier one: its context (which began with BOS) goes first.
        for (int32_t id : r.context)
            if (size_t(id) >= m.tokenizer->n_vocab())
                throw invalid_field("context", fmt::format("Invalid 'context': token id {} is not in the vocabulary "
                                                           "({} tokens).",
                                                           id, m.tokenizer->n_vocab()));
        if (!ids.empty() && ids[0] == m.tokenizer->bos_id()) ids.erase(ids.begin());
        ids.insert(ids.begin(), r.context.begin(), r.context.end());
        if (ids.size() >= limit) throw context_length_error(Endpoint::Completion, ids.size(), limit);
    }
    // options.num_ctx smaller than the server's: the reply stops where that context would be full.
    if (limit < m.n_ctx) {
        const int32_t room = int32_t(limit - ids.size());
        req.engine.max_tokens = req.engine.max_tokens < 0 ? room : std::min(req.engine.max_tokens, room);
    }
    return ids;
}

void generate(ServerCore& core, ollama::Route route, Response& res, const std::string& body) {
    const auto start = Clock::now();
    core.check_not_draining();
    const json j = read_body(body);
    thread_local std::mt19937_64 seeds{std::random_device{}()};
    ollama::Request r =
        route == ollama::Route::Chat ? ollama::parse_chat(j, seeds()) : ollama::parse_generate(j, seeds());
    std::shared_ptr<const ServedModel> m = named_model(core, r.model);
    if (!m->submit)
        throw ApiError(400, fmt::format("\"{}\" does not support {}", r.model,
                                        route == ollama::Route::Chat ? "chat" : "generate"));
    ollama::check_images(r, m->takes_images());
    if (r.load_only) {
        ServerCore::send_json(res, ollama::load_response(r));
        return;
    }
    const uint32_t limit = ollama::context_limit(r, m->n_ctx);
    std::vector<int32_t> prompt = prepare(r, *m, limit);
    r.parsed.engine.prompt = prompt;
    std::unique_ptr<Generation> gen = ServerCore::submit(*m, r.parsed.engine);
    ollama::Responder responder(r, std::move(prompt), start);
    if (r.stream) {
        std::vector<std::unique_ptr<Generation>> gens;
        gens.push_back(std::move(gen));
        core.stream(res, std::move(gens), std::make_unique<OllamaStream>(std::move(responder)));
        return;
    }
    const engine::Event done = core.collect(*gen, [&](const engine::Event& ev) { responder.add(ev); });
    ServerCore::send_json(res, responder.response(done));
}

// The model's embedding model, or Ollama's 400 for one that makes none.
std::shared_ptr<const ServedModel> embedding_model(ServerCore& core, const std::string& name) {
    std::shared_ptr<const ServedModel> m = named_model(core, name);
    if (!m->embed)
        throw ApiError(400, fmt::format("\"{}\" does not support embeddings: vkllm makes them with embedding models "
                                        "(encoders such as bert; decoders whose file names a pooling type, or served "
                                        "with --embeddings --pooling P)",
                                        name));
    return m;
}

// An input's token ids, cut to the model's limit where `truncate` allows (the special tokens
// around it kept), else Ollama's 400.
std::vector<int32_t> embedding_input(const ServedModel& m, const std::string& text, bool truncate, size_t index) {
    std::vector<int32_t> ids = m.tokenizer->encode(text, true);
    if (ids.size() <= m.embed_limit) return ids;
    if (!truncate)
        throw ApiError(400,
                       fmt::format("the input length exceeds the context length (input {}: {} tokens, the "
                                   "model takes {})",
                                   index, ids.size(), m.embed_limit),
                       "invalid_request_error", fmt::format("input[{}]", index));
    const std::vector<int32_t> plain = m.tokenizer->encode(text, false);
    size_t front = 0;  // the special tokens encode(.., true) put before the text
    while (front < ids.size() && !std::equal(plain.begin(), plain.end(), ids.begin() + std::ptrdiff_t(front),
                                             ids.begin() + std::ptrdiff_t(std::min(ids.size(), front + plain.size()))))
        ++front;
    const size_t back = ids.size() - std::min(ids.size(), front + plain.size());
    if (front + back >= m.embed_limit || front + plain.size() + back != ids.size())
        throw ApiError(400, "input after truncation exceeds maximum context length");
    std::vector<int32_t> cut(ids.begin(), ids.begin() + std::ptrdiff_t(front));
    cut.insert(cut.end(), plain.begin(), plain.begin() + std::ptrdiff_t(m.embed_limit - front - back));
    cut.insert(cut.end(), ids.end() - std::ptrdiff_t(back), ids.end());
    return cut;
}

void embed(ServerCore& core, Response& res, const std::string& body, bool legacy) {
    const auto start = Clock::now();
    core.check_not_draining();
    const json j = read_body(body);
    ollama::EmbedRequest r = legacy ? ollama::parse_embeddings(j) : ollama::parse_embed(j);
    std::shared_ptr<const ServedModel> m = embedding_model(core, r.model);
    ollama::check_dimensions(r, m->embedding_dim);
    std::vector<std::vector<int32_t>> inputs;
    uint64_t tokens = 0;
    for (size_t i = 0; i < r.inputs.size(); ++i) {
        inputs.push_back(embedding_input(*m, r.inputs[i], legacy || r.truncate, i));
        tokens += inputs.back().size();
    }
    const std::vector<std::vector<float>> vectors =
        inputs.empty() ? std::vector<std::vector<float>>{} : core.embed(*m, inputs);
    if (legacy) {
        ServerCore::send_json(res, ollama::embeddings_response(vectors.empty() ? std::vector<float>{} : vectors[0]));
        return;
    }
    const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
    ServerCore::send_json(res, ollama::embed_response(r.model, vectors, tokens, ns));
}

// pull, push, create, copy and delete: this server serves the one file it was started with.
ApiError one_model_only(const ServerCore& core, const char* what) {
    std::shared_ptr<const ServedModel> m = core.model();
    return ApiError(501, fmt::format("vkllm serve serves one model file{}: it cannot {} models (start it with "
                                     "another -m to serve another model)",
                                     m ? fmt::format(" ({})", ollama::listed_name(m->id)) : std::string(), what));
}

}  // namespace

void add_ollama_routes(ServerCore& core) {
    core.post(
        "/api/chat",
        [&core](const Request&, Response& res, const std::string& body) {
            generate(core, ollama::Route::Chat, res, body);
        },
        kStyle);
    core.post(
        "/api/generate",
        [&core](const Request&, Response& res, const std::string& body) {
            generate(core, ollama::Route::Generate, res, body);
        },
        kStyle);
    core.post(
        "/api/embed",
        [&core](const Request&, Response& res, const std::string& body) { embed(core, res, body, false); }, kStyle);
    core.post(
        "/api/embeddings",
        [&core](const Request&, Response& res, const std::string& body) { embed(core, res, body, true); }, kStyle);
    core.get(
        "/api/tags",
        [&core](const Request&, Response& res) { ServerCore::send_json(res, ollama::tags_json(*core.ready_model())); },
        kStyle);
    core.get(
        "/api/ps",
        [&core](const Request&, Response& res) { ServerCore::send_json(res, ollama::ps_json(*core.ready_model())); },
        kStyle);
    core.get(
        "/api/version", [](const Request&, Response& res) { ServerCore::send_json(res, ollama::version_json()); },
        kStyle);
    core.post(
        "/api/show",
        [&core](const Request&, Response& res, const std::string& body) {
            const json j = read_body(body);
            // `model`, or the older `name`.
            std::string name;
            for (const char* key : {"model", "name"})
                if (auto it = j.find(key); name.empty() && it != j.end() && it->is_string())
                    name = it->get<std::string>();
            if (name.empty()) throw ollama::model_required();
            ServerCore::send_json(res, ollama::show_json(*named_model(core, name)));
        },
        kStyle);
    const std::pair<const char*, const char*> unsupported[] = {
        {"/api/pull", "pull"}, {"/api/push", "push"}, {"/api/create", "create"}, {"/api/copy", "copy"}};
    for (const auto& [path, what] : unsupported)
        core.post(
            path, [&core, what](const Request&, Response&, const std::string&) { throw one_model_only(core, what); },
            kStyle);
    core.del(
        "/api/delete", [&core](const Request&, Response&, const std::string&) { throw one_model_only(core, "delete"); },
        kStyle);
}

}  // namespace vkllm::server
