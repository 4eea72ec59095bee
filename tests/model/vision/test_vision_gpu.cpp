// The device vision encoder (model/vision/vision_gpu.h) against the host reference (vision_cpu.h,
// itself checked against llama.cpp's libmtmd in test_vision_cpu.cpp): every projector type of the
// table, random tiles, one tile and a batch of several (packed rows, per-tile attention), F16 and
// Q8_0 weights, a ViT wider than the text model; the pipelines the plan lists are all it records.
#include "support/test_context.h"

#include "model/mmproj/mmproj_config.h"
#include "model/testgen/random_mmproj.h"
#include "model/vision/vision_cpu.h"
#include "model/vision/vision_gpu.h"
#include "model/vision/vision_stages.h"
#include "runtime/vk_check.h"
#include "support/model_test_util.h"

#include <fmt/format.h>

#include <random>

using namespace vkllm;

namespace {

GgufFile random_mmproj(ProjectorType type, TensorType wtype, uint32_t dim, uint64_t seed) {
    MmprojShape s;
    s.type = type;
    s.text_dim = 96;
    s.dim = dim;
    s.ffn = 2 * dim;
    s.weight_type = wtype;
    s.seed = seed;
    return GgufFile::from_memory(make_random_mmproj(s).write_memory(), "random-mmproj");
}

ImageTile random_tile(uint32_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(-2.0f, 2.0f);
    ImageTile t;
    t.nx = t.ny = n;
    t.chw.resize(size_t(3) * n * n);
    for (float& v : t.chw) v = d(rng);
    return t;
}

// Device and host differ by f32 summation order and (F16 patch kernels) the half rounding of the
// unfolded pixels the device applies as ggml does; a wrong stage is ~1e-1.
constexpr test::Tolerance kTol{1e-5, 2e-2, 2e-2};

}  // namespace

TEST_CASE("vision encoder on the device matches the host reference: every projector type, one tile and a batch") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    for (const ProjectorDesc& d : projector_table())
        for (TensorType wt : {TensorType::F16, TensorType::Q8_0})
            for (uint32_t dim : {64u, 128u}) {
                CAPTURE(d.name);
                CAPTURE(type_traits(wt).name);
                CAPTURE(dim);
                const GgufFile f = random_mmproj(d.type, wt, dim, 7 + dim);
                const VisionConfig cfg = VisionConfig::from_gguf(f);
                if (d.positions != VisionPositions::Learned) {  // Qwen2-VL's: the host reference only, so far
                    CHECK_THROWS_WITH_AS(VisionGpu(ctx, f, cfg), doctest::Contains("does not run projector"),
                                         MmprojError);
                    continue;
                }
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
            }
}

TEST_CASE("vision encoder: the plan lists every pipeline it records; bad tiles are refused") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    const GgufFile f = random_mmproj(ProjectorType::Gemma3, TensorType::F16, 64, 3);
    const VisionConfig cfg = VisionConfig::from_gguf(f);
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
