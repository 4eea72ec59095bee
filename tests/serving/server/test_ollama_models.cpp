// The model as Ollama's API names and lists it: name:tag matching, the 404, the human parameter
// count, and the bodies of /api/tags, /api/ps, /api/show and /api/version.
#include "serving/server/ollama_models.h"

#include "support/openai_testing.h"

#include <doctest/doctest.h>

using namespace vkllm;
using namespace vkllm::server;
using namespace vkllm::server::ollama;
using vkllm::server::openai_testing::error_of;

namespace {

ServedModel served() {
    ServedModel m;
    m.id = "stories260K.gguf";
    m.n_ctx = 256;
    m.submit = [](engine::CompletionRequest) -> std::unique_ptr<Generation> { return nullptr; };
    m.card.file_bytes = 1185376;
    m.card.modified_ns = 1700000000000000000LL;
    m.card.digest = std::string(64, 'a');
    m.card.architecture = "llama";
    m.card.parameters = 292000;
    m.card.file_type = "F32";
    m.card.metadata = {{"general.architecture", "llama"}, {"general.parameter_count", 292000}};
    m.card.chat_template = "{{ messages }}";
    return m;
}

}  // namespace

TEST_CASE("ollama: names as clients send them") {
    CHECK(listed_name("stories260K.gguf") == "stories260K.gguf:latest");
    CHECK(listed_name("qwen3:8b") == "qwen3:8b");
    CHECK(listed_name("registry.local:5000/team/model") == "registry.local:5000/team/model:latest");
    CHECK(names_model("stories260K.gguf", "stories260K.gguf"));
    CHECK(names_model("stories260K.gguf:latest", "stories260K.gguf"));
    CHECK(names_model("STORIES260k.GGUF:Latest", "stories260K.gguf"));
    CHECK(names_model("qwen3:8b", "qwen3:8b"));
    CHECK_FALSE(names_model("qwen3", "qwen3:8b"));
    CHECK_FALSE(names_model("stories260K.gguf:q4", "stories260K.gguf"));
    CHECK_FALSE(names_model("llama3", "stories260K.gguf"));

    ServedModel m = served();
    CHECK_NOTHROW(check_model_name("stories260K.gguf:latest", m));
    ApiError e = error_of([&] { check_model_name("llama3.2", m); });
    CHECK(e.status() == 404);
    CHECK(std::string(e.what()) == "model 'llama3.2' not found");
}

TEST_CASE("ollama: parameter sizes as Ollama prints them") {
    CHECK(parameter_size(8030261248) == "8.0B");
    CHECK(parameter_size(7000000000) == "7B");
    CHECK(parameter_size(1500000) == "1.50M");
    CHECK(parameter_size(3000000) == "3M");
    CHECK(parameter_size(292000) == "292K");
    CHECK(parameter_size(999) == "999");
}

TEST_CASE("ollama: tags, ps, show and version") {
    ServedModel m = served();
    json tags = tags_json(m);
    REQUIRE(tags["models"].size() == 1);
    const json& t = tags["models"][0];
    CHECK(t["name"] == "stories260K.gguf:latest");
    CHECK(t["model"] == "stories260K.gguf:latest");
    CHECK(t["modified_at"] == "2023-11-14T22:13:20.000000000Z");
    CHECK(t["size"] == 1185376);
    CHECK(t["digest"].get<std::string>().size() == 64);
    CHECK(t["details"] == json{{"parent_model", ""},
                               {"format", "gguf"},
                               {"family", "llama"},
                               {"families", {"llama"}},
                               {"parameter_size", "292K"},
                               {"quantization_level", "F32"}});

    json ps = ps_json(m)["models"][0];
    CHECK(ps["name"] == "stories260K.gguf:latest");
    CHECK(ps["context_length"] == 256);
    CHECK(ps["size_vram"] == 1185376);
    CHECK(ps.contains("expires_at"));

    json show = show_json(m);
    CHECK(show["template"] == "{{ messages }}");
    CHECK(show["model_info"]["general.architecture"] == "llama");
    CHECK(show["details"]["family"] == "llama");
    CHECK(show["capabilities"] == json{"completion"});
    CHECK(show["modelfile"].get<std::string>().find("FROM stories260K.gguf") != std::string::npos);
    CHECK(show["parameters"].get<std::string>().find("num_ctx") == 0);
    CHECK_FALSE(show.contains("license"));

    m.template_renders_tools = true;
    m.reasoning = &vkllm::answer::think_tags();
    CHECK(capabilities(m) == json{"completion", "tools", "thinking"});
    ServedModel e;
    e.embed = [](const std::vector<std::vector<int32_t>>&) { return std::vector<std::vector<float>>{}; };
    CHECK(capabilities(e) == json{"embedding"});

    CHECK(version_json()["version"] == kApiVersion);
}
