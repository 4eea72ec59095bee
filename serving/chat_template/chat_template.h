// Chat templates: a model's `tokenizer.chat_template` (Jinja) rendered by vkllm's own sandboxed
// Jinja interpreter (serving/chat_template/jinja/), with Hugging Face's conventions (trim_blocks,
// lstrip_blocks, loop controls, raise_exception, strftime_now, tojson), plus built-in templates by
// name for files that carry none.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace vkllm::chat_template {

// Any failure to parse or render: the message names the template and the line ("template
// 'chatml', line 3: unknown filter 'foo'"), or the template's own raise_exception message.
class TemplateError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct ChatInputs {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // OpenAI-style messages
    nlohmann::ordered_json tools;  // null: no tools (the variable is none); else the list
    bool add_generation_prompt = true;
    std::string bos_token, eos_token;
    // Further variables real templates read (enable_thinking, ...): an object, or null.
    nlohmann::ordered_json extra;
    // The time strftime_now() formats, "YYYY-MM-DD HH:MM:SS" (tests pin it); empty: the local clock.
    std::string now;
};

// Bounds for untrusted templates: exceeding one is a TemplateError, never a hang or a crash.
struct RenderLimits {
    size_t max_output_bytes = 4u << 20;  // the output, and any one string or list built on the way
    uint64_t max_steps = 10'000'000;  // loop iterations + macro calls + expression nodes + output writes
    uint32_t max_depth = 200;  // macro recursion, and nesting of blocks in the source
};

class ChatTemplate {
public:
    // Parses `source` (TemplateError on a syntax error). `name` is used in messages.
    ChatTemplate(std::string source, std::string name, RenderLimits limits = {});
    ~ChatTemplate();
    ChatTemplate(ChatTemplate&&) noexcept;
    ChatTemplate& operator=(ChatTemplate&&) noexcept;

    // TemplateError on failure. Tool calls' arguments reach the template as given (objects, by
    // Hugging Face's convention); where it fails on them, it is rendered again with them as JSON text.
    // An assistant turn's null content reaches it as "" where the template would print the null as
    // "None" (prints_null_content()).
    std::string apply(const ChatInputs& in) const;
    // Whether the template prints an assistant turn's null content as the text "None" (probed once,
    // by rendering one tool-calling turn with null and with "" content).
    bool prints_null_content() const;
    const std::string& name() const { return name_; }
    const std::string& source() const { return source_; }

private:
    std::string render(const ChatInputs& in) const;
    std::string render_calls(const ChatInputs& in) const;  // render(), again with arguments as text where that fails

    struct Parsed;
    std::string source_, name_;
    RenderLimits limits_;
    std::unique_ptr<Parsed> parsed_;
};

// Names of the built-in templates ("chatml", "llama2", "llama3", "mistral", "phi3", "gemma",
// "zephyr", "deepseek", ...).
std::vector<std::string> builtin_template_names();
// The source of a built-in template; TemplateError listing the names when unknown.
std::string builtin_template_source(const std::string& name);

// Picks the template: `option` (a built-in name or a file path, from --chat-template) when given,
// else the model's own `tokenizer.chat_template` (`from_model`, empty when absent), else ChatML.
// TemplateError for an unreadable file.
ChatTemplate resolve_chat_template(const std::string& option, const std::string& from_model);

}  // namespace vkllm::chat_template
