// `vkllm bench --mmproj --image` (apps/bench_vision.cpp) end to end on random files: the JSON holds
// each image's timing fields with values that fit the file's shape, the Markdown a row per image,
// --profile the encoder's kernels; a missing --image or --mmproj, a missing file and an mmproj of
// another width are refused with messages naming the problem.
#include "support/run_vkllm.h"
#include "support/test_context.h"

#include <filesystem>

#include <nlohmann/json.hpp>

namespace fs = std::filesystem;
using vkllm::test::run_vkllm;

namespace {

// A text model of width 96 with a random gemma3 mmproj (64 px tiles of 8 px patches: 64 patches,
// 4 x 4 pooled to 4 image tokens) and an idefics3 one (32 px tiles: 16 patches, 4 tokens).
fs::path make_models() {
    const fs::path dir = vkllm::test::binary_dir() / "test-tmp" / "bench_vision";
    fs::create_directories(dir);
    for (const char* type : {"gemma3", "idefics3"}) {
        const auto r = run_vkllm("gen-model -o " + (dir / (std::string(type) + ".gguf")).string() +
                                     " --dim 96 --layers 1 --heads 2 --ffn 128 --vocab 300 --type f16 --seed 3 "
                                     "--mmproj " + type + " --vit-dim 96 --vit-layers 3 --vit-heads 3 --vit-ffn 160",
                                 "bench_vision_gen");
        INFO(r.err);
        REQUIRE(r.status == 0);
    }
    return dir;
}

}  // namespace

TEST_CASE("cli: vkllm bench --mmproj --image times the vision encoder per image") {
    const fs::path dir = make_models();
    const std::string sq = (vkllm::test::fixtures_dir() / "vision" / "peer" / "sq.png").string();
    const std::string cat = (vkllm::test::fixtures_dir() / "vision" / "peer" / "cat.png").string();
    const std::string model = (dir / "gemma3.gguf").string(), mmproj = (dir / "gemma3-mmproj.gguf").string();

    auto r = run_vkllm("bench -m " + model + " --mmproj " + mmproj + " --image " + sq + " --image " + cat +
                           " -p 4 -n 2 -r 3 --no-probes --json",
                       "bench_vision_json");
    INFO(r.err);
    REQUIRE(r.status == 0);
    const nlohmann::json j = nlohmann::json::parse(r.out);
    const nlohmann::json& v = j["results"][0]["vision"];
    CHECK(v["mmproj"] == mmproj);
    CHECK(v["projector"] == "gemma3");
    CHECK(v["vit"]["dim"] == 96);
    CHECK(v["vit"]["layers"] == 3);
    CHECK(v["vit"]["heads"] == 3);
    CHECK(v["vit"]["ffn"] == 160);
    CHECK(v["vit"]["weight_type"] == "F16");
    REQUIRE(v["images"].size() == 2);
    CHECK(v["images"][0]["image"] == sq);
    CHECK(v["images"][1]["width"] == 97);
    CHECK(v["images"][1]["height"] == 61);
    for (const auto& im : v["images"]) {
        CHECK(im["tiles"] == 1);
        CHECK(im["tile_size"] == nlohmann::json::array({64, 64}));
        CHECK(im["image_tokens"] == 4);
        CHECK(im["patches"].get<double>() == 64);
        const double ms = im["encode_ms"].get<double>();
        CHECK(ms > 0);
        CHECK(im["encode_ms_min"].get<double>() <= ms);
        CHECK(im["encode_ms_max"].get<double>() >= ms);
        CHECK(im["encode_warmup_ms"].get<double>() > 0);
        CHECK(im["preprocess_ms"].get<double>() >= 0);
        CHECK(im["decode_ms"].get<double>() >= 0);
        CHECK(im["image_tokens_per_s"].get<double>() == doctest::Approx(4 * 1000.0 / ms));
        CHECK(im["patches_per_s"].get<double>() == doctest::Approx(64 * 1000.0 / ms));
        // 64 patches of 3 * 64 inputs into 96, then 3 layers over 64 positions:
        // 2 * 64 * (4 * 96^2 + 2 * 96 * 160) + 4 * 64^2 * 96 each.
        const double flops = 2.0 * 64 * 192 * 96 + 3 * (2.0 * 64 * (4 * 96 * 96 + 2 * 96 * 160) + 4.0 * 64 * 64 * 96);
        CHECK(im["vit_gflop"].get<double>() == doctest::Approx(flops * 1e-9));
        CHECK(!im.contains("profile"));
    }
    // The text model's own figures are still there.
    CHECK(j["results"][0]["pp_tps_mean"].get<double>() > 0);

    // Markdown, idefics3, --profile: a row per image, the kernels of the encode.
    r = run_vkllm("bench -m " + (dir / "idefics3.gguf").string() + " --mmproj " +
                      (dir / "idefics3-mmproj.gguf").string() + " --image " + sq + " -p 4 -n 2 -r 1 --no-probes --profile",
                  "bench_vision_md");
    INFO(r.err);
    REQUIRE(r.status == 0);
    CHECK(r.out.find("| mmproj | ViT | image | tiles | image tokens | preprocess ms | encode ms (median) |") !=
          std::string::npos);
    CHECK(r.out.find("| idefics3-mmproj.gguf | idefics3 F16 d96 L3 h3 ff160 32px/8 | sq.png (64x64) |") !=
          std::string::npos);
    CHECK(r.out.find("vision profile: idefics3-mmproj.gguf on sq.png") != std::string::npos);
    CHECK(r.out.find("| layer_norm") != std::string::npos);
    CHECK(r.out.find("| attention") != std::string::npos);
}

TEST_CASE("cli: vkllm bench --mmproj --image refuses what it cannot time") {
    const fs::path dir = make_models();
    const std::string sq = (vkllm::test::fixtures_dir() / "vision" / "peer" / "sq.png").string();
    const std::string model = (dir / "gemma3.gguf").string(), mmproj = (dir / "gemma3-mmproj.gguf").string();
    const std::string base = "bench -m " + model + " -p 4 -n 2 -r 1 --no-probes";

    auto r = run_vkllm(base + " --mmproj " + mmproj, "bench_vision_bad");
    CHECK(r.status != 0);
    CHECK(r.err.find("--mmproj needs --image") != std::string::npos);
    r = run_vkllm(base + " --image " + sq, "bench_vision_bad");
    CHECK(r.status != 0);
    CHECK(r.err.find("--image needs a vision encoder") != std::string::npos);
    r = run_vkllm(base + " --mmproj " + mmproj + " --image " + (dir / "nothing.png").string(), "bench_vision_bad");
    CHECK(r.status != 0);
    CHECK(r.err.find("nothing.png: cannot open the file") != std::string::npos);
    // An mmproj whose rows are not the text model's width.
    r = run_vkllm("bench -m " + vkllm::test::model_path("stories260K.gguf") + " -p 4 -n 2 -r 1 --no-probes --mmproj " +
                      mmproj + " --image " + sq,
                  "bench_vision_bad");
    CHECK(r.status != 0);
    CHECK(r.err.find("rows of 96 values but the text model's embedding length is 64") != std::string::npos);
}
