// mmproj files (model/mmproj): VisionConfig::from_gguf on random files of each projector type, and
// its refusals (missing and misshaped tensors, missing keys, unsupported projectors, audio-only
// files, a text model of another width), preprocess_spec, tile_tokens, image_prompt and the random
// writer's shapes.
#include <algorithm>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "model/mmproj/image_prompt.h"
#include "model/mmproj/mmproj_config.h"
#include "model/testgen/random_mmproj.h"
#include "support/model_test_util.h"

using namespace vkllm;

namespace {

MmprojShape shape(ProjectorType type) {
    MmprojShape s;
    s.type = type;
    s.text_dim = 96;
    s.seed = 3;
    return s;
}

VisionConfig load(const GgufWriter& w) {
    const GgufFile f = GgufFile::from_memory(w.write_memory(), "test.mmproj");
    return VisionConfig::from_gguf(f);
}

// A tensor of the writer replaced by one of other dims (zeros).
void reshape(GgufWriter& w, const std::string& name, std::initializer_list<uint64_t> ne) {
    TensorType type = TensorType::F32;
    for (const GgufTensorInfo& t : w.tensors())
        if (t.name == name) type = t.type;
    REQUIRE(w.remove_tensor(name));
    w.add_tensor(name, type, ne, [](std::span<uint8_t> d) { std::memset(d.data(), 0, d.size()); });
}

}  // namespace

TEST_CASE("mmproj: each projector type's random file reads back as written") {
    const VisionConfig g = load(make_random_mmproj(shape(ProjectorType::Gemma3)));
    CHECK(g.type == ProjectorType::Gemma3);
    CHECK(g.desc->name == "gemma3");
    CHECK(g.image_size == 64);
    CHECK(g.patch_size == 8);
    CHECK(g.n_embd == 64);
    CHECK(g.n_head == 4);
    CHECK(g.head_dim == 16);
    CHECK(g.n_ff == 128);
    CHECK(g.n_layer == 2);
    CHECK(g.n_layer_used == 2);
    CHECK(g.merge == 4);  // no scale_factor key: Gemma 3's 4
    CHECK(g.text_dim == 96);
    CHECK(g.activation == VisionActivation::Gelu);
    CHECK(g.has_patch_bias);
    CHECK(g.has_post_ln);
    CHECK(!g.has_pre_ln);
    CHECK(!g.has_class_embedding);
    CHECK(g.eps == doctest::Approx(1e-6));
    CHECK(tile_tokens(g, 64, 64) == 4);
    const PreprocessSpec gs = preprocess_spec(g);
    CHECK(gs.kind == PreprocessKind::Square);
    CHECK(gs.image_size == 64);
    CHECK(gs.mean[0] == 0.5f);
    CHECK(gs.std[2] == 0.5f);

    const VisionConfig i = load(make_random_mmproj(shape(ProjectorType::Idefics3)));
    CHECK(i.merge == 2);
    CHECK(i.preproc_image_size == 32);
    CHECK(tile_tokens(i, 32, 32) == 4);
    CHECK(preprocess_spec(i).kind == PreprocessKind::Idefics3);
    CHECK(preprocess_spec(i).preproc_image_size == 32);

    const VisionConfig m = load(make_random_mmproj(shape(ProjectorType::Mlp)));
    CHECK(m.has_class_embedding);
    CHECK(m.has_pre_ln);
    CHECK(!m.has_post_ln);
    CHECK(!m.has_patch_bias);
    CHECK(m.activation == VisionActivation::GeluQuick);
    CHECK(m.n_layer_used == 1);  // llama.cpp's rule without feature_layer: all but the last layer
    CHECK(m.n_positions() == 17);
    CHECK(tile_tokens(m, 56, 56) == 16);
    CHECK(preprocess_spec(m).kind == PreprocessKind::PadSquare);
    CHECK(preprocess_spec(m).mean[0] == doctest::Approx(0.48145466f));

    MmprojShape fl = shape(ProjectorType::Mlp);
    fl.feature_layer = 2;
    CHECK(load(make_random_mmproj(fl)).n_layer_used == 2);
    MmprojShape sf = shape(ProjectorType::Gemma3);
    sf.merge = 2;  // written as clip.vision.projector.scale_factor, as llama.cpp's tiny test Gemma 3
    CHECK(load(make_random_mmproj(sf)).merge == 2);
    CHECK(tile_tokens(load(make_random_mmproj(sf)), 64, 64) == 16);

    // Every tensor the config lists is in the file; the file has nothing else.
    const GgufWriter w = make_random_mmproj(shape(ProjectorType::Gemma3));
    CHECK(vision_tensors(g).size() == w.tensors().size());
    CHECK(vit_tensor_name(3, "attn_q.weight") == "v.blk.3.attn_q.weight");
    CHECK(find_projector("idefics3")->type == ProjectorType::Idefics3);
    CHECK(find_projector("qwen3vl_merger") == nullptr);
    CHECK(supported_projectors_list() == "gemma3, idefics3, mlp, qwen2vl_merger, qwen2.5vl_merger");

    const VisionConfig q = load(make_random_mmproj(shape(ProjectorType::Qwen2Vl)));
    CHECK(q.type == ProjectorType::Qwen2Vl);
    CHECK(q.merge == 2);
    CHECK(q.rope_base == 10000.0f);
    CHECK(!q.has_patch_bias);
    CHECK(q.has_post_ln);
    CHECK(q.activation == VisionActivation::GeluQuick);
    CHECK(tile_tokens(q, 64, 32) == 8);
    CHECK(tile_tokens(q, 48, 80) == 15);  // any size of whole 16 px blocks
    CHECK(tile_grid(q, 48, 80).cols == 3);  // the merged tokens' grid: 3 columns of 5 rows
    CHECK(tile_grid(q, 48, 80).rows == 5);
    CHECK_THROWS_AS(tile_tokens(q, 40, 32), std::invalid_argument);
    const PreprocessSpec qs = preprocess_spec(q);
    CHECK(qs.kind == PreprocessKind::SmartResize);
    CHECK(qs.merge == 2);
    CHECK(qs.min_pixels == 8 * 16 * 16);  // mtmd's 8 to 4096 tokens of 16 x 16 pixels
    CHECK(qs.max_pixels == 4096 * 16 * 16);
    for (const VisionTensor& t : vision_tensors(q)) CHECK(t.name != "v.position_embd.weight");
    CHECK(!q.windowed(0));

    const VisionConfig q5 = load(make_random_mmproj(shape(ProjectorType::Qwen25Vl)));
    CHECK(q5.desc->norm == VisionNorm::Rms);
    CHECK(q5.desc->gated_ffn);
    CHECK(q5.activation == VisionActivation::Silu);
    CHECK(q5.wa_pattern == 2);
    CHECK(q5.window_px == 112);
    CHECK(q5.windowed(0));
    CHECK(!q5.windowed(1));
    bool has_gate = false, has_norm_bias = false;
    for (const VisionTensor& t : vision_tensors(q5)) {
        has_gate |= t.name == "v.blk.0.ffn_gate.weight";
        has_norm_bias |= t.name == "v.blk.0.ln1.bias" || t.name == "v.post_ln.bias";
    }
    CHECK(has_gate);
    CHECK(!has_norm_bias);
}

TEST_CASE("mmproj: the random files are deterministic and sized as asked") {
    const auto a = make_random_mmproj(shape(ProjectorType::Mlp)).write_memory();
    CHECK(a == make_random_mmproj(shape(ProjectorType::Mlp)).write_memory());
    MmprojShape other = shape(ProjectorType::Mlp);
    other.seed = 4;
    CHECK(a != make_random_mmproj(other).write_memory());
    MmprojShape big = shape(ProjectorType::Idefics3);
    big.dim = 32, big.heads = 2, big.layers = 3, big.image_size = 48, big.patch_size = 8, big.merge = 3;
    const VisionConfig c = load(make_random_mmproj(big));
    CHECK(c.n_layer == 3);
    CHECK(tile_tokens(c, 48, 48) == 4);
    MmprojShape bad = shape(ProjectorType::Gemma3);
    bad.image_size = 60;  // not a multiple of the 8 px patch
    CHECK_THROWS_AS(make_random_mmproj(bad), std::invalid_argument);
    bad = shape(ProjectorType::Idefics3);
    bad.merge = 3;  // 4 x 4 patches
    CHECK_THROWS_AS(make_random_mmproj(bad), std::invalid_argument);
    bad = shape(ProjectorType::Gemma3);
    bad.heads = 5;
    CHECK_THROWS_AS(make_random_mmproj(bad), std::invalid_argument);
}

TEST_CASE("mmproj: missing or misshaped tensors are refused by name") {
    GgufWriter w = make_random_mmproj(shape(ProjectorType::Gemma3));
    REQUIRE(w.remove_tensor("v.blk.1.attn_k.weight"));
    CHECK_THROWS_WITH_AS(load(w), doctest::Contains("v.blk.1.attn_k.weight: missing"), MmprojError);

    w = make_random_mmproj(shape(ProjectorType::Mlp));
    reshape(w, "mm.2.weight", {96, 80});
    CHECK_THROWS_WITH_AS(load(w), doctest::Contains("mm.2.weight"), MmprojError);
    CHECK_THROWS_WITH_AS(load(w), doctest::Contains("expected [96, 96]"), MmprojError);

    w = make_random_mmproj(shape(ProjectorType::Mlp));
    reshape(w, "v.position_embd.weight", {64, 16});  // no row for the class embedding
    CHECK_THROWS_WITH_AS(load(w), doctest::Contains("v.position_embd.weight"), MmprojError);

    w = make_random_mmproj(shape(ProjectorType::Idefics3));
    reshape(w, "mm.model.fc.weight", {64, 96});  // not the shuffled width 64 * 2 * 2
    CHECK_THROWS_WITH_AS(load(w), doctest::Contains("expected [256, 96]"), MmprojError);

    w = make_random_mmproj(shape(ProjectorType::Gemma3));
    REQUIRE(w.remove_tensor("mm.input_projection.weight"));
    CHECK_THROWS_WITH_AS(load(w), doctest::Contains("mm.input_projection.weight: missing"), MmprojError);

    w = make_random_mmproj(shape(ProjectorType::Mlp));
    REQUIRE(w.remove_tensor("v.class_embd"));
    CHECK_THROWS_WITH_AS(load(w), doctest::Contains("v.class_embd: missing"), MmprojError);

    // A norm stored as a quantized type.
    w = make_random_mmproj(shape(ProjectorType::Gemma3));
    REQUIRE(w.remove_tensor("v.post_ln.weight"));
    w.add_tensor("v.post_ln.weight", TensorType::Q8_0, {64}, [](std::span<uint8_t> d) { std::memset(d.data(), 0, d.size()); });
    CHECK_THROWS_WITH_AS(load(w), doctest::Contains("where F32"), MmprojError);
}

TEST_CASE("mmproj: missing and invalid keys are refused by name") {
    for (const char* key : {"clip.vision.patch_size", "clip.vision.embedding_length", "clip.vision.image_mean",
                            "clip.vision.attention.layer_norm_epsilon", "clip.vision.block_count"}) {
        CAPTURE(key);
        GgufWriter w = make_random_mmproj(shape(ProjectorType::Gemma3));
        REQUIRE(w.remove(key));
        CHECK_THROWS_WITH_AS(load(w), doctest::Contains(key), GgufError);
    }
    GgufWriter w = make_random_mmproj(shape(ProjectorType::Gemma3));
    w.set_u32("clip.vision.patch_size", 7);
    CHECK_THROWS_WITH_AS(load(w), doctest::Contains("does not divide the image size"), MmprojError);
    w = make_random_mmproj(shape(ProjectorType::Gemma3));
    w.set_u32("clip.vision.attention.head_count", 3);
    CHECK_THROWS_WITH_AS(load(w), doctest::Contains("heads do not divide"), MmprojError);
    w = make_random_mmproj(shape(ProjectorType::Gemma3));
    const float std_zero[3] = {0.5f, 0.0f, 0.5f};
    w.set_f32_array("clip.vision.image_std", std_zero);
    CHECK_THROWS_WITH_AS(load(w), doctest::Contains("clip.vision.image_std"), MmprojError);
    w = make_random_mmproj(shape(ProjectorType::Gemma3));
    const float two[2] = {0.5f, 0.5f};
    w.set_f32_array("clip.vision.image_mean", two);
    CHECK_THROWS_WITH_AS(load(w), doctest::Contains("needs 3"), MmprojError);
    w = make_random_mmproj(shape(ProjectorType::Gemma3));
    w.set_bool("clip.use_silu", true);
    CHECK_THROWS_WITH_AS(load(w), doctest::Contains("both true"), MmprojError);
    w = make_random_mmproj(shape(ProjectorType::Gemma3));
    w.set_u32("clip.vision.projector.scale_factor", 3);  // 8 x 8 patches
    CHECK_THROWS_WITH_AS(load(w), doctest::Contains("scale_factor"), MmprojError);
    w = make_random_mmproj(shape(ProjectorType::Idefics3));
    REQUIRE(w.remove("clip.vision.projector.scale_factor"));
    CHECK_THROWS_WITH_AS(load(w), doctest::Contains("missing (projector 'idefics3' needs it)"), MmprojError);
    w = make_random_mmproj(shape(ProjectorType::Qwen2Vl));
    w.set_u32("clip.vision.spatial_merge_size", 4);  // divides the 8 x 8 grid, but llama.cpp merges 2 x 2
    CHECK_THROWS_WITH_AS(load(w), doctest::Contains("2 x 2 blocks only"), MmprojError);
    w = make_random_mmproj(shape(ProjectorType::Qwen2Vl));
    REQUIRE(w.remove_tensor("v.patch_embd.weight.1"));
    CHECK_THROWS_WITH_AS(load(w), doctest::Contains("v.patch_embd.weight.1: missing"), MmprojError);
    w = make_random_mmproj(shape(ProjectorType::Qwen25Vl));
    REQUIRE(w.remove("clip.vision.n_wa_pattern"));
    CHECK_THROWS_WITH_AS(load(w), doctest::Contains("clip.vision.n_wa_pattern"), MmprojError);
    w = make_random_mmproj(shape(ProjectorType::Gemma3));
    w.set_u32("clip.vision.image_size", 1u << 20);
    CHECK_THROWS_WITH_AS(load(w), doctest::Contains("outside 1.."), MmprojError);

    MmprojShape fl = shape(ProjectorType::Mlp);
    fl.feature_layer = 1;
    w = make_random_mmproj(fl);
    const int32_t past[1] = {9};
    w.set_i32_array("clip.vision.feature_layer", past);
    CHECK_THROWS_WITH_AS(load(w), doctest::Contains("past the encoder's 2 layers"), MmprojError);
    const int32_t stacked[2] = {0, 2};
    w.set_i32_array("clip.vision.feature_layer", stacked);
    CHECK_THROWS_WITH_AS(load(w), doctest::Contains("several feature layers"), MmprojError);
    const int32_t unset[1] = {-1};  // llama.cpp: negative means unset, the default rule applies
    w.set_i32_array("clip.vision.feature_layer", unset);
    CHECK(load(w).n_layer_used == 1);
}

TEST_CASE("mmproj: other projectors, audio-only files and text files are refused by name") {
    GgufWriter w = make_random_mmproj(shape(ProjectorType::Gemma3));
    w.set_string("clip.projector_type", "qwen3vl_merger");
    CHECK_THROWS_WITH_AS(load(w),
                         doctest::Contains("'qwen3vl_merger' is not supported (supported: gemma3, idefics3, mlp, "
                                           "qwen2vl_merger, qwen2.5vl_merger)"),
                         MmprojError);

    w = make_random_mmproj(shape(ProjectorType::Gemma3));
    w.set_string("clip.projector_type", "ultravox");
    w.set_bool("clip.has_vision_encoder", false);
    w.set_bool("clip.has_audio_encoder", true);
    CHECK_THROWS_WITH_AS(load(w), doctest::Contains("audio encoder only"), MmprojError);

    // Mixed-modality files name the vision projector under clip.vision.projector_type.
    w = make_random_mmproj(shape(ProjectorType::Gemma3));
    REQUIRE(w.remove("clip.projector_type"));
    w.set_string("clip.vision.projector_type", "gemma3");
    CHECK(load(w).type == ProjectorType::Gemma3);

    w = make_random_mmproj(shape(ProjectorType::Gemma3));
    REQUIRE(w.remove("clip.projector_type"));
    CHECK_THROWS_WITH_AS(load(w), doctest::Contains("clip.projector_type: missing"), MmprojError);

    w = make_random_mmproj(shape(ProjectorType::Gemma3));
    REQUIRE(w.remove("clip.has_vision_encoder"));
    CHECK_THROWS_WITH_AS(load(w), doctest::Contains("no vision encoder"), MmprojError);
}

TEST_CASE("mmproj: the text model's width must be the projector's") {
    const VisionConfig c = load(make_random_mmproj(shape(ProjectorType::Idefics3)));
    CHECK_NOTHROW(check_text_dim(c, 96));
    CHECK_THROWS_WITH_AS(check_text_dim(c, 2048), doctest::Contains("rows of 96 values"), MmprojError);
    CHECK_THROWS_WITH_AS(check_text_dim(c, 2048), doctest::Contains("embedding length is 2048"), MmprojError);
    CHECK_THROWS_WITH_AS(check_text_dim(c, 2048), doctest::Contains("test.mmproj"), MmprojError);
}

TEST_CASE("mmproj: tile_tokens refuses tiles the encoder does not take") {
    const VisionConfig g = load(make_random_mmproj(shape(ProjectorType::Gemma3)));
    CHECK_THROWS_AS(tile_tokens(g, 32, 64), std::invalid_argument);
    CHECK_THROWS_AS(tile_tokens(g, 0, 0), std::invalid_argument);
}

TEST_CASE("mmproj: image_prompt per projector type") {
    auto tiles = [](uint32_t n, uint32_t size) {
        PreprocessedImage img;
        ImageTile t;
        t.nx = t.ny = size;
        t.chw.assign(size_t(3) * size * size, 0.0f);
        img.tiles.assign(n, t);
        return img;
    };
    const VisionConfig g = load(make_random_mmproj(shape(ProjectorType::Gemma3)));
    std::vector<ImagePiece> p = image_prompt(g, tiles(1, 64));
    REQUIRE(p.size() == 3);
    CHECK(p[0].text == "<start_of_image>");
    CHECK(p[1].kind == ImagePiece::Kind::Tile);
    CHECK(p[1].n_tokens == 4);
    CHECK(p[2].text == "<end_of_image>");
    CHECK(image_prompt_rows(p) == 4);
    CHECK_THROWS_AS(image_prompt(g, tiles(2, 64)), std::invalid_argument);

    const VisionConfig m = load(make_random_mmproj(shape(ProjectorType::Mlp)));
    p = image_prompt(m, tiles(1, 56));
    REQUIRE(p.size() == 1);
    CHECK(p[0].n_tokens == 16);
    CHECK(p[0].grid.cols == 4);
    CHECK(p[0].grid.rows == 4);

    // Idefics3, 2 rows x 3 columns of slices and the global image.
    const VisionConfig i = load(make_random_mmproj(shape(ProjectorType::Idefics3)));
    PreprocessedImage img = tiles(7, 32);
    img.grid_cols = 3, img.grid_rows = 2;
    p = image_prompt(i, img);
    std::string layout;
    for (const ImagePiece& x : p)
        layout += x.kind == ImagePiece::Kind::Tile    ? fmt::format("[{}]", x.tile)
                  : x.kind == ImagePiece::Kind::Token ? fmt::format("{{{}}}", x.text)
                                                      : x.text;
    CHECK(layout ==
          "<fake_token_around_image><row_1_col_1>[0]<fake_token_around_image><row_1_col_2>[1]"
          "<fake_token_around_image><row_1_col_3>[2]{\n}<fake_token_around_image><row_2_col_1>[3]"
          "<fake_token_around_image><row_2_col_2>[4]<fake_token_around_image><row_2_col_3>[5]"
          "{\n\n}{<fake_token_around_image>}{<global-img>}[6]{<fake_token_around_image>}");
    CHECK(image_prompt_rows(p) == 7 * 4 + 5);
    // Every Token piece's text is among the layout tokens a random vocabulary is given (gen-model).
    const std::span<const std::string_view> looked_up = image_layout_tokens(ProjectorType::Idefics3);
    for (const ImagePiece& x : p)
        if (x.kind == ImagePiece::Kind::Token)
            CHECK(std::find(looked_up.begin(), looked_up.end(), x.text) != looked_up.end());
    CHECK(looked_up.size() == 4);
    CHECK(image_layout_tokens(ProjectorType::Gemma3).empty());
    img.grid_cols = 2;  // 7 tiles do not fit 2 x 2 + 1
    CHECK_THROWS_AS(image_prompt(i, img), std::invalid_argument);
    PreprocessedImage global = tiles(1, 32);  // not sliced: the global image alone
    p = image_prompt(i, global);
    CHECK(p.size() == 5);
    CHECK(kMediaMarker == "<__media__>");
}
