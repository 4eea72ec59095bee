// OpenAI's routes: /v1/chat/completions, /v1/completions, /v1/models, /v1/embeddings and
// /v1/rerank (each also without the /v1 prefix, as llama-server answers them).
#include "serving/server/openai_embeddings.h"
#include "serving/server/openai_responses.h"
#include "serving/server/request_plan.h"
#include "serving/server/server_core.h"

#include <fmt/format.h>

#include <chrono>
#include <random>

namespace vkllm::server {

namespace {

using Request = ServerCore::Request;
using Response = ServerCore::Response;

int64_t unix_now() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// OpenAI's server-sent events: one ResponseBuilder per choice.
class OpenAiStream final : public StreamEncoder {
public:
    OpenAiStream(std::vector<ResponseBuilder> rbs, uint32_t n) : rbs_(std::move(rbs)), n_(n) {}
    const char* content_type() const override { return "text/event-stream"; }
    std::string start() override {
        std::string s;
        for (const ResponseBuilder& rb : rbs_) s += rb.stream_start();
        return s;
    }
    std::string text(size_t i, const engine::Event& ev) override { return rbs_[i].stream_text(ev); }
    std::string finish(size_t i, const engine::Event& done) override { return rbs_[i].stream_finish(done); }
    std::string end(const std::vector<engine::Event>& dones) override {
        return rbs_[0].stream_end(combined_usage(dones, n_));
    }
    std::string error(const ApiError& e) override { return ResponseBuilder::stream_error(e); }

private:
    std::vector<ResponseBuilder> rbs_;
    uint32_t n_;  // choices per prompt
};

void completion(ServerCore& core, Endpoint ep, Response& res, const std::string& body) {
    core.check_not_draining();
    std::shared_ptr<const ServedModel> m = core.ready_model();
    ServerCore::require_generator(*m);
    json j = parse_body(body);
    thread_local std::mt19937_64 seeds{std::random_device{}()};
    ParsedRequest req =
        ep == Endpoint::Chat ? parse_chat_request(j, seeds(), m->takes_images()) : parse_completion_request(j, seeds());
    check_logit_bias(req, m->tokenizer->n_vocab());
    const std::vector<std::vector<int32_t>> prompts = prepare_generation(req, *m, m->n_ctx);

    // One engine request per choice, seeds apart (greedy choices are equal); choice p * n + i is
    // prompt p's i-th, as OpenAI numbers a batch's choices.
    std::vector<std::unique_ptr<Generation>> gens;
    std::vector<ResponseBuilder> rbs;
    const std::string id = new_response_id(ep);
    const int64_t created = unix_now();
    for (size_t p = 0; p < prompts.size(); ++p)
        for (uint32_t i = 0; i < req.n; ++i) {
            engine::CompletionRequest one = req.engine;
            one.prompt = prompts[p];
            one.documents = req.prompt_documents[p];
            one.sampler.seed += i;
            gens.push_back(ServerCore::submit(*m, std::move(one)));
            rbs.emplace_back(req, id, req.model.empty() ? m->id : req.model, created, uint32_t(p * req.n + i));
        }
    if (req.stream) {
        core.stream(res, std::move(gens), std::make_unique<OpenAiStream>(std::move(rbs), req.n));
        return;
    }
    std::vector<json> responses;
    std::vector<engine::Event> dones;
    for (size_t i = 0; i < gens.size(); ++i) {
        dones.push_back(core.collect(*gens[i], [&](const engine::Event& ev) { rbs[i].add(ev); }));
        responses.push_back(rbs[i].response(dones.back()));
    }
    ServerCore::send_json(
        res, responses.size() == 1 ? std::move(responses[0]) : merge_choices(std::move(responses), dones, req.n));
}

void embeddings(ServerCore& core, Response& res, const std::string& body) {
    core.check_not_draining();
    std::shared_ptr<const ServedModel> m = core.ready_model();
    if (m->rerank)
        throw ApiError(400,
                       fmt::format("The model '{}' is a reranker (pooling rank): it answers /v1/rerank only.", m->id),
                       "invalid_request_error", "model", "model_not_supported");
    if (!m->embed)
        throw ApiError(
            400,
            fmt::format("The model '{}' does not make embeddings: vkllm serves /v1/embeddings from "
                        "embedding models (encoders such as bert; decoders whose file names a pooling type, or served "
                        "with --embeddings --pooling P).",
                        m->id),
            "invalid_request_error", "model", "model_not_supported");
    EmbeddingsRequest req = parse_embeddings_request(parse_body(body), m->tokenizer->n_vocab(), m->embedding_dim);
    std::vector<std::vector<int32_t>> inputs = std::move(req.token_ids);
    for (const std::string& t : req.texts) inputs.push_back(m->tokenizer->encode(t, true));
    uint64_t tokens = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
        if (inputs[i].size() > m->embed_limit) throw embedding_length_error(i, inputs[i].size(), m->embed_limit);
        tokens += inputs[i].size();
    }
    const std::vector<std::vector<float>> vectors = core.embed(*m, inputs);
    ServerCore::send_json(res, embeddings_response(vectors, req.base64, req.model.empty() ? m->id : req.model, tokens));
}

void rerank(ServerCore& core, Response& res, const std::string& body) {
    core.check_not_draining();
    std::shared_ptr<const ServedModel> m = core.ready_model();
    if (!m->rerank)
        throw ApiError(400,
                       fmt::format("The model '{}' is not a reranker (pooling rank, a classification head): it "
                                   "answers {} only.",
                                   m->id, m->embed ? "/v1/embeddings" : "chat and completions"),
                       "invalid_request_error", "model", "model_not_supported");
    RerankRequest req = parse_rerank_request(parse_body(body));
    std::vector<std::vector<int32_t>> inputs;
    uint64_t tokens = 0;
    for (size_t i = 0; i < req.documents.size(); ++i) {
        inputs.push_back(m->rerank_tokens(req.query, req.documents[i]));
        if (inputs[i].empty())
            throw ApiError(400, fmt::format("The query and document {} give no tokens.", i), "invalid_request_error",
                           fmt::format("documents[{}]", i));
        if (inputs[i].size() > m->embed_limit) throw rerank_length_error(i, inputs[i].size(), m->embed_limit);
        tokens += inputs[i].size();
    }
    const std::vector<float> scores = core.rerank(*m, inputs);
    ServerCore::send_json(res, rerank_response(req, scores, req.model.empty() ? m->id : req.model, tokens));
}

json model_card(const ServedModel& m) {
    json card{{"id", m.id}, {"object", "model"}, {"created", m.created}, {"owned_by", "vkllm"}};
    // llama-server's words for what a model does; the chat page offers images on "multimodal".
    if (m.takes_images()) card["capabilities"] = json::array({"completion", "multimodal"});
    return card;
}

}  // namespace

void add_openai_routes(ServerCore& core) {
    auto models = [&core](const Request&, Response& res) {
        ServerCore::send_json(res, json{{"object", "list"}, {"data", json::array({model_card(*core.ready_model())})}});
    };
    core.get("/v1/models", models);
    core.get("/models", models);
    core.get_pattern(R"(/v1/models/(.+))", [&core](const Request& req, Response& res) {
        auto m = core.ready_model();
        if (req.matches[1] != m->id)
            throw ApiError(404, fmt::format("The model '{}' does not exist", req.matches[1].str()),
                           "invalid_request_error", "model", "model_not_found");
        ServerCore::send_json(res, model_card(*m));
    });
    for (const char* path : {"/v1/chat/completions", "/chat/completions"})
        core.post(path, [&core](const Request&, Response& res, const std::string& body) {
            completion(core, Endpoint::Chat, res, body);
        });
    for (const char* path : {"/v1/completions", "/completions"})
        core.post(path, [&core](const Request&, Response& res, const std::string& body) {
            completion(core, Endpoint::Completion, res, body);
        });
    for (const char* path : {"/v1/embeddings", "/embeddings"})
        core.post(path,
                  [&core](const Request&, Response& res, const std::string& body) { embeddings(core, res, body); });
    for (const char* path : {"/v1/rerank", "/rerank", "/v1/reranking", "/reranking"})
        core.post(path, [&core](const Request&, Response& res, const std::string& body) { rerank(core, res, body); });
}

}  // namespace vkllm::server
