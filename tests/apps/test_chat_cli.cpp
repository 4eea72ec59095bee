// `vkllm chat` driven through a pipe: answers stream, a follow-up turn reuses the conversation's
// cache (only its new tokens are evaluated), /reset starts over, and bad options fail clearly.
#include "support/run_vkllm.h"

#include "support/model_test_util.h"

#include <fstream>

using vkllm::test::run_vkllm;

namespace {

struct TurnStats {
    int prompt = 0, reused = 0, generated = 0;
};

// The "[N prompt tokens, R reused from the cache, ... ms to first token; G tokens in ..." lines.
std::vector<TurnStats> turn_stats(const std::string& err) {
    std::vector<TurnStats> out;
    for (size_t at = err.find("prompt tokens, "); at != std::string::npos; at = err.find("prompt tokens, ", at + 1)) {
        TurnStats t;
        const size_t open = err.rfind('[', at);
        const size_t semi = err.find("; ", at);
        if (open == std::string::npos || semi == std::string::npos) break;
        t.prompt = std::stoi(err.substr(open + 1));
        t.reused = std::stoi(err.substr(at + 15));
        t.generated = std::stoi(err.substr(semi + 2));
        out.push_back(t);
    }
    return out;
}

}  // namespace

TEST_CASE("cli: vkllm chat streams answers, reuses the conversation's cache and resets on /reset") {
    VKLLM_REQUIRE_MODEL(model, "stories260K.gguf");
    const std::string input = (std::filesystem::path(VKLLM_BINARY_DIR) / "test-tmp" / "chat_input.txt").string();
    std::filesystem::create_directories(std::filesystem::path(input).parent_path());
    std::ofstream(input) << "Once upon a time\nThe end\n/reset\nOnce upon a time\n/exit\nnever answered\n";
    auto r = run_vkllm("chat -m " + model + " --temp 0 -n 12 --stats --chat-template chatml --no-pipeline-cache",
                       "chat", input);
    REQUIRE(r.status == 0);
    const std::vector<TurnStats> t = turn_stats(r.err);
    REQUIRE(t.size() == 3);  // the line after /exit is never answered
    CHECK(t[0].reused == 0);
    // Turn 2's prompt is turn 1's prompt, its answer and the new message: all of turn 1 but the
    // last answer token (never evaluated) comes from the cache.
    CHECK(t[1].reused >= t[0].prompt + t[0].generated - 1);
    CHECK(t[1].prompt > t[1].reused);
    // After /reset the same first message renders the same prompt as turn 1, which the slot's
    // cache still holds: all of it but the last token (evaluated again for its logits) is reused,
    // and the greedy answer is turn 1's again.
    CHECK(t[2].prompt == t[0].prompt);
    CHECK(t[2].reused == t[2].prompt - 1);
    CHECK(t[2].generated == t[0].generated);
    CHECK(r.err.find("conversation cleared") != std::string::npos);
}

TEST_CASE("cli: vkllm chat rejects an unknown template and a missing model") {
    VKLLM_REQUIRE_MODEL(model, "stories260K.gguf");
    auto r = run_vkllm("chat -m " + model + " --chat-template no-such-template", "chat_bad");
    CHECK(r.status == 1);
    CHECK(r.err.find("no-such-template") != std::string::npos);
    r = run_vkllm("chat -m /nonexistent.gguf", "chat_missing");
    CHECK(r.status != 0);
    CHECK(r.err.find("nonexistent") != std::string::npos);
}

TEST_CASE("cli: vkllm chat --tools: a required call is printed, its typed result goes back, the model goes on") {
    VKLLM_REQUIRE_MODEL(model, "stories260K.gguf");
    const std::filesystem::path dir = std::filesystem::path(VKLLM_BINARY_DIR) / "test-tmp";
    std::filesystem::create_directories(dir);
    const std::string tools = (dir / "chat_tools.json").string(), input = (dir / "chat_tools_input.txt").string();
    std::ofstream(tools) << R"([{"type":"function","function":{"name":"get_weather","parameters":{"type":"object",)"
                            R"("properties":{"city":{"type":"string","maxLength":12}},"required":["city"],)"
                            R"("additionalProperties":false}}}])";
    std::ofstream(input) << "What is the weather?\n{\"temp\": 21}\n";
    auto r = run_vkllm("chat -m " + model + " --tools " + tools + " --tool-choice required --seed 3 -n 150 --no-pipeline-cache",
                       "chat_tools", input);
    REQUIRE(r.status == 0);
    INFO(r.out);
    INFO(r.err);
    const size_t call = r.out.find("[tool call] get_weather({\"city\":");
    REQUIRE(call != std::string::npos);
    CHECK(r.out.find("tool_calls") == std::string::npos);  // the markup is never shown
    CHECK(r.err.find("result of get_weather: ") != std::string::npos);
    CHECK(r.out.size() > r.out.find('\n', call) + 1);  // the answer after the result

    r = run_vkllm("chat -m " + model + " --tools " + tools + " --tool-choice nope --no-pipeline-cache", "chat_tools_bad");
    CHECK(r.status == 1);
    CHECK(r.err.find("nope") != std::string::npos);
}
