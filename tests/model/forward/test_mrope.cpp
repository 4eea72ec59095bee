// M-RoPE (Qwen2-VL's text model, arch qwen2vl): the positions of a sequence's rows (RopePositions)
// against their definition; the device forward pass against the host reference with text, an image's
// rows at its grid's positions and text after them, in one sequence and a decode batch of two whose
// positions are offset differently, through truncation into and before the image and a shared prefix;
// a split over two contexts hands the four positions on; the grid changes the logits (lost sections
// would not); bad grids and sections are refused by name.
#include "support/test_context.h"

#include "support/model_test_util.h"

#include "model/forward/model_cpu.h"
#include "model/forward/model_gpu.h"
#include "model/forward/rope_positions.h"
#include "model/gguf/gguf_writer.h"
#include "model/testgen/model_shape.h"
#include "model/testgen/random_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>

using namespace vkllm;

namespace {

using Pos = std::array<int32_t, 4>;

ModelShape mrope_shape() {
    ModelShape s;
    s.arch = "qwen2vl";
    s.dim = 128;
    s.ffn_dim = 256;
    s.n_heads = 4;
    s.n_kv_heads = 2;  // head_dim 32: 16 pairs as 4 + 6 + 6 + 0
    s.n_layers = 2;
    s.n_vocab = 300;
    s.n_ctx = 256;
    s.weight_type = TensorType::Q8_0;
    s.name = "mrope-qwen2vl";
    return s;
}

std::vector<int32_t> tokens(uint32_t n, uint32_t seed) {
    std::vector<int32_t> t(n);
    for (uint32_t i = 0; i < n; ++i) t[i] = int32_t(1 + (i * 37 + seed * 101 + 11) % 299);
    return t;
}

// Image-like rows: random, of the embeddings' scale.
std::vector<float> image_rows(uint32_t n, uint32_t dim, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 0.05f);
    std::vector<float> r(size_t(n) * dim);
    for (float& v : r) v = d(rng);
    return r;
}

ModelOptions options(uint32_t n_seq) {
    ModelOptions o;
    o.n_ctx = 128;
    o.ubatch = 8;  // a 4 x 3 image is two chunks
    o.n_seq = n_seq;
    return o;
}

std::vector<float> logits_row(const ModelGpu& m, uint32_t rows, uint32_t r) {
    std::vector<float> all(size_t(rows) * m.config().n_vocab);
    m.read_logits(rows, all.data());
    return {all.begin() + long(r) * m.config().n_vocab, all.begin() + long(r + 1) * m.config().n_vocab};
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
    double d = 0;
    for (size_t i = 0; i < a.size(); ++i) d = std::max(d, double(std::fabs(a[i] - b[i])));
    return d;
}

// Device and host differ by f32 summation order and the f16 cache's roundings, as the other model tests.
const test::Tolerance kTol{1e-6, 1e-2, 1e-2};

}  // namespace

TEST_CASE("mrope: a sequence's positions follow its images' grids, through truncation") {
    RopePositions p;
    CHECK(p.at(5) == Pos{5, 5, 5, 0});
    p.add_image(3, {3, 2});  // rows 3..8, at t = 3; the text after from 3 + max(3, 2) = 6
    CHECK(p.at(2) == Pos{2, 2, 2, 0});
    CHECK(p.at(3) == Pos{3, 3, 3, 0});
    CHECK(p.at(5) == Pos{3, 3, 5, 0});  // k = 2: y 0, x 2
    CHECK(p.at(6) == Pos{3, 4, 3, 0});  // k = 3: y 1, x 0
    CHECK(p.at(8) == Pos{3, 4, 5, 0});
    CHECK(p.at(9) == Pos{6, 6, 6, 0});
    CHECK(p.at(12) == Pos{9, 9, 9, 0});
    p.add_image(10, {1, 4});  // at t = 7, rows 10..13; after it 7 + 4 = 11 at row 14
    CHECK(p.at(13) == Pos{7, 10, 7, 0});
    CHECK(p.at(14) == Pos{11, 11, 11, 0});
    CHECK(p.images() == 2);
    RopePositions shared = p;
    shared.truncate(14);  // after the second image: nothing changes
    CHECK(shared.at(14) == Pos{11, 11, 11, 0});
    p.truncate(12);  // inside it: its first rows keep theirs, the text restarts from the offset before it
    CHECK(p.images() == 2);
    CHECK(p.at(11) == Pos{7, 8, 7, 0});
    CHECK(p.at(12) == Pos{9, 9, 9, 0});
    p.truncate(10);  // at its first row: forgotten
    CHECK(p.images() == 1);
    CHECK(p.at(10) == Pos{7, 7, 7, 0});
    p.truncate(4);  // inside the first
    CHECK(p.at(4) == Pos{4, 4, 4, 0});
    CHECK_THROWS_AS(p.add_image(3, {2, 2}), std::logic_error);  // inside the image kept
    p.clear();
    CHECK(p.at(7) == Pos{7, 7, 7, 0});
    CHECK_NOTHROW(check_image_grid({}, 5));
    CHECK_NOTHROW(check_image_grid({3, 2}, 6));
    VKLLM_CHECK_THROWS_WITH_SUBSTR(check_image_grid({3, 2}, 7), std::invalid_argument, "3 x 2");
    VKLLM_CHECK_THROWS_WITH_SUBSTR(check_image_grid({0, 2}, 0), std::invalid_argument, "0 x 2");
    VKLLM_CHECK_THROWS_WITH_SUBSTR(check_image_grid({65536, 65536}, 0), std::invalid_argument, "65536 x 65536");
}

TEST_CASE(
    "mrope: text, an image at its grid's positions and text match the host reference; batches, truncation, "
    "shared prefixes") {
    test::ValidationGuard guard;
    Context& ctx = test::float_path_context();
    const test::LoadedModel m = test::open_model(test::write_model("mrope-qwen2vl", mrope_shape()));
    REQUIRE(m.cfg.rope_sections == std::array<uint32_t, 4>{4, 6, 6, 0});
    REQUIRE(m.cfg.pos_width() == 4);
    const uint32_t dim = m.cfg.dim;
    ModelGpu gpu(ctx, m.file, m.cfg, options(2));
    ModelCpu cpu0(m.file, m.cfg, gpu.n_ctx(), ops::KvType::F16, 8);
    std::optional<ModelCpu> cpu1(cpu0);  // re-made as a copy of cpu0 for the shared prefix

    // Sequence 0: 7 tokens, a 4 x 3 image (12 rows, two chunks; the text after it from 7 + 4 = 11 at row 19), 5 tokens.
    const std::vector<int32_t> pre0 = tokens(7, 1), tail0 = tokens(5, 2);
    const std::vector<float> img0 = image_rows(12, dim, 3);
    gpu.eval(0, pre0);
    test::validate_result("text", gpu.logits(), cpu0.eval(pre0), kTol);
    gpu.eval_embeddings(0, img0, false, {4, 3});
    test::validate_result("image rows", gpu.logits(), cpu0.eval_embeddings(img0, false, {4, 3}), kTol);
    gpu.eval(0, tail0);
    test::validate_result("text after the image", gpu.logits(), cpu0.eval(tail0), kTol);
    // Sequence 1: 3 tokens, a 2 x 5 image (10 rows, its text from 3 + 5 = 8 at row 13), 4 tokens: an offset of
    // -5 where sequence 0 has -8.
    const std::vector<int32_t> pre1 = tokens(3, 4), tail1 = tokens(4, 5);
    const std::vector<float> img1 = image_rows(10, dim, 6);
    gpu.eval(1, pre1);
    cpu1->eval(pre1);
    gpu.eval_embeddings(1, img1, false, {2, 5});
    cpu1->eval_embeddings(img1, false, {2, 5});
    gpu.eval(1, tail1);
    test::validate_result("sequence 1 after its image", gpu.logits(), cpu1->eval(tail1), kTol);

    auto decode_both = [&](int32_t t0, int32_t t1, const char* what) {
        const std::array batch{SeqToken{0, t0}, SeqToken{1, t1}};
        gpu.decode(batch);
        INFO(what);
        test::validate_result("decode row 0", logits_row(gpu, 2, 0), cpu0.eval(std::array{t0}), kTol);
        test::validate_result("decode row 1", logits_row(gpu, 2, 1), cpu1->eval(std::array{t1}), kTol);
    };
    for (int32_t i = 0; i < 3; ++i) decode_both(10 + i, 20 + i, "a batch of two offsets");

    // Back into sequence 0's image (row 12: its first 5 rows kept), then before it (row 4), each continued.
    REQUIRE(gpu.truncate(0, 12));
    cpu0.truncate(12);
    gpu.eval(0, tail0);
    test::validate_result("text after a cut image", gpu.logits(), cpu0.eval(tail0), kTol);
    decode_both(30, 31, "after the cut");
    REQUIRE(gpu.truncate(0, 4));
    cpu0.truncate(4);
    gpu.eval(0, tail0);
    test::validate_result("text after a cut before the image", gpu.logits(), cpu0.eval(tail0), kTol);
    gpu.eval_embeddings(0, img0, false, {4, 3});
    cpu0.eval_embeddings(img0, false, {4, 3});
    decode_both(32, 33, "a second image after the cut");

    // Sequence 1 takes sequence 0's first rows: through its whole second image (21), then all but that image's
    // last row (20), and continues.
    REQUIRE(gpu.n_past(0) == 4 + 5 + 12 + 1);
    for (const uint32_t n : {21u, 20u}) {
        CAPTURE(n);
        REQUIRE(gpu.share_prefix(1, 0, n));
        cpu1.emplace(cpu0);
        cpu1->truncate(n);
        gpu.eval(1, tail1);
        test::validate_result("a shared prefix", gpu.logits(), cpu1->eval(tail1), kTol);
    }
    decode_both(40, 41, "after sharing");
}

TEST_CASE("mrope: the grid moves the positions: the logits after an image differ from sequential rows") {
    test::ValidationGuard guard;
    Context& ctx = test::float_path_context();
    const test::LoadedModel m = test::open_model(test::write_model("mrope-qwen2vl", mrope_shape()));
    const std::vector<int32_t> pre = tokens(5, 7), tail = tokens(4, 8);
    const std::vector<float> img = image_rows(12, m.cfg.dim, 9);
    auto run = [&](ImageGrid grid) {
        ModelGpu gpu(ctx, m.file, m.cfg, options(1));
        ModelCpu cpu(m.file, m.cfg, gpu.n_ctx(), ops::KvType::F16, 8);
        gpu.eval(0, pre);
        cpu.eval(pre);
        gpu.eval_embeddings(0, img, false, grid);
        cpu.eval_embeddings(img, false, grid);
        gpu.eval(0, tail);
        const std::vector<float> want = cpu.eval(tail);
        test::validate_result("text after the image", gpu.logits(), want, kTol);
        return std::pair{gpu.logits(), want};
    };
    const auto [grid_gpu, grid_cpu] = run({4, 3});
    const auto [seq_gpu, seq_cpu] = run({});
    const auto [other_gpu, other_cpu] = run({3, 4});  // the same rows on another grid
    // A lost section or grid (every pair at t, or the rows sequential) would leave these equal.
    CHECK(max_diff(grid_gpu, seq_gpu) > 1e-3);
    CHECK(max_diff(grid_cpu, seq_cpu) > 1e-3);
    CHECK(max_diff(grid_gpu, other_gpu) > 1e-3);
    CHECK(max_diff(grid_cpu, other_cpu) > 1e-3);

    // A model without M-RoPE ignores a grid (but checks it).
    ModelShape q = mrope_shape();
    q.arch = "qwen2";
    q.name = "mrope-qwen2";
    const test::LoadedModel plain = test::open_model(test::write_model("mrope-qwen2", q));
    CHECK(plain.cfg.pos_width() == 1);
    ModelGpu a(ctx, plain.file, plain.cfg, options(1)), b(ctx, plain.file, plain.cfg, options(1));
    for (ModelGpu* g : {&a, &b}) g->eval(0, pre);
    a.eval_embeddings(0, img, false, {4, 3});
    b.eval_embeddings(0, img, false, {});
    a.eval(0, tail);
    b.eval(0, tail);
    CHECK(max_diff(a.logits(), b.logits()) == 0);
    VKLLM_CHECK_THROWS_WITH_SUBSTR(a.eval_embeddings(0, img, false, {5, 3}), std::invalid_argument, "5 x 3");
    ModelGpu g(ctx, m.file, m.cfg, options(1));
    VKLLM_CHECK_THROWS_WITH_SUBSTR(g.eval_embeddings(0, img, false, {2, 3}), std::invalid_argument, "2 x 3");
    CHECK(g.n_past(0) == 0);
}

TEST_CASE("mrope: a split over two contexts hands the four positions on: the unsplit model's logits bit for bit") {
    test::ValidationGuard guard;
    Context& a = test::float_path_context();
    // Another VkDevice on the same physical device: the hand-off goes through the host as between devices.
    auto b = test::make_context(a.caps().int_dot_kernels ? CapsOverride::parse("no-int-dot") : CapsOverride{});
    const test::LoadedModel m = test::open_model(test::write_model("mrope-qwen2vl", mrope_shape()));
    ModelGpu one(a, m.file, m.cfg, options(2));
    const std::vector<ModelStage> stages{{&a, {0, 1}}, {b.get(), {1, 1}}};
    ModelGpu split(stages, m.file, m.cfg, options(2));
    const std::vector<int32_t> pre = tokens(6, 10), tail = tokens(3, 11);
    const std::vector<float> img = image_rows(12, m.cfg.dim, 12);
    for (ModelGpu* g : {&one, &split}) {
        g->eval(0, pre);
        g->eval_embeddings(0, img, false, {3, 4});
        g->eval(0, tail);
    }
    CHECK(same_bits(split.logits(), one.logits()));
    for (ModelGpu* g : {&one, &split}) g->eval(1, tail);
    for (int32_t i = 0; i < 2; ++i) {
        const std::array batch{SeqToken{0, 50 + i}, SeqToken{1, 60 + i}};
        one.decode(batch);
        split.decode(batch);
        for (uint32_t r = 0; r < 2; ++r) CHECK(same_bits(logits_row(split, 2, r), logits_row(one, 2, r)));
    }
}

TEST_CASE("mrope: rope.dimension_sections is required and must fit the head") {
    auto with = [](const char* name, auto edit) {
        GgufWriter w = make_random_model(mrope_shape());
        edit(w);
        return GgufFile::from_memory(w.write_memory(), name);
    };
    const std::string key = "qwen2vl.rope.dimension_sections";
    GgufFile missing = with("mrope-missing", [&](GgufWriter& w) { w.remove(key); });
    VKLLM_CHECK_THROWS_WITH_SUBSTR(ModelConfig::from_gguf(missing), ModelConfigError,
                                   "key 'qwen2vl.rope.dimension_sections': required for this architecture");
    GgufFile wide = with("mrope-wide", [&](GgufWriter& w) {
        w.set_i32_array(key, std::array<int32_t, 4>{4, 6, 7, 0});
    });
    VKLLM_CHECK_THROWS_WITH_SUBSTR(ModelConfig::from_gguf(wide), ModelConfigError, "sum to 17 pairs; expected 1 to 16");
    GgufFile three = with("mrope-three", [&](GgufWriter& w) { w.set_i32_array(key, std::array<int32_t, 3>{4, 6, 6}); });
    VKLLM_CHECK_THROWS_WITH_SUBSTR(ModelConfig::from_gguf(three), ModelConfigError, "has 3 elements, expected 4");
    GgufFile neg = with("mrope-neg", [&](GgufWriter& w) { w.set_i32_array(key, std::array<int32_t, 4>{4, -6, 6, 0}); });
    VKLLM_CHECK_THROWS_WITH_SUBSTR(ModelConfig::from_gguf(neg), ModelConfigError, "element 1 is negative");
}
