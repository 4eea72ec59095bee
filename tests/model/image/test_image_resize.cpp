// The resize filters on tiny images, against values worked out by hand from each filter's
// definition (the u8 truncation or rounding and the clamping included), the fit with its padding,
// and the crop.
#include "model/image/image_resize.h"
#include "support/model_test_util.h"

using namespace vkllm;

namespace {

// A grey image: every pixel's three channels equal its value.
RgbImage grey(uint32_t nx, uint32_t ny, std::vector<uint8_t> v) {
    RgbImage img;
    img.nx = nx;
    img.ny = ny;
    for (uint8_t x : v) img.rgb.insert(img.rgb.end(), {x, x, x});
    return img;
}

std::vector<uint8_t> red_of(const RgbImage& img) {
    std::vector<uint8_t> out;
    for (size_t i = 0; i < img.rgb.size(); i += 3) out.push_back(img.rgb[i]);
    return out;
}

}  // namespace

TEST_CASE("bilinear aligns the corners and truncates to u8") {
    // 2 x 2 -> 3 x 3: sample positions 0, 0.5, 1 on each axis. The centre is
    // lerp(lerp(0, 100, .5), lerp(200, 255, .5), .5) = lerp(50, 227.5, .5) = 138.75 -> 138.
    const RgbImage out = resize_rgb(grey(2, 2, {0, 100, 200, 255}), 3, 3, ResizeFilter::Bilinear);
    CHECK(red_of(out) == std::vector<uint8_t>{0, 50, 100, 100, 138, 177, 200, 227, 255});
    // One output column samples the first source column only.
    CHECK(red_of(resize_rgb(grey(3, 1, {9, 50, 70}), 1, 1, ResizeFilter::Bilinear)) == std::vector<uint8_t>{9});
    // A single source pixel spreads everywhere.
    CHECK(red_of(resize_rgb(grey(1, 1, {42}), 2, 2, ResizeFilter::Bilinear)) == std::vector<uint8_t>(4, 42));
}

TEST_CASE("bicubic interpolates through four clamped samples, rounds and clamps to u8") {
    // 2 x 1 -> 3 x 1 of [0, 255]: x = j * 2/3. At j = 1 (t = 2/3) the samples are 0, 0, 255, 255
    // (edges clamped): a1 = 255 - 255/6 = 212.5, a2 = 127.5, a3 = -85, so
    // 212.5 t + 127.5 t^2 - 85 t^3 = 173.15 -> 173. At j = 2 (t = 1/3) the samples are 0, 255, 255, 255:
    // 255 + 85 t - 127.5 t^2 + 42.5 t^3 = 270.7 -> clamped to 255.
    CHECK(red_of(resize_rgb(grey(2, 1, {0, 255}), 3, 1, ResizeFilter::Bicubic)) == std::vector<uint8_t>{0, 173, 255});
    // Mirrored: 255 - 173.15 = 81.85 -> 82, and the undershoot -15.7 clamps to 0.
    CHECK(red_of(resize_rgb(grey(2, 1, {255, 0}), 3, 1, ResizeFilter::Bicubic)) == std::vector<uint8_t>{255, 82, 0});
}

TEST_CASE("Pillow's bicubic normalises its taps, in 22-bit fixed point") {
    // 4 -> 2 of [0, 0, 255, 255]: scale 2 widens the kernel to support 4; output 0 is centred on 1.0
    // and takes inputs 0..3 at distances .25, .25, .75, 1.25 (in kernel units): weights
    // .8671875, .8671875, .2265625, -.0703125, summing to 1.890625. 255 (.2265625 - .0703125) / 1.890625
    // = 21.07 -> 21; output 1 is the mirror, 233.93 -> 234.
    CHECK(red_of(resize_rgb(grey(4, 1, {0, 0, 255, 255}), 2, 1, ResizeFilter::BicubicPillow)) ==
          std::vector<uint8_t>{21, 234});
    // 2 -> 4 of [0, 255] overshoots at both ends (-23 and 278) and clamps: 0, 53, 202, 255.
    CHECK(red_of(resize_rgb(grey(2, 1, {0, 255}), 4, 1, ResizeFilter::BicubicPillow)) ==
          std::vector<uint8_t>{0, 53, 202, 255});
    // Only the axis that changes is filtered: a column stays as it is.
    const RgbImage col = resize_rgb(grey(1, 3, {10, 20, 30}), 2, 3, ResizeFilter::BicubicPillow);
    CHECK(red_of(col) == std::vector<uint8_t>{10, 10, 20, 20, 30, 30});
}

TEST_CASE("Lanczos keeps a constant image constant and an exact-size copy exact") {
    CHECK(red_of(resize_rgb(grey(5, 3, std::vector<uint8_t>(15, 77)), 3, 7, ResizeFilter::LanczosPillow)) ==
          std::vector<uint8_t>(21, 77));
    const RgbImage img = grey(3, 2, {1, 2, 3, 4, 5, 6});
    for (ResizeFilter f : {ResizeFilter::Bilinear, ResizeFilter::Bicubic, ResizeFilter::BicubicPillow,
                           ResizeFilter::LanczosPillow})
        CHECK(resize_rgb(img, 3, 2, f).rgb == img.rgb);
}

TEST_CASE("a fit scales to the target's limiting side, rounds the other up and centres it on the pad colour") {
    // 2 x 1 into 4 x 4: scale 2, fitted 4 x 2 at row offset (4 - 2) / 2 = 1.
    const RgbImage out =
        resize_fit(grey(2, 1, {0, 255}), 4, 4, ResizeFilter::Bilinear, PadStyle::Ceil, {122, 116, 104});
    REQUIRE(out.nx == 4);
    REQUIRE(out.ny == 4);
    const std::vector<uint8_t> pad = {122, 116, 104};
    for (uint32_t y : {0u, 3u})
        for (uint32_t x = 0; x < 4; ++x)
            CHECK(std::vector<uint8_t>(&out.rgb[(y * 4 + x) * 3], &out.rgb[(y * 4 + x) * 3] + 3) == pad);
    // Rows 1 and 2 hold the bilinear 2 -> 4 of [0, 255]: 0, 85, 170, 255.
    CHECK(red_of(out) == std::vector<uint8_t>{122, 122, 122, 122, 0, 85, 170, 255, 0, 85, 170, 255, 122, 122, 122, 122});
    // 3 x 1 into 2 x 2: scale 2/3, height ceil(2/3) = 1 at offset (2 - 1) / 2 = 0 with Ceil; with
    // Nearest round(2/3) = 1 at offset round(0.5) = 1.
    const RgbImage ceil = resize_fit(grey(3, 1, {5, 5, 5}), 2, 2, ResizeFilter::Bilinear, PadStyle::Ceil, {0, 0, 0});
    CHECK(red_of(ceil) == std::vector<uint8_t>{5, 5, 0, 0});
    const RgbImage near = resize_fit(grey(3, 1, {5, 5, 5}), 2, 2, ResizeFilter::Bilinear, PadStyle::Nearest, {0, 0, 0});
    CHECK(red_of(near) == std::vector<uint8_t>{0, 0, 5, 5});
    // No padding: stretched.
    CHECK(red_of(resize_fit(grey(2, 1, {0, 255}), 2, 2, ResizeFilter::Bilinear, PadStyle::None, {1, 1, 1})) ==
          std::vector<uint8_t>{0, 255, 0, 255});
    // A sliver that rounds to no pixel keeps one (mtmd would stop on an assertion).
    const RgbImage sliver =
        resize_fit(grey(9, 1, std::vector<uint8_t>(9, 50)), 4, 4, ResizeFilter::Bicubic, PadStyle::Nearest, {0, 0, 0});
    CHECK(sliver.nx == 4);
    CHECK(sliver.ny == 4);
}

TEST_CASE("crop takes a rectangle and refuses one outside the image") {
    const RgbImage img = grey(3, 3, {1, 2, 3, 4, 5, 6, 7, 8, 9});
    CHECK(red_of(crop_rgb(img, 1, 1, 2, 2)) == std::vector<uint8_t>{5, 6, 8, 9});
    CHECK_THROWS_AS(crop_rgb(img, 2, 0, 2, 1), std::invalid_argument);
    CHECK_THROWS_AS(crop_rgb(img, 0, 0, 0, 1), std::invalid_argument);
    CHECK_THROWS_AS(crop_rgb(img, 4, 0, 1, 1), std::invalid_argument);
    CHECK_THROWS_AS(resize_rgb(RgbImage{}, 2, 2, ResizeFilter::Bilinear), std::invalid_argument);
    CHECK_THROWS_AS(resize_rgb(img, 0, 2, ResizeFilter::Bilinear), std::invalid_argument);
}
