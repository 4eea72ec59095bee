// llama-server's native API as data: the FIM tokens a vocabulary names or spells, the /infill prompt
// layout and its budget, /completion and /infill bodies (prompt forms, sampler fields, the refused
// samplers, logit_bias forms), and the result, stream chunk, /props and /slots shapes.
#include "serving/server/fim_prompt.h"
#include "serving/server/native_requests.h"
#include "serving/server/native_responses.h"
#include "serving/server/prompt.h"

#include "model/testgen/random_model.h"
#include "support/openai_testing.h"
#include "support/test_context.h"

#include <doctest/doctest.h>

#include <memory>

using namespace vkllm;
using namespace vkllm::server;
using namespace vkllm::server::openai_testing;

namespace {

// A random SentencePiece vocabulary of 512 tokens; with `fim`, its last six are Qwen2.5-Coder's FIM
// tokens (prefix, suffix and middle named by GGUF keys, pad, repo and file separator by text).
struct Vocab {
    std::unique_ptr<GgufFile> file;
    std::unique_ptr<Tokenizer> tok;
};
Vocab random_vocab(bool fim, bool drop_keys = false) {
    ModelShape shape;
    shape.dim = 16;
    shape.n_layers = 1;
    shape.n_heads = 2;
    shape.n_kv_heads = 2;
    shape.ffn_dim = 16;
    shape.n_vocab = 512;
    shape.fim_tokens = fim;
    GgufWriter w = make_random_model(shape);
    if (drop_keys) w.remove_prefix("tokenizer.ggml.fim_");
    Vocab v;
    v.file = std::make_unique<GgufFile>(GgufFile::from_memory(w.write_memory(), "fim.gguf"));
    v.tok = make_tokenizer(*v.file);
    return v;
}

std::string pieces(const Tokenizer& tok, const std::vector<int32_t>& ids) {
    std::string s;
    for (int32_t id : ids) s += tok.token_to_piece(id, true);
    return s;
}

}  // namespace

TEST_CASE("native: FIM tokens from the GGUF keys or, failing them, from their text") {
    for (bool drop_keys : {false, true}) {
        Vocab v = random_vocab(true, drop_keys);
        const FimTokens& f = v.tok->fim();
        CHECK(f.usable());
        CHECK(f.pre == v.tok->find_token("<|fim_prefix|>"));
        CHECK(f.suf == v.tok->find_token("<|fim_suffix|>"));
        CHECK(f.mid == v.tok->find_token("<|fim_middle|>"));
        CHECK(f.pad == v.tok->find_token("<|fim_pad|>"));
        CHECK(f.rep == v.tok->find_token("<|repo_name|>"));
        CHECK(f.sep == v.tok->find_token("<|file_sep|>"));
        CHECK(v.tok->is_eog(f.pad));  // llama.cpp stops at pad, repo and file separator
        CHECK(fim_missing(*v.tok).empty());
    }
    Vocab plain = random_vocab(false);
    CHECK_FALSE(plain.tok->fim().usable());
    CHECK(fim_missing(*plain.tok) == "prefix token is missing. suffix token is missing. middle token is missing. ");
    CHECK_THROWS_AS(fim_prompt(*plain.tok, FimInput{}, FimBudget{}), std::invalid_argument);
}

TEST_CASE("native: the FIM prompt is llama-server's repository-level layout") {
    Vocab v = random_vocab(true);
    const Tokenizer& tok = *v.tok;
    FimInput in;
    in.prefix = tok.encode("int main() {\n", false, false);
    in.suffix = tok.encode("}\n", false, false);
    in.prompt = tok.encode("    return", false, false);
    CHECK(pieces(tok, fim_prompt(tok, in, fim_budget(4096, 16))) ==
          "<|repo_name|> myproject\n<|file_sep|> filename\n<s><|fim_prefix|> int main() {\n     return"
          "<|fim_suffix|> }\n<|fim_middle|>");
    in.extra = {{"a.h", "int a;\n"}, {"b.h", "int b;\n"}};
    CHECK(pieces(tok, fim_prompt(tok, in, fim_budget(4096, 16))) ==
          "<|repo_name|> myproject\n<|file_sep|> a.h\n int a;\n<|file_sep|> b.h\n int b;\n<|file_sep|> filename\n"
          "<s><|fim_prefix|> int main() {\n     return<|fim_suffix|> }\n<|fim_middle|>");

    SUBCASE("the budget keeps the prefix's end, the suffix's start and the files' end") {
        FimInput big;
        for (int i = 0; i < 200; ++i) big.prefix.push_back(300 + i % 50);
        for (int i = 0; i < 200; ++i) big.suffix.push_back(400 + i % 50);
        big.prompt = {7, 8};
        big.extra = {{"x", std::string(300, 'x')}};
        FimBudget b{64, 200, 10};  // prefix 48, suffix 16 - 2 - 2 = 12, extras 200 - 64 - 20 = 116
        const std::vector<int32_t> ids = fim_prompt(tok, big, b);
        const FimTokens& f = tok.fim();
        auto pre = std::find(ids.begin(), ids.end(), f.pre);
        auto suf = std::find(ids.begin(), ids.end(), f.suf);
        REQUIRE(pre != ids.end());
        CHECK(pre - ids.begin() == 116 + 1);  // the files' last 116 tokens, then BOS
        CHECK(std::vector<int32_t>(pre + 1, suf) == [&] {
            std::vector<int32_t> want(big.prefix.end() - 48, big.prefix.end());
            want.insert(want.end(), {7, 8});
            return want;
        }());
        CHECK(std::vector<int32_t>(suf + 1, ids.end() - 1) ==
              std::vector<int32_t>(big.suffix.begin(), big.suffix.begin() + 12));
        CHECK(ids.back() == f.mid);
    }
    CHECK(fim_budget(4096, -1).n_batch == 2048);
    CHECK(fim_budget(1024, -1).n_batch == 512);
    CHECK(fim_budget(1024, -1).n_predict == 0);
}

TEST_CASE("native: /completion prompts as llama-server takes them") {
    auto prompts = [](json p) { return parse_native_completion(json{{"prompt", p}}, 1, 2).prompts; };
    CHECK(prompts("hi").size() == 1);
    CHECK(prompts(json::array({1, 2, 3})).size() == 1);
    CHECK(prompts(json::array({1, 2, "x", 3})).size() == 1);  // ids and text: one prompt
    CHECK(prompts(json::array({"a", "b"})).size() == 2);  // strings only: one prompt each
    CHECK(prompts(json::array({json::array({1, 2}), "b"})).size() == 2);
    CHECK(error_of([] { parse_native_completion(json::object(), 1, 2); }).param() == "prompt");
    CHECK(error_of([] { parse_native_completion(json{{"prompt", 5}}, 1, 2); }).param() == "prompt");
    CHECK(error_of([] { parse_native_completion(json{{"prompt", json::array()}}, 1, 2); }).param() == "prompt");
    CHECK(error_of([] {
              parse_native_completion(json{{"prompt", json::array({"a", 5.5})}}, 1, 2);
          }).param() == "prompt[1]");
    json many = json::array();
    for (size_t i = 0; i <= kMaxNativePrompts; ++i) many.push_back("x");
    CHECK(error_of([&] { parse_native_completion(json{{"prompt", many}}, 1, 2); }).param() == "prompt");

    if (const std::string path = test::model_path("stories260K.gguf"); !path.empty()) {
        GgufFile file = GgufFile::open(path);
        auto tok = make_tokenizer(file);
        const std::vector<int32_t> hi = tok->encode("Hi", true, true);
        CHECK(prompt_ids(*tok, "Hi", true, true) == hi);
        CHECK(prompt_ids(*tok, json::array({5, 6}), true, true) == std::vector<int32_t>{5, 6});  // ids: no BOS
        std::vector<int32_t> mixed = prompt_ids(*tok, json::array({"Hi", 7, "Hi"}), true, true);
        std::vector<int32_t> want = hi;
        want.push_back(7);
        for (int32_t id : tok->encode("Hi", false, true)) want.push_back(id);  // BOS only at the start
        CHECK(mixed == want);
        CHECK(error_of([&] { prompt_ids(*tok, json::array({512}), true, true); }).param() == "prompt");
    }
}

TEST_CASE("native: sampler fields, defaults, and what vkllm cannot honour") {
    NativeRequest d = parse_native_completion(json{{"prompt", "x"}}, 99, 2);
    CHECK(d.engine.sampler.temperature == doctest::Approx(0.8));
    CHECK(d.engine.sampler.top_k == 40);
    CHECK(d.engine.sampler.seed == 99);
    CHECK_FALSE(d.seed_given);
    CHECK(d.engine.max_tokens == -1);
    CHECK(d.id_slot == -1);

    NativeRequest r = parse_native_completion(json{{"prompt", "x"},
                                                   {"n_predict", 8},
                                                   {"temperature", 0},
                                                   {"top_k", 5},
                                                   {"top_p", 0.5},
                                                   {"min_p", 0},
                                                   {"seed", 42},
                                                   {"stop", {"a", ""}},
                                                   {"n_probs", 3},
                                                   {"return_tokens", true},
                                                   {"id_slot", 1},
                                                   {"repeat_last_n", -1},
                                                   {"cache_prompt", false},
                                                   {"response_fields", {"content"}},
                                                   {"stream", true},
                                                   {"mirostat", 0},
                                                   {"typical_p", 1},
                                                   {"top_n_sigma", -1},
                                                   {"samplers", json::array()}},
                                              1, 2);
    CHECK(r.engine.max_tokens == 8);
    CHECK(r.engine.sampler.temperature == 0);
    CHECK(r.engine.sampler.top_k == 5);
    CHECK(r.engine.sampler.top_p == doctest::Approx(0.5));
    CHECK(r.engine.sampler.seed == 42);
    CHECK(r.seed_given);
    CHECK(r.engine.stop == std::vector<std::string>{"a"});
    CHECK(r.engine.logprobs);
    CHECK(r.engine.top_logprobs == 3);
    CHECK(r.return_tokens);
    CHECK(r.engine.slot == 1);
    CHECK(r.engine.sampler.repeat_last_n > 1000000);
    CHECK(r.response_fields == std::vector<std::string>{"content"});
    CHECK(r.stream);
    CHECK(parse_native_completion(json{{"prompt", "x"}, {"max_tokens", 5}}, 1, 2).engine.max_tokens == 5);
    CHECK_FALSE(parse_native_completion(json{{"prompt", "x"}, {"seed", -1}}, 1, 2).seed_given);

    auto param = [](json extra) {
        extra["prompt"] = "x";
        return error_of([&] { parse_native_completion(extra, 1, 2); }).param();
    };
    CHECK(param({{"n_predict", "x"}}) == "n_predict");
    CHECK(param({{"n_predict", 0}}) == "n_predict");
    CHECK(param({{"temperature", "hot"}}) == "temperature");
    CHECK(param({{"n_probs", 21}}) == "n_probs");
    CHECK(param({{"id_slot", 2}}) == "id_slot");
    CHECK(param({{"stop", "a"}}) == "stop");
    CHECK(param({{"mirostat", 2}}) == "mirostat");
    CHECK(param({{"typical_p", 0.9}}) == "typical_p");
    CHECK(param({{"dynatemp_range", 0.5}}) == "dynatemp_range");
    CHECK(param({{"xtc_probability", 0.1}}) == "xtc_probability");
    CHECK(param({{"dry_multiplier", 0.8}}) == "dry_multiplier");
    CHECK(param({{"top_n_sigma", 1}}) == "top_n_sigma");
    CHECK(param({{"post_sampling_probs", true}}) == "post_sampling_probs");
    CHECK(param({{"samplers", {"top_k"}}}) == "samplers");
    CHECK(param({{"lora", {{{"id", 0}, {"scale", 1}}}}}) == "lora");
    CHECK(param({{"grammar", "root ::= ("}}) == "grammar");
    CHECK(param({{"grammar", "root ::= \"a\""}, {"stop", {"a"}}}) == "stop");
    CHECK(param({{"response_fields", "content"}}) == "response_fields");
    CHECK(param({{"logit_bias", {{1}}}}) == "logit_bias");
    CHECK(param({{"logit_bias", {{1, "x"}}}}) == "logit_bias");
    CHECK(param({{"logit_bias", {{1, 101}}}}) == "logit_bias");
    CHECK(param({{"repeat_penalty", 0}}) == "repeat_penalty");
    // Whatever the parser accepts, the engine's sampler accepts too (no 400 naming a CLI flag later).
    for (const char* f : {"temperature", "min_p", "repeat_penalty", "presence_penalty", "frequency_penalty", "top_p"})
        for (double v : {0.0, 0.5, 0.999, 2.0, 100.0}) {
            CAPTURE(f);
            CAPTURE(v);
            try {
                NativeRequest r = parse_native_completion(json{{"prompt", "x"}, {f, v}}, 1, 2);
                CHECK_NOTHROW(r.engine.sampler.validate());
            } catch (const ApiError& e) {
                CHECK(e.param() == f);
            }
        }
    CHECK(param({{"logit_bias", {{"7", -1e9}}}}) == "logit_bias");
    CHECK(parse_native_completion(json{{"prompt", "x"}, {"json_schema", {{"type", "boolean"}}}}, 1, 2).engine.grammar);
}

TEST_CASE("native: logit_bias as pairs or an object, by id or by text") {
    NativeRequest r = parse_native_completion(
        json{{"prompt", "x"}, {"logit_bias", json::array({json::array({5, -100}), json::array({"Hi", false})})}}, 1, 2);
    REQUIRE(r.engine.sampler.logit_bias.size() == 1);
    CHECK(r.engine.sampler.logit_bias[0] == std::pair<int32_t, float>{5, -100.0f});
    REQUIRE(r.text_bias.size() == 1);
    CHECK(r.text_bias[0].first == "Hi");
    CHECK(r.text_bias[0].second == -100.0f);  // false bans the token, within the sampler's range
    for (const auto& [text, bias] : r.text_bias) r.engine.sampler.logit_bias.emplace_back(1, bias);
    CHECK_NOTHROW(r.engine.sampler.validate());
    NativeRequest o = parse_native_completion(json{{"prompt", "x"}, {"logit_bias", {{"7", 2.5}, {"Hi", -1}}}}, 1, 2);
    CHECK(o.engine.sampler.logit_bias == std::vector<std::pair<int32_t, float>>{{7, 2.5f}});
    CHECK(o.text_bias.size() == 1);
    if (const std::string path = test::model_path("stories260K.gguf"); !path.empty()) {
        GgufFile file = GgufFile::open(path);
        auto tok = make_tokenizer(file);
        resolve_logit_bias(*tok, o);
        CHECK(o.engine.sampler.logit_bias.size() == 1 + tok->encode("Hi", false, false).size());
        NativeRequest bad = parse_native_completion(json{{"prompt", "x"}, {"logit_bias", {{"600", 1}}}}, 1, 2);
        CHECK(error_of([&] { resolve_logit_bias(*tok, bad); }).param() == "logit_bias");
    }
}

TEST_CASE("native: /infill bodies and the 501 of a model without FIM tokens") {
    json body = {{"input_prefix", "a"},
                 {"input_suffix", "b"},
                 {"prompt", "c"},
                 {"input_extra", {{{"filename", "f.h"}, {"text", "x"}}, {{"text", "y"}}}}};
    NativeRequest r = parse_infill_request(body, 1, 1);
    CHECK(r.infill);
    REQUIRE(r.input_extra.size() == 2);
    CHECK(r.input_extra[0].filename == "f.h");
    CHECK(r.input_extra[1].filename == "tmp");  // llama-server's default name
    CHECK(r.prompts.at(0) == "c");
    for (json extra : {json::object(), json{{"filename", "ok"}}, json{{"filename", 123}},
                       json{{"filename", 123}, {"text", "abc"}}, json{{"filename", 123}, {"text", 456}}}) {
        json b = body;
        b["input_extra"] = json::array({extra});
        CHECK(error_of([&] { parse_infill_request(b, 1, 1); }).status() == 400);
    }
    for (const char* missing : {"input_prefix", "input_suffix"}) {
        json b = body;
        b.erase(missing);
        CHECK(error_of([&] { parse_infill_request(b, 1, 1); }).param() == missing);
    }
    CHECK(error_of([&] {
              json b = body;
              b["prompt"] = 5;
              parse_infill_request(b, 1, 1);
          }).param() == "prompt");

    Vocab plain = random_vocab(false);
    const ApiError e = error_of([&] { infill_prompt(*plain.tok, r, 4096); });
    CHECK(e.status() == 501);
    CHECK(std::string(e.what()).find("prefix token is missing") != std::string::npos);
    Vocab v = random_vocab(true);
    const std::string p = pieces(*v.tok, infill_prompt(*v.tok, r, 4096));
    CHECK(p.starts_with("<|repo_name|> myproject\n<|file_sep|> f.h\n x<|file_sep|> tmp\n y<|file_sep|> filename\n"));
    CHECK(p.ends_with("<|fim_prefix|> a c<|fim_suffix|> b<|fim_middle|>"));
}

TEST_CASE("native: results, stream chunks, response_fields, /props and /slots") {
    const std::string path = test::model_path("stories260K.gguf");
    if (path.empty()) return;
    GgufFile file = GgufFile::open(path);
    auto tok = make_tokenizer(file);
    NativeRequest req = parse_native_completion(json{{"prompt", "Hi"}, {"n_predict", 2}, {"n_probs", 1}}, 5, 2);
    const std::vector<int32_t> prompt = tok->encode("Hi", true, true);
    NativeResult res(req, *tok, "m", 0, prompt);
    engine::TokenLogprob lp{432, ",", -0.5f, {{",", -0.5f}}, {432}};
    engine::Event ev = text_event(",", {lp});
    ev.tokens = {432};
    const std::vector<json> chunks = sse_objects(res.stream_text(ev));
    REQUIRE(chunks.size() == 1);
    CHECK(chunks[0]["content"] == ",");
    CHECK(chunks[0]["tokens"] == json::array({432}));
    CHECK(chunks[0]["stop"] == false);
    CHECK(chunks[0]["id_slot"] == -1);
    CHECK(chunks[0]["tokens_predicted"] == 1);
    CHECK(chunks[0]["tokens_evaluated"] == prompt.size());
    CHECK(chunks[0]["completion_probabilities"][0] ==
          json{{"id", 432},
               {"token", ","},
               {"bytes", {44}},
               {"logprob", -0.5f},
               {"top_logprobs", {{{"id", 432}, {"token", ","}, {"bytes", {44}}, {"logprob", -0.5f}}}}});
    CHECK(res.stream_text(engine::Event{}).empty());

    res.add(ev);
    engine::Event done = done_event(engine::FinishReason::Stop, uint32_t(prompt.size()), 2, 1);
    done.stop_word = "\n";
    done.slot = 1;
    const json out = res.final_json(done);
    CHECK(out["content"] == ",");
    CHECK(out["tokens"] == json::array());  // return_tokens not asked
    CHECK(out["stop"] == true);
    CHECK(out["stop_type"] == "word");
    CHECK(out["stopping_word"] == "\n");
    CHECK(out["id_slot"] == 1);
    CHECK(out["prompt"] == "<s> Hi");
    CHECK(out["tokens_cached"] == prompt.size() + 1);
    CHECK(out["timings"]["cache_n"] == 1);
    CHECK(out["timings"]["prompt_n"] == prompt.size() - 1);
    CHECK(out["generation_settings"]["seed"] == 4294967295u);
    CHECK(out["generation_settings"]["n_predict"] == 2);
    CHECK(out["completion_probabilities"].size() == 1);
    done.stop_word.clear();
    CHECK(native_stop_type(done) == std::string("eos"));
    done.finish = engine::FinishReason::Length;
    CHECK(native_stop_type(done) == std::string("limit"));

    CHECK(pick_fields(out, {"content", "generation_settings/n_predict", "nope", "timings/nope"}) ==
          json{{"content", ","}, {"generation_settings/n_predict", 2}});

    PropsInfo p;
    p.model_alias = "a";
    p.model_path = "/m.gguf";
    p.n_ctx = 256;
    p.total_slots = 2;
    const json props = props_json(p);
    CHECK(props["total_slots"] == 2);
    CHECK(props["default_generation_settings"]["n_ctx"] == 256);
    CHECK(props["default_generation_settings"]["params"]["top_k"] == 40);
    CHECK(props["modalities"]["vision"] == false);
    CHECK(slots_json({false, true}, 128) ==
          json::array({json{{"id", 0}, {"n_ctx", 128}, {"speculative", false}, {"is_processing", false}},
                       json{{"id", 1}, {"n_ctx", 128}, {"speculative", false}, {"is_processing", true}}}));

    const json wp = tokens_with_pieces(*tok, tok->encode("a 媽", false, false));
    CHECK(wp[0]["piece"] == " a");
    CHECK(wp.back()["piece"].is_array());  // one byte of 媽: not UTF-8 alone
}

TEST_CASE("native: OpenAI's suffix on /v1/completions is the FIM prompt, a 400 without FIM tokens") {
    ParsedRequest req = parse_completion_request(json{{"prompt", "int main() {\n"}, {"suffix", "}\n"}}, 1);
    REQUIRE(req.suffix);
    Vocab v = random_vocab(true);
    const std::vector<int32_t> ids = prompt_tokens(*v.tok, {}, req, 4096);
    CHECK(pieces(*v.tok, ids) ==
          "<|repo_name|> myproject\n<|file_sep|> filename\n<s><|fim_prefix|> int main() {\n<|fim_suffix|> "
          "}\n<|fim_middle|>");
    Vocab plain = random_vocab(false);
    const ApiError e = error_of([&] { prompt_tokens(*plain.tok, {}, req, 4096); });
    CHECK(e.status() == 400);
    CHECK(e.param() == "suffix");
    CHECK(std::string(e.what()).find("fill-in-the-middle") != std::string::npos);
}
