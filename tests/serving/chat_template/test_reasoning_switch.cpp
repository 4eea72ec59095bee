// Reasoning on and off through each real template's own variables (../shared/templates), and the
// requests a template cannot honour.
#include "serving/chat_template/reasoning_switch.h"

#include "serving/answer/harmony.h"
#include "serving/answer/reasoning.h"
#include "serving/chat_template/chat_template.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;
using namespace vkllm::chat_template;
using json = nlohmann::ordered_json;

namespace {

std::string template_source(const std::string& name) {
    std::ifstream f(fs::path(VKLLM_TEMPLATES_DIR) / "templates" / name, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

ReasoningSwitch switch_of(const std::string& src) {
    return reasoning_switch(src, vkllm::answer::reasoning_tags(src) != nullptr,
                            vkllm::answer::template_is_harmony(src));
}

std::string render(const std::string& src, const json& kwargs) {
    ChatInputs in;
    in.messages = json::array({json{{"role", "user"}, {"content", "Hi"}}});
    in.add_generation_prompt = true;
    in.extra = kwargs;
    return ChatTemplate(src, "t").apply(in);
}

}  // namespace

TEST_CASE("reasoning switch: a variable is read in blocks, not in strings or as an attribute") {
    CHECK(reads_variable("{% if enable_thinking %}x{% endif %}", "enable_thinking"));
    CHECK(reads_variable("{{- 'a' if not thinking else 'b' -}}", "thinking"));
    CHECK(reads_variable("{%- if thinking is defined -%}", "thinking"));
    CHECK_FALSE(reads_variable("thinking outside any block", "thinking"));
    CHECK_FALSE(reads_variable("{{ 'the thinking field' }}", "thinking"));
    CHECK_FALSE(reads_variable("{{ \"it's thinking\" }}", "thinking"));
    CHECK_FALSE(reads_variable("{{ message.thinking }}", "thinking"));
    CHECK_FALSE(reads_variable("{{ message. thinking }}", "thinking"));
    CHECK_FALSE(reads_variable("{% if enable_thinking_x %}", "enable_thinking"));
    CHECK_FALSE(reads_variable("{% if x %}{{ unclosed", "y"));
    CHECK(parse_reasoning("on") == Reasoning::On);
    CHECK(parse_reasoning("off") == Reasoning::Off);
    CHECK(parse_reasoning("auto") == Reasoning::Auto);
    CHECK_THROWS_AS(parse_reasoning("yes"), std::invalid_argument);
}

TEST_CASE("reasoning switch: each real template's variables") {
    if (!fs::exists(fs::path(VKLLM_TEMPLATES_DIR) / "templates")) {
        MESSAGE("skipped: ../shared/templates not found");
        return;
    }
    struct Row {
        const char* file;
        bool thinks, enable_thinking, thinking, effort, can_turn_off;
    };
    const Row rows[] = {
        {"Qwen-Qwen3-0.6B.jinja", true, true, false, false, true},
        {"HuggingFaceTB-SmolLM3-3B.jinja", true, true, false, false, true},
        {"GLM-4.6.jinja", true, true, false, false, true},
        {"deepseek-ai-DeepSeek-V3.1.jinja", true, true, true, false, true},
        {"ibm-granite-granite-3.3-2B-Instruct.jinja", true, false, true, false, true},
        {"openai-gpt-oss-120b.jinja", true, false, false, true, false},
        {"meta-llama-Llama-3.1-8B-Instruct.jinja", false, false, false, false, true},
        {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", true, false, false, false, false},
    };
    for (const Row& r : rows) {
        const std::string file = r.file;
        CAPTURE(file);
        const ReasoningSwitch sw = switch_of(template_source(r.file));
        CHECK(sw.thinks == r.thinks);
        CHECK(sw.enable_thinking == r.enable_thinking);
        CHECK(sw.thinking == r.thinking);
        CHECK(sw.reasoning_effort == r.effort);
        CHECK(sw.can_turn_off() == r.can_turn_off);
    }
}

TEST_CASE("reasoning switch: on, off and an effort become the template's variables and change its prompt") {
    if (!fs::exists(fs::path(VKLLM_TEMPLATES_DIR) / "templates")) return;
    const std::string qwen3 = template_source("Qwen-Qwen3-0.6B.jinja");
    const ReasoningSwitch sw = switch_of(qwen3);
    json kw;
    apply_reasoning(kw, sw, Reasoning::Off, "", "reasoning_effort");
    CHECK(kw == json{{"enable_thinking", false}});
    CHECK(render(qwen3, kw).find("<think>\n\n</think>") != std::string::npos);  // Qwen3's no-thinking prompt
    kw = nullptr;
    apply_reasoning(kw, sw, Reasoning::Auto, "high", "reasoning_effort");
    CHECK(kw == json{{"enable_thinking", true}});
    CHECK(render(qwen3, kw).find("</think>") == std::string::npos);
    kw = nullptr;
    apply_reasoning(kw, sw, Reasoning::Auto, "none", "reasoning_effort");
    CHECK(kw == json{{"enable_thinking", false}});
    // The client's own variable stays.
    kw = json{{"enable_thinking", true}};
    apply_reasoning(kw, sw, Reasoning::Off, "", "reasoning_effort");
    CHECK(kw["enable_thinking"] == true);
    // Auto sets nothing.
    kw = nullptr;
    apply_reasoning(kw, sw, Reasoning::Auto, "", "reasoning_effort");
    CHECK(kw.is_null());

    const std::string oss = template_source("openai-gpt-oss-120b.jinja");
    const ReasoningSwitch harmony = switch_of(oss);
    kw = nullptr;
    apply_reasoning(kw, harmony, Reasoning::Auto, "minimal", "reasoning_effort");
    CHECK(kw == json{{"reasoning_effort", "low"}});
    CHECK(render(oss, kw).find("Reasoning: low") != std::string::npos);
    kw = nullptr;
    apply_reasoning(kw, harmony, Reasoning::On, "high", "reasoning_effort");
    CHECK(render(oss, kw).find("Reasoning: high") != std::string::npos);

    const std::string granite = template_source("ibm-granite-granite-3.3-2B-Instruct.jinja");
    kw = nullptr;
    apply_reasoning(kw, switch_of(granite), Reasoning::On, "", "reasoning_effort");
    CHECK(kw == json{{"thinking", true}});
    const std::string thinking = render(granite, kw), plain = render(granite, json::object());
    CHECK(thinking.find("thought process") != std::string::npos);  // Granite's thinking system prompt
    CHECK(plain.find("thought process") == std::string::npos);
}

TEST_CASE("reasoning switch: what a template cannot do is refused, naming the field") {
    ReasoningSwitch none;  // writes no reasoning
    json kw;
    auto error = [&](const ReasoningSwitch& sw, Reasoning mode, std::string_view effort) {
        try {
            apply_reasoning(kw, sw, mode, effort, "think");
        } catch (const ReasoningError& e) {
            CHECK(e.param() == "think");
            return std::string(e.what());
        }
        return std::string();
    };
    CHECK(error(none, Reasoning::On, "").find("writes no reasoning") != std::string::npos);
    CHECK(error(none, Reasoning::Auto, "high").find("writes no reasoning") != std::string::npos);
    CHECK(error(none, Reasoning::Off, "").empty());  // nothing to turn off
    ReasoningSwitch always;  // DeepSeek R1: always reasons, no switch
    always.thinks = true;
    CHECK(error(always, Reasoning::Off, "").find("no switch") != std::string::npos);
    CHECK(error(always, Reasoning::On, "").empty());
    ReasoningSwitch harmony;
    harmony.thinks = harmony.effort_only = harmony.reasoning_effort = true;
    CHECK(error(harmony, Reasoning::Off, "").find("'low'") != std::string::npos);
    CHECK(error(harmony, Reasoning::Auto, "none").find("no switch") != std::string::npos);
    CHECK(error(always, Reasoning::Auto, "max").find("'max'") != std::string::npos);
}
