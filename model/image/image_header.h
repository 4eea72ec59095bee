// The size an image file declares, read from its header alone (bounded reads, nothing decoded), so
// that decode_image can refuse a zero or oversized image before any decoder allocates for it.
// stb_image's own probe cannot serve: it reports any failure as "unknown image type" and refuses
// large PNGs with a message of its own.
#pragma once

#include <cstdint>
#include <span>

#include "model/image/image_decode.h"

namespace vkllm {

struct DeclaredSize {
    uint64_t nx = 0, ny = 0;
};

// Throws ImageError naming the format when the header is cut short or malformed.
DeclaredSize declared_image_size(ImageFormat f, std::span<const uint8_t> bytes);

}  // namespace vkllm
