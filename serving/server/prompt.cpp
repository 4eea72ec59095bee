#include "serving/server/prompt.h"

#include "serving/server/fim_prompt.h"

#include "serving/answer/reasoning.h"

#include <fmt/format.h>

namespace vkllm::server {

std::string render_chat(const ChatRenderer& render, const chat_template::ChatInputs& in) {
    if (!render) throw ApiError(500, "no chat template is configured", "server_error");
    try {
        return render(in);
    } catch (const chat_template::TemplateError& e) {
        throw ApiError(400, fmt::format("The chat template could not render these messages: {}", e.what()),
                       "invalid_request_error", "messages");
    }
}

std::vector<int32_t> prompt_tokens(const Tokenizer& tok, const ChatRenderer& render, const ParsedRequest& req,
                                   uint32_t n_ctx, std::string* rendered) {
    std::vector<int32_t> ids;
    if (req.endpoint == Endpoint::Chat) {
        const std::string text = answer::forced_prompt(
            render_chat(render, chat_template::chat_inputs(tok, req.messages, req.tools, req.template_kwargs)),
            req.tool_plan);
        ids = chat_template::encode_prompt(tok, text);
        if (rendered) *rendered = text;
    } else if (req.suffix) {
        // Fill in the middle: the prompt is the code before the insertion point, as llama-server's
        // /infill lays it out (fim_prompt.h).
        if (const std::string missing = fim_missing(tok); !missing.empty())
            throw invalid_field("suffix", "Invalid 'suffix': this model has no fill-in-the-middle tokens (" +
                                              missing.substr(0, missing.size() - 1) + ").");
        FimInput in;
        in.prefix = req.prompt_is_tokens ? req.prompt_tokens : tok.encode(req.prompt_text, false, false);
        in.suffix = tok.encode(*req.suffix, false, false);
        for (int32_t id : in.prefix)
            if (size_t(id) >= tok.n_vocab())
                throw invalid_field("prompt", fmt::format("Invalid 'prompt': token id {} is not in the vocabulary ({} "
                                                          "tokens).",
                                                          id, tok.n_vocab()));
        ids = fim_prompt(tok, in, fim_budget(n_ctx, req.engine.max_tokens));
    } else if (req.prompt_is_tokens) {
        for (int32_t id : req.prompt_tokens)
            if (size_t(id) >= tok.n_vocab())
                throw invalid_field(
                    "prompt", fmt::format("Invalid 'prompt': token id {} is not in the vocabulary ({} tokens).", id,
                                          tok.n_vocab()));
        ids = req.prompt_tokens;
    } else {
        ids = chat_template::encode_prompt(tok, req.prompt_text);
    }
    if (ids.empty())
        throw invalid_field(req.endpoint == Endpoint::Chat ? "messages" : "prompt", "The prompt encodes to no tokens.");
    if (ids.size() >= n_ctx) throw context_length_error(req.endpoint, ids.size(), n_ctx);
    return ids;
}

}  // namespace vkllm::server
