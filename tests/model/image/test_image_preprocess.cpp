// preprocess_image: each kind's tile count, sizes and normalised values on images small enough to
// work out by hand, the Idefics3 and SmartResize grids for several aspect ratios, and every spec
// check.
#include <cmath>
#include <limits>
#include <string>

#include "model/image/image_preprocess.h"
#include "support/model_test_util.h"

using namespace vkllm;

namespace {

PreprocessSpec spec_of(PreprocessKind k, uint32_t image_size, uint32_t patch) {
    PreprocessSpec s;
    s.kind = k;
    s.image_size = image_size;
    s.patch_size = patch;
    s.mean = {0.5f, 0.25f, 0.75f};
    s.std = {0.5f, 0.25f, 0.125f};
    return s;
}

PreprocessSpec qwen(uint32_t patch = 14, uint32_t merge = 2) {
    PreprocessSpec s = spec_of(PreprocessKind::SmartResize, 0, patch);
    s.merge = merge;
    const uint32_t unit = patch * merge * patch * merge;
    s.min_pixels = kSmartResizeMinTokens * unit;
    s.max_pixels = kSmartResizeMaxTokens * unit;
    return s;
}

RgbImage solid(uint32_t nx, uint32_t ny, std::array<uint8_t, 3> c) {
    RgbImage img;
    img.nx = nx;
    img.ny = ny;
    img.rgb.resize(size_t(nx) * ny * 3);
    for (size_t i = 0; i < img.rgb.size(); ++i) img.rgb[i] = c[i % 3];
    return img;
}

// mtmd's normalisation, in float.
float norm(uint8_t v, const PreprocessSpec& s, size_t c) { return (float(v) / 255.0f - s.mean[c]) / s.std[c]; }

float at(const ImageTile& t, size_t c, uint32_t x, uint32_t y) { return t.chw[c * t.nx * t.ny + size_t(y) * t.nx + x]; }

std::string error_of(const RgbImage& img, const PreprocessSpec& s) {
    try {
        (void)preprocess_image(img, s);
    } catch (const std::invalid_argument& e) {
        return e.what();
    }
    return "(accepted)";
}

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("Square: one tile, fitted bilinear onto black bars, normalised per channel") {
    const PreprocessSpec s = spec_of(PreprocessKind::Square, 4, 2);
    // 2 x 1 of grey 0 and 255: fitted to 4 x 2 at rows 1..2 (0, 85, 170, 255 across), rows 0 and 3 black.
    RgbImage img = solid(2, 1, {0, 0, 0});
    std::fill(img.rgb.begin() + 3, img.rgb.end(), uint8_t(255));
    const PreprocessedImage p = preprocess_image(img, s);
    REQUIRE(p.tiles.size() == 1);
    CHECK(p.grid_cols == 0);
    const ImageTile& t = p.tiles[0];
    REQUIRE(t.nx == 4);
    REQUIRE(t.ny == 4);
    REQUIRE(t.chw.size() == 48);
    for (size_t c = 0; c < 3; ++c) {
        CAPTURE(c);
        for (uint32_t x = 0; x < 4; ++x) {
            CHECK(at(t, c, x, 0) == norm(0, s, c));
            CHECK(at(t, c, x, 3) == norm(0, s, c));
        }
        const uint8_t row[] = {0, 85, 170, 255};
        for (uint32_t x = 0; x < 4; ++x) CHECK(at(t, c, x, 1) == norm(row[x], s, c));
    }
    CHECK(at(t, 0, 3, 2) == 1.0f);    // (1 - .5) / .5
    CHECK(at(t, 2, 0, 0) == -6.0f);   // (0 - .75) / .125
    CHECK(at(t, 1, 3, 1) == 3.0f);    // (1 - .25) / .25
}

TEST_CASE("PadSquare: the square is padded with LLaVA's grey, bicubic inside") {
    const PreprocessSpec s = spec_of(PreprocessKind::PadSquare, 4, 2);
    const PreprocessedImage p = preprocess_image(solid(1, 2, {10, 200, 30}), s);
    REQUIRE(p.tiles.size() == 1);
    const ImageTile& t = p.tiles[0];
    REQUIRE(t.nx == 4);
    // 1 x 2 fitted to 2 x 4 at column offset 1: columns 0 and 3 are (122, 116, 104).
    const uint8_t grey[] = {122, 116, 104}, colour[] = {10, 200, 30};
    for (size_t c = 0; c < 3; ++c)
        for (uint32_t y = 0; y < 4; ++y) {
            CHECK(at(t, c, 0, y) == norm(grey[c], s, c));
            CHECK(at(t, c, 3, y) == norm(grey[c], s, c));
            CHECK(at(t, c, 1, y) == norm(colour[c], s, c));  // a solid colour stays itself
        }
    // An image of the tile's size is only normalised.
    const PreprocessedImage same = preprocess_image(solid(4, 4, {1, 2, 3}), s);
    CHECK(same.tiles[0].chw[0] == norm(1, s, 0));
}

TEST_CASE("Idefics3: slices row by row, then the global tile") {
    PreprocessSpec s = spec_of(PreprocessKind::Idefics3, 4, 2);
    s.preproc_image_size = 8;
    // 6 x 3: longest edge to 8 -> 8 x 4 -> a 2 x 1 grid, 3 tiles.
    RgbImage img = solid(6, 3, {0, 0, 0});
    for (uint32_t y = 0; y < 3; ++y)
        for (uint32_t x = 3; x < 6; ++x) img.rgb[(y * 6 + x) * 3] = 255;  // right half red
    const PreprocessedImage p = preprocess_image(img, s);
    CHECK(p.grid_cols == 2);
    CHECK(p.grid_rows == 1);
    REQUIRE(p.tiles.size() == 3);
    for (const ImageTile& t : p.tiles) CHECK((t.nx == 4 && t.ny == 4));
    // The left slice is black, the right one red (bicubic of a step, away from the edge).
    CHECK(at(p.tiles[0], 0, 0, 0) == norm(0, s, 0));
    CHECK(at(p.tiles[1], 0, 3, 3) == norm(255, s, 0));
    // The global tile is the whole image stretched: black on its left, red on its right.
    CHECK(at(p.tiles[2], 0, 0, 2) == norm(0, s, 0));
    CHECK(at(p.tiles[2], 0, 3, 2) == norm(255, s, 0));

    // Grids for several aspect ratios (the layout alone).
    struct Case {
        uint32_t w, h, cols, rows;
    };
    for (const Case& c : {Case{6, 3, 2, 1}, Case{3, 6, 1, 2}, Case{10, 10, 2, 2}, Case{1, 1, 2, 2},
                          Case{100, 10, 2, 1}, Case{10, 100, 1, 2}, Case{8, 7, 2, 2}}) {
        CAPTURE(c.w);
        CAPTURE(c.h);
        const TileLayout l = preprocess_layout(c.w, c.h, s);
        CHECK(l.grid_cols == c.cols);
        CHECK(l.grid_rows == c.rows);
        CHECK(l.n_tiles() == c.cols * c.rows + 1);
    }
    // SmolVLM's sizes: 512 tiles, longest edge 2048. 1920 x 1080 -> 2048 x 1152 -> ceil to 2048 x 1536;
    // a tall 600 x 4000 -> 308 x 2048 -> 1 x 4. mtmd computes the scale in float: 2048 / 4000 is
    // 0.51200002, so 4000 x 3000 gives a height of 1536.0001, rounded up to 2048: 4 x 4 slices, not the
    // 4 x 3 of exact arithmetic (llama.cpp 9749 makes 16 slices + 1 too; so for 960 x 720).
    PreprocessSpec smol = spec_of(PreprocessKind::Idefics3, 512, 16);
    smol.preproc_image_size = 2048;
    CHECK(preprocess_layout(4000, 3000, smol).n_tiles() == 17);
    CHECK(preprocess_layout(960, 720, smol).n_tiles() == 17);
    CHECK(preprocess_layout(1920, 1080, smol).n_tiles() == 13);
    CHECK(preprocess_layout(1920, 1080, smol).grid_rows == 3);
    CHECK(preprocess_layout(600, 4000, smol).grid_cols == 1);
    CHECK(preprocess_layout(600, 4000, smol).grid_rows == 4);
    // Without preproc_image_size mtmd makes the global tile only.
    s.preproc_image_size = 0;
    const PreprocessedImage g = preprocess_image(img, s);
    CHECK(g.grid_cols == 0);
    REQUIRE(g.tiles.size() == 1);
    CHECK(g.tiles[0].nx == 4);
}

TEST_CASE("SmartResize: sides rounded to multiples of patch x merge within the pixel budget") {
    struct Case {
        uint32_t w, h, nx, ny;
    };
    // patch 14, merge 2: multiples of 28, 6272 .. 3211264 pixels.
    for (const Case& c : {
             Case{1920, 1080, 1932, 1092},  // rounded to nearest: 68.6 -> 69, 38.6 -> 39
             Case{4000, 3000, 2044, 1540},  // over the budget: scaled by 1/1.933, rounded down
             Case{10, 10, 84, 84},          // tiny: one unit, under the budget, scaled up 7.9x, rounded up
             Case{1000, 20, 1008, 28},      // wide: at least one unit high
             Case{20, 1000, 28, 1008},      // tall
             Case{28, 28, 84, 84},
         }) {
        CAPTURE(c.w);
        CAPTURE(c.h);
        const TileLayout l = preprocess_layout(c.w, c.h, qwen());
        CHECK(l.tile_nx == c.nx);
        CHECK(l.tile_ny == c.ny);
        CHECK(l.n_tiles() == 1);
    }
    // A solid image of an exact size with a budget that keeps it: only normalised.
    PreprocessSpec s = qwen();
    s.min_pixels = 28 * 28;
    const PreprocessedImage p = preprocess_image(solid(56, 28, {255, 0, 128}), s);
    REQUIRE(p.tiles.size() == 1);
    CHECK(p.tiles[0].nx == 56);
    CHECK(p.tiles[0].ny == 28);
    CHECK(at(p.tiles[0], 2, 55, 27) == norm(128, s, 2));
    // Merge 1, units of 14: 30 x 29 rounds to 28 x 28 = 784 pixels, under the budget of 8 x 196, so
    // both sides scale by sqrt(1568 / 870) and round up: 42 x 42. A solid image stays solid inside.
    const PreprocessedImage q = preprocess_image(solid(30, 29, {200, 200, 200}), qwen(14, 1));
    CHECK(q.tiles[0].nx == 42);
    CHECK(q.tiles[0].ny == 42);
    CHECK(at(q.tiles[0], 0, 5, 5) == norm(200, s, 0));
}

TEST_CASE("a bad spec or image is refused naming the field") {
    const RgbImage img = solid(4, 4, {1, 2, 3});
    auto with = [](PreprocessSpec s, auto edit) {
        edit(s);
        return s;
    };
    const PreprocessSpec sq = spec_of(PreprocessKind::Square, 28, 14);
    CHECK(contains(error_of(img, with(sq, [](auto& s) { s.patch_size = 0; })), "square: patch_size is 0"));
    CHECK(contains(error_of(img, with(sq, [](auto& s) { s.image_size = 0; })), "image_size is 0"));
    CHECK(contains(error_of(img, with(sq, [](auto& s) { s.image_size = 30; })),
                   "image_size 30 is not a multiple of patch_size 14"));
    CHECK(contains(error_of(img, with(sq, [](auto& s) { s.image_size = 4102; })), "image_size 4102 is above 4096"));
    CHECK(contains(error_of(img, with(sq, [](auto& s) { s.std[1] = 0; })), "image_std[1] is 0"));
    CHECK(contains(error_of(img, with(sq, [](auto& s) { s.mean[2] = std::numeric_limits<float>::quiet_NaN(); })),
                   "image_mean[2] is nan"));
    PreprocessSpec id = spec_of(PreprocessKind::Idefics3, 28, 14);
    CHECK(contains(error_of(img, with(id, [](auto& s) { s.preproc_image_size = 100000; })),
                   "idefics3: preproc_image_size 100000 is above 4096"));
    CHECK(contains(error_of(img, with(qwen(), [](auto& s) { s.merge = 0; })), "smart_resize: merge is 0"));
    CHECK(contains(error_of(img, with(qwen(), [](auto& s) { s.max_pixels = 0; })), "max_pixels is 0"));
    CHECK(contains(error_of(img, with(qwen(), [](auto& s) { s.min_pixels = s.max_pixels + 1; })),
                   "is above max_pixels"));
    CHECK(contains(error_of(img, with(qwen(), [](auto& s) { s.min_pixels = 0, s.max_pixels = 100; })),
                   "max_pixels 100 is below one merged patch (28 x 28)"));
    CHECK(contains(error_of(img, with(qwen(), [](auto& s) { s.max_pixels = 1u << 30; })), "is above 16777216"));
    // A budget that scales a sliver up past 16 Mi pixels: 4096 x 1 at min_pixels 16 Mi, units of 28,
    // rounds to 4116 x 28, scales by sqrt(16 Mi / 4096) = 64 and rounds up: 262164 x 84.
    CHECK(contains(error_of(solid(4096, 1, {0, 0, 0}), with(qwen(), [](auto& s) {
                       s.min_pixels = s.max_pixels = 16u << 20;
                   })),
                   "smart_resize: a 4096 x 1 image would become 262164 x 84, above 16777216 pixels"));
    CHECK(contains(error_of(RgbImage{}, sq), "the image is 0 x 0 pixels"));
    RgbImage short_pixels = img;
    short_pixels.rgb.pop_back();
    CHECK(contains(error_of(short_pixels, sq), "47 bytes of pixels for a 4 x 4 image"));
    CHECK_THROWS_AS(preprocess_layout(4, 4, with(sq, [](auto& s) { s.kind = PreprocessKind(9); })),
                    std::invalid_argument);
    CHECK(preprocess_kind_name(PreprocessKind::SmartResize) == "smart_resize");
}
