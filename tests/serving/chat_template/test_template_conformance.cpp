// The 198 conformance cases of ../shared/templates (real model chat templates x conversations x
// with/without the generation prompt): each must render byte for byte what Python's jinja2 3.1.2
// renders with Hugging Face's settings (see ../shared/templates/README.md).
#include "serving/chat_template/chat_template.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

namespace fs = std::filesystem;
using vkllm::chat_template::ChatInputs;
using vkllm::chat_template::ChatTemplate;

namespace {

std::string read_file(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    REQUIRE_MESSAGE(f.good(), "cannot read " << p.string());
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("template conformance: every case of ../shared/templates renders as jinja2 does") {
    const fs::path root = fs::path(VKLLM_TEMPLATES_DIR);
    if (!fs::exists(root / "index.json")) {
        MESSAGE("skipped: " << (root / "index.json").string() << " not found");
        return;
    }
    const auto index = nlohmann::ordered_json::parse(read_file(root / "index.json"));
    std::map<std::string, ChatTemplate> parsed;
    size_t passed = 0, total = 0;
    for (const auto& c : index["cases"]) {
        ++total;
        const std::string id = c["id"].get<std::string>();
        const std::string tpath = c["template"].get<std::string>();
        auto it = parsed.find(tpath);
        if (it == parsed.end())
            it = parsed.emplace(tpath, ChatTemplate(read_file(root / tpath), c["template_name"].get<std::string>())).first;
        const auto msgs = nlohmann::ordered_json::parse(read_file(root / c["messages"].get<std::string>()));
        ChatInputs in;
        if (msgs.is_array()) {
            in.messages = msgs;
        } else {
            in.messages = msgs["messages"];
            if (msgs.contains("tools")) in.tools = msgs["tools"];
        }
        in.add_generation_prompt = c["add_generation_prompt"].get<bool>();
        in.bos_token = c["bos"].get<std::string>();
        in.eos_token = c["eos"].get<std::string>();
        in.now = "2024-07-26 00:00:00";
        const std::string expected = read_file(root / c["expected"].get<std::string>());
        std::string got;
        try {
            got = it->second.apply(in);
        } catch (const std::exception& e) {
            got = std::string("<error> ") + e.what();
        }
        if (const char* dump = std::getenv("VKLLM_TEMPLATE_DUMP"); dump && got != expected) {
            // Debugging aid: the output of each failing case, for diffing against expected/.
            std::string file = id;
            for (char& ch : file)
                if (ch == '/') ch = '.';
            std::ofstream(fs::path(dump) / (file + ".txt"), std::ios::binary) << got;
        }
        INFO("case " << id);
        CHECK(got == expected);
        passed += got == expected;
    }
    MESSAGE("template conformance: " << passed << "/" << total << " cases equal to jinja2's output");
    CHECK(total == 198);
}
