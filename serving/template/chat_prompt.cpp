#include "serving/template/chat_prompt.h"

#include <algorithm>

namespace vkllm::chat {

ChatInputs chat_inputs(const Tokenizer& tok, const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                       const nlohmann::ordered_json& extra) {
    ChatInputs in;
    in.messages = messages;
    in.tools = tools;
    in.extra = extra;
    in.add_generation_prompt = true;
    if (tok.bos_id() >= 0) in.bos_token = std::string(tok.token_text(tok.bos_id()));
    if (tok.eos_id() >= 0) in.eos_token = std::string(tok.token_text(tok.eos_id()));
    return in;
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

std::vector<int32_t> tool_control_tokens(const Tokenizer& tok, const ToolFormat& format) {
    std::vector<int32_t> ids;
    for (const std::string& text : tool_markup(format)) {
        const int32_t id = tok.find_token(text);
        if (id >= 0 && tok.token_type(id) == TokenType::Control && !tok.is_eog(id)) ids.push_back(id);
    }
    std::sort(ids.begin(), ids.end());
    return ids;
}

}  // namespace vkllm::chat
