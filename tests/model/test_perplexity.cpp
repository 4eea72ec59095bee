// Perplexity and KL divergence: against the numbers llama.cpp's llama-perplexity printed for the
// same text (committed in tests/fixtures/perplexity/README.md: the peer is not needed here),
// against the host reference forward pass, through llama.cpp's own base file, and on bad input.
#include "support/test_context.h"

#include "model/testgen/random_model.h"
#include "model/forward/model_cpu.h"
#include "model/perplexity.h"
#include "runtime/vk_check.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <set>

using namespace vkllm;
namespace fs = std::filesystem;

namespace {

// The fixtures sit beside this source file (CMake compiles it by its absolute path).
fs::path fixture(const std::string& name) { return test::fixtures_dir() / "perplexity" / name; }

fs::path scratch(const std::string& name) {
    fs::path dir = ::vkllm::test::binary_dir() / "test-tmp" / "perplexity";
    fs::create_directories(dir);
    return dir / name;
}

struct Model {
    GgufFile file;
    ModelConfig cfg;
    std::unique_ptr<Tokenizer> tok;
};

Model open_model(const std::string& path) {
    GgufFile f = GgufFile::open(path);
    ModelConfig cfg = ModelConfig::from_gguf(f);
    auto tok = make_tokenizer(f);
    return {std::move(f), cfg, std::move(tok)};
}

ModelOptions ppl_options(uint32_t n_ctx, uint32_t ubatch) {
    ModelOptions o;
    o.n_ctx = n_ctx;
    o.ubatch = ubatch;
    o.all_logits = true;
    return o;
}

std::vector<int32_t> fixture_tokens(const Tokenizer& tok) {
    return perplexity_tokens(tok, read_perplexity_text(fixture("stories.txt").string()));
}

// The host reference forward pass, one token at a time from an empty cache.
ChunkEvaluator host_evaluator(ModelCpu& cpu, uint32_t n_vocab) {
    return {n_vocab, [&cpu](std::span<const int32_t> chunk, const ModelGpu::LogitsSink& sink) {
                cpu.reset();
                for (uint32_t i = 0; i < chunk.size(); ++i) sink(i, cpu.eval(chunk.subspan(i, 1)));
            }};
}

std::string random_model(const std::string& name, TensorType type, uint32_t n_vocab = 512) {
    ModelShape s;
    s.dim = 128;
    s.n_layers = 2;
    s.n_heads = 4;
    s.n_kv_heads = 2;
    s.ffn_dim = 384;
    s.n_vocab = n_vocab;
    s.n_ctx = 512;
    s.weight_type = type;
    s.seed = 11;
    fs::path p = scratch(name + ".gguf");
    write_random_model(p.string(), s);
    return p.string();
}

void check_close(double got, double expected, double rel, const char* what) {
    INFO(what << ": got " << got << ", expected " << expected);
    CHECK(std::abs(got / expected - 1) <= rel);
}

}  // namespace

TEST_CASE("perplexity: stories260K matches llama-perplexity within 0.5%") {
    std::string path = test::model_path("stories260K.gguf");
    if (path.empty()) return;
    test::ValidationGuard guard;
    Model m = open_model(path);
    const std::vector<int32_t> tokens = fixture_tokens(*m.tok);
    CHECK(tokens.size() == 7959);  // llama-perplexity: 62 chunks of 128, 31 of 256
    CHECK(tokens[0] == m.tok->bos_id());
    struct Case {
        uint32_t n_ctx, ubatch;
        int32_t chunks;
        double ppl, uncertainty;  // llama-perplexity's, from tests/fixtures/perplexity/README.md
    };
    const Case cases[] = {
        {128, 128, 2, 4.2989, 0.74019},  // its Final estimate for --chunks 2 (with -b 128)
        {128, 48, 8, 3.9123, 0},         // [8] of the full -c 128 run; 48: three ubatches per chunk
        {256, 256, 4, 3.6813, 0},        // [4] of the full -c 256 run
    };
    for (const Case& c : cases) {
        CAPTURE(c.n_ctx);
        CAPTURE(c.ubatch);
        ModelGpu gpu(test::context(), m.file, m.cfg, ppl_options(c.n_ctx, c.ubatch));
        PerplexityOptions po{c.n_ctx, c.chunks, chunk_bos(*m.tok)};
        std::vector<double> running;
        PerplexityResult r = compute_perplexity(device_evaluator(gpu), tokens, po,
                                                [&](const ChunkProgress& p) { running.push_back(p.ppl); });
        CHECK(r.n_chunks == uint32_t(c.chunks));
        CHECK(r.nll.count == uint64_t(c.chunks) * (c.n_ctx - 1 - c.n_ctx / 2));
        CHECK(running.size() == size_t(c.chunks));
        CHECK(running.back() == doctest::Approx(r.nll.ppl()));
        check_close(r.nll.ppl(), c.ppl, 0.005, "PPL");
        if (c.uncertainty > 0) check_close(r.nll.ppl_uncertainty(), c.uncertainty, 0.005, "PPL uncertainty");
        MESSAGE("-c " << c.n_ctx << " --chunks " << c.chunks << ": vkllm " << r.nll.ppl() << " +/- "
                      << r.nll.ppl_uncertainty() << ", llama-perplexity " << c.ppl);
    }
}

TEST_CASE("perplexity: a random F16 model (as `vkllm gen-model` writes it) matches llama-perplexity within 0.5%") {
    test::ValidationGuard guard;
    // `vkllm gen-model -o r16.gguf --dim 256 --layers 2 --heads 4 --kv-heads 2 --ffn 768 --vocab 512 --type f16`
    ModelShape s;
    s.dim = 256;
    s.n_layers = 2;
    s.n_heads = 4;
    s.n_kv_heads = 2;
    s.ffn_dim = 768;
    s.n_vocab = 512;
    s.n_ctx = 2048;
    s.weight_type = TensorType::F16;
    s.seed = 1;
    const fs::path path = scratch("r16.gguf");
    write_random_model(path.string(), s);
    Model m = open_model(path.string());
    const std::vector<int32_t> tokens = fixture_tokens(*m.tok);
    CHECK(tokens.size() == 11472);  // llama-perplexity: 89 chunks of 128
    ModelGpu gpu(test::context(), m.file, m.cfg, ppl_options(128, 128));
    PerplexityResult r = compute_perplexity(device_evaluator(gpu), tokens, {128, 4, chunk_bos(*m.tok)});
    check_close(r.nll.ppl(), 771.6189, 0.005, "PPL ([4] of llama-perplexity -c 128)");
    MESSAGE("r16 -c 128 --chunks 4: vkllm " << r.nll.ppl() << ", llama-perplexity 771.6189");
}

TEST_CASE("perplexity: files quantized by llama-quantize (K-quants, IQ4, Q4/Q5/Q8, BF16) match llama-perplexity") {
    // tests/fixtures/perplexity/quant: one F16 random model (README there), quantized by llama.cpp
    // to the Q4_K_M, Q3_K_M and Q2_K mixes and to two mixes made with --tensor-type so that every
    // type occurs in a matrix multiply; values: llama-perplexity -c 128 -b 128 --chunks 8.
    struct Case {
        const char* file;
        double ppl;
    };
    const Case cases[] = {{"mix_k.gguf", 592.1392},  {"mix_legacy.gguf", 569.8308}, {"Q4_K_M.gguf", 591.7311},
                          {"Q3_K_M.gguf", 542.4174}, {"Q2_K.gguf", 590.2220}};
    std::set<TensorType> types;
    for (const Case& c : cases) {
        CAPTURE(c.file);
        test::ValidationGuard guard;
        Model m = open_model(fixture(std::string("quant/") + c.file).string());
        for (const GgufTensorInfo& t : m.file.tensors()) types.insert(t.type);
        const std::vector<int32_t> tokens = fixture_tokens(*m.tok);
        // 128: one matmul per chunk and layer; 7: the matvec path (m = 7, then a remainder of 2).
        for (uint32_t ubatch : {128u, 7u}) {
            CAPTURE(ubatch);
            ModelGpu gpu(test::context(), m.file, m.cfg, ppl_options(128, ubatch));
            PerplexityResult r = compute_perplexity(device_evaluator(gpu), tokens, {128, 8, chunk_bos(*m.tok)});
            check_close(r.nll.ppl(), c.ppl, 0.005, "PPL");
            MESSAGE(std::string(c.file) << " --ubatch " << ubatch << ": vkllm " << r.nll.ppl() << ", llama-perplexity " << c.ppl);
        }
    }
    for (TensorType t : {TensorType::Q2_K, TensorType::Q3_K, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K,
                         TensorType::IQ4_NL, TensorType::IQ4_XS, TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0,
                         TensorType::Q5_1, TensorType::Q8_0, TensorType::BF16}) {
        CAPTURE(type_traits(t).name);
        CHECK(types.count(t) == 1);
    }
}

TEST_CASE("perplexity: the device agrees with the host reference forward pass") {
    std::vector<std::string> paths = {test::model_path("stories260K.gguf"), random_model("ppl_f16", TensorType::F16)};
    for (const std::string& path : paths) {
        if (path.empty()) continue;
        CAPTURE(path);
        test::ValidationGuard guard;
        Model m = open_model(path);
        const std::vector<int32_t> tokens = fixture_tokens(*m.tok);
        PerplexityOptions po{64, 2, chunk_bos(*m.tok)};
        ModelGpu gpu(test::context(), m.file, m.cfg, ppl_options(64, 24));  // 24 + 24 + 16 per chunk
        ModelCpu cpu(m.file, m.cfg, 64, ops::KvType::F16, 24);
        PerplexityResult dev = compute_perplexity(device_evaluator(gpu), tokens, po);
        PerplexityResult host = compute_perplexity(host_evaluator(cpu, m.cfg.n_vocab), tokens, po);
        CHECK(dev.nll.count == host.nll.count);
        // stories260K's logits differ by up to 5e-7 NMSE between host and device (f16 KV values
        // that round one ulp apart; see test_forward), which moves its PPL by ~7e-5.
        check_close(dev.nll.ppl(), host.nll.ppl(), 5e-4, "device vs host PPL");
        check_close(dev.nll.sum2, host.nll.sum2, 5e-4, "sum of nll^2");
        MESSAGE(path << ": device " << dev.nll.ppl() << ", host " << host.nll.ppl());
    }
}

TEST_CASE("perplexity: all-logits mode is opt-in, sized by ubatch and vocab, and checked against the binding limit") {
    std::string path = test::model_path("stories260K.gguf");
    if (path.empty()) return;
    test::ValidationGuard guard;
    Model m = open_model(path);
    const DeviceCaps& caps = test::context().caps();
    ModelOptions plain;
    plain.n_ctx = 64;
    plain.ubatch = 32;
    const MemoryPlan p0 = plan_memory(caps, m.file, m.cfg, plain);
    CHECK(p0.all_logits == 0);
    const MemoryPlan p1 = plan_memory(caps, m.file, m.cfg, ppl_options(64, 32));
    CHECK(p1.all_logits == 32ull * m.cfg.n_vocab * 4);
    CHECK(p1.scratch == p0.scratch + p1.all_logits);

    DeviceCaps small = caps;
    small.max_storage_buffer_range = 16 * m.cfg.n_vocab * 4;  // 16 rows of logits per binding
    CHECK_THROWS_WITH_AS(plan_memory(small, m.file, m.cfg, ppl_options(64, 32)),
                         doctest::Contains("at most --ubatch 16"), DeviceLimitError);

    ModelGpu gen(test::context(), m.file, m.cfg, plain);
    std::vector<int32_t> toks = {1, 403, 407, 261};
    CHECK_THROWS_AS(gen.eval_all_logits(toks, [](uint32_t, std::span<const float>) {}), std::logic_error);

    // The rows and the last-token logits agree: the last row is what logits() and argmax() see.
    ModelGpu gpu(test::context(), m.file, m.cfg, ppl_options(64, 3));
    std::vector<float> last;
    uint32_t rows = 0;
    gpu.eval_all_logits(toks, [&](uint32_t first, std::span<const float> r) {
        CHECK(first == rows);
        rows += uint32_t(r.size() / m.cfg.n_vocab);
        last.assign(r.end() - m.cfg.n_vocab, r.end());
    });
    CHECK(rows == toks.size());
    CHECK(gpu.logits() == last);
    CHECK(gpu.argmax() == int32_t(std::max_element(last.begin(), last.end()) - last.begin()));
}

TEST_CASE("kl-divergence: a model against itself, and against llama.cpp's base file") {
    std::string path = test::model_path("stories260K.gguf");
    if (path.empty()) return;
    test::ValidationGuard guard;
    Model m = open_model(path);
    const std::vector<int32_t> tokens = fixture_tokens(*m.tok);
    ModelGpu gpu(test::context(), m.file, m.cfg, ppl_options(128, 128));
    ChunkEvaluator dev = device_evaluator(gpu);

    // vkllm's own base file, read back by the same model.
    PerplexityOptions po{128, 2, chunk_bos(*m.tok)};
    const std::string base_path = scratch("self.kld").string();
    PerplexityResult ppl;
    {
        KlBaseWriter w(base_path, kl_base_header(m.cfg.n_vocab, tokens.size(), po),
                       std::span(tokens).first(2 * 128));
        ppl = compute_perplexity(dev, tokens, po, {}, &w);
    }
    CHECK(!fs::exists(base_path + ".tmp"));
    // llama.cpp's file, written by `llama-perplexity --kl-divergence-base` for the same run: the
    // same layout, the same tokens (so the tokenizers agree on the whole text).
    const fs::path llama_base = fixture("stories260K_c128_llamacpp.kld");
    CHECK(fs::file_size(base_path) == fs::file_size(llama_base));
    for (const std::string& p : {base_path, llama_base.string()}) {
        CAPTURE(p);
        KlBaseReader base(p);
        CHECK(base.header().n_ctx == 128);
        CHECK(base.header().n_chunks == 2);
        CHECK(base.tokens() == std::vector<int32_t>(tokens.begin(), tokens.begin() + 256));
        KlResult kl = compute_kl_divergence(dev, base, -1, chunk_bos(*m.tok));
        CHECK(kl.count() == ppl.nll.count);
        CHECK(kl.same_top == kl.count());  // 100% top-1 agreement
        CHECK(std::abs(kl.kld().first) < 1e-4);
        check_close(kl.nll.ppl(), ppl.nll.ppl(), 1e-9, "PPL(Q) = the perplexity run's");
        check_close(kl.nll_base.ppl(), ppl.nll.ppl(), 1e-4, "PPL(base) from the stored log-probs");
        check_close(kl.nll_base.ppl(), 4.298940, 0.005, "llama.cpp's Mean PPL(base)");
        MESSAGE(p << ": KLD " << kl.kld().first << ", PPL " << kl.nll.ppl() << " vs base " << kl.nll_base.ppl());
    }
}

TEST_CASE("kl-divergence: Q8_0 against F16 of the same random weights is small and positive") {
    test::ValidationGuard guard;
    Model f16 = open_model(random_model("kl_f16", TensorType::F16));
    Model q8 = open_model(random_model("kl_q8_0", TensorType::Q8_0));
    const std::vector<int32_t> tokens = fixture_tokens(*f16.tok);
    PerplexityOptions po{64, 3, chunk_bos(*f16.tok)};
    const std::string base_path = scratch("f16.kld").string();
    PerplexityResult base_ppl;
    {
        ModelGpu gpu(test::context(), f16.file, f16.cfg, ppl_options(64, 64));
        KlBaseWriter w(base_path, kl_base_header(f16.cfg.n_vocab, tokens.size(), po), std::span(tokens).first(3 * 64));
        base_ppl = compute_perplexity(device_evaluator(gpu), tokens, po, {}, &w);
    }
    ModelGpu gpu(test::context(), q8.file, q8.cfg, ppl_options(64, 64));
    KlBaseReader base(base_path);
    KlResult kl = compute_kl_divergence(device_evaluator(gpu), base, -1, chunk_bos(*q8.tok));
    const double kld = kl.kld().first;
    MESSAGE("Q8_0 vs F16: KLD " << kld << " +/- " << kl.kld().second << ", same top " << kl.same_top_p().first
                                << ", PPL " << kl.nll.ppl() << " vs " << kl.nll_base.ppl());
    CHECK(kld > 1e-6);
    CHECK(kld < 1e-2);
    CHECK(kl.same_top_p().first > 0.8);
    check_close(kl.nll_base.ppl(), base_ppl.nll.ppl(), 1e-4, "PPL(base)");
    check_close(kl.nll.ppl(), base_ppl.nll.ppl(), 0.02, "PPL(Q8_0) near PPL(F16)");
}

TEST_CASE("perplexity: bad input is refused with a message naming the problem") {
    std::string path = test::model_path("stories260K.gguf");
    if (path.empty()) return;
    test::ValidationGuard guard;
    Model m = open_model(path);

    // Texts and files.
    const std::vector<int32_t> short_tokens = perplexity_tokens(*m.tok, "Once upon a time");
    CHECK_THROWS_WITH_AS(kl_base_header(m.cfg.n_vocab, short_tokens.size(), {64}),
                         doctest::Contains(fmt::format("tokenizes to only {} tokens", short_tokens.size()).c_str()),
                         PerplexityError);
    CHECK_THROWS_WITH_AS(kl_base_header(m.cfg.n_vocab, short_tokens.size(), {64}), doctest::Contains("2 x 64 = 128"),
                         PerplexityError);
    CHECK_THROWS_WITH_AS(kl_base_header(m.cfg.n_vocab, 1000, {2}), doctest::Contains("at least 4"), PerplexityError);
    CHECK_THROWS_WITH_AS(perplexity_tokens(*m.tok, ""), doctest::Contains("empty"), PerplexityError);
    CHECK_THROWS_WITH_AS(read_perplexity_text("/nonexistent/text.txt"), doctest::Contains("does not exist"),
                         PerplexityError);
    CHECK_THROWS_WITH_AS(read_perplexity_text(scratch("").string()), doctest::Contains("not a regular file"),
                         PerplexityError);
    std::ofstream(scratch("newline.txt")) << "\n";
    CHECK_THROWS_WITH_AS(read_perplexity_text(scratch("newline.txt").string()), doctest::Contains("is empty"),
                         PerplexityError);
    std::ofstream(scratch("two.txt")) << "ab\n\n";
    CHECK(read_perplexity_text(scratch("two.txt").string()) == "ab\n");  // one newline dropped, as llama.cpp

    // Chunks larger than the model's context.
    ModelGpu gpu(test::context(), m.file, m.cfg, ppl_options(64, 64));
    const std::vector<int32_t> tokens = fixture_tokens(*m.tok);
    PerplexityOptions big{128, 2, chunk_bos(*m.tok)};
    CHECK_THROWS_WITH_AS(compute_perplexity(device_evaluator(gpu), tokens, big), doctest::Contains("do not fit"),
                         PerplexityError);

    // Base files: missing, foreign, truncated, another vocabulary.
    CHECK_THROWS_WITH_AS(KlBaseReader("/nonexistent/base.kld"), doctest::Contains("does not exist"), KlBaseError);
    std::ofstream(scratch("garbage.kld")) << "this is not a base file, only some text of some length";
    CHECK_THROWS_WITH_AS(KlBaseReader(scratch("garbage.kld").string()), doctest::Contains("_logits_"), KlBaseError);
    {
        std::ifstream in(fixture("stories260K_c128_llamacpp.kld"), std::ios::binary);
        std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        std::ofstream(scratch("truncated.kld"), std::ios::binary) << bytes.substr(0, bytes.size() - 100);
    }
    CHECK_THROWS_WITH_AS(KlBaseReader(scratch("truncated.kld").string()), doctest::Contains("truncated"), KlBaseError);
    Model other = open_model(random_model("kl_vocab1024", TensorType::F16, 1024));
    ModelGpu other_gpu(test::context(), other.file, other.cfg, ppl_options(128, 128));
    KlBaseReader base(fixture("stories260K_c128_llamacpp.kld").string());
    CHECK_THROWS_WITH_AS(compute_kl_divergence(device_evaluator(other_gpu), base, -1, chunk_bos(*other.tok)),
                         doctest::Contains("vocab of 512 tokens, but this model's has 1024"), KlBaseError);

    // The writer refuses an unwritable path and leaves nothing behind when a run fails.
    const std::vector<int32_t> some(256, 5);
    CHECK_THROWS_WITH_AS(KlBaseWriter("/nonexistent/dir/base.kld", {128, 512, 2}, some),
                         doctest::Contains("cannot write"), KlBaseError);
    const std::string unfinished = scratch("unfinished.kld").string();
    { KlBaseWriter w(unfinished, {128, 512, 2}, some); }
    CHECK(!fs::exists(unfinished));
    CHECK(!fs::exists(unfinished + ".tmp"));
}

TEST_CASE("perplexity: llama.cpp's uncertainty formula") {
    NllStats s;
    for (double v : {1.0, 2.0, 3.0, 4.0}) s.add(v);
    const double mean = 2.5, var = (1 + 4 + 9 + 16) / 4.0 - mean * mean;  // 1.25
    CHECK(s.ppl() == doctest::Approx(std::exp(mean)));
    CHECK(s.ppl_uncertainty() == doctest::Approx(std::exp(mean) * std::sqrt(var / 3)));
    std::vector<float> logits = {0.0f, 1.0f, 2.0f};
    const double lse = std::log(1 + std::exp(1.0) + std::exp(2.0));
    CHECK(token_nll(logits, 0) == doctest::Approx(lse));
    CHECK(token_nll(logits, 2) == doctest::Approx(lse - 2));
}

TEST_CASE("perplexity: stories260K on the cooperative-matrix matmuls (--caps coopmat) matches llama-perplexity within 0.5%") {
    // Every prompt chunk's projections on the matrix units (X and the weights rounded to half).
    std::string path = test::model_path("stories260K.gguf");
    if (path.empty()) return;
    Context* ctx = test::coopmat_context();
    if (!ctx) return;
    test::ValidationGuard guard;
    Model m = open_model(path);
    const std::vector<int32_t> tokens = fixture_tokens(*m.tok);
    for (const auto& [n_ctx, chunks, ppl] : {std::tuple{128u, 2, 4.2989}, std::tuple{256u, 4, 3.6813}}) {
        CAPTURE(n_ctx);
        ModelGpu gpu(*ctx, m.file, m.cfg, ppl_options(n_ctx, n_ctx));
        PerplexityOptions po{n_ctx, chunks, chunk_bos(*m.tok)};
        const PerplexityResult r = compute_perplexity(device_evaluator(gpu), tokens, po, {});
        check_close(r.nll.ppl(), ppl, 0.005, "PPL");
        MESSAGE("--caps coopmat -c " << n_ctx << " --chunks " << chunks << ": vkllm " << r.nll.ppl()
                                     << ", llama-perplexity " << ppl);
    }
}
