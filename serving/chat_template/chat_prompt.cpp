#include "serving/chat_template/chat_prompt.h"

#include <fmt/format.h>

#include <algorithm>

namespace vkllm::chat_template {

using json = nlohmann::ordered_json;

const char* json_type_name(const json& v) {
    switch (v.type()) {
        case json::value_t::null: return "null";
        case json::value_t::boolean: return "a boolean";
        case json::value_t::string: return "a string";
        case json::value_t::array: return "an array";
        case json::value_t::object: return "an object";
        case json::value_t::number_integer:
        case json::value_t::number_unsigned: return "an integer";
        case json::value_t::number_float: return "a decimal";
        default: return "an unsupported value";
    }
}

namespace {

[[noreturn]] void wrong_type(const std::string& name, const char* expected, const json& v) {
    throw MessageError(
        fmt::format("Invalid type for '{}': expected {}, but got {} instead.", name, expected, json_type_name(v)),
        name);
}

// Absent or null: not given.
const json* field(const json& body, const char* name) {
    auto it = body.find(name);
    if (it == body.end() || it->is_null()) return nullptr;
    return &*it;
}

// The URL of an image_url part: {"url": "..."} as OpenAI documents it, or the URL alone.
std::string image_part_url(const json& part, const std::string& pat) {
    const json* iu = field(part, "image_url");
    if (!iu) throw MessageError(fmt::format("Missing required parameter: '{}.image_url'.", pat), pat + ".image_url");
    const json* url = iu;
    if (iu->is_object()) {
        url = field(*iu, "url");
        if (!url)
            throw MessageError(fmt::format("Missing required parameter: '{}.image_url.url'.", pat),
                               pat + ".image_url.url");
        if (!url->is_string()) wrong_type(pat + ".image_url.url", "a string", *url);
    } else if (!iu->is_string()) {
        wrong_type(pat + ".image_url", "an object or a string", *iu);
    }
    if (url->get_ref<const std::string&>().empty())
        throw MessageError(fmt::format("Invalid '{}.image_url': the URL is empty.", pat), pat + ".image_url");
    return url->get<std::string>();
}

// A message's content parts as one text, as llama-server joins them: a newline between text parts
// but none before or after an image, which becomes the marker (its reference appended to `images`).
// `marker_at` receives the first text part that holds the marker itself.
std::string join_parts(const json& parts, const std::string& at, std::vector<ImageRef>* images,
                       std::string& marker_at) {
    std::string text;
    bool after_image = false;
    for (size_t j = 0; j < parts.size(); ++j) {
        const json& part = parts[j];
        const std::string pat = fmt::format("{}.content[{}]", at, j);
        if (!part.is_object()) wrong_type(pat, "an object", part);
        const json* type = field(part, "type");
        if (!type || !type->is_string())
            throw MessageError(fmt::format("Missing required parameter: '{}.type'.", pat), pat + ".type");
        const std::string& kind = type->get_ref<const std::string&>();
        std::string piece;
        const bool image = kind == "image_url";
        if (image) {
            if (!images)
                throw MessageError(fmt::format("Invalid value for '{}.type': 'image_url'. This model takes no "
                                               "images: it is served without a vision encoder (--mmproj).",
                                               pat),
                                   pat + ".type");
            images->push_back(ImageRef{image_part_url(part, pat), pat + ".image_url"});
            piece = kImageMarker;
        } else if (kind == "text") {
            const json* t = field(part, "text");
            if (!t) throw MessageError(fmt::format("Missing required parameter: '{}.text'.", pat), pat + ".text");
            if (!t->is_string()) wrong_type(pat + ".text", "a string", *t);
            piece = t->get<std::string>();
            if (marker_at.empty() && piece.find(kImageMarker) != std::string::npos) marker_at = pat + ".text";
        } else {
            throw MessageError(fmt::format("Invalid value for '{}.type': '{}'. vkllm supports content parts of type "
                                           "'text' and, for a model with a vision encoder, 'image_url'.",
                                           pat, kind),
                               pat + ".type");
        }
        if (!image && !after_image && !text.empty()) text += "\n";
        text += piece;
        after_image = image;
    }
    return text;
}

}  // namespace

json parse_messages(const json& messages, std::vector<ImageRef>* images) {
    if (!messages.is_array()) wrong_type("messages", "an array", messages);
    const size_t images_before = images ? images->size() : 0;
    std::string marker_at;  // the first text that holds the image marker itself
    if (messages.empty())
        throw MessageError("Invalid 'messages': empty array. Expected an array with minimum length 1.", "messages");
    json out = json::array();
    for (size_t i = 0; i < messages.size(); ++i) {
        const json& m = messages[i];
        const std::string at = fmt::format("messages[{}]", i);
        if (!m.is_object()) wrong_type(at, "an object", m);
        const json* role = field(m, "role");
        if (!role) throw MessageError(fmt::format("Missing required parameter: '{}.role'.", at), at + ".role");
        if (!role->is_string() || role->get<std::string>().empty())
            wrong_type(at + ".role", "a non-empty string", *role);
        json msg = m;
        auto c = m.find("content");
        const bool has_tool_calls = m.contains("tool_calls") && m["tool_calls"].is_array() && !m["tool_calls"].empty();
        if (c == m.end() || c->is_null()) {
            // Only an assistant turn (one that calls tools, or a prefill) may come without content.
            if (!has_tool_calls && role->get<std::string>() != "assistant")
                throw MessageError(fmt::format("Missing required parameter: '{}.content'.", at), at + ".content");
        } else if (c->is_array()) {
            msg["content"] = join_parts(*c, at, images, marker_at);
        } else if (!c->is_string()) {
            wrong_type(at + ".content", "a string or an array of content parts", *c);
        } else if (marker_at.empty() && c->get_ref<const std::string&>().find(kImageMarker) != std::string::npos) {
            marker_at = at + ".content";
        }
        if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
            if (!m["tool_calls"].is_array()) wrong_type(at + ".tool_calls", "an array", m["tool_calls"]);
            for (size_t j = 0; j < m["tool_calls"].size(); ++j) {
                const std::string cat = fmt::format("{}.tool_calls[{}]", at, j);
                const json& call = msg["tool_calls"][j];
                if (!call.is_object()) wrong_type(cat, "an object", call);
                const json* fn = field(call, "function");
                if (!fn)
                    throw MessageError(fmt::format("Missing required parameter: '{}.function'.", cat),
                                       cat + ".function");
                if (!fn->is_object()) wrong_type(cat + ".function", "an object", *fn);
                const json* name = field(*fn, "name");
                if (!name || !name->is_string())
                    wrong_type(cat + ".function.name", "a string", name ? *name : json(nullptr));
                // The arguments go into the prompt as the call the model made: text that is not
                // a JSON object would teach it a broken call, so it is refused, not rendered.
                const json* args = field(*fn, "arguments");
                const std::string aat = cat + ".function.arguments";
                if (args && args->is_string()) {
                    const std::string& text = args->get_ref<const std::string&>();
                    const bool blank = text.find_first_not_of(" \t\r\n") == std::string::npos;
                    const json parsed = blank ? json::object() : answer::parse_json_bounded(text);
                    if (parsed.is_discarded())
                        throw MessageError(fmt::format("Invalid '{}': the arguments of a tool call must be a JSON "
                                                       "object, but '{}' is not valid JSON.",
                                                       aat, text.size() > 80 ? text.substr(0, 80) + "..." : text),
                                           aat);
                    if (!parsed.is_object())
                        throw MessageError(fmt::format("Invalid '{}': the arguments of a tool call must be a JSON "
                                                       "object, but got {}.",
                                                       aat, parsed.type_name()),
                                           aat);
                } else if (args && !args->is_object()) {
                    wrong_type(aat, "a JSON object or a string holding one", *args);
                }
            }
            answer::arguments_as_objects(msg);
        }
        out.push_back(std::move(msg));
    }
    if (images && images->size() > images_before && !marker_at.empty())
        throw MessageError(fmt::format("Invalid '{}': the text holds '{}', which marks where an image goes; with "
                                       "images in the request it would move them. Leave it out of the text.",
                                       marker_at, kImageMarker),
                           marker_at);
    return out;
}

ChatInputs chat_inputs(const Tokenizer& tok, const nlohmann::ordered_json& messages,
                       const nlohmann::ordered_json& tools, const nlohmann::ordered_json& extra) {
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

std::vector<int32_t> tool_control_tokens(const Tokenizer& tok, const answer::ToolFormat& format) {
    std::vector<int32_t> ids;
    for (const std::string& text : tool_markup(format)) {
        const int32_t id = tok.find_token(text);
        if (id >= 0 && tok.token_type(id) == TokenType::Control && !tok.is_eog(id)) ids.push_back(id);
    }
    std::sort(ids.begin(), ids.end());
    return ids;
}

}  // namespace vkllm::chat_template
