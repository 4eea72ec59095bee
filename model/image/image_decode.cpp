#include "model/image/image_decode.h"

#include "model/image/image_header.h"
#include "model/image/png_inflate_guard.h"

#include <stb/stb_image.h>
#include <webp/decode.h>

#include <climits>
#include <cstring>
#include <memory>
#include <string>

#include <fmt/format.h>

namespace vkllm {

namespace {

struct Magic {
    ImageFormat format;
    size_t offset;
    std::string_view bytes;
};

// One row per format; WebP is a RIFF container whose form type, at byte 8, says WEBP.
constexpr Magic kMagics[] = {
    {ImageFormat::Png, 0, std::string_view("\x89PNG\r\n\x1a\n", 8)},
    {ImageFormat::Jpeg, 0, std::string_view("\xff\xd8\xff", 3)},
    {ImageFormat::Gif, 0, "GIF87a"},
    {ImageFormat::Gif, 0, "GIF89a"},
    {ImageFormat::Bmp, 0, "BM"},
    {ImageFormat::WebP, 8, "WEBP"},
};

bool has_bytes(std::span<const uint8_t> bytes, size_t offset, std::string_view magic) {
    return bytes.size() >= offset + magic.size() && std::memcmp(bytes.data() + offset, magic.data(), magic.size()) == 0;
}

std::string first_bytes_hex(std::span<const uint8_t> bytes) {
    std::string out;
    for (size_t i = 0; i < bytes.size() && i < 8; ++i) out += fmt::format("{}{:02x}", i ? " " : "", bytes[i]);
    return out.empty() ? "none" : out;
}

void check_declared_size(ImageFormat f, uint64_t nx, uint64_t ny, const ImageLimits& limits) {
    if (nx == 0 || ny == 0)
        throw ImageError(
            fmt::format("{} image declares a size of {} x {} pixels: nothing to show", image_format_name(f), nx, ny));
    const uint64_t pixels = nx * ny;  // both below 2^32 (header fields): no overflow
    if (pixels > limits.max_pixels)
        throw ImageError(fmt::format(
            "{} image declares {} x {} = {} pixels, over the limit of {} pixels (refused before decoding; raise "
            "the limit with --image-max-pixels if the image is genuine)",
            image_format_name(f), nx, ny, pixels, limits.max_pixels));
}

std::string_view webp_status_text(VP8StatusCode s) {
    switch (s) {
        case VP8_STATUS_OK: return "ok";
        case VP8_STATUS_OUT_OF_MEMORY: return "out of memory";
        case VP8_STATUS_INVALID_PARAM: return "invalid parameter";
        case VP8_STATUS_BITSTREAM_ERROR: return "corrupt bitstream";
        case VP8_STATUS_UNSUPPORTED_FEATURE: return "unsupported feature";
        case VP8_STATUS_SUSPENDED: return "decoding suspended";
        case VP8_STATUS_USER_ABORT: return "decoding aborted";
        case VP8_STATUS_NOT_ENOUGH_DATA: return "truncated data";
    }
    return "unknown libwebp status";
}

RgbImage decode_webp(std::span<const uint8_t> bytes, const ImageLimits& limits) {
    WebPBitstreamFeatures features;
    const VP8StatusCode info = WebPGetFeatures(bytes.data(), bytes.size(), &features);
    if (info != VP8_STATUS_OK)
        throw ImageError(fmt::format("corrupt or truncated WebP image: libwebp: {}", webp_status_text(info)));
    if (features.width < 0 || features.height < 0)
        throw ImageError("corrupt WebP image: libwebp reports a negative size");
    check_declared_size(ImageFormat::WebP, uint64_t(features.width), uint64_t(features.height), limits);
    if (features.has_animation)
        throw ImageError("animated WebP images are not supported: send one frame (as PNG, JPEG or a still WebP)");

    RgbImage img;
    img.nx = uint32_t(features.width);
    img.ny = uint32_t(features.height);
    img.rgb.resize(size_t(img.nx) * img.ny * 3);
    WebPDecoderConfig config;
    if (!WebPInitDecoderConfig(&config)) throw ImageError("WebP: libwebp's decoder does not match its header");
    // Straight into our buffer, RGB without alpha: the alpha channel is dropped, as stb drops it.
    config.output.colorspace = MODE_RGB;
    config.output.is_external_memory = 1;
    config.output.u.RGBA.rgba = img.rgb.data();
    config.output.u.RGBA.stride = int(img.nx * 3);
    config.output.u.RGBA.size = img.rgb.size();
    const VP8StatusCode status = WebPDecode(bytes.data(), bytes.size(), &config);
    WebPFreeDecBuffer(&config.output);  // external memory: frees nothing of ours
    if (status != VP8_STATUS_OK)
        throw ImageError(fmt::format("corrupt or truncated WebP image: libwebp: {}", webp_status_text(status)));
    return img;
}

RgbImage decode_stb(ImageFormat f, std::span<const uint8_t> bytes, const ImageLimits& limits) {
    if (bytes.size() > size_t(INT_MAX))
        throw ImageError(fmt::format("{} file of {} bytes is too large for the decoder (2 GiB at most)",
                                     image_format_name(f), bytes.size()));
    const DeclaredSize size = declared_image_size(f, bytes);
    check_declared_size(f, size.nx, size.ny, limits);
    if (f == ImageFormat::Png) check_png_inflated_size(bytes, size.nx, size.ny);

    // Three channels, as mtmd-helper asks: stb drops alpha, replicates grey and keeps the high byte of
    // 16-bit samples. For an animated GIF this is the first frame.
    int got_x = 0, got_y = 0, channels = 0;
    std::unique_ptr<stbi_uc, void (*)(void*)> pixels(
        stbi_load_from_memory(bytes.data(), int(bytes.size()), &got_x, &got_y, &channels, 3), stbi_image_free);
    if (!pixels) {
        const char* why = stbi_failure_reason();
        throw ImageError(fmt::format("corrupt or truncated {} image: stb_image: {}", image_format_name(f),
                                     why && *why ? why : "no reason given"));
    }
    if (uint64_t(got_x) != size.nx || uint64_t(got_y) != size.ny)
        throw ImageError(fmt::format("corrupt {} image: its header says {} x {} but it decodes to {} x {}",
                                     image_format_name(f), size.nx, size.ny, got_x, got_y));
    RgbImage img;
    img.nx = uint32_t(got_x);
    img.ny = uint32_t(got_y);
    img.rgb.assign(pixels.get(), pixels.get() + size_t(img.nx) * img.ny * 3);
    return img;
}

}  // namespace

std::string_view image_format_name(ImageFormat f) {
    switch (f) {
        case ImageFormat::Png: return "PNG";
        case ImageFormat::Jpeg: return "JPEG";
        case ImageFormat::Gif: return "GIF";
        case ImageFormat::Bmp: return "BMP";
        case ImageFormat::WebP: return "WebP";
    }
    return "unknown";
}

std::optional<ImageFormat> sniff_image_format(std::span<const uint8_t> bytes) {
    for (const Magic& m : kMagics) {
        if (m.format == ImageFormat::WebP && !has_bytes(bytes, 0, "RIFF")) continue;
        if (has_bytes(bytes, m.offset, m.bytes)) return m.format;
    }
    return std::nullopt;
}

RgbImage decode_image(std::span<const uint8_t> bytes, const ImageLimits& limits) {
    const std::optional<ImageFormat> f = sniff_image_format(bytes);
    if (!f)
        throw ImageError(fmt::format("unknown image format: {} bytes starting {} are not PNG, JPEG, GIF, BMP or WebP",
                                     bytes.size(), first_bytes_hex(bytes)));
    return *f == ImageFormat::WebP ? decode_webp(bytes, limits) : decode_stb(*f, bytes, limits);
}

}  // namespace vkllm
