// The vision encoders' host reference (model/vision/vision_cpu.h) against llama.cpp's libmtmd: for a
// random mmproj of each projector type (gemma3, idefics3, mlp, qwen2vl_merger, qwen2.5vl_merger),
// regenerated here as `vkllm gen-model --mmproj TYPE --seed 55` wrote it, the embeddings of two test
// images and the prompt layout libmtmd produced
// (tests/fixtures/vision, README.md there). The images are sizes the encoders take as they are
// (image_size square; Qwen2-VL's 64 x 32 and Qwen2.5-VL's 128 x 64, within their pixel limits): their
// tiles come from model/image's preprocess_image, checked against the normalisation done here.
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include <fmt/format.h>

#include "model/image/image_preprocess.h"
#include "model/mmproj/image_prompt.h"
#include "model/mmproj/mmproj_config.h"
#include "model/testgen/random_mmproj.h"
#include "model/vision/vision_cpu.h"
#include "support/model_test_util.h"
#include "support/vision_fixtures.h"

using namespace vkllm;
using namespace vkllm::test;

namespace {

// The chunk layout of the fixture: "text N \"pieces\"" / "image N NX NY" lines.
struct Chunk {
    bool image = false;
    uint32_t n_tokens = 0;
    std::string text;  // detokenized, unescaped, spaces removed (the random vocab's SentencePiece adds them)
};

std::string unescape_without_spaces(const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        char c = s[i];
        if (c == '\\' && i + 1 < s.size()) {
            const char e = s[++i];
            if (e == 'n') c = '\n';
            else if (e == 'x' && i + 2 < s.size()) c = char(std::stoi(s.substr(i + 1, 2), nullptr, 16)), i += 2;
            else c = e;
        } else if (c == ' ') {
            continue;
        }
        out += c;
    }
    return out;
}

std::vector<Chunk> read_chunks(const std::string& path) {
    std::ifstream in(path);
    REQUIRE_MESSAGE(in.good(), "missing fixture ", path);
    std::vector<Chunk> out;
    std::string kind;
    while (in >> kind) {
        Chunk c;
        c.image = kind == "image";
        in >> c.n_tokens;
        std::string rest;
        std::getline(in, rest);
        if (!c.image) {
            const size_t a = rest.find('"'), b = rest.rfind('"');
            c.text = unescape_without_spaces(rest.substr(a + 1, b - a - 1));
        }
        out.push_back(c);
    }
    return out;
}

// What the oracle's prompt "A<__media__>B" becomes with image_prompt's pieces: the text chunks as
// runs of Text and Token pieces between the tiles.
struct ExpectedChunk {
    bool image = false;
    uint32_t n_tokens = 0;
    std::vector<ImagePiece> pieces;
};

std::vector<ExpectedChunk> expected_chunks(const std::vector<ImagePiece>& pieces) {
    auto text = [](const char* s) { return ImagePiece{ImagePiece::Kind::Text, s, 0, 0, {}}; };
    std::vector<ExpectedChunk> out{{false, 0, {text("A")}}};
    for (const ImagePiece& p : pieces) {
        if (p.kind == ImagePiece::Kind::Tile) {
            out.push_back({true, p.n_tokens, {}});
            continue;
        }
        if (out.back().image) out.push_back({});
        out.back().pieces.push_back(p);
    }
    if (out.back().image) out.push_back({});
    out.back().pieces.push_back(text("B"));
    return out;
}

// A text chunk of the fixture against its pieces: Text as written, a Token as its text or, where
// the random vocabulary lacks it (mtmd then inserts -1), as "<null>".
bool text_matches(const std::string& got, const std::vector<ImagePiece>& pieces) {
    size_t at = 0;
    for (const ImagePiece& p : pieces) {
        std::string want;
        for (char c : p.text)
            if (c != ' ') want += c;
        if (p.kind == ImagePiece::Kind::Token && got.compare(at, 6, "<null>") == 0) {
            at += 6;
        } else if (got.compare(at, want.size(), want) == 0) {
            at += want.size();
        } else {
            return false;
        }
    }
    return at == got.size();
}

void check_layout(const std::string& fixture, const std::vector<ImagePiece>& pieces) {
    const std::vector<Chunk> want = read_chunks(kFixtures + fixture);
    const std::vector<ExpectedChunk> got = expected_chunks(pieces);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
        CAPTURE(i);
        CAPTURE(want[i].text);
        CHECK(got[i].image == want[i].image);
        if (got[i].image) CHECK(got[i].n_tokens == want[i].n_tokens);
        else CHECK(text_matches(want[i].text, got[i].pieces));
    }
}

struct Case {
    ProjectorType type;
    const char* name;
    uint32_t nx, ny;  // the test images' size: one the encoder takes without resizing
};
constexpr Case kCases[] = {{ProjectorType::Gemma3, "gemma3", 64, 64},
                           {ProjectorType::Idefics3, "idefics3", 32, 32},
                           {ProjectorType::Mlp, "mlp", 56, 56},
                           {ProjectorType::Qwen2Vl, "qwen2vl_merger", 64, 32},
                           {ProjectorType::Qwen25Vl, "qwen2.5vl_merger", 128, 64}};

}  // namespace

TEST_CASE("vision: encode_tile_cpu matches llama.cpp's libmtmd on random mmproj files") {
    for (const Case& c : kCases) {
        const GgufFile file = fixture_mmproj(c.type);
        const VisionConfig cfg = VisionConfig::from_gguf(file);
        const PreprocessSpec spec = preprocess_spec(cfg);
        for (const char* image : {"ramp", "hash"}) {
            CAPTURE(c.name);
            CAPTURE(image);
            // From RGB through model/image's preprocessing (sizes it keeps: only the normalisation),
            // checked against the normalisation done here.
            const std::vector<uint8_t> rgb = test_image(image, c.nx, c.ny);
            const PreprocessedImage pre = preprocess_image(RgbImage{c.nx, c.ny, rgb}, spec);
            const ImageTile tile = normalized(rgb, c.nx, c.ny, spec);
            // Idefics3's image is one slice plus the global image, both this tile (preproc_image_size
            // is the tile size): two chunks with the same embeddings.
            const size_t n_chunks = c.type == ProjectorType::Idefics3 ? 2 : 1;
            REQUIRE(pre.tiles.size() == n_chunks);
            for (size_t k = 0; k < n_chunks; ++k) {
                REQUIRE(pre.tiles[k].nx == c.nx);
                REQUIRE(pre.tiles[k].ny == c.ny);
                CHECK(pre.tiles[k].chw == tile.chw);
                const std::vector<float> got = encode_tile_cpu(cfg, file, pre.tiles[k]);
                CHECK(got.size() == size_t(tile_tokens(cfg, c.nx, c.ny)) * cfg.text_dim);
                const std::vector<float> want =
                    read_f32_file(fmt::format("{}{}-{}.image{}.f32", kFixtures, c.name, image, k));
                REQUIRE(want.size() == got.size());
                const Diff d = compare(got, want);
                INFO("nmse ", d.nmse, " max abs ", d.max_abs);
                CHECK(d.finite);
                CHECK(d.nmse < kMaxNmse);
                CHECK(d.max_abs < kMaxAbs);
            }
        }
    }
}

TEST_CASE("vision: llama.cpp puts LLaVA's class embedding after the patches") {
    // CLIP's definition (ClassRow::First) is far from libmtmd's figures; ClassRow::Last, the default,
    // is what libmtmd computes (the case above).
    const GgufFile file = fixture_mmproj(ProjectorType::Mlp);
    const VisionConfig cfg = VisionConfig::from_gguf(file);
    const ImageTile tile = normalized(test_image("ramp", 56, 56), 56, 56, preprocess_spec(cfg));
    const std::vector<float> first = project_cpu(cfg, file, encode_vit_cpu(cfg, file, tile, ClassRow::First));
    const Diff d = compare(first, read_f32_file(kFixtures + "mlp-ramp.image0.f32"));
    CHECK(d.nmse > 0.05);
    CHECK(encode_vit_cpu(cfg, file, tile, ClassRow::First).size() == size_t(cfg.n_positions()) * cfg.n_embd);
}

TEST_CASE("vision: Qwen2.5-VL's window attention is libmtmd's") {
    // The 128 x 64 image is 8 x 4 blocks: two 112-pixel windows (7 blocks and 1 wide). Layer 0 attends
    // within them, layer 1 (n_wa_pattern 2) to the whole tile; without the windows the result is off.
    const GgufFile file = fixture_mmproj(ProjectorType::Qwen25Vl);
    VisionConfig cfg = VisionConfig::from_gguf(file);
    CHECK(cfg.windowed(0));
    CHECK(!cfg.windowed(1));
    const ImageTile tile = normalized(test_image("hash", 128, 64), 128, 64, preprocess_spec(cfg));
    const std::vector<float> want = read_f32_file(kFixtures + "qwen2.5vl_merger-hash.image0.f32");
    CHECK(compare(encode_tile_cpu(cfg, file, tile), want).nmse < kMaxNmse);
    cfg.wa_pattern = 0;
    CHECK(compare(encode_tile_cpu(cfg, file, tile), want).nmse > 1e-3);
}

TEST_CASE("vision: image_prompt is libmtmd's chunk layout") {
    for (const Case& c : kCases) {
        CAPTURE(c.name);
        const GgufFile file = fixture_mmproj(c.type);
        const VisionConfig cfg = VisionConfig::from_gguf(file);
        PreprocessedImage img;
        ImageTile tile;
        tile.nx = c.nx;
        tile.ny = c.ny;
        tile.chw.assign(size_t(3) * tile.nx * tile.ny, 0.0f);
        img.tiles.push_back(tile);
        if (c.type == ProjectorType::Idefics3) {  // a 1 x 1 grid: the slice, then the global image
            img.grid_cols = img.grid_rows = 1;
            img.tiles.push_back(tile);
        }
        check_layout(fmt::format("{}-ramp.chunks.txt", c.name), image_prompt(cfg, img));
    }
    // Idefics3's 2 x 2 slices: "\n" between the rows, the global image last.
    const GgufFile file = fixture_mmproj(ProjectorType::Idefics3);
    const VisionConfig cfg = VisionConfig::from_gguf(file);
    PreprocessedImage img;
    ImageTile tile;
    tile.nx = tile.ny = 32;
    tile.chw.assign(size_t(3) * 32 * 32, 0.0f);
    img.tiles.assign(5, tile);
    img.grid_cols = img.grid_rows = 2;
    check_layout("idefics3-grid.chunks.txt", image_prompt(cfg, img));
}

TEST_CASE("vision: encode_tile_cpu refuses tiles the encoder does not take") {
    const GgufFile file = fixture_mmproj(ProjectorType::Gemma3);
    const VisionConfig cfg = VisionConfig::from_gguf(file);
    ImageTile tile;
    tile.nx = tile.ny = cfg.image_size / 2;
    tile.chw.assign(size_t(3) * tile.nx * tile.ny, 0.0f);
    CHECK_THROWS_AS(encode_tile_cpu(cfg, file, tile), std::invalid_argument);
    tile.nx = tile.ny = cfg.image_size;
    tile.chw.assign(7, 0.0f);  // not 3 planes of the tile
    CHECK_THROWS_WITH_AS(encode_tile_cpu(cfg, file, tile), doctest::Contains("3 planes"), std::invalid_argument);
}
