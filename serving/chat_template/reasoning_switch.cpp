#include "serving/chat_template/reasoning_switch.h"

#include <fmt/format.h>

#include <cctype>

namespace vkllm::chat_template {

namespace {

bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

}  // namespace

bool reads_variable(std::string_view src, std::string_view name) {
    size_t i = 0;
    while ((i = src.find('{', i)) != std::string_view::npos) {
        if (i + 1 >= src.size() || (src[i + 1] != '{' && src[i + 1] != '%')) {
            ++i;
            continue;
        }
        const std::string_view close = src[i + 1] == '{' ? "}}" : "%}";
        i += 2;
        // Inside one block: skip string literals, look at identifiers.
        while (i < src.size() && src.substr(i, 2) != close) {
            const char c = src[i];
            if (c == '\'' || c == '"') {
                for (++i; i < src.size() && src[i] != c; ++i)
                    if (src[i] == '\\') ++i;
                ++i;
            } else if (ident_char(c) && !std::isdigit(static_cast<unsigned char>(c))) {
                size_t j = i;
                while (j < src.size() && ident_char(src[j])) ++j;
                size_t before = i;
                while (before > 0 && src[before - 1] == ' ') --before;
                const bool attribute = before > 0 && src[before - 1] == '.';
                if (!attribute && src.substr(i, j - i) == name) return true;
                i = j;
            } else {
                ++i;
            }
        }
        i += 2;
    }
    return false;
}

Reasoning parse_reasoning(std::string_view s) {
    if (s == "auto") return Reasoning::Auto;
    if (s == "on") return Reasoning::On;
    if (s == "off") return Reasoning::Off;
    throw std::invalid_argument(fmt::format("--reasoning: '{}' is not one of on, off, auto", s));
}

ReasoningSwitch reasoning_switch(std::string_view src, bool thinks, bool harmony) {
    ReasoningSwitch sw;
    sw.thinks = thinks || harmony;
    sw.effort_only = harmony;
    sw.enable_thinking = reads_variable(src, "enable_thinking");
    sw.thinking = reads_variable(src, "thinking");
    sw.reasoning_effort = reads_variable(src, "reasoning_effort");
    return sw;
}

void apply_reasoning(nlohmann::ordered_json& kwargs, const ReasoningSwitch& sw, Reasoning mode, std::string_view effort,
                     const std::string& param) {
    if (!effort.empty()) {
        if (effort == "none")
            mode = Reasoning::Off;
        else if (effort == "minimal" || effort == "low" || effort == "medium" || effort == "high")
            mode = Reasoning::On;
        else
            throw ReasoningError(param, fmt::format("Invalid '{}': '{}' is not one of none, minimal, low, medium, "
                                                    "high.",
                                                    param, effort));
    }
    if (mode == Reasoning::Auto) return;
    if (mode == Reasoning::On && !sw.thinks)
        throw ReasoningError(param, fmt::format("Invalid '{}': this model's chat template writes no reasoning, so "
                                                "reasoning cannot be turned on.",
                                                param));
    if (mode == Reasoning::Off && !sw.can_turn_off())
        throw ReasoningError(
            param, fmt::format("Invalid '{}': this model's chat template has no switch to turn its reasoning off{}.",
                               param, sw.effort_only ? " (gpt-oss always reasons: ask for 'low' for the least)" : ""));
    if (!kwargs.is_object()) kwargs = nlohmann::ordered_json::object();
    auto set = [&](const char* name, nlohmann::ordered_json v) {
        if (!kwargs.contains(name)) kwargs[name] = std::move(v);
    };
    const bool on = mode == Reasoning::On;
    if (sw.enable_thinking) set("enable_thinking", on);
    if (sw.thinking && !sw.effort_only) set("thinking", on);
    if (sw.reasoning_effort && !effort.empty() && effort != "none")
        set("reasoning_effort", std::string(effort == "minimal" ? "low" : effort));
}

}  // namespace vkllm::chat_template
