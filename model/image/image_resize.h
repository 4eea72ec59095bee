// The image manipulations llama.cpp's mtmd applies before normalising (tools/mtmd/mtmd-image.cpp,
// img_tool), reimplemented from their definitions so that every output byte is the same: the
// resize filters with their own float arithmetic, truncation or rounding to u8, the
// aspect-preserving fit with its padding, and the crop. Sizes are checked by the caller
// (image_preprocess.cpp); these functions require non-empty images and targets.
#pragma once

#include <array>
#include <cstdint>

#include "model/image/image_decode.h"

namespace vkllm {

enum class ResizeFilter {
    Bilinear,  // corners aligned: output x samples source x * (nx_in - 1) / (nx_out - 1); truncated to u8
    Bicubic,  // Catmull-Rom-like cubic through 4 samples, output x at source x * nx_in / nx_out; rounded
    BicubicPillow,  // Pillow's separable bicubic (a = -0.5), 22-bit fixed-point weights, horizontal pass first
    LanczosPillow,  // Pillow's separable Lanczos-3, same fixed-point scheme
};

// How a resize to a target keeps the aspect ratio (mtmd's pad_style).
enum class PadStyle {
    None,  // stretched to the target
    Ceil,  // scaled to fit, edges rounded up, centred with the offset rounded down, the rest padded
    Nearest,  // scaled to fit, edges and offset rounded to nearest
};

// Stretches src to nx x ny (a copy when the size is already that).
RgbImage resize_rgb(const RgbImage& src, uint32_t nx, uint32_t ny, ResizeFilter filter);

// mtmd's img_tool::resize: a copy when src is already nx x ny; else stretched (PadStyle::None) or
// scaled to fit and composited onto a canvas of `pad` colour.
RgbImage resize_fit(const RgbImage& src, uint32_t nx, uint32_t ny, ResizeFilter filter, PadStyle pad,
                    std::array<uint8_t, 3> pad_colour);

// The w x h rectangle at (x, y); it must lie inside src.
RgbImage crop_rgb(const RgbImage& src, uint32_t x, uint32_t y, uint32_t w, uint32_t h);

}  // namespace vkllm
