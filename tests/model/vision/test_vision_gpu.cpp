// The device vision encoder (model/vision/vision_gpu.h) against the host reference (vision_cpu.h,
// itself checked against llama.cpp's libmtmd in test_vision_cpu.cpp): every projector type of the
// table, random tiles, one tile and a batch of several (packed rows, per-tile attention), F16 and
// Q8_0 weights, a ViT wider than the text model; Qwen2-VL's and Qwen2.5-VL's tiles of any shape, with
// windows that do not divide them; the pipelines the plan lists are all it records. The device row
// layout (vision_layout.h) from its definition.
#include "support/test_context.h"

#include "model/mmproj/mmproj_config.h"
#include "model/testgen/random_mmproj.h"
#include "model/vision/vision_cpu.h"
#include "model/vision/vision_gpu.h"
#include "model/vision/vision_layout.h"
#include "model/vision/vision_stages.h"
#include "runtime/vk_check.h"
#include "support/model_test_util.h"
#include "support/vision_fixtures.h"

#include <fmt/format.h>

#include <random>
#include <set>

using namespace vkllm;

namespace {

GgufFile random_mmproj(ProjectorType type, TensorType wtype, uint32_t dim, uint64_t seed, uint32_t patch = 0,
                       uint32_t image = 0) {
    MmprojShape s;
    s.patch_size = patch;
    s.image_size = image;
    s.type = type;
    s.text_dim = 96;
    s.dim = dim;
    s.ffn = 2 * dim;
    s.weight_type = wtype;
    s.seed = seed;
    return GgufFile::from_memory(make_random_mmproj(s).write_memory(), "random-mmproj");
}

ImageTile random_tile(uint32_t nx, uint32_t ny, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(-2.0f, 2.0f);
    ImageTile t;
    t.nx = nx;
    t.ny = ny;
    t.chw.resize(size_t(3) * nx * ny);
    for (float& v : t.chw) v = d(rng);
    return t;
}
ImageTile random_tile(uint32_t n, uint32_t seed) { return random_tile(n, n, seed); }

// Device and host differ by f32 summation order and (F16 patch kernels) the half rounding of the
// unfolded pixels the device applies as ggml does; a wrong stage is ~1e-1.
constexpr test::Tolerance kTol{1e-5, 2e-2, 2e-2};

}  // namespace

TEST_CASE("vision encoder on the device matches the host reference: every projector type, one tile and a batch") {
    test::ValidationGuard guard;
    // lavapipe itself takes the attention as matmuls (vision_attention.h), the GPU-tuned variant the
    // flash kernel: both forms against the reference.
    std::set<bool> forms;
    for (const char* spec : {"", "no-storage16,no-storage8,no-int8,gpu-tuning"}) {
    CAPTURE(spec);
    Context& ctx = test::context_for(spec);
    forms.insert(vit_attention_by_matmuls(ctx.caps()));
    for (const ProjectorDesc& d : projector_table())
        for (TensorType wt : {TensorType::F16, TensorType::Q8_0})
            for (uint32_t dim : {64u, 128u}) {
                CAPTURE(d.name);
                CAPTURE(type_traits(wt).name);
                CAPTURE(dim);
                const GgufFile f = random_mmproj(d.type, wt, dim, 7 + dim);
                const VisionConfig cfg = VisionConfig::from_gguf(f);
                VisionGpu gpu(ctx, f, cfg);
                std::vector<ImageTile> tiles;
                for (uint32_t i = 0; i < 3; ++i) tiles.push_back(random_tile(cfg.image_size, 100 * dim + i));
                const std::vector<std::vector<float>> one = gpu.encode(std::span(tiles).first(1));
                const std::vector<std::vector<float>> three = gpu.encode(tiles);
                REQUIRE(one.size() == 1);
                REQUIRE(three.size() == 3);
                for (size_t i = 0; i < tiles.size(); ++i) {
                    const std::vector<float> want = encode_tile_cpu(cfg, f, tiles[i]);
                    REQUIRE(three[i].size() == size_t(tile_tokens(cfg, cfg.image_size, cfg.image_size)) * cfg.text_dim);
                    test::validate_result(fmt::format("{} tile {} of 3", d.name, i), three[i], want, kTol);
                }
                // A tile alone and in a batch: the same rows (each sees only itself).
                test::validate_result("tile 0 alone", one[0], three[0], {1e-10, 1e-4, 1e-4});
                const VisionPlan plan = gpu.plan(3, cfg.image_size, cfg.image_size);
                CHECK(plan.attn_mm.on == vit_attention_by_matmuls(ctx.caps()));
                for (uint32_t l = 0; l < plan.layers.size(); ++l)
                    CHECK(plan.layers[l].attn_matmuls == (plan.attn_mm.on && !plan.layers[l].windowed));
            }
    }
    CHECK(forms.size() == 2);
}

TEST_CASE("vision encoder: Qwen2-VL and Qwen2.5-VL on tiles of any shape, windows that do not divide them") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    // 14-pixel patches as the real files have: 28-pixel blocks, windows of 4 x 4 blocks. A 140 x 168 tile
    // is 5 x 6 blocks: 2 x 2 windows, the last column and row of them partial; 84 x 56 is 3 x 2 blocks,
    // one partial window.
    for (ProjectorType type : {ProjectorType::Qwen2Vl, ProjectorType::Qwen25Vl})
        for (TensorType wt : {TensorType::F16, TensorType::Q8_0}) {
            const GgufFile f = random_mmproj(type, wt, 64, 11, 14, 56);
            const VisionConfig cfg = VisionConfig::from_gguf(f);
            CAPTURE(cfg.desc->name);
            CAPTURE(type_traits(wt).name);
            VisionGpu gpu(ctx, f, cfg);
            std::vector<ImageTile> tiles;
            for (uint32_t i = 0; i < 3; ++i) tiles.push_back(random_tile(140, 168, 50 + i));
            tiles.push_back(random_tile(84, 56, 60));
            const std::vector<std::vector<float>> one = gpu.encode(std::span(tiles).first(1));
            const std::vector<std::vector<float>> all = gpu.encode(tiles);  // a batch of 3, then 1
            REQUIRE(all.size() == 4);
            for (size_t i = 0; i < tiles.size(); ++i) {
                const std::vector<float> want = encode_tile_cpu(cfg, f, tiles[i]);
                REQUIRE(all[i].size() == size_t(tile_tokens(cfg, tiles[i].nx, tiles[i].ny)) * cfg.text_dim);
                test::validate_result(fmt::format("{} tile {}", cfg.desc->name, i), all[i], want, kTol);
            }
            test::validate_result("tile 0 alone", one[0], all[0], {1e-10, 1e-4, 1e-4});
        }
}

TEST_CASE("vision encoder: Qwen2-VL and Qwen2.5-VL on the device match llama.cpp's libmtmd") {
    // The fixtures of test_vision_cpu.cpp: Qwen2.5-VL's 128 x 64 image is 8 x 4 blocks, two 112-pixel
    // windows of 7 and 1 blocks, so the window order and the way back are libmtmd's.
    test::ValidationGuard guard;
    Context& ctx = test::context();
    for (ProjectorType type : {ProjectorType::Qwen2Vl, ProjectorType::Qwen25Vl}) {
        const GgufFile f = test::fixture_mmproj(type);
        const VisionConfig cfg = VisionConfig::from_gguf(f);
        const uint32_t nx = type == ProjectorType::Qwen2Vl ? 64 : 128, ny = nx / 2;
        VisionGpu gpu(ctx, f, cfg);
        for (const std::string image : {"ramp", "hash"}) {
            CAPTURE(cfg.desc->name);
            CAPTURE(image);
            const std::vector<ImageTile> tile{
                test::normalized(test::test_image(image, nx, ny), nx, ny, preprocess_spec(cfg))};
            const std::vector<float> got = gpu.encode(tile).at(0);
            const std::vector<float> want =
                test::read_f32_file(fmt::format("{}{}-{}.image0.f32", test::kFixtures, cfg.desc->name, image));
            REQUIRE(got.size() == want.size());
            const test::Diff d = test::compare(got, want);
            INFO("nmse ", d.nmse, " max abs ", d.max_abs);
            CHECK(d.finite);
            CHECK(d.nmse < test::kMaxNmse);
            CHECK(d.max_abs < test::kMaxAbs);
        }
    }
}

TEST_CASE("vision encoder: the feed-forward's activation as the file says, refused where no op runs it") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    auto file = [](ProjectorType type, bool gelu, bool silu) {
        MmprojShape s;
        s.type = type;
        s.text_dim = 96;
        GgufWriter w = make_random_mmproj(s);
        w.set_bool("clip.use_gelu", gelu);
        w.set_bool("clip.use_silu", silu);
        return GgufFile::from_memory(w.write_memory(), "random-mmproj");
    };
    // Qwen2.5-VL's gated feed-forward with tanh GELU (GeGLU) runs and matches the reference.
    const GgufFile geglu = file(ProjectorType::Qwen25Vl, true, false);
    const VisionConfig cfg = VisionConfig::from_gguf(geglu);
    REQUIRE(cfg.activation == VisionActivation::Gelu);
    VisionGpu gpu(ctx, geglu, cfg);
    const std::vector<ImageTile> tiles{random_tile(48, 32, 7)};
    test::validate_result("geglu", gpu.encode(tiles).at(0), encode_tile_cpu(cfg, geglu, tiles[0]), kTol);
    // Gated quick GELU and a plain SiLU feed-forward have no device op.
    const GgufFile quick = file(ProjectorType::Qwen25Vl, false, false), silu = file(ProjectorType::Mlp, false, true);
    CHECK_THROWS_WITH_AS(VisionGpu(ctx, quick, VisionConfig::from_gguf(quick)),
                         doctest::Contains("gated quick-GELU"), MmprojError);
    CHECK_THROWS_WITH_AS(VisionGpu(ctx, silu, VisionConfig::from_gguf(silu)), doctest::Contains("SiLU vision encoder"),
                         MmprojError);
}

TEST_CASE("vision layout: Qwen2.5-VL's rows in window order, from the definition") {
    const GgufFile f = random_mmproj(ProjectorType::Qwen25Vl, TensorType::F16, 64, 1, 14, 56);
    const VisionConfig cfg = VisionConfig::from_gguf(f);
    REQUIRE(uses_windows(cfg));
    // 5 x 3 blocks of 2 x 2 patches (10 x 6), windows of 4 x 4 blocks: window 0 is blocks x 0..3 of
    // rows 0..2 (48 rows), window 1 block x 4 of rows 0..2 (12 rows).
    const VitRowLayout l = vit_row_layout(cfg, 140, 84);
    REQUIRE(l.rows.size() == 60);
    REQUIRE(l.windows.size() == 60);
    CHECK(l.windows[0] == std::array<uint32_t, 2>{0, 48});
    CHECK(l.windows[47] == std::array<uint32_t, 2>{0, 48});
    CHECK(l.windows[48] == std::array<uint32_t, 2>{48, 60});
    // Window 0's second block is block (1, 0): patches (y 0..1, x 2..3); its fifth block (0, 1) starts at y 2.
    CHECK((l.rows[4].y == 0 && l.rows[4].x == 2 && l.rows[7].y == 1 && l.rows[7].x == 3));
    CHECK((l.rows[16].y == 2 && l.rows[16].x == 0));
    // Window 1: block (4, 0), then (4, 1): patches x 8..9.
    CHECK((l.rows[48].y == 0 && l.rows[48].x == 8 && l.rows[52].y == 2 && l.rows[52].x == 8));
    // The projector's rows go back to block order: block j of window order is block out_block[j] row-major.
    REQUIRE(l.out_block.size() == 15);
    CHECK(l.out_block[1] == 1);
    CHECK(l.out_block[4] == 5);  // block (0, 1)
    CHECK(l.out_block[12] == 4);  // window 1's first block, (4, 0)
    CHECK(l.out_block[14] == 14);
    std::vector<uint32_t> sorted = l.out_block;
    std::sort(sorted.begin(), sorted.end());
    for (uint32_t j = 0; j < sorted.size(); ++j) CHECK(sorted[j] == j);
    // Packed tables: tile 1's rows see tile 1 only (or their window in it); rotary positions (y, x, 0, 0).
    const std::vector<int32_t> segs = batch_segments(l, 2, 60, false), wsegs = batch_segments(l, 2, 60, true);
    CHECK((segs[2 * 60] == 60 && segs[2 * 60 + 1] == 120));
    CHECK((wsegs[2 * 110] == 108 && wsegs[2 * 110 + 1] == 120));
    const std::vector<int32_t> pos = batch_rope_positions(l, 2);
    REQUIRE(pos.size() == 2 * 60 * 4);
    CHECK(std::vector<int32_t>(pos.begin() + 4 * 64, pos.begin() + 4 * 65) == std::vector<int32_t>{0, 2, 0, 0});
    // Qwen2-VL has no windows: the reference's block order, the identity out_block.
    const GgufFile f2 = random_mmproj(ProjectorType::Qwen2Vl, TensorType::F16, 64, 1, 14, 56);
    const VisionConfig cfg2 = VisionConfig::from_gguf(f2);
    const VitRowLayout l2 = vit_row_layout(cfg2, 140, 84);
    CHECK(l2.windows.empty());
    CHECK((l2.rows[4].y == 0 && l2.rows[4].x == 2 && l2.rows[20].y == 2 && l2.rows[20].x == 0));
    for (uint32_t j = 0; j < l2.out_block.size(); ++j) CHECK(l2.out_block[j] == j);
    CHECK_THROWS_AS(vit_row_layout(cfg2, 140, 70), std::invalid_argument);  // not whole blocks
}

TEST_CASE("vision encoder: the plan lists every pipeline it records; bad tiles are refused") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    for (ProjectorType type : {ProjectorType::Gemma3, ProjectorType::Qwen25Vl}) {
    const GgufFile f = random_mmproj(type, TensorType::F16, 64, 3);
    const VisionConfig cfg = VisionConfig::from_gguf(f);
    CAPTURE(cfg.desc->name);
    VisionGpu gpu(ctx, f, cfg);
    const VisionPlan p = gpu.plan(2, cfg.image_size, cfg.image_size);
    ctx.prepare_pipelines(p.pipelines(ctx));
    const uint32_t created = ctx.pipeline_stats().created;
    std::vector<ImageTile> tiles{random_tile(cfg.image_size, 1), random_tile(cfg.image_size, 2)};
    gpu.encode(tiles);
    CHECK(ctx.pipeline_stats().created == created);
    CHECK(gpu.batch_tiles(cfg.image_size, cfg.image_size) >= 1);
    std::vector<ImageTile> bad{random_tile(cfg.image_size + cfg.patch_size, 3)};
    CHECK_THROWS_AS(gpu.encode(bad), std::invalid_argument);
    }
}

TEST_CASE("vision stages: unfolding and merging from their definitions") {
    // A 4 x 2 tile of 2-pixel patches: value = 100 c + 10 y + x.
    ImageTile t;
    t.nx = 4;
    t.ny = 2;
    for (uint32_t c = 0; c < 3; ++c)
        for (uint32_t y = 0; y < 2; ++y)
            for (uint32_t x = 0; x < 4; ++x) t.chw.push_back(float(100 * c + 10 * y + x));
    const std::vector<float> u = unfold_patches(t, 2, false);
    REQUIRE(u.size() == 2 * 12);
    // patch (1, 0): x 2..3, channel-major, then y, then x
    const std::vector<float> want1{2, 3, 12, 13, 102, 103, 112, 113, 202, 203, 212, 213};
    CHECK(std::vector<float>(u.begin() + 12, u.end()) == want1);
    CHECK_THROWS_AS(unfold_patches(t, 3, false), std::invalid_argument);
    // In a given order: patch (1, 0) first.
    const std::vector<PatchPos> order{{0, 1}, {0, 0}};
    const std::vector<float> reordered = unfold_patches(t, 2, false, order);
    REQUIRE(reordered.size() == 24);
    CHECK(std::vector<float>(reordered.begin(), reordered.begin() + 12) == want1);
    const std::vector<PatchPos> outside{{0, 1}, {1, 0}}, short_order{{0, 0}};
    CHECK_THROWS_AS(unfold_patches(t, 2, false, outside), std::invalid_argument);
    CHECK_THROWS_AS(unfold_patches(t, 2, false, short_order), std::invalid_argument);
}

TEST_CASE("vision encoder: a batch that cannot be built (out of memory) leaves the encoder usable") {
    test::ValidationGuard guard;
    // Weights fit in 30000-byte allocations, a batch's buffers do not.
    Context& small = test::context_for("max-alloc=30000");
    const GgufFile f = random_mmproj(ProjectorType::Gemma3, TensorType::F16, 64, 5);
    const VisionConfig cfg = VisionConfig::from_gguf(f);
    VisionGpu gpu(small, f, cfg);
    std::vector<ImageTile> tiles{random_tile(cfg.image_size, 1)};
    CHECK_THROWS_AS(gpu.encode(tiles), DeviceLimitError);
    CHECK_THROWS_AS(gpu.encode(tiles), DeviceLimitError);  // the same error again, not a crash
}
