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

std::string chat_prompt_text(const Tokenizer& tok, const ChatRenderer& render, const ParsedRequest& req) {
    return answer::forced_prompt(
        render_chat(render, chat_template::chat_inputs(tok, req.messages, req.tools, req.template_kwargs)),
        req.tool_plan);
}

std::vector<int32_t> completion_prompt_tokens(const Tokenizer& tok, const PromptInput& p, const std::string& param) {
    if (!p.is_tokens) return chat_template::encode_prompt(tok, p.text);
    for (int32_t id : p.tokens)
        if (size_t(id) >= tok.n_vocab())
            throw invalid_field(param, fmt::format("Invalid '{}': token id {} is not in the vocabulary ({} tokens).",
                                                   param, id, tok.n_vocab()));
    return p.tokens;
}

std::vector<int32_t> encode_documents(const Tokenizer& tok, const std::string& text, std::string_view separator,
                                      std::vector<engine::DocumentSpan>& spans) {
    spans.clear();
    if (separator.empty() || text.find(separator) == std::string::npos) return chat_template::encode_prompt(tok, text);
    std::vector<std::string> pieces;
    for (size_t at = 0;;) {
        const size_t next = text.find(separator, at);
        pieces.push_back(text.substr(at, next == std::string::npos ? std::string::npos : next - at));
        if (next == std::string::npos) break;
        at = next + separator.size();
    }
    std::vector<int32_t> ids = chat_template::encode_prompt(tok, pieces.front());
    for (size_t i = 1; i < pieces.size(); ++i) {
        const std::vector<int32_t> piece = tok.encode(pieces[i], false, true);
        if (i + 1 < pieces.size() && !piece.empty()) spans.push_back({ids.size(), piece.size()});
        ids.insert(ids.end(), piece.begin(), piece.end());
    }
    return ids;
}

std::vector<int32_t> prompt_tokens(const Tokenizer& tok, const ChatRenderer& render, const ParsedRequest& req,
                                   uint32_t n_ctx, std::string* rendered, size_t index,
                                   const DocumentMarks& documents) {
    std::vector<int32_t> ids;
    std::string param = "messages";
    std::vector<engine::DocumentSpan> unused;
    std::vector<engine::DocumentSpan>& spans = documents.spans ? *documents.spans : unused;
    if (req.endpoint == Endpoint::Chat) {
        const std::string text = chat_prompt_text(tok, render, req);
        ids = encode_documents(tok, text, documents.separator, spans);
        if (rendered) *rendered = text;
    } else if (req.suffix) {
        // Fill in the middle: the prompt is the code before the insertion point, as llama-server's
        // /infill lays it out (fim_prompt.h).
        if (const std::string missing = fim_missing(tok); !missing.empty())
            throw invalid_field("suffix", "Invalid 'suffix': this model has no fill-in-the-middle tokens (" +
                                              missing.substr(0, missing.size() - 1) + ").");
        const PromptInput& p = req.prompts.at(index);
        param = req.prompts.size() > 1 ? fmt::format("prompt[{}]", index) : "prompt";
        FimInput in;
        in.prefix = p.is_tokens ? completion_prompt_tokens(tok, p, param) : tok.encode(p.text, false, false);
        in.suffix = tok.encode(*req.suffix, false, false);
        ids = fim_prompt(tok, in, fim_budget(n_ctx, req.engine.max_tokens));
    } else {
        param = req.prompts.size() > 1 ? fmt::format("prompt[{}]", index) : "prompt";
        const PromptInput& p = req.prompts.at(index);
        ids = p.is_tokens ? completion_prompt_tokens(tok, p, param)
                          : encode_documents(tok, p.text, documents.separator, spans);
    }
    if (ids.empty()) throw invalid_field(param, "The prompt encodes to no tokens.");
    if (ids.size() >= n_ctx) {
        ApiError e = context_length_error(req.endpoint, ids.size(), n_ctx);
        if (req.prompts.size() > 1)
            throw ApiError(e.status(), fmt::format("{}: {}", param, e.what()), e.type(), param, e.code());
        throw e;
    }
    return ids;
}

}  // namespace vkllm::server
