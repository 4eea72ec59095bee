#include "model/image/image_preprocess.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "model/image/image_resize.h"

namespace vkllm {

namespace {

// How mtmd shapes an image for one kind of projector: the filter, the padding and its colour of the
// resize that makes the single tile (Idefics3: the global tile), and those of the resize that makes
// the image Idefics3 cuts into slices. From clip.cpp's load_hparams for the projector types the kind
// stands for, and the preprocessor mtmd.cpp picks for them.
struct KindRow {
    PreprocessKind kind;
    std::string_view name;
    ResizeFilter filter;
    PadStyle pad;
    std::array<uint8_t, 3> pad_colour;
    ResizeFilter slice_filter;
    PadStyle slice_pad;
};

constexpr std::array<uint8_t, 3> kBlack = {0, 0, 0};
// LLaVA's background (the mean colour of its training images, rounded).
constexpr std::array<uint8_t, 3> kLlavaGrey = {122, 116, 104};

constexpr KindRow kKinds[] = {
    {PreprocessKind::Square, "square", ResizeFilter::Bilinear, PadStyle::Ceil, kBlack, ResizeFilter::Bilinear,
     PadStyle::None},
    {PreprocessKind::PadSquare, "pad_square", ResizeFilter::Bicubic, PadStyle::Ceil, kLlavaGrey, ResizeFilter::Bicubic,
     PadStyle::None},
    {PreprocessKind::Idefics3, "idefics3", ResizeFilter::Bilinear, PadStyle::None, kBlack, ResizeFilter::Bicubic,
     PadStyle::Ceil},
    {PreprocessKind::SmartResize, "smart_resize", ResizeFilter::Bilinear, PadStyle::Ceil, kBlack,
     ResizeFilter::Bilinear, PadStyle::None},
};

const KindRow& row_of(PreprocessKind k) {
    for (const KindRow& r : kKinds)
        if (r.kind == k) return r;
    throw std::invalid_argument(fmt::format("image preprocessing: unknown kind {}", int(k)));
}

void require(bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument("image preprocessing (" + what + ")");
}

// Idefics3's refined size: scaled so that the longest edge is `longest_edge` (up or down), each
// side then rounded up to a multiple of `align`. Float throughout, as mtmd computes it.
uint32_t ceil_to(float v, uint32_t align) { return uint32_t(std::ceil(v / float(align))) * align; }

// Qwen2-VL's smart resize: each side rounded to the nearest multiple of `align` (at least one),
// then, if the area leaves [min_pixels, max_pixels], both sides scaled by one factor and rounded
// down (too large) or up (too small). mtmd's float arithmetic and its order.
std::pair<uint32_t, uint32_t> smart_size(uint32_t width, uint32_t height, uint32_t align, uint32_t min_pixels,
                                         uint32_t max_pixels) {
    const float f = float(align);
    auto round_by = [&](float x) { return int64_t(std::round(x / f)) * int64_t(align); };
    auto ceil_by = [&](float x) { return int64_t(std::ceil(x / f)) * int64_t(align); };
    auto floor_by = [&](float x) { return int64_t(std::floor(x / f)) * int64_t(align); };
    const int64_t a = align;
    int64_t h = std::max(a, round_by(float(height)));
    int64_t w = std::max(a, round_by(float(width)));
    const int64_t area = int64_t(width) * height;
    if (h * w > int64_t(max_pixels)) {
        const float beta = std::sqrt(float(area) / float(max_pixels));
        h = std::max(a, floor_by(float(height) / beta));
        w = std::max(a, floor_by(float(width) / beta));
    } else if (h * w < int64_t(min_pixels)) {
        const float beta = std::sqrt(float(min_pixels) / float(area));
        h = ceil_by(float(height) * beta);
        w = ceil_by(float(width) * beta);
    }
    return {uint32_t(w), uint32_t(h)};
}

ImageTile normalise(const RgbImage& img, const PreprocessSpec& spec) {
    ImageTile t;
    t.nx = img.nx;
    t.ny = img.ny;
    const size_t plane = size_t(img.nx) * img.ny;
    t.chw.resize(plane * 3);
    for (size_t i = 0; i < plane; ++i)
        for (size_t c = 0; c < 3; ++c)
            t.chw[c * plane + i] = (float(img.rgb[i * 3 + c]) / 255.0f - spec.mean[c]) / spec.std[c];
    return t;
}

}  // namespace

std::string_view preprocess_kind_name(PreprocessKind k) { return row_of(k).name; }

void check_preprocess_spec(const PreprocessSpec& spec) {
    const std::string kind(row_of(spec.kind).name);
    require(spec.patch_size > 0, kind + ": patch_size is 0");
    require(spec.patch_size <= kMaxPreprocessSide, kind + ": patch_size " + std::to_string(spec.patch_size) +
                                                       " is above " + std::to_string(kMaxPreprocessSide));
    for (size_t c = 0; c < 3; ++c) {
        require(std::isfinite(spec.mean[c]), fmt::format("{}: image_mean[{}] is {}", kind, c, spec.mean[c]));
        require(std::isfinite(spec.std[c]) && spec.std[c] != 0.0f,
                fmt::format("{}: image_std[{}] is {}", kind, c, spec.std[c]));
    }
    if (spec.kind == PreprocessKind::SmartResize) {
        require(spec.merge > 0, kind + ": merge is 0");
        const uint64_t align = uint64_t(spec.patch_size) * spec.merge;
        require(align <= kMaxPreprocessSide,
                fmt::format("{}: patch_size x merge = {} is above {}", kind, align, kMaxPreprocessSide));
        require(spec.max_pixels > 0, kind + ": max_pixels is 0");
        require(spec.max_pixels <= kMaxSmartResizePixels,
                fmt::format("{}: max_pixels {} is above {}", kind, spec.max_pixels, kMaxSmartResizePixels));
        require(spec.min_pixels <= spec.max_pixels,
                fmt::format("{}: min_pixels {} is above max_pixels {}", kind, spec.min_pixels, spec.max_pixels));
        require(align * align <= spec.max_pixels, fmt::format("{}: max_pixels {} is below one merged patch ({} x {})",
                                                              kind, spec.max_pixels, align, align));
        return;
    }
    require(spec.image_size > 0, kind + ": image_size is 0");
    require(spec.image_size <= kMaxPreprocessSide,
            fmt::format("{}: image_size {} is above {}", kind, spec.image_size, kMaxPreprocessSide));
    require(spec.image_size % spec.patch_size == 0, fmt::format("{}: image_size {} is not a multiple of patch_size {}",
                                                                kind, spec.image_size, spec.patch_size));
    if (spec.kind == PreprocessKind::Idefics3)
        require(
            spec.preproc_image_size <= kMaxPreprocessSide,
            fmt::format("{}: preproc_image_size {} is above {}", kind, spec.preproc_image_size, kMaxPreprocessSide));
}

TileLayout preprocess_layout(uint32_t nx, uint32_t ny, const PreprocessSpec& spec) {
    check_preprocess_spec(spec);
    require(nx > 0 && ny > 0, fmt::format("the image is {} x {} pixels", nx, ny));
    TileLayout l;
    switch (spec.kind) {
        case PreprocessKind::Square:
        case PreprocessKind::PadSquare: l.tile_nx = l.tile_ny = spec.image_size; break;
        case PreprocessKind::Idefics3: {
            l.tile_nx = l.tile_ny = spec.image_size;
            if (spec.preproc_image_size == 0) break;  // mtmd without the key: the global tile only
            const float le = float(spec.preproc_image_size);
            const float scale = std::min(le / float(nx), le / float(ny));
            const uint32_t rw = ceil_to(float(nx) * scale, spec.image_size);
            const uint32_t rh = ceil_to(float(ny) * scale, spec.image_size);
            l.grid_cols = rw / spec.image_size;
            l.grid_rows = rh / spec.image_size;
            l.slice_nx = l.slice_ny = spec.image_size;
            break;
        }
        case PreprocessKind::SmartResize: {
            const auto [w, h] = smart_size(nx, ny, spec.patch_size * spec.merge, spec.min_pixels, spec.max_pixels);
            // Rounding a side up to one unit can leave the budget behind (a panorama scaled up to
            // min_pixels): bounded here, never reached by mtmd's own budgets.
            require(uint64_t(w) * h <= kMaxSmartResizePixels,
                    fmt::format("smart_resize: a {} x {} image would become {} x {}, above {} pixels", nx, ny, w, h,
                                kMaxSmartResizePixels));
            l.tile_nx = w;
            l.tile_ny = h;
            break;
        }
    }
    return l;
}

PreprocessedImage preprocess_image(const RgbImage& img, const PreprocessSpec& spec) {
    require(img.rgb.size() == size_t(img.nx) * img.ny * 3,
            fmt::format("{} bytes of pixels for a {} x {} image", img.rgb.size(), img.nx, img.ny));
    const TileLayout l = preprocess_layout(img.nx, img.ny, spec);
    const KindRow& row = row_of(spec.kind);
    PreprocessedImage out;
    out.grid_cols = l.grid_cols;
    out.grid_rows = l.grid_rows;
    if (l.grid_cols > 0) {
        const RgbImage refined = resize_fit(img, l.grid_cols * l.slice_nx, l.grid_rows * l.slice_ny, row.slice_filter,
                                            row.slice_pad, kBlack);
        for (uint32_t r = 0; r < l.grid_rows; ++r)
            for (uint32_t c = 0; c < l.grid_cols; ++c)
                out.tiles.push_back(
                    normalise(crop_rgb(refined, c * l.slice_nx, r * l.slice_ny, l.slice_nx, l.slice_ny), spec));
    }
    out.tiles.push_back(normalise(resize_fit(img, l.tile_nx, l.tile_ny, row.filter, row.pad, row.pad_colour), spec));
    return out;
}

}  // namespace vkllm
