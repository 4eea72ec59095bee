// llama-server's native routes in its request and response shapes: /completion and /infill
// (whole or streamed), /tokenize (with_pieces), /detokenize, /apply-template, /props and /slots.
#include "serving/server/image_prompt.h"
#include "serving/server/native_responses.h"
#include "serving/server/openai_embeddings.h"
#include "serving/server/openai_responses.h"
#include "serving/server/server_core.h"

#include <fmt/format.h>

#include <algorithm>
#include <random>

namespace vkllm::server {

namespace {

using Request = ServerCore::Request;
using Response = ServerCore::Response;

// llama-server's stream: one `data: {...}` event per piece of text, the last one the whole result
// with stop true; no [DONE].
class NativeStream final : public StreamEncoder {
public:
    NativeStream(std::shared_ptr<const NativeRequest> req, std::vector<NativeResult> results)
        : req_(std::move(req)), results_(std::move(results)) {}
    const char* content_type() const override { return "text/event-stream"; }
    std::string start() override { return {}; }
    std::string text(size_t i, const engine::Event& ev) override { return results_[i].stream_text(ev); }
    std::string finish(size_t i, const engine::Event& done) override { return results_[i].stream_final(done); }
    std::string end(const std::vector<engine::Event>&) override { return {}; }
    std::string error(const ApiError& e) override { return sse_data(error_body(e, ErrorStyle::OpenAI)); }

private:
    std::shared_ptr<const NativeRequest> req_;  // the results read it
    std::vector<NativeResult> results_;
};

// The 400 llama-server gives for a prompt that does not fit a slot (with room for one token).
void check_fits(size_t prompt_tokens, uint32_t n_ctx) {
    if (prompt_tokens >= n_ctx)
        throw ApiError(400,
                       fmt::format("request ({} tokens) exceeds the available context size ({} tokens), try "
                                   "increasing it",
                                   prompt_tokens, n_ctx),
                       "exceed_context_size_error", "prompt", "context_length_exceeded");
}

// The images of a /completion prompt object (multimodal_data: base64, each read as a data URL whose
// type comes from its bytes), named by their fields; none for other prompts.
std::vector<chat_template::ImageRef> prompt_images(const json& prompt, const std::string& param) {
    std::vector<chat_template::ImageRef> refs;
    if (!prompt.is_object() || !prompt.contains("multimodal_data")) return refs;
    const json& data = prompt["multimodal_data"];
    for (size_t k = 0; k < data.size(); ++k)
        refs.push_back(
            {"data:image/*;base64," + data[k].get<std::string>(), fmt::format("{}.multimodal_data[{}]", param, k)});
    return refs;
}

// POST /completion and /infill: one engine request per prompt.
void generate(ServerCore& core, Response& res, const std::string& body, bool infill) {
    core.check_not_draining();
    std::shared_ptr<const ServedModel> m = core.ready_model();
    ServerCore::require_generator(*m);
    const Tokenizer& tok = *m->tokenizer;
    thread_local std::mt19937_64 seeds{std::random_device{}()};
    const json j = parse_body(body);
    auto req = std::make_shared<NativeRequest>(infill ? parse_infill_request(j, seeds(), m->n_slots)
                                                      : parse_native_completion(j, seeds(), m->n_slots));
    resolve_logit_bias(tok, *req);
    std::vector<std::vector<int32_t>> prompts;
    std::vector<std::vector<PromptEmbeddings>> images;  // each prompt's
    if (infill) {
        prompts.push_back(infill_prompt(tok, *req, m->n_ctx));
    } else {
        // A request's images are bounded as a chat's, over all its prompts, before any is read.
        std::vector<std::vector<chat_template::ImageRef>> refs_of;
        size_t n_images = 0;
        for (size_t i = 0; i < req->prompts.size(); ++i) {
            refs_of.push_back(
                prompt_images(req->prompts[i], req->prompts.size() > 1 ? fmt::format("prompt[{}]", i) : "prompt"));
            n_images += refs_of.back().size();
        }
        if (n_images > kMaxImages)
            throw ApiError(
                400, fmt::format("This request has {} images; a request may have at most {}.", n_images, kMaxImages),
                "invalid_request_error", "prompt");
        for (size_t i = 0; i < req->prompts.size(); ++i) {
            const std::string param = req->prompts.size() > 1 ? fmt::format("prompt[{}]", i) : "prompt";
            images.emplace_back();
            if (const std::vector<chat_template::ImageRef>& refs = refs_of[i]; !refs.empty()) {
                const std::string& text = req->prompts[i]["prompt_string"].get_ref<const std::string&>();
                const ImagePromptInput in{&text, &refs, "", ImagePromptSource::Completion, m->media_marker, param};
                prompts.push_back(image_prompt_tokens(in, m->image_prompt, m->image_input, m->n_ctx, images.back()));
                continue;
            }
            prompts.push_back(prompt_ids(tok, req->prompts[i], true, true, param));
            if (prompts.back().empty())
                throw invalid_field(param, fmt::format("Invalid '{}': the prompt has no tokens.", param));
        }
    }
    // Every prompt is checked before any runs.
    for (const std::vector<int32_t>& p : prompts) check_fits(p.size(), m->n_ctx);
    if (req->id_slot >= 0) {
        if (prompts.size() > 1)
            throw invalid_field("id_slot",
                                "Invalid 'id_slot': one slot runs one prompt; send a batch of prompts "
                                "without it.");
        // A slot another request holds: the client may retry (llama-server waits for it instead).
        if (m->metrics)
            if (const engine::EngineMetrics em = m->metrics();
                size_t(req->id_slot) < em.busy.size() && em.busy[size_t(req->id_slot)])
                throw ApiError(
                    503,
                    fmt::format("Slot {} is busy with another request; retry, or leave out 'id_slot'.", req->id_slot),
                    "unavailable_error", "id_slot");
    }
    std::vector<std::unique_ptr<Generation>> gens;
    std::vector<NativeResult> results;
    for (size_t i = 0; i < prompts.size(); ++i) {
        engine::CompletionRequest one = req->engine;
        one.prompt = prompts[i];
        if (i < images.size()) one.images = std::move(images[i]);
        std::vector<uint32_t> starts;  // where each image's rows begin: one marker each in "prompt"
        for (const PromptEmbeddings& e : one.images) starts.push_back(e.first);
        gens.push_back(ServerCore::submit(*m, std::move(one)));
        results.emplace_back(*req, tok, m->id, i, std::move(prompts[i]), m->media_marker, std::move(starts));
    }
    if (req->stream) {
        core.stream(res, std::move(gens), std::make_unique<NativeStream>(req, std::move(results)));
        return;
    }
    json out = json::array();
    for (size_t i = 0; i < gens.size(); ++i) {
        const engine::Event done = core.collect(*gens[i], [&](const engine::Event& ev) { results[i].add(ev); });
        out.push_back(results[i].final_json(done));
    }
    ServerCore::send_json(res, out.size() == 1 ? out[0] : out);
}

[[noreturn]] void not_supported(const std::string& message) { throw ApiError(501, message, "not_supported_error"); }

}  // namespace

void add_native_routes(ServerCore& core) {
    core.post("/completion",
              [&core](const Request&, Response& res, const std::string& body) { generate(core, res, body, false); });
    core.post("/infill",
              [&core](const Request&, Response& res, const std::string& body) { generate(core, res, body, true); });
    core.post("/tokenize", [&core](const Request&, Response& res, const std::string& body) {
        auto m = core.ready_model();
        const json j = parse_body(body);
        TokenizeRequest t = parse_tokenize_request(j);
        const std::vector<int32_t> ids = m->tokenizer->encode(t.content, t.add_special, t.parse_special);
        ServerCore::send_json(
            res, json{{"tokens", parse_with_pieces(j) ? tokens_with_pieces(*m->tokenizer, ids) : json(ids)}});
    });
    core.get("/props", [&core](const Request&, Response& res) {
        auto m = core.ready_model();
        const Tokenizer& tok = *m->tokenizer;
        PropsInfo p;
        p.vision = m->takes_images();
        p.media_marker = m->media_marker;
        p.model_alias = m->id;
        p.model_path = m->model_path;
        p.chat_template = m->chat_template;
        p.bos_token = tok.bos_id() >= 0 ? tok.token_to_piece(tok.bos_id(), true) : "";
        p.eos_token = tok.eos_id() >= 0 ? tok.token_to_piece(tok.eos_id(), true) : "";
        p.n_ctx = m->n_ctx;
        p.total_slots = m->n_slots;
        ServerCore::send_json(res, props_json(p));
    });
    // llama-server changes settings here only when started with --props; vkllm never does.
    core.post("/props", [](const Request&, Response&, const std::string&) {
        not_supported("This server does not support changing global properties.");
    });
    core.get("/slots", [&core](const Request& req, Response& res) {
        auto m = core.ready_model();
        std::vector<bool> busy(m->n_slots, false);
        if (m->metrics)
            if (const engine::EngineMetrics em = m->metrics(); em.busy.size() == busy.size()) busy = em.busy;
        if (req.has_param("fail_on_no_slot") && std::all_of(busy.begin(), busy.end(), [](bool b) { return b; }))
            throw ApiError(503, "no slot available", "unavailable_error");
        ServerCore::send_json(res, slots_json(busy, m->n_ctx));
    });
    // Saving, restoring and erasing a slot's cache: not in vkllm (the engine keeps each slot's
    // prefix by itself), answered as llama-server answers without --slot-save-path.
    core.post_pattern(R"(/slots/([^/]*))", [](const Request&, Response&, const std::string&) {
        throw ApiError(501, "This server does not support slots action (save, restore, erase).", "not_supported_error");
    });
    core.post("/detokenize", [&core](const Request&, Response& res, const std::string& body) {
        auto m = core.ready_model();
        std::vector<int32_t> ids = parse_detokenize_request(parse_body(body), m->tokenizer->n_vocab());
        // As llama-server: each token's piece, control tokens as their text, no space dropped.
        std::string text;
        for (int32_t id : ids) text += m->tokenizer->token_to_piece(id, true);
        ServerCore::send_json(res, json{{"content", text}});
    });
    core.post("/apply-template", [&core](const Request&, Response& res, const std::string& body) {
        auto m = core.ready_model();
        if (!m->render_chat)
            throw ApiError(
                400, fmt::format("The model '{}' is an embedding or rerank model: it has no chat template.", m->id));
        TemplateRequest t = parse_apply_template_request(parse_body(body), m->takes_images());
        // What a chat request with these tools renders (tool_choice auto): a template that cannot
        // show them gets them in the system message. A format this server cannot parse still renders.
        try {
            answer::add_system_text(t.messages, answer::plan_tool_use(*m->tool_format, m->template_renders_tools,
                                                                      t.tools, answer::ToolChoice::Auto, {}, true)
                                                    .system_text);
        } catch (const answer::ToolError&) {}
        std::string prompt = render_chat(
            m->render_chat, chat_template::chat_inputs(*m->tokenizer, t.messages, t.tools, t.template_kwargs));
        ServerCore::send_json(res, json{{"prompt", prompt}});
    });
}

}  // namespace vkllm::server
