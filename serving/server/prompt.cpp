#include "serving/server/prompt.h"

#include <fmt/format.h>

namespace vkllm::server {

chat::ChatInputs chat_inputs(const Tokenizer& tok, const json& messages, const json& tools, const json& template_kwargs) {
    chat::ChatInputs in;
    in.messages = messages;
    in.tools = tools;
    in.extra = template_kwargs;
    in.add_generation_prompt = true;
    if (tok.bos_id() >= 0) in.bos_token = std::string(tok.token_text(tok.bos_id()));
    if (tok.eos_id() >= 0) in.eos_token = std::string(tok.token_text(tok.eos_id()));
    return in;
}

std::string render_chat(const ChatRenderer& render, const chat::ChatInputs& in) {
    if (!render) throw ApiError(500, "no chat template is configured", "server_error");
    try {
        return render(in);
    } catch (const chat::TemplateError& e) {
        throw ApiError(400, fmt::format("The chat template could not render these messages: {}", e.what()),
                       "invalid_request_error", "messages");
    }
}

std::vector<int32_t> encode_prompt(const Tokenizer& tok, const std::string& text) {
    std::vector<int32_t> ids = tok.encode(text, true, true);
    // A rendered template that starts with "<s>" / "<|begin_of_text|>" already holds BOS; the
    // vocabulary's own BOS in front of it would be a second one, which models were never trained on.
    const int32_t bos = tok.bos_id();
    if (bos >= 0 && ids.size() >= 2 && ids[0] == bos && ids[1] == bos) ids.erase(ids.begin());
    if (ids.empty() && bos >= 0) ids.push_back(bos);  // "" means BOS only, as in `vkllm run`
    return ids;
}

std::vector<int32_t> prompt_tokens(const Tokenizer& tok, const ChatRenderer& render, const ParsedRequest& req,
                                   uint32_t n_ctx) {
    std::vector<int32_t> ids;
    if (req.endpoint == Endpoint::Chat) {
        ids = encode_prompt(tok, render_chat(render, chat_inputs(tok, req.messages, req.tools, req.template_kwargs)));
    } else if (req.prompt_is_tokens) {
        for (int32_t id : req.prompt_tokens)
            if (size_t(id) >= tok.n_vocab())
                throw invalid_field("prompt", fmt::format("Invalid 'prompt': token id {} is not in the vocabulary ({} tokens).",
                                                          id, tok.n_vocab()));
        ids = req.prompt_tokens;
    } else {
        ids = encode_prompt(tok, req.prompt_text);
    }
    if (ids.empty()) throw invalid_field(req.endpoint == Endpoint::Chat ? "messages" : "prompt", "The prompt encodes to no tokens.");
    if (ids.size() >= n_ctx) throw context_length_error(req.endpoint, ids.size(), n_ctx);
    return ids;
}

}  // namespace vkllm::server
