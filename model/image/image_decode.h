// Image files to 8-bit RGB pixels, with the decoders llama.cpp's mtmd uses.
//
// PNG, JPEG, GIF (its first frame) and BMP go through Debian's stb_image, the library mtmd-helper
// decodes with, asked for 3 channels as mtmd asks: alpha is dropped (never blended onto a colour),
// grey is replicated, 16-bit PNG samples keep their high byte. WebP, which stb_image does not read,
// goes through libwebp with the same rules. The size an image declares is read from its header first
// and refused before anything is decoded when it is zero or above ImageLimits::max_pixels, so a small
// file that declares a huge canvas (a decompression bomb) never allocates it. Every failure is an
// ImageError naming the format and the decoder's reason.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string_view>
#include <vector>

namespace vkllm {

class ImageError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Row-major, top row first, 3 bytes (R, G, B) per pixel.
struct RgbImage {
    uint32_t nx = 0, ny = 0;
    std::vector<uint8_t> rgb;
};

struct ImageLimits {
    // 8192 x 8192: above any camera's photo (a 50-megapixel sensor is 8192 x 6144), and what it
    // decodes to stays bounded (192 MiB of RGB; stb may hold 16-bit RGBA, 512 MiB, while it
    // converts). llama.cpp takes whatever stb takes (2^24 per side), which lets a 100-byte PNG ask
    // for terabytes. Every projector shrinks an image to at most a few megapixels anyway.
    uint64_t max_pixels = uint64_t(8192) * 8192;
};

enum class ImageFormat { Png, Jpeg, Gif, Bmp, WebP };

std::string_view image_format_name(ImageFormat f);  // "PNG", "JPEG", "GIF", "BMP", "WebP"

// By magic bytes only; nullopt when they are none of the five formats.
std::optional<ImageFormat> sniff_image_format(std::span<const uint8_t> bytes);

// Throws ImageError for an unknown format, a truncated or corrupt file, a zero size or one above
// limits.max_pixels (that message says how to raise the limit).
RgbImage decode_image(std::span<const uint8_t> bytes, const ImageLimits& limits = {});

}  // namespace vkllm
