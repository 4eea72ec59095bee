// Turning a model's reasoning on or off, and choosing how much of it, through the variables its
// chat template reads: Qwen3, GLM-4.5/4.6, SmolLM3, Gemma 4 and DeepSeek V3.1 read
// `enable_thinking`, Granite 3.x and DeepSeek V3.1 `thinking`, gpt-oss `reasoning_effort`
// (low, medium, high). The client says it once (OpenAI's `reasoning_effort`, Ollama's `think`,
// `vkllm serve --reasoning`) and this maps it onto whichever the template has; what the template
// cannot do is refused, never silently ignored. Pure functions of the template's source and the
// request (tests/serving/chat_template/test_reasoning_switch.cpp).
#pragma once

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>
#include <string_view>

namespace vkllm::chat_template {

// Whether `source` reads the variable `name`: an identifier in a {{ }} or {% %} block, outside
// string literals and not an attribute (`message.thinking` is not the variable `thinking`).
bool reads_variable(std::string_view source, std::string_view name);

enum class Reasoning { Auto, On, Off };  // Auto: the template's own default

// --reasoning on|off|auto; std::invalid_argument naming the value otherwise.
Reasoning parse_reasoning(std::string_view s);

// What a template offers, read once from its source.
struct ReasoningSwitch {
    bool thinks = false;  // it writes a reasoning block (or Harmony's analysis channel)
    bool effort_only = false;  // gpt-oss' Harmony: reasoning cannot be turned off, only made low
    bool enable_thinking = false, thinking = false, reasoning_effort = false;  // the variables it reads
    bool can_turn_off() const { return !thinks || ((enable_thinking || thinking) && !effort_only); }
};
ReasoningSwitch reasoning_switch(std::string_view template_source, bool thinks, bool harmony);

// A request for reasoning that the template cannot honour; `param` names the request's field.
class ReasoningError : public std::invalid_argument {
public:
    ReasoningError(std::string param, const std::string& message)
        : std::invalid_argument(message), param_(std::move(param)) {}
    const std::string& param() const { return param_; }

private:
    std::string param_;
};

// Sets the template variables in `kwargs` (an object, or null made one) for `mode` and `effort`
// ("", "none", "minimal", "low", "medium", "high"; "none" is Off, the others On). Variables the
// client set itself in chat_template_kwargs are left as they are. Throws ReasoningError (`param`)
// when the template cannot do it: On for a template that never reasons, Off for one that always
// does, an unknown effort.
void apply_reasoning(nlohmann::ordered_json& kwargs, const ReasoningSwitch& sw, Reasoning mode, std::string_view effort,
                     const std::string& param);

}  // namespace vkllm::chat_template
