// libFuzzer target: the chat-template parser and interpreter on arbitrary template source.
//
// The input is the template. It is parsed and rendered with a small conversation (system, user,
// assistant with a tool call, tool result) and a tools list, under tight RenderLimits; the only
// acceptable failure is vkllm::chat_template::TemplateError (syntax errors, undefined values, limits),
// whose message must name the template. Anything else -- another exception, a crash, a hang past
// -timeout, a leak or a sanitizer report -- is a finding. Seeds: the real templates of
// ../shared/templates and the built-ins (fuzz_make_seeds); fuzz/jinja.dict gives the keywords.
#include "serving/chat_template/chat_template.h"

#include <cstdio>
#include <cstdlib>
#include <string>

using namespace vkllm::chat_template;

namespace {

const ChatInputs& inputs() {
    static const ChatInputs in = [] {
        ChatInputs c;
        c.messages = nlohmann::ordered_json::parse(R"([
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Weather in Paris? \u00e9\u65e5"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
             "function": {"name": "weather", "arguments": {"city": "Paris", "days": [1, 2.5, null, true]}}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "{\"t\": 22}"},
            {"role": "assistant", "content": "<think>\nwarm\n</think>\n\n22 C", "reasoning_content": "warm"},
            {"role": "user", "content": [{"type": "text", "text": "thanks"}, {"type": "image"}]}
        ])");
        c.tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "weather",
            "description": "Weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
            "required": ["city"]}}}])");
        c.bos_token = "<s>";
        c.eos_token = "</s>";
        c.now = "2024-07-26 00:00:00";
        c.extra = nlohmann::ordered_json::parse(R"({"enable_thinking": false})");
        return c;
    }();
    return in;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    RenderLimits limits;
    limits.max_output_bytes = 64 << 10;
    limits.max_steps = 200'000;
    limits.max_depth = 64;
    const std::string source(reinterpret_cast<const char*>(data), size);
    try {
        ChatTemplate t(source, "fuzz", limits);
        ChatInputs in = inputs();
        in.add_generation_prompt = size % 2 == 0;
        const std::string out = t.apply(in);
        if (out.size() > limits.max_output_bytes) {
            std::fprintf(stderr, "fuzz_template: output of %zu bytes passed the limit\n", out.size());
            std::abort();
        }
    } catch (const TemplateError& e) {
        if (std::string(e.what()).rfind("template 'fuzz'", 0) != 0) {
            std::fprintf(stderr, "fuzz_template: error message names no template: %s\n", e.what());
            std::abort();
        }
    }
    return 0;
}
