// llama-server's native routes: /tokenize, /detokenize and /apply-template, in its request and
// response shapes.
#include "serving/server/openai_embeddings.h"
#include "serving/server/openai_responses.h"
#include "serving/server/server_core.h"

#include <fmt/format.h>

namespace vkllm::server {

namespace {
using Request = ServerCore::Request;
using Response = ServerCore::Response;
}  // namespace

void add_native_routes(ServerCore& core) {
    core.post("/tokenize", [&core](const Request&, Response& res, const std::string& body) {
        auto m = core.ready_model();
        TokenizeRequest t = parse_tokenize_request(parse_body(body));
        ServerCore::send_json(res, json{{"tokens", m->tokenizer->encode(t.content, t.add_special, t.parse_special)}});
    });
    core.post("/detokenize", [&core](const Request&, Response& res, const std::string& body) {
        auto m = core.ready_model();
        std::vector<int32_t> ids = parse_detokenize_request(parse_body(body), m->tokenizer->n_vocab());
        ServerCore::send_json(res, json{{"content", m->tokenizer->decode(ids)}});
    });
    core.post("/apply-template", [&core](const Request&, Response& res, const std::string& body) {
        auto m = core.ready_model();
        if (!m->render_chat)
            throw ApiError(
                400, fmt::format("The model '{}' is an embedding or rerank model: it has no chat template.", m->id));
        TemplateRequest t = parse_apply_template_request(parse_body(body));
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
