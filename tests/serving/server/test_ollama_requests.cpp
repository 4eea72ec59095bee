// Ollama's request bodies on plain JSON: /api/chat and /api/generate into engine requests (options
// honoured, ignored or refused by name; format; think; images, template, suffix and raw's limits),
// /api/embed and /api/embeddings, and their 400s.
#include "serving/server/ollama_requests.h"

#include "support/openai_testing.h"

#include <doctest/doctest.h>

using namespace vkllm;
using namespace vkllm::server;
using namespace vkllm::server::ollama;
using vkllm::server::openai_testing::error_of;

namespace {

json chat(json extra = json::object()) {
    json b = {{"model", "m:latest"}, {"messages", json::array({json{{"role", "user"}, {"content", "Hi"}}})}};
    for (auto& [k, v] : extra.items()) b[k] = v;
    return b;
}

json generate(json extra = json::object()) {
    json b = {{"model", "m"}, {"prompt", "Once upon a time"}};
    for (auto& [k, v] : extra.items()) b[k] = v;
    return b;
}

ApiError chat_error(json extra) {
    return error_of([&] { parse_chat(chat(std::move(extra)), 1); });
}

}  // namespace

TEST_CASE("ollama: a minimal chat streams by default and keeps the server's sampler") {
    Request r = parse_chat(chat(), 42);
    CHECK(r.route == Route::Chat);
    CHECK(r.model == "m:latest");
    CHECK(r.stream);
    CHECK_FALSE(r.load_only);
    CHECK(r.parsed.endpoint == Endpoint::Chat);
    REQUIRE(r.parsed.messages.size() == 1);
    CHECK(r.parsed.engine.sampler.seed == 42);
    CHECK(r.parsed.engine.sampler.temperature == SamplerParams{}.temperature);
    CHECK(r.parsed.engine.max_tokens == -1);
    CHECK(r.think == Think::Default);
    CHECK(parse_chat(chat({{"stream", false}}), 1).stream == false);
}

TEST_CASE("ollama: options map onto the sampler") {
    json opts = {{"temperature", 0},
                 {"top_k", 7},
                 {"top_p", 0.5},
                 {"min_p", 0.1},
                 {"seed", 1234},
                 {"num_predict", 20},
                 {"stop", {"\n", "user:"}},
                 {"repeat_penalty", 1.2},
                 {"repeat_last_n", 33},
                 {"presence_penalty", 1.5},
                 {"frequency_penalty", -0.5},
                 {"num_ctx", 256}};
    Request r = parse_chat(chat({{"options", opts}}), 1);
    const SamplerParams& s = r.parsed.engine.sampler;
    CHECK(s.temperature == 0.0f);
    CHECK(s.top_k == 7);
    CHECK(s.top_p == doctest::Approx(0.5));
    CHECK(s.min_p == doctest::Approx(0.1));
    CHECK(s.seed == 1234);
    CHECK(r.parsed.engine.max_tokens == 20);
    CHECK(r.parsed.engine.stop == std::vector<std::string>{"\n", "user:"});
    CHECK(s.repeat_penalty == doctest::Approx(1.2));
    CHECK(s.repeat_last_n == 33);
    CHECK(s.presence_penalty == doctest::Approx(1.5));
    CHECK(s.frequency_penalty == doctest::Approx(-0.5));
    CHECK(r.num_ctx == 256);

    // Ollama's special values: -1 seed is random (the server's stays), num_predict -1/-2 no limit,
    // repeat_last_n -1 the whole context, top_p 0 off, a single stop string.
    Request sp = parse_chat(chat({{"options",
                                   {{"seed", -1},
                                    {"num_predict", -2},
                                    {"repeat_last_n", -1},
                                    {"top_p", 0},
                                    {"stop", "END"},
                                    {"top_k", 5.0}}}}),
                            77);
    CHECK(sp.parsed.engine.sampler.seed == 77);
    CHECK(sp.parsed.engine.max_tokens == -1);
    CHECK(sp.parsed.engine.sampler.repeat_last_n == std::numeric_limits<int32_t>::max());
    CHECK(sp.parsed.engine.sampler.top_p == 1.0f);
    CHECK(sp.parsed.engine.stop == std::vector<std::string>{"END"});
    CHECK(sp.parsed.engine.sampler.top_k == 5);
    // Seeds of every size keep every digit (nlohmann reads large ones as unsigned).
    for (uint64_t seed : {uint64_t(12345678901), uint64_t(9007199254740993), std::numeric_limits<uint64_t>::max()})
        CHECK(parse_chat(chat({{"options", {{"seed", seed}}}}), 1).parsed.engine.sampler.seed == seed);
    CHECK(error_of([] {
              parse_chat(chat({{"options", {{"num_predict", uint64_t(1) << 40}}}}), 1);
          }).param() == "options.num_predict");
}

TEST_CASE("ollama: runtime options are accepted and ignored, output-changing ones refused by name") {
    json runtime = {{"num_gpu", 99},       {"num_thread", 8}, {"use_mmap", true},  {"use_mlock", false},
                    {"num_batch", 512},    {"main_gpu", 0},   {"low_vram", false}, {"numa", false},
                    {"num_keep", 5},       {"f16_kv", true},  {"mirostat", 0},     {"mirostat_tau", 5.0},
                    {"mirostat_eta", 0.1}, {"tfs_z", 1},      {"typical_p", 1.0},  {"penalize_newline", true}};
    Request r = parse_chat(chat({{"options", runtime}}), 1);
    CHECK(r.parsed.engine.sampler.temperature == SamplerParams{}.temperature);

    const json refused = {{"mirostat", 2}, {"tfs_z", 0.9}, {"typical_p", 0.7}};
    for (const auto& [key, value] : refused.items()) {
        ApiError e = chat_error({{"options", {{key, value}}}});
        CHECK(e.status() == 400);
        CHECK(e.param() == "options." + key);
        CHECK(std::string(e.what()).find("options." + key) != std::string::npos);
    }
    // penalize_newline false is refused only where a penalty would apply to the newline.
    CHECK(parse_chat(chat({{"options", {{"penalize_newline", false}}}}), 1).parsed.engine.sampler.repeat_penalty ==
          1.0f);
    CHECK(chat_error({{"options", {{"penalize_newline", false}, {"repeat_penalty", 1.1}}}}).param() ==
          "options.penalize_newline");
    // Unknown options and wrong types name the option.
    CHECK(chat_error({{"options", {{"flux_capacitor", 1}}}}).param() == "options.flux_capacitor");
    CHECK(chat_error({{"options", {{"temperature", "hot"}}}}).param() == "options.temperature");
    CHECK(chat_error({{"options", {{"num_gpu", "all"}}}}).param() == "options.num_gpu");
    CHECK(chat_error({{"options", {{"top_k", 1.5}}}}).param() == "options.top_k");
    CHECK(chat_error({{"options", {{"min_p", 1}}}}).param() == "options.min_p");
    CHECK(chat_error({{"options", {{"repeat_penalty", 0}}}}).param() == "options.repeat_penalty");
    CHECK(chat_error({{"options", {{"num_predict", -3}}}}).param() == "options.num_predict");
    CHECK(chat_error({{"options", {{"stop", {1}}}}}).param() == "options.stop");
    CHECK(chat_error({{"options", {{"num_ctx", 0}}}}).param() == "options.num_ctx");
    CHECK(chat_error({{"options", "fast"}}).param() == "options");
}

TEST_CASE("ollama: num_ctx at most the server's context") {
    Request r = parse_chat(chat({{"options", {{"num_ctx", 2048}}}}), 1);
    CHECK(context_limit(r, 4096) == 2048);
    CHECK(context_limit(parse_chat(chat(), 1), 4096) == 4096);
    ApiError e = error_of([&] { context_limit(r, 512); });
    CHECK(e.status() == 400);
    CHECK(e.param() == "options.num_ctx");
    CHECK(std::string(e.what()).find("512") != std::string::npos);
}

TEST_CASE("ollama: the model, stream, keep_alive and logprobs fields are checked") {
    ApiError missing = error_of([] { parse_chat(json{{"messages", json::array()}}, 1); });
    CHECK(missing.status() == 400);
    CHECK(std::string(missing.what()) == "model is required");
    CHECK(std::string(chat_error({{"model", ""}}).what()) == "model is required");
    CHECK(chat_error({{"model", 3}}).param() == "model");
    CHECK(chat_error({{"stream", "yes"}}).param() == "stream");
    CHECK_NOTHROW(parse_chat(chat({{"keep_alive", "5m"}}), 1));
    CHECK_NOTHROW(parse_chat(chat({{"keep_alive", -1}}), 1));
    CHECK(chat_error({{"keep_alive", json::array()}}).param() == "keep_alive");
    Request lp = parse_chat(chat({{"logprobs", true}, {"top_logprobs", 3}}), 1);
    CHECK(lp.parsed.engine.logprobs);
    CHECK(lp.parsed.engine.top_logprobs == 3);
    CHECK(std::string(chat_error({{"top_logprobs", 21}}).what()) == "top_logprobs must be between 0 and 20");
}

TEST_CASE("ollama: format json and JSON schemas become grammars") {
    CHECK(parse_chat(chat({{"format", "json"}}), 1).parsed.engine.grammar);
    json schema = {{"type", "object"}, {"properties", {{"age", {{"type", "integer"}}}}}, {"required", {"age"}}};
    CHECK(parse_chat(chat({{"format", schema}}), 1).parsed.engine.grammar);
    CHECK_FALSE(parse_chat(chat({{"format", ""}}), 1).parsed.engine.grammar);
    CHECK(chat_error({{"format", "xml"}}).param() == "format");
    CHECK(chat_error({{"format", 5}}).param() == "format");
    CHECK(
        chat_error({{"format", {{"type", "object"}, {"patternProperties", {{"^a", {{"type", "string"}}}}}}}}).param() ==
        "format");
    // A stop string could cut the structure short.
    CHECK(chat_error({{"format", "json"}, {"options", {{"stop", {"}"}}}}}).param() == "options.stop");
}

TEST_CASE("ollama: chat messages in Ollama's shape") {
    json messages = json::array(
        {json{{"role", "user"}, {"content", "weather?"}, {"images", json::array()}},
         json{{"role", "assistant"},
              {"content", ""},
              {"thinking", "I should call it."},
              {"tool_calls",
               json::array({json{{"function", {{"name", "get_weather"}, {"arguments", {{"city", "Paris"}}}}}}})}},
         json{{"role", "tool"}, {"content", "sunny"}, {"tool_name", "get_weather"}}});
    Request r = parse_chat(chat({{"messages", messages}}), 1);
    const json& m = r.parsed.messages;
    REQUIRE(m.size() == 3);
    CHECK_FALSE(m[0].contains("images"));
    CHECK(m[1]["reasoning_content"] == "I should call it.");
    CHECK_FALSE(m[1].contains("thinking"));
    CHECK(m[1]["tool_calls"][0]["function"]["arguments"] == json{{"city", "Paris"}});
    CHECK(m[2]["name"] == "get_weather");

    // Images: image parts before the message's text, named as Ollama's fields; refused by a model
    // without a vision encoder.
    Request img = parse_chat(
        chat({{"messages", json::array({json{{"role", "user"}, {"content", "ok"}},
                                        json{{"role", "user"}, {"content", "what is this?"}, {"images", {"aGVs", "YQ=="}}}})}}),
        1);
    CHECK(img.parsed.messages[1]["content"] == "<__media__><__media__>what is this?");
    REQUIRE(img.parsed.images.size() == 2);
    CHECK(img.parsed.images[0].url == "data:image/*;base64,aGVs");
    CHECK(img.parsed.images[0].param == "messages[1].images[0]");
    CHECK(img.parsed.images[1].param == "messages[1].images[1]");
    CHECK_NOTHROW(check_images(img, true));
    try {
        check_images(img, false);
        FAIL("expected a 400");
    } catch (const ApiError& e) {
        CHECK(e.status() == 400);
        CHECK(e.param() == "messages[1].images[0]");
        CHECK(std::string(e.what()).find("takes no images") != std::string::npos);
    }
    CHECK(chat_error({{"messages", json::array({json{{"role", "user"}, {"content", "x"}, {"images", "aGVs"}}})}})
              .param() == "messages[0].images");
    CHECK(chat_error({{"messages", json::array({json{{"role", "user"}, {"content", "x"}, {"images", {5}}}})}})
              .param() == "messages[0].images[0]");
    CHECK(chat_error({{"messages", json::array({json{{"content", "x"}}})}}).param() == "messages[0].role");
    CHECK(chat_error({{"messages", "hi"}}).param() == "messages");

    // No messages: Ollama's "load the model".
    CHECK(parse_chat(chat({{"messages", json::array()}}), 1).load_only);
    CHECK(parse_chat(json{{"model", "m"}}, 1).load_only);
}

TEST_CASE("ollama: chat tools are checked like OpenAI's") {
    json tools = json::array(
        {json{{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", {{"type", "object"}}}}}}});
    Request r = parse_chat(chat({{"tools", tools}}), 1);
    CHECK(r.parsed.tools == tools);
    CHECK(r.parsed.tool_choice == ToolChoice::Auto);
    CHECK(parse_chat(chat({{"tools", json::array()}}), 1).parsed.tools.is_null());
    CHECK(chat_error({{"tools", {{"type", "function"}}}}).param() == "tools");
    CHECK(chat_error({{"tools", json::array({json{{"type", "function"}, {"function", {{"description", "x"}}}}})}})
              .status() == 400);
}

TEST_CASE("ollama: think switches the reasoning split and the template") {
    Request d = parse_chat(chat(), 1);
    apply_think(d, true, false);
    CHECK(d.parsed.reasoning_format == "auto");
    CHECK(d.parsed.template_kwargs.is_null());
    CHECK(d.parsed.reasoning == chat_template::Reasoning::Auto);

    Request on = parse_chat(chat({{"think", true}}), 1);
    CHECK(on.think == Think::On);
    apply_think(on, true, false);
    CHECK(on.parsed.reasoning == chat_template::Reasoning::On);  // the template's switch is set by prepare_generation

    Request off = parse_chat(chat({{"think", false}}), 1);
    apply_think(off, true, false);
    CHECK(off.parsed.reasoning == chat_template::Reasoning::Off);
    CHECK(off.parsed.reasoning_format == "none");
    apply_think(off = parse_chat(chat({{"think", false}}), 1), false, false);  // off on a model that does not think
    CHECK(off.parsed.reasoning_format == "none");

    Request level = parse_chat(chat({{"think", "low"}}), 1);
    CHECK(level.think_level == "low");
    apply_think(level, true, true);
    CHECK(level.parsed.reasoning == chat_template::Reasoning::On);
    CHECK(level.parsed.reasoning_effort == "low");

    Request cannot = parse_chat(chat({{"think", true}}), 1);
    ApiError e = error_of([&] { apply_think(cannot, false, false); });
    CHECK(e.status() == 400);
    CHECK(std::string(e.what()) == "\"m:latest\" does not support thinking");
    Request harmony_off = parse_chat(chat({{"think", false}}), 1);
    CHECK(error_of([&] { apply_think(harmony_off, true, true); }).param() == "think");
    CHECK(chat_error({{"think", "max"}}).param() == "think");
    CHECK(chat_error({{"think", 1}}).param() == "think");
}

TEST_CASE("ollama: generate renders a one-turn chat, raw sends the prompt as it is") {
    Request g = parse_generate(generate({{"system", "Be brief."}, {"stream", false}}), 1);
    CHECK(g.route == Route::Generate);
    CHECK_FALSE(g.stream);
    CHECK(g.parsed.endpoint == Endpoint::Chat);
    REQUIRE(g.parsed.messages.size() == 2);
    CHECK(g.parsed.messages[0] == json{{"role", "system"}, {"content", "Be brief."}});
    CHECK(g.parsed.messages[1] == json{{"role", "user"}, {"content", "Once upon a time"}});

    Request raw = parse_generate(generate({{"raw", true}}), 1);
    CHECK(raw.raw);
    CHECK(raw.parsed.endpoint == Endpoint::Completion);
    REQUIRE(raw.parsed.prompts.size() == 1);
    CHECK(raw.parsed.prompts[0].text == "Once upon a time");
    apply_think(raw, true, false);
    CHECK(raw.parsed.reasoning_format == "none");
    // think asks the template for something a raw or fill-in-the-middle generate does not render.
    for (json extra : {json{{"raw", true}, {"think", true}}, json{{"suffix", "x"}, {"think", false}}}) {
        Request t = parse_generate(generate(extra), 1);
        CHECK(error_of([&] { apply_think(t, true, false); }).param() == "think");
    }

    Request ctx = parse_generate(generate({{"context", {1, 2, 3}}}), 1);
    CHECK(ctx.context == std::vector<int32_t>{1, 2, 3});

    CHECK(parse_generate(json{{"model", "m"}}, 1).load_only);
    CHECK(parse_generate(generate({{"prompt", ""}}), 1).load_only);
}

TEST_CASE("ollama: generate's refusals") {
    auto gen_error = [](json extra) { return error_of([&] { parse_generate(generate(std::move(extra)), 1); }); };
    CHECK(std::string(gen_error({{"raw", true}, {"system", "x"}}).what()) ==
          "raw mode does not support template, system, or context");
    CHECK(gen_error({{"raw", true}, {"context", {1}}}).status() == 400);
    CHECK(gen_error({{"template", "{{ .Prompt }}"}}).param() == "template");
    CHECK_NOTHROW(parse_generate(generate({{"template", ""}}), 1));
    CHECK(gen_error({{"suffix", "return x"}, {"system", "s"}}).param() == "suffix");
    // A suffix makes the generate fill in the middle: the prompt before the cursor, the suffix after.
    Request fim = parse_generate(generate({{"suffix", "    return x"}}), 1);
    CHECK(fim.parsed.endpoint == Endpoint::Completion);
    REQUIRE(fim.parsed.suffix.has_value());
    CHECK(*fim.parsed.suffix == "    return x");
    REQUIRE(fim.parsed.prompts.size() == 1);
    Request gen_img = parse_generate(generate({{"images", {"aGVsbG8="}}, {"system", "s"}}), 1);
    REQUIRE(gen_img.parsed.images.size() == 1);
    CHECK(gen_img.parsed.images[0].param == "images[0]");
    CHECK(gen_img.parsed.messages[1]["content"].get<std::string>()== "<__media__>Once upon a time");
    // Images need the template's prompt.
    CHECK(gen_error({{"images", {"aGVsbG8="}}, {"raw", true}}).param() == "images");
    CHECK(gen_error({{"images", {"aGVsbG8="}}, {"suffix", "x"}}).param() == "images");
    CHECK(gen_error({{"images", {"aGVsbG8="}}, {"context", {1, 2}}}).param() == "images");
    CHECK(gen_error({{"images", "aGVsbG8="}}).param() == "images");
    CHECK(gen_error({{"context", {-1}}}).param() == "context[0]");
    CHECK(gen_error({{"context", "abc"}}).param() == "context");
    CHECK(gen_error({{"prompt", 5}}).param() == "prompt");
    CHECK(gen_error({{"system", 5}}).param() == "system");
}

TEST_CASE("ollama: embed and embeddings bodies") {
    EmbedRequest one = parse_embed(json{{"model", "e"}, {"input", "hello"}});
    CHECK(one.inputs == std::vector<std::string>{"hello"});
    CHECK(one.truncate);
    EmbedRequest many =
        parse_embed(json{{"model", "e"}, {"input", {"a", "b"}}, {"truncate", false}, {"dimensions", 128}});
    CHECK(many.inputs.size() == 2);
    CHECK_FALSE(many.truncate);
    CHECK(many.dimensions == 128);
    CHECK_NOTHROW(check_dimensions(many, 128));
    CHECK(error_of([&] { check_dimensions(many, 64); }).param() == "dimensions");
    CHECK(parse_embed(json{{"model", "e"}, {"input", ""}}).inputs.empty());
    CHECK(parse_embed(json{{"model", "e"}}).inputs.empty());
    CHECK(error_of([] { parse_embed(json{{"model", "e"}, {"input", {1, 2}}}); }).param() == "input[0]");
    CHECK(error_of([] { parse_embed(json{{"model", "e"}, {"input", 5}}); }).param() == "input");
    CHECK(error_of([] { parse_embed(json{{"input", "x"}}); }).status() == 400);
    CHECK(error_of([] {
              parse_embed(json{{"model", "e"}, {"input", "x"}, {"options", {{"bogus", 1}}}});
          }).param() == "options.bogus");

    EmbedRequest old = parse_embeddings(json{{"model", "e"}, {"prompt", "hi"}});
    CHECK(old.inputs == std::vector<std::string>{"hi"});
    CHECK(parse_embeddings(json{{"model", "e"}, {"prompt", ""}}).inputs.empty());
    CHECK(error_of([] { parse_embeddings(json{{"model", "e"}, {"prompt", 1}}); }).param() == "prompt");
}

TEST_CASE("ollama: whatever the options accept, the engine's sampler accepts too") {
    for (const char* f : {"temperature", "top_p", "min_p", "repeat_penalty", "presence_penalty", "frequency_penalty"})
        for (double v : {-1.0, 0.0, 0.5, 0.999, 1.0, 2.0, 100.0}) {
            CAPTURE(f);
            CAPTURE(v);
            try {
                Request r = parse_chat(chat({{"options", {{f, v}}}}), 1);
                CHECK_NOTHROW(r.parsed.engine.sampler.validate());
            } catch (const ApiError& e) {
                CHECK(e.param() == std::string("options.") + f);
            }
        }
}
