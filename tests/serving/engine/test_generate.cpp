// engine::generate (what `vkllm run` runs: one request through a one-slot Engine) on the real
// stories260K model and on random models: the published greedy story, seeded sampling, the context
// check made before anything runs, and NaN weights ending the generation with NonFiniteError for
// every sampler, with nothing decoded.
#include "support/test_context.h"

#include "model/gguf/gguf_writer.h"
#include "support/model_test_util.h"
#include "model/testgen/random_model.h"
#include "serving/engine/generate.h"

#include <cmath>
#include <cstring>
#include <fstream>

using namespace vkllm;
using namespace vkllm::engine;

TEST_CASE("generate: stories260K greedy generation reproduces the published story") {
    std::string path = test::model_path("stories260K.gguf");
    std::string expected_path = test::model_path("stories260K.greedy200.txt");
    if (path.empty() || expected_path.empty()) return;
    test::ValidationGuard guard;
    std::ifstream f(expected_path, std::ios::binary);
    std::string expected((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    test::LoadedModel m = test::open_model(path);
    auto tok = make_tokenizer(m.file);
    ModelGpu gpu(test::context(), m.file, m.cfg, {});
    GenerateParams gp;
    gp.n_predict = 200;
    gp.sampler.temperature = 0;
    gp.sampler.repeat_penalty = 1;
    std::string text;
    std::vector<int32_t> prompt = {tok->bos_id()};
    GenerateStats st = generate(gpu, *tok, prompt, gp, [&](std::string_view p) { text += p; });
    CHECK(text == expected);
    MESSAGE("generated " << st.generated_tokens << " tokens at " << st.generate_tps() << " tokens/s");
}

TEST_CASE("generate: the same seed gives the same text; sampling settings are validated") {
    std::string path = test::model_path("stories260K.gguf");
    if (path.empty()) return;
    test::ValidationGuard guard;
    test::LoadedModel m = test::open_model(path);
    auto tok = make_tokenizer(m.file);
    ModelGpu gpu(test::context(), m.file, m.cfg, {});
    auto sample_text = [&](uint64_t seed) {
        gpu.reset();
        GenerateParams gp;
        gp.n_predict = 40;
        gp.sampler.temperature = 1.0f;
        gp.sampler.top_k = 40;
        gp.sampler.top_p = 0.9f;
        gp.sampler.min_p = 0.02f;
        gp.sampler.repeat_penalty = 1.1f;
        gp.sampler.seed = seed;
        std::string text;
        std::vector<int32_t> prompt = tok->encode("Once upon a time", true);
        generate(gpu, *tok, prompt, gp, [&](std::string_view p) { text += p; });
        return text;
    };
    std::string a = sample_text(42), b = sample_text(42), c = sample_text(7);
    CHECK(!a.empty());
    CHECK(a == b);
    CHECK(a != c);  // 40 tokens at temperature 1: another seed takes another path

    SamplerParams bad;
    bad.temperature = -1;
    CHECK_THROWS_WITH_AS(bad.validate(), doctest::Contains("--temp"), std::invalid_argument);
    bad = {};
    bad.top_p = 0;
    CHECK_THROWS_WITH_AS(bad.validate(), doctest::Contains("--top-p"), std::invalid_argument);
    bad = {};
    bad.min_p = 1;
    CHECK_THROWS_WITH_AS(bad.validate(), doctest::Contains("--min-p"), std::invalid_argument);
}

TEST_CASE("generate: a prompt and -n that exceed the context are refused before anything runs") {
    std::string path = test::model_path("stories260K.gguf");
    if (path.empty()) return;
    test::ValidationGuard guard;
    test::LoadedModel m = test::open_model(path);
    ModelOptions opts;
    opts.n_ctx = 32;
    ModelGpu gpu(test::context(), m.file, m.cfg, opts);
    auto tok = make_tokenizer(m.file);
    GenerateParams gp;
    gp.n_predict = 32;
    gp.sampler.temperature = 0;
    std::vector<int32_t> prompt = {1};
    std::string text;
    CHECK_THROWS_WITH_AS(generate(gpu, *tok, prompt, gp, [&](std::string_view p) { text += p; }),
                         doctest::Contains("exceeds the context"), ContextFullError);
    CHECK(gpu.stats().tokens == 0);
    CHECK(text.empty());
    gp.n_predict = 31;  // exactly the context: runs
    generate(gpu, *tok, prompt, gp, [&](std::string_view p) { text += p; });
    CHECK(!text.empty());
}

TEST_CASE("generate: NaN weights end the generation with NonFiniteError for every sampler") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    ModelShape shape;
    shape.dim = 32;
    shape.n_layers = 2;
    shape.n_heads = 4;
    shape.n_kv_heads = 4;
    shape.ffn_dim = 64;
    shape.n_vocab = 300;
    shape.n_ctx = 64;
    GgufWriter w = make_random_model(shape);
    w.remove_tensor("blk.1.ffn_down.weight");
    w.add_tensor("blk.1.ffn_down.weight", TensorType::F32, {shape.ffn_dim, shape.dim}, [](std::span<uint8_t> dst) {
        const float nan = std::nanf("");
        for (size_t i = 0; i + 4 <= dst.size(); i += 4) std::memcpy(dst.data() + i, &nan, 4);
    });
    GgufFile file = GgufFile::from_memory(w.write_memory(), "nan.gguf");
    auto tok = make_tokenizer(file);
    ModelOptions opts;
    opts.n_ctx = 32;
    ModelGpu gpu(ctx, file, ModelConfig::from_gguf(file), opts);
    const std::vector<int32_t> prompt = tok->encode("hello", true);
    GenerateParams p;
    p.n_predict = 4;
    std::string text;
    auto on_piece = [&](std::string_view piece) { text += piece; };
    // Greedy reads the device argmax; temperature and logprob-free sampling read the logits.
    for (float temperature : {0.0f, 0.7f}) {
        CAPTURE(temperature);
        p.sampler.temperature = temperature;
        CHECK_THROWS_WITH_AS(generate(gpu, *tok, prompt, p, on_piece), doctest::Contains("non-finite logits"),
                             NonFiniteError);
    }
    CHECK(text.empty());

    // The same shapes with finite weights generate normally: the check does not misfire.
    GgufFile good = GgufFile::from_memory(make_random_model(shape).write_memory(), "good.gguf");
    ModelGpu ok(ctx, good, ModelConfig::from_gguf(good), opts);
    p.sampler.temperature = 0;
    GenerateStats st = generate(ok, *tok, prompt, p, on_piece);
    CHECK(st.generated_tokens + (st.stopped_at_eos ? 1 : 0) >= 1);
}
