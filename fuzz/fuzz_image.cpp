// libFuzzer target: arbitrary bytes as an image file, decoded and preprocessed for every kind.
//
// The decoders (stb_image, libwebp) run with a small pixel limit, so a file that declares a large
// canvas must be refused by its header; every image that decodes is turned into tiles by each
// kind's small spec, and once more by a spec whose numbers come from the input's last bytes (which
// may be invalid: std::invalid_argument is its documented refusal). Tiles must have the sizes
// preprocess_layout promised and finite values. Any other exception escapes to libFuzzer and is
// reported as a crash, like a sanitizer finding.
#include "model/image/image_decode.h"
#include "model/image/image_preprocess.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <stdexcept>

using namespace vkllm;

namespace {

void require(bool ok, const char* what) {
    if (!ok) {
        std::fprintf(stderr, "fuzz_image: invariant broken: %s\n", what);
        std::abort();
    }
}

// Small enough that a few hundred executions a second still reach the resize code.
constexpr uint64_t kMaxPixels = 64 * 64;

void check_tiles(const RgbImage& img, const PreprocessSpec& spec) {
    const TileLayout layout = preprocess_layout(img.nx, img.ny, spec);
    const PreprocessedImage p = preprocess_image(img, spec);
    require(p.tiles.size() == layout.n_tiles(), "tile count as laid out");
    require(p.grid_cols == layout.grid_cols && p.grid_rows == layout.grid_rows, "grid as laid out");
    for (size_t i = 0; i < p.tiles.size(); ++i) {
        const ImageTile& t = p.tiles[i];
        const bool slice = i + 1 < p.tiles.size();
        require(
            t.nx == (slice ? layout.slice_nx : layout.tile_nx) && t.ny == (slice ? layout.slice_ny : layout.tile_ny),
            "tile size as laid out");
        require(t.chw.size() == size_t(t.nx) * t.ny * 3, "three planes");
        for (float v : t.chw) require(std::isfinite(v), "finite values");
    }
}

PreprocessSpec small(PreprocessKind k) {
    PreprocessSpec s;
    s.kind = k;
    s.image_size = 8;
    s.patch_size = 4;
    s.mean = {0.5f, 0.5f, 0.5f};
    s.std = {0.25f, 0.5f, 1.0f};
    s.preproc_image_size = 24;
    s.merge = 2;
    s.min_pixels = 64;
    s.max_pixels = 1024;
    return s;
}

// The input's last 8 bytes as a spec: small numbers, zeros included.
PreprocessSpec from_tail(std::span<const uint8_t> b) {
    PreprocessSpec s = small(PreprocessKind::Square);
    if (b.size() < 8) return s;
    const uint8_t* t = b.data() + b.size() - 8;
    s.kind = PreprocessKind(t[0] % 4);
    s.patch_size = t[1] % 9;
    s.image_size = t[2] % 33;
    s.preproc_image_size = t[3] % 65;
    s.merge = t[4] % 4;
    s.min_pixels = uint32_t(t[5]) * 8;
    s.max_pixels = uint32_t(t[6]) * 16;
    s.std[t[7] % 3] = float(t[7] % 5) / 4;  // 0 sometimes
    return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::span<const uint8_t> bytes(data, size);
    (void)sniff_image_format(bytes);
    RgbImage img;
    try {
        img = decode_image(bytes, ImageLimits{kMaxPixels});
    } catch (const ImageError&) {
        return 0;
    }
    require(img.nx > 0 && img.ny > 0 && uint64_t(img.nx) * img.ny <= kMaxPixels, "size within the limit");
    require(img.rgb.size() == size_t(img.nx) * img.ny * 3, "three bytes a pixel");
    for (PreprocessKind k :
         {PreprocessKind::Square, PreprocessKind::PadSquare, PreprocessKind::Idefics3, PreprocessKind::SmartResize})
        check_tiles(img, small(k));
    try {
        check_tiles(img, from_tail(bytes));
    } catch (const std::invalid_argument&) {}
    return 0;
}
