// One small template per Jinja feature (tests/fixtures/jinja/cases.json), rendered by vkllm's
// interpreter and compared with what Python's jinja2 rendered for it with Hugging Face's settings
// (tests/fixtures/jinja/make_fixtures.py writes the file; the expectations are jinja2's). A case
// jinja2 fails must fail here too, as a TemplateError naming the template and the line.
#include "serving/chat_template/chat_template.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

namespace fs = std::filesystem;
using vkllm::chat_template::ChatInputs;
using vkllm::chat_template::ChatTemplate;
using vkllm::chat_template::TemplateError;

TEST_CASE("jinja features: every fixture renders as Python's jinja2 rendered it") {
    const fs::path file = fs::path(VKLLM_FIXTURES_DIR) / "jinja" / "cases.json";
    std::ifstream f(file, std::ios::binary);
    REQUIRE_MESSAGE(f.good(), "cannot read " << file.string());
    const auto doc = nlohmann::ordered_json::parse(std::string(std::istreambuf_iterator<char>(f), {}));
    size_t passed = 0, total = 0;
    for (const auto& c : doc["cases"]) {
        ++total;
        const std::string name = c["name"].get<std::string>();
        INFO("case " << name << ": " << c["template"].get<std::string>());
        ChatInputs in;
        in.add_generation_prompt = false;
        in.bos_token = "<s>";
        in.eos_token = "</s>";
        in.extra = c["vars"];
        in.now = "2024-07-26 00:00:00";
        std::string got, error;
        try {
            got = ChatTemplate(c["template"].get<std::string>(), name).apply(in);
        } catch (const TemplateError& e) {
            error = e.what();
        }
        if (c.contains("error")) {
            INFO("jinja2 raised " << c["error"].get<std::string>() << "; vkllm rendered: " << got);
            CHECK(!error.empty());
            CHECK(error.find("template '" + name + "'") == 0);
            CHECK(error.find(", line ") != std::string::npos);
            passed += !error.empty();
        } else {
            INFO("vkllm error: " << error);
            CHECK(got == c["expected"].get<std::string>());
            passed += error.empty() && got == c["expected"].get<std::string>();
        }
    }
    MESSAGE("jinja features: " << passed << "/" << total << " fixtures as jinja2");
}
