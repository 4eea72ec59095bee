// `vkllm gen-model --mmproj TYPE`: the mmproj written beside the text model, sized to its width, the
// same bytes as model/testgen's writer for the same seed; unknown types and stray options refused.
#include <filesystem>
#include <fstream>
#include <iterator>

#include "model/mmproj/mmproj_config.h"
#include "model/testgen/random_mmproj.h"
#include "support/run_vkllm.h"

namespace fs = std::filesystem;
using namespace vkllm;

TEST_CASE("gen-model --mmproj writes a random mmproj beside the text model") {
    const fs::path dir = fs::path(VKLLM_BINARY_DIR) / "test-tmp" / "gen_mmproj";
    fs::create_directories(dir);
    const std::string text = (dir / "text.gguf").string();
    fs::remove(dir / "text-mmproj.gguf");
    test::CliResult r = test::run_vkllm("gen-model -o " + text +
                                            " --dim 96 --layers 1 --heads 2 --ffn 128 --vocab 300 --type f16 "
                                            "--seed 9 --mmproj idefics3",
                                        "gen_mmproj");
    INFO(r.err);
    REQUIRE(r.status == 0);
    const fs::path mmproj = dir / "text-mmproj.gguf";
    REQUIRE(fs::exists(mmproj));
    const GgufFile f = GgufFile::open(mmproj.string());
    const VisionConfig cfg = VisionConfig::from_gguf(f);
    CHECK(cfg.type == ProjectorType::Idefics3);
    CHECK_NOTHROW(check_text_dim(cfg, 96));
    MmprojShape s;
    s.type = ProjectorType::Idefics3;
    s.text_dim = 96;
    s.seed = 9;
    std::ifstream in(mmproj, std::ios::binary);
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(bytes == make_random_mmproj(s).write_memory());

    const std::string other = (dir / "other.gguf").string();
    r = test::run_vkllm("gen-model -o " + text + " --dim 64 --layers 1 --heads 2 --ffn 128 --vocab 300 --type f16 "
                            "--mmproj mlp --mmproj-output " + other + " --image-size 28",
                        "gen_mmproj");
    INFO(r.err);
    REQUIRE(r.status == 0);
    const VisionConfig m = VisionConfig::from_gguf(GgufFile::open(other));
    CHECK(m.image_size == 28);
    CHECK(m.patch_size == 14);
    CHECK(m.text_dim == 64);
}

TEST_CASE("gen-model --mmproj refuses unknown projector types and stray options") {
    const std::string text = (fs::path(VKLLM_BINARY_DIR) / "test-tmp" / "gen_mmproj_bad.gguf").string();
    test::CliResult r = test::run_vkllm(
        "gen-model -o " + text + " --dim 64 --layers 1 --heads 2 --ffn 128 --vocab 300 --type f16 --mmproj qwen3vl_merger",
        "gen_mmproj");
    CHECK(r.status != 0);
    CHECK(r.err.find("unknown projector type 'qwen3vl_merger' (supported: gemma3, idefics3, mlp, qwen2vl_merger, "
                     "qwen2.5vl_merger)") != std::string::npos);
    r = test::run_vkllm("gen-model -o " + text + " --dim 64 --layers 1 --heads 2 --ffn 128 --vocab 300 --type f16 "
                        "--image-size 32",
                        "gen_mmproj");
    CHECK(r.status != 0);
    CHECK(r.err.find("need --mmproj") != std::string::npos);
    r = test::run_vkllm("gen-model -o " + text + " --dim 64 --layers 1 --heads 2 --ffn 128 --vocab 300 --type f16 "
                        "--vit-layers 12",
                        "gen_mmproj");
    CHECK(r.status != 0);
    CHECK(r.err.find("need --mmproj") != std::string::npos);
    // A bad mmproj shape is refused before the text model is written.
    fs::remove(text);
    r = test::run_vkllm("gen-model -o " + text + " --dim 64 --layers 1 --heads 2 --ffn 128 --vocab 300 --type f16 "
                        "--mmproj gemma3 --image-size 60",
                        "gen_mmproj");
    CHECK(r.status != 0);
    CHECK(r.err.find("not a whole number of 8-pixel patches") != std::string::npos);
    CHECK(!fs::exists(text));
    // --vit-heads must divide --vit-dim.
    r = test::run_vkllm("gen-model -o " + text + " --dim 64 --layers 1 --heads 2 --ffn 128 --vocab 300 --type f16 "
                        "--mmproj gemma3 --vit-dim 100 --vit-heads 3",
                        "gen_mmproj");
    CHECK(r.status != 0);
    CHECK(r.err.find("dim 100 / heads 3") != std::string::npos);
    CHECK(!fs::exists(text));
}
