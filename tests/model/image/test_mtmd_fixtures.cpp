// model/image against llama.cpp build 9749 itself: tests/fixtures/image/mtmd_preprocess.txt holds what
// the peer's own img_tool::resize and preprocessors made of random images (written by
// tools/mtmd_preprocess_oracle.cpp, see the fixture's README); every byte and float must match.
#include <fmt/format.h>

#include <fstream>
#include <sstream>
#include <string>

#include "model/image/image_preprocess.h"
#include "model/image/image_resize.h"
#include "support/model_test_util.h"

using namespace vkllm;

namespace {

// The oracle's images: bytes of a 32-bit LCG.
std::vector<uint8_t> random_bytes(uint32_t seed, size_t n) {
    std::vector<uint8_t> out(n);
    for (uint8_t& b : out) {
        seed = seed * 1664525u + 1013904223u;
        b = uint8_t(seed >> 24);
    }
    return out;
}

uint64_t fnv1a(const void* data, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const uint8_t*>(data)[i]) * 1099511628211ull;
    return h;
}

RgbImage random_image(uint32_t w, uint32_t h, uint32_t seed) {
    RgbImage img;
    img.nx = w;
    img.ny = h;
    img.rgb = random_bytes(seed, size_t(w) * h * 3);
    return img;
}

// mtmd keeps f32 images RGB-interleaved; the tiles are planar.
uint64_t tile_hash(const ImageTile& t) {
    const size_t plane = size_t(t.nx) * t.ny;
    std::vector<float> rgb(plane * 3);
    for (size_t i = 0; i < plane; ++i)
        for (size_t c = 0; c < 3; ++c) rgb[i * 3 + c] = t.chw[c * plane + i];
    return fnv1a(rgb.data(), rgb.size() * sizeof(float));
}

std::vector<std::string> fixture_lines(std::string_view prefix) {
    std::ifstream in(std::string(VKLLM_SOURCE_DIR) + "/tests/fixtures/image/mtmd_preprocess.txt");
    REQUIRE(in);
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);)
        if (line.rfind(prefix, 0) == 0) out.push_back(line);
    return out;
}

PreprocessKind kind_of(const std::string& name) {
    for (PreprocessKind k :
         {PreprocessKind::Square, PreprocessKind::PadSquare, PreprocessKind::Idefics3, PreprocessKind::SmartResize})
        if (preprocess_kind_name(k) == name) return k;
    FAIL("unknown kind " << name);
    return PreprocessKind::Square;
}

}  // namespace

TEST_CASE("every resize filter and padding matches mtmd's img_tool::resize byte for byte") {
    const auto lines = fixture_lines("resize ");
    REQUIRE(lines.size() == 156);
    const ResizeFilter filters[] = {ResizeFilter::Bilinear, ResizeFilter::Bicubic, ResizeFilter::BicubicPillow,
                                    ResizeFilter::LanczosPillow};
    const PadStyle pads[] = {PadStyle::None, PadStyle::Ceil, PadStyle::Nearest};
    for (const std::string& line : lines) {
        CAPTURE(line);
        std::istringstream s(line.substr(7));
        int algo, pad;
        uint32_t sw, sh, tw, th, seed, nx, ny;
        std::string arrow, hash;
        s >> algo >> pad >> sw >> sh >> tw >> th >> seed >> arrow >> nx >> ny >> hash;
        REQUIRE(s);
        const RgbImage out =
            resize_fit(random_image(sw, sh, seed), tw, th, filters[algo], pads[pad], {122, 116, 104});
        CHECK(out.nx == nx);
        CHECK(out.ny == ny);
        CHECK(fmt::format("{:016x}", fnv1a(out.rgb.data(), out.rgb.size())) == hash);
    }
}

TEST_CASE("each kind's tiles match mtmd's preprocessor float for float") {
    const auto lines = fixture_lines("preprocess ");
    REQUIRE(lines.size() == 108);
    for (const std::string& line : lines) {
        CAPTURE(line);
        std::istringstream s(line.substr(11));
        std::string kind, arrow, grid_word, tiles_word;
        uint32_t image_size, patch, preproc, w, h, seed, cols, rows, n;
        s >> kind >> image_size >> patch >> preproc >> w >> h >> seed >> arrow >> grid_word >> cols >> rows >>
            tiles_word >> n;
        REQUIRE(s);
        PreprocessSpec spec;
        spec.kind = kind_of(kind);
        spec.image_size = image_size;
        spec.patch_size = patch;
        spec.preproc_image_size = preproc;
        spec.merge = 2;
        spec.min_pixels = kSmartResizeMinTokens * (patch * 2) * (patch * 2);
        spec.max_pixels = kSmartResizeMaxTokens * (patch * 2) * (patch * 2);
        spec.mean = {0.48145466f, 0.4578275f, 0.40821073f};
        spec.std = {0.26862954f, 0.26130258f, 0.27577711f};
        const PreprocessedImage p = preprocess_image(random_image(w, h, seed), spec);
        CHECK(p.grid_cols == cols);
        CHECK(p.grid_rows == rows);
        REQUIRE(p.tiles.size() == n);
        const TileLayout layout = preprocess_layout(w, h, spec);
        CHECK(layout.n_tiles() == n);
        for (const ImageTile& t : p.tiles) {
            std::string word, hash;
            uint32_t tx, ty;
            s >> word >> tx >> ty >> hash;
            CHECK(t.nx == tx);
            CHECK(t.ny == ty);
            CHECK(fmt::format("{:016x}", tile_hash(t)) == hash);
        }
    }
}
