#include "model/image/image_header.h"

#include <cstring>

#include <fmt/format.h>

namespace vkllm {

namespace {

[[noreturn]] void bad(ImageFormat f, std::string_view why) {
    throw ImageError(fmt::format("corrupt or truncated {} image: {}", image_format_name(f), why));
}

uint32_t be16(const uint8_t* p) { return uint32_t(p[0]) << 8 | p[1]; }
uint32_t be32(const uint8_t* p) { return be16(p) << 16 | be16(p + 2); }
uint32_t le16(const uint8_t* p) { return uint32_t(p[1]) << 8 | p[0]; }
uint32_t le32(const uint8_t* p) { return le16(p + 2) << 16 | le16(p); }

// PNG: the IHDR chunk comes first, right after the 8-byte signature.
DeclaredSize png_size(std::span<const uint8_t> b) {
    if (b.size() < 24) bad(ImageFormat::Png, "the file ends inside its header");
    if (std::memcmp(b.data() + 12, "IHDR", 4) != 0) bad(ImageFormat::Png, "the first chunk is not IHDR");
    return {be32(b.data() + 16), be32(b.data() + 20)};
}

// GIF: the logical screen, which stb decodes every frame onto.
DeclaredSize gif_size(std::span<const uint8_t> b) {
    if (b.size() < 10) bad(ImageFormat::Gif, "the file ends inside its header");
    return {le16(b.data() + 6), le16(b.data() + 8)};
}

// BMP: the info header after the 14-byte file header; OS/2's 12-byte one has 16-bit sizes. A
// negative height means rows stored top-down.
DeclaredSize bmp_size(std::span<const uint8_t> b) {
    if (b.size() < 26) bad(ImageFormat::Bmp, "the file ends inside its header");
    const uint32_t header = le32(b.data() + 14);
    if (header == 12) return {le16(b.data() + 18), le16(b.data() + 20)};
    const int32_t w = int32_t(le32(b.data() + 18)), h = int32_t(le32(b.data() + 22));
    if (w < 0) bad(ImageFormat::Bmp, "negative width");
    return {uint64_t(w), h < 0 ? uint64_t(-int64_t(h)) : uint64_t(h)};
}

// JPEG: the first start-of-frame segment, found by walking the segments after SOI.
DeclaredSize jpeg_size(std::span<const uint8_t> b) {
    size_t at = 2;
    while (true) {
        while (at < b.size() && b[at] == 0xFF && at + 1 < b.size() && b[at + 1] == 0xFF) ++at;  // fill bytes
        if (at + 4 > b.size()) bad(ImageFormat::Jpeg, "the file ends before its frame header");
        if (b[at] != 0xFF) bad(ImageFormat::Jpeg, fmt::format("no marker at byte {}", at));
        const uint8_t marker = b[at + 1];
        const uint32_t len = be16(b.data() + at + 2);
        if (len < 2) bad(ImageFormat::Jpeg, fmt::format("a segment of length {} at byte {}", len, at));
        const bool sof = marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
        if (sof) {
            if (len < 8 || at + 9 > b.size()) bad(ImageFormat::Jpeg, "the file ends inside its frame header");
            return {be16(b.data() + at + 7), be16(b.data() + at + 5)};
        }
        if (marker == 0xD9 || marker == 0xDA) bad(ImageFormat::Jpeg, "no frame header before the image data");
        at += 2 + size_t(len);
    }
}

}  // namespace

DeclaredSize declared_image_size(ImageFormat f, std::span<const uint8_t> bytes) {
    switch (f) {
        case ImageFormat::Png: return png_size(bytes);
        case ImageFormat::Jpeg: return jpeg_size(bytes);
        case ImageFormat::Gif: return gif_size(bytes);
        case ImageFormat::Bmp: return bmp_size(bytes);
        case ImageFormat::WebP: break;  // libwebp's WebPGetFeatures reads it
    }
    throw ImageError(fmt::format("{} images: no header reader", image_format_name(f)));
}

}  // namespace vkllm
