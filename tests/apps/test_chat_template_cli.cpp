// End-to-end tests of `vkllm chat-template`: the conformance cases of ../shared/templates through
// the command (stdout must be exactly the expected bytes), the model's own template with its
// BOS / EOS, built-ins, and clear messages with exit 1 for bad input.
#include "support/run_vkllm.h"
#include "support/test_context.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;
using vkllm::test::run_vkllm;

namespace {

fs::path tmp_dir() {
    fs::path dir = fs::path(VKLLM_BINARY_DIR) / "test-tmp";
    fs::create_directories(dir);
    return dir;
}

// A shell word: the text in single quotes.
std::string quoted(const std::string& s) {
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

std::string read_file(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

fs::path write_file(const std::string& name, const std::string& text) {
    const fs::path p = tmp_dir() / name;
    std::ofstream(p, std::ios::binary) << text;
    return p;
}

}  // namespace

TEST_CASE("cli: vkllm chat-template prints exactly what jinja2 renders for the conformance cases") {
    const fs::path root = fs::path(VKLLM_MODELS_DIR).parent_path() / "templates";
    if (!fs::exists(root / "index.json")) {
        MESSAGE("skipped: no " << (root / "index.json").string());
        return;
    }
    const auto index = nlohmann::json::parse(read_file(root / "index.json"));
    size_t passed = 0, total = 0;
    for (const auto& c : index["cases"]) {
        ++total;
        // docs/chat.md's command, with strftime_now pinned as the expected files were rendered.
        std::string args = "chat-template --template " + quoted((root / c["template"].get<std::string>()).string()) +
                           " --messages " + quoted((root / c["messages"].get<std::string>()).string()) +
                           (c["add_generation_prompt"].get<bool>() ? " --add-generation-prompt" : "") +
                           " --bos " + quoted(c["bos"].get<std::string>()) + " --eos " + quoted(c["eos"].get<std::string>()) +
                           " --now '2024-07-26 00:00:00'";
        const auto r = run_vkllm(args, "chat_template");
        const std::string expected = read_file(root / c["expected"].get<std::string>());
        INFO("case " << c["id"].get<std::string>() << ": " << r.err);
        CHECK(r.status == 0);
        CHECK(r.out == expected);
        passed += r.status == 0 && r.out == expected;
    }
    MESSAGE("vkllm chat-template: " << passed << "/" << total << " conformance cases byte for byte");
    CHECK(total == 198);
}

TEST_CASE("cli: vkllm chat-template takes the model's template, BOS and EOS from the GGUF file") {
    const std::string phi3 = vkllm::test::model_path("ggml-vocab-phi-3.gguf");
    if (phi3.empty()) return;
    const fs::path msgs = write_file("chat_msgs.json", R"([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}])");
    auto r = run_vkllm("chat-template -m " + phi3 + " --messages " + msgs.string(), "chat_template");
    CHECK(r.status == 0);
    CHECK(r.out == "<s><|user|>\nHi<|end|>\n<|assistant|>\nHello<|end|>\n");
    r = run_vkllm("chat-template -m " + phi3 + " --messages " + msgs.string() + " --bos '[B]'", "chat_template");
    CHECK(r.out == "[B]<|user|>\nHi<|end|>\n<|assistant|>\nHello<|end|>\n");
    // --chat-template overrides the model's own; the vocab still gives EOS.
    r = run_vkllm("chat-template -m " + phi3 + " --chat-template zephyr --messages " + msgs.string() +
                      " --add-generation-prompt",
                  "chat_template");
    CHECK(r.status == 0);
    CHECK(r.out == "<|user|>\nHi<|endoftext|>\n<|assistant|>\nHello<|endoftext|>\n<|assistant|>\n");
    // A file without a template gets ChatML (as llama.cpp does), with a warning.
    const std::string spm = vkllm::test::model_path("ggml-vocab-llama-spm.gguf");
    r = run_vkllm("chat-template -m " + spm + " --messages " + msgs.string(), "chat_template");
    CHECK(r.status == 0);
    CHECK(r.out == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n");
    CHECK(r.err.find("no tokenizer.chat_template") != std::string::npos);
}

TEST_CASE("cli: vkllm chat-template renders built-ins and a messages object with tools") {
    const fs::path msgs = write_file("chat_obj.json", R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}],
        "tools": [{"type": "function", "function": {"name": "f"}}], "flag": true})");
    auto r = run_vkllm("chat-template --template chatml --messages " + msgs.string() + " --add-generation-prompt", "chat_template");
    CHECK(r.status == 0);
    CHECK(r.out == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
    r = run_vkllm("chat-template --template llama3 --bos '<|begin_of_text|>' --messages " + msgs.string(), "chat_template");
    CHECK(r.out ==
          "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>");
    // tools and the extra variables reach the template.
    const fs::path t = write_file("chat_tools.jinja", "{{ tools|map(attribute='function.name')|join }} {{ flag }}\n");
    r = run_vkllm("chat-template --template " + t.string() + " --messages " + msgs.string(), "chat_template");
    CHECK(r.out == "f True");
}

TEST_CASE("cli: vkllm chat-template refuses bad input with a clear message and exit 1") {
    const fs::path msgs = write_file("chat_ok.json", R"([{"role": "user", "content": "x"}])");
    const fs::path bad_json = write_file("chat_bad.json", R"([{"role": "user", )");
    const fs::path not_msgs = write_file("chat_not_msgs.json", R"({"role": "user"})");
    const fs::path raising = write_file("chat_raise.jinja", "line one\n{{ raise_exception('no system role, please') }}\n");
    const fs::path syntax = write_file("chat_syntax.jinja", "{% for m in messages %}\n{{ m.content }}\n");
    struct Case {
        std::string args, expect;
    };
    const std::vector<Case> cases = {
        {"chat-template --messages " + msgs.string(), "no template"},
        {"chat-template --template chatml --messages /nonexistent/m.json", "cannot read the messages file"},
        {"chat-template --template chatml --messages " + bad_json.string(), "not valid JSON"},
        {"chat-template --template chatml --messages " + not_msgs.string(), "messages array"},
        {"chat-template --template nosuch --messages " + msgs.string(), "neither a built-in"},
        {"chat-template --template " + raising.string() + " --messages " + msgs.string(), "line 2: no system role, please"},
        {"chat-template --template " + syntax.string() + " --messages " + msgs.string(), "line 2: unexpected end of template"},
        {"chat-template --template chatml --now yesterday --messages " + msgs.string(), "YYYY-MM-DD"},
        {"chat-template -m /nonexistent/model.gguf --messages " + msgs.string(), "does not exist"},
    };
    for (const Case& c : cases) {
        const auto r = run_vkllm(c.args, "chat_template_bad");
        INFO(c.args << " -> " << r.err);
        CHECK(r.status == 1);
        CHECK(r.out.empty());
        CHECK(r.err.find(c.expect) != std::string::npos);
    }
}
