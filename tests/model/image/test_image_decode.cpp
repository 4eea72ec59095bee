// Image decoding: each format from bytes written in the test, alpha and 16-bit PNG as mtmd takes
// them, and every way a file can be bad (unknown, truncated, corrupt, zero or oversized).
#include <chrono>
#include <string>

#include "model/image/image_decode.h"
#include "support/image_files.h"
#include "support/model_test_util.h"

using namespace vkllm;
namespace imf = image_files;

namespace {

std::vector<uint8_t> ramp_rgb(uint32_t w, uint32_t h) {
    std::vector<uint8_t> rgb(size_t(w) * h * 3);
    for (uint32_t y = 0; y < h; ++y)
        for (uint32_t x = 0; x < w; ++x) {
            uint8_t* p = &rgb[(size_t(y) * w + x) * 3];
            p[0] = uint8_t(x * 255 / std::max(1u, w - 1));
            p[1] = uint8_t(y * 255 / std::max(1u, h - 1));
            p[2] = uint8_t((x + y) * 255 / std::max(1u, w + h - 2));
        }
    return rgb;
}

std::string error_of(std::span<const uint8_t> bytes, const ImageLimits& limits = {}) {
    try {
        (void)decode_image(bytes, limits);
    } catch (const ImageError& e) {
        return e.what();
    }
    return "(decoded)";
}

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

int max_abs_diff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
    int m = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::abs(int(a[i]) - int(b[i])));
    return m;
}

const uint8_t kPalette[4][3] = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {10, 20, 30}};

}  // namespace

TEST_CASE("image formats are recognised by their magic bytes") {
    const std::vector<uint8_t> rgb = ramp_rgb(3, 2);
    CHECK(sniff_image_format(imf::png_rgb(3, 2, rgb)) == ImageFormat::Png);
    CHECK(sniff_image_format(imf::jpeg(3, 2, rgb)) == ImageFormat::Jpeg);
    CHECK(sniff_image_format(imf::gif(1, 1, kPalette, {{0}})) == ImageFormat::Gif);
    CHECK(sniff_image_format(imf::bmp(3, 2, rgb)) == ImageFormat::Bmp);
    CHECK(sniff_image_format(imf::webp(3, 2, rgb, false, true)) == ImageFormat::WebP);
    const std::string gif87 = "GIF87a", wave = "RIFF\x10\0\0\0WAVEfmt ", tga = std::string("\0\0\2\0\0\0", 6);
    CHECK(sniff_image_format(std::span(reinterpret_cast<const uint8_t*>(gif87.data()), gif87.size())) ==
          ImageFormat::Gif);
    CHECK_FALSE(sniff_image_format(std::span(reinterpret_cast<const uint8_t*>(wave.data()), wave.size())));
    CHECK_FALSE(sniff_image_format(std::span(reinterpret_cast<const uint8_t*>(tga.data()), tga.size())));
    CHECK_FALSE(sniff_image_format({}));
    CHECK(image_format_name(ImageFormat::WebP) == "WebP");
}

TEST_CASE("PNG, GIF, BMP and lossless WebP decode to exactly the pixels written") {
    const uint32_t w = 5, h = 3;
    const std::vector<uint8_t> rgb = ramp_rgb(w, h);
    for (const auto& [name, bytes] : {std::pair{"png", imf::png_rgb(w, h, rgb)}, std::pair{"bmp", imf::bmp(w, h, rgb)},
                                      std::pair{"webp", imf::webp(w, h, rgb, false, true)}}) {
        CAPTURE(name);
        const RgbImage img = decode_image(bytes);
        CHECK(img.nx == w);
        CHECK(img.ny == h);
        CHECK(img.rgb == rgb);
    }
    // GIF: palette indices, 2 x 2.
    const RgbImage g = decode_image(imf::gif(2, 2, kPalette, {{0, 1, 2, 3}}));
    REQUIRE(g.nx == 2);
    REQUIRE(g.ny == 2);
    CHECK(g.rgb == std::vector<uint8_t>{255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30});
}

TEST_CASE("an animated GIF decodes to its first frame") {
    const RgbImage g = decode_image(imf::gif(2, 1, kPalette, {{2, 3}, {0, 0}, {1, 1}}));
    CHECK(g.rgb == std::vector<uint8_t>{0, 0, 255, 10, 20, 30});
}

TEST_CASE("lossy JPEG and WebP decode close to what was written") {
    const uint32_t w = 16, h = 16;
    const std::vector<uint8_t> rgb = ramp_rgb(w, h);
    for (const auto& [name, bytes] :
         {std::pair{"jpeg", imf::jpeg(w, h, rgb, 95)}, std::pair{"webp", imf::webp(w, h, rgb, false, false)}}) {
        CAPTURE(name);
        const RgbImage img = decode_image(bytes);
        CHECK(img.nx == w);
        CHECK(img.ny == h);
        CHECK(max_abs_diff(img.rgb, rgb) <= 24);  // a smooth ramp: lossy coding moves it only a little
    }
}

TEST_CASE("alpha is dropped, not blended, and grey is replicated, as stb gives them to mtmd") {
    // RGBA: (10, 20, 30, 0) stays (10, 20, 30) although it is fully transparent.
    const RgbImage rgba = decode_image(imf::png(2, 1, 4, {10, 20, 30, 0, 200, 100, 50, 128}));
    CHECK(rgba.rgb == std::vector<uint8_t>{10, 20, 30, 200, 100, 50});
    const RgbImage ga = decode_image(imf::png(2, 1, 2, {77, 0, 200, 255}));
    CHECK(ga.rgb == std::vector<uint8_t>{77, 77, 77, 200, 200, 200});
    const RgbImage grey = decode_image(imf::png(1, 1, 1, {9}));
    CHECK(grey.rgb == std::vector<uint8_t>{9, 9, 9});
    const RgbImage wa = decode_image(imf::webp(2, 1, {10, 20, 30, 0, 200, 100, 50, 128}, true, true));
    CHECK(wa.rgb == std::vector<uint8_t>{10, 20, 30, 200, 100, 50});
}

TEST_CASE("16-bit PNG samples keep their high byte") {
    const RgbImage img = decode_image(imf::png(2, 1, 3, {0x1234, 0xffff, 0x00ff, 0x8000, 0x7fff, 0x0100}, 16));
    CHECK(img.rgb == std::vector<uint8_t>{0x12, 0xff, 0x00, 0x80, 0x7f, 0x01});
}

TEST_CASE("unknown bytes are refused naming what they start with") {
    const std::string hello = "hello world";
    const std::string e = error_of(std::span(reinterpret_cast<const uint8_t*>(hello.data()), hello.size()));
    CHECK(contains(e, "unknown image format"));
    CHECK(contains(e, "68 65 6c 6c 6f"));
    CHECK(contains(error_of({}), "unknown image format"));
}

TEST_CASE("truncated files are refused or decoded at their declared size, never read past their end") {
    const uint32_t w = 8, h = 8;
    const std::vector<uint8_t> rgb = ramp_rgb(w, h);
    const std::pair<const char*, std::vector<uint8_t>> files[] = {
        {"PNG", imf::png_rgb(w, h, rgb)},          {"JPEG", imf::jpeg(w, h, rgb)},
        {"GIF", imf::gif(2, 2, kPalette, {{0, 1, 2, 3}})}, {"BMP", imf::bmp(w, h, rgb)},
        {"WebP", imf::webp(w, h, rgb, false, true)},
    };
    for (const auto& [name, bytes] : files) {
        CAPTURE(std::string(name));
        // Cut inside the header: always an error naming the format.
        const std::vector<uint8_t> head(bytes.begin(), bytes.begin() + 12);
        CHECK(contains(error_of(head), name));
        for (size_t cut = 1; cut < bytes.size(); ++cut) {
            // Heap copies of exactly `cut` bytes, so that a read past the end is a sanitizer report.
            const std::vector<uint8_t> part(bytes.begin(), bytes.begin() + long(cut));
            try {
                const RgbImage img = decode_image(part);
                CHECK(img.rgb.size() == size_t(img.nx) * img.ny * 3);  // stb fills what is missing of some formats
            } catch (const ImageError& e) {
                CHECK(contains(e.what(), name));
            }
        }
    }
    // Half a PNG or WebP is refused. (stb reads zeros past the end of a BMP or a JPEG's entropy-coded
    // data, so those decode with a black or grey bottom, in mtmd as here.)
    for (const auto& [name, bytes] : {files[0], files[4]}) {
        CAPTURE(std::string(name));
        const std::vector<uint8_t> half(bytes.begin(), bytes.begin() + long(bytes.size() / 2));
        CHECK(contains(error_of(half), name));
    }
}

TEST_CASE("corrupt files are refused with the decoder's reason") {
    std::vector<uint8_t> png = imf::png_rgb(4, 4, ramp_rgb(4, 4));
    std::vector<uint8_t> bad_depth = png;
    bad_depth[24] = 7;  // IHDR bit depth
    CHECK(contains(error_of(bad_depth), "corrupt or truncated PNG image: stb_image:"));
    std::vector<uint8_t> bad_zlib = png;
    bad_zlib[41] ^= 0xff;  // the zlib header of IDAT
    CHECK(contains(error_of(bad_zlib), "PNG"));
    std::vector<uint8_t> webp = imf::webp(4, 4, ramp_rgb(4, 4), false, true);
    for (size_t i = 20; i < webp.size(); ++i) webp[i] ^= 0x5a;
    CHECK(contains(error_of(webp), "WebP image: libwebp:"));
    std::vector<uint8_t> bmp = imf::bmp(4, 4, ramp_rgb(4, 4));
    bmp[28] = 13;  // bits per pixel
    CHECK(contains(error_of(bmp), "BMP"));
}

TEST_CASE("an image of zero width or height is refused") {
    const uint8_t pal[4][3] = {};
    CHECK(contains(error_of(imf::png_header_only(0, 10)), "PNG"));
    CHECK(contains(error_of(imf::png_header_only(10, 0)), "PNG"));
    CHECK(contains(error_of(imf::gif(0, 0, pal, {{}})), "GIF"));
    CHECK(contains(error_of(imf::bmp(0, 3, {})), "BMP"));
}

TEST_CASE("a PNG whose data inflates far beyond its declared size is refused before stb inflates it") {
    // 10 x 10 RGB needs 10 x 31 bytes of rows; this IDAT inflates to 64 MiB of zeros (64 KiB compressed).
    std::vector<uint8_t> zeros(64u << 20, 0);
    uLongf n = compressBound(uLong(zeros.size()));
    std::vector<uint8_t> z(n);
    REQUIRE(compress2(z.data(), &n, zeros.data(), uLong(zeros.size()), 9) == Z_OK);
    z.resize(n);
    CHECK(z.size() < 100000);
    std::vector<uint8_t> bomb = imf::png_signature_and_ihdr(10, 10, 8, 2);
    // Split over several IDAT chunks, as encoders do: the stream continues across them.
    for (size_t at = 0; at < z.size(); at += 8192)
        imf::png_chunk(bomb, "IDAT", std::vector<uint8_t>(z.begin() + long(at), z.begin() + long(std::min(z.size(), at + 8192))));
    imf::png_chunk(bomb, "IEND", {});
    const std::string e = error_of(bomb);
    CHECK(contains(e, "PNG image data inflates to more than"));
    CHECK(contains(e, "declared 10 x 10 pixels"));
    // The same rows split over many small IDAT chunks still decode (the guard follows the stream).
    const std::vector<uint8_t> rgb = ramp_rgb(40, 30);
    std::vector<uint8_t> png = imf::png_rgb(40, 30, rgb);
    const uint32_t idat_len = uint32_t(png[33]) << 24 | uint32_t(png[34]) << 16 | uint32_t(png[35]) << 8 | png[36];
    const std::vector<uint8_t> idat(png.begin() + 41, png.begin() + 41 + idat_len);
    std::vector<uint8_t> split = imf::png_signature_and_ihdr(40, 30, 8, 2);
    for (size_t at = 0; at < idat.size(); at += 7)
        imf::png_chunk(split, "IDAT", std::vector<uint8_t>(idat.begin() + long(at), idat.begin() + long(std::min(idat.size(), at + 7))));
    imf::png_chunk(split, "IEND", {});
    CHECK(decode_image(split).rgb == rgb);
}

TEST_CASE("a declared size over the pixel limit is refused before decoding") {
    // 100000 x 100000 would be 30 GB of RGB: refused from the header alone, at once.
    const auto t0 = std::chrono::steady_clock::now();
    const std::string e = error_of(imf::png_header_only(100000, 100000));
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1));
    CHECK(contains(e, "PNG image declares 100000 x 100000 = 10000000000 pixels"));
    CHECK(contains(e, "over the limit of 67108864 pixels"));
    CHECK(contains(e, "--image-max-pixels"));

    // Small files whose headers declare a huge canvas, in each format stb reads.
    const std::vector<uint8_t> rgb = ramp_rgb(4, 4);
    std::vector<uint8_t> jpeg = imf::jpeg(4, 4, rgb);
    const size_t sof = [&] {  // the baseline frame header libjpeg writes
        for (size_t i = 2; i + 1 < jpeg.size(); ++i)
            if (jpeg[i] == 0xFF && jpeg[i + 1] == 0xC0) return i;
        return size_t(0);
    }();
    REQUIRE(sof > 0);
    jpeg[sof + 5] = jpeg[sof + 6] = jpeg[sof + 7] = jpeg[sof + 8] = 0xFF;  // 65535 x 65535
    CHECK(contains(error_of(jpeg), "JPEG image declares 65535 x 65535 = 4294836225 pixels, over the limit"));
    std::vector<uint8_t> gif = imf::gif(4, 4, kPalette, {std::vector<uint8_t>(16)});
    gif[6] = gif[7] = gif[8] = gif[9] = 0xFF;
    CHECK(contains(error_of(gif), "GIF image declares 65535 x 65535"));
    std::vector<uint8_t> bmp = imf::bmp(4, 4, rgb);
    bmp[20] = bmp[24] = 0x10;  // 1048580 x 1048580
    CHECK(contains(error_of(bmp), "BMP image declares 1048580 x 1048580"));
    bmp = imf::bmp(4, 4, rgb);
    bmp[22] = bmp[23] = bmp[24] = bmp[25] = 0xFF;  // height -1: one row stored top-down
    CHECK(decode_image(bmp, ImageLimits{4}).ny == 1);

    // The limit is exact, for every format.
    for (const auto& bytes : {imf::png_rgb(4, 4, rgb), imf::jpeg(4, 4, rgb), imf::bmp(4, 4, rgb),
                              imf::webp(4, 4, rgb, false, true), imf::gif(4, 4, kPalette, {std::vector<uint8_t>(16)})}) {
        CHECK(contains(error_of(bytes, ImageLimits{15}), "4 x 4 = 16 pixels, over the limit of 15"));
        CHECK(decode_image(bytes, ImageLimits{16}).nx == 4);
    }
}
