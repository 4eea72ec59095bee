#include "model/image/image_resize.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

namespace vkllm {

namespace {

RgbImage blank(uint32_t nx, uint32_t ny) {
    RgbImage img;
    img.nx = nx;
    img.ny = ny;
    img.rgb.resize(size_t(nx) * ny * 3);
    return img;
}

const uint8_t* pixel(const RgbImage& img, int x, int y) { return &img.rgb[(size_t(y) * img.nx + size_t(x)) * 3]; }
uint8_t* pixel(RgbImage& img, int x, int y) { return &img.rgb[(size_t(y) * img.nx + size_t(x)) * 3]; }

// All in float, in mtmd's order of operations: s + (e - s) * t.
float lerp(float s, float e, float t) { return s + (e - s) * t; }

RgbImage bilinear(const RgbImage& src, uint32_t nx, uint32_t ny) {
    RgbImage dst = blank(nx, ny);
    const int sw = int(src.nx), sh = int(src.ny);
    const float x_ratio = nx > 1 ? float(sw - 1) / float(int(nx) - 1) : 0.0f;
    const float y_ratio = ny > 1 ? float(sh - 1) / float(int(ny) - 1) : 0.0f;
    for (int y = 0; y < int(ny); ++y) {
        const float py = float(y) * y_ratio;
        const int y0 = std::min(int(py), sh - 1), y1 = std::min(y0 + 1, sh - 1);
        const float yf = py - float(y0);
        for (int x = 0; x < int(nx); ++x) {
            const float px = float(x) * x_ratio;
            const int x0 = std::min(int(px), sw - 1), x1 = std::min(x0 + 1, sw - 1);
            const float xf = px - float(x0);
            const uint8_t *p00 = pixel(src, x0, y0), *p10 = pixel(src, x1, y0);
            const uint8_t *p01 = pixel(src, x0, y1), *p11 = pixel(src, x1, y1);
            uint8_t* out = pixel(dst, x, y);
            for (int c = 0; c < 3; ++c) {
                const float top = lerp(float(p00[c]), float(p10[c]), xf);
                const float bottom = lerp(float(p01[c]), float(p11[c]), xf);
                out[c] = uint8_t(lerp(top, bottom, yf));  // truncated, as mtmd does
            }
        }
    }
    return dst;
}

// One cubic through 4 samples p[-1..2] evaluated at t in [0, 1): the coefficients in double (as
// mtmd's 1.0 / 3 literals make them), stored as float, the polynomial in float.
float cubic(float pm1, float p0, float p1, float p2, float t) {
    const float d0 = pm1 - p0, d2 = p1 - p0, d3 = p2 - p0;
    const float a0 = p0;
    const float a1 = float(-1.0 / 3 * d0 + d2 - 1.0 / 6 * d3);
    const float a2 = float(1.0 / 2 * d0 + 1.0 / 2 * d2);
    const float a3 = float(-1.0 / 6 * d0 - 1.0 / 2 * d2 + 1.0 / 6 * d3);
    return a0 + a1 * t + a2 * t * t + a3 * t * t * t;
}

RgbImage bicubic(const RgbImage& src, uint32_t nx, uint32_t ny) {
    RgbImage dst = blank(nx, ny);
    const int sw = int(src.nx), sh = int(src.ny);
    const float tx = float(sw) / float(nx), ty = float(sh) / float(ny);
    auto at = [&](int x, int y, int c) {
        return float(pixel(src, std::clamp(x, 0, sw - 1), std::clamp(y, 0, sh - 1))[c]);
    };
    for (int i = 0; i < int(ny); ++i) {
        const int y = int(ty * float(i));
        const float dy = ty * float(i) - float(y);
        for (int j = 0; j < int(nx); ++j) {
            const int x = int(tx * float(j));
            const float dx = tx * float(j) - float(x);
            uint8_t* out = pixel(dst, j, i);
            for (int c = 0; c < 3; ++c) {
                float col[4];
                for (int r = 0; r < 4; ++r) {
                    const int yy = y - 1 + r;
                    col[r] = cubic(at(x - 1, yy, c), at(x, yy, c), at(x + 1, yy, c), at(x + 2, yy, c), dx);
                }
                const float v = cubic(col[0], col[1], col[2], col[3], dy);
                out[c] = uint8_t(std::min(std::max(std::round(v), 0.0f), 255.0f));
            }
        }
    }
    return dst;
}

// Pillow's resampling (libImaging/Resample.c): per output pixel, the span of input pixels under
// the filter (widened by the scale when shrinking) and its weights, normalised to sum 1 and
// stored as 22-bit fixed point.
constexpr int kPrecisionBits = 32 - 8 - 2;

struct Taps {
    int ksize = 0;
    std::vector<int> first, count;  // per output pixel
    std::vector<int32_t> weights;  // out x ksize
};

double bicubic_pillow_filter(double x) {
    constexpr double a = -0.5;
    x = std::fabs(x);
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
}

double lanczos_filter(double x) {
    if (!(-3.0 <= x && x < 3.0)) return 0.0;
    auto sinc = [](double v) {
        if (v == 0.0) return 1.0;
        const double pv = v * 3.141592653589793238462643383279502884;
        return std::sin(pv) / pv;
    };
    return sinc(x) * sinc(x / 3.0);
}

Taps pillow_taps(int in, int out, bool lanczos) {
    const double support_base = lanczos ? 3.0 : 2.0;
    const double scale = double(in) / out;
    const double filterscale = std::max(scale, 1.0);
    const double support = support_base * filterscale;
    Taps t;
    t.ksize = int(std::ceil(support)) * 2 + 1;
    t.first.resize(size_t(out));
    t.count.resize(size_t(out));
    t.weights.assign(size_t(out) * size_t(t.ksize), 0);
    std::vector<double> w(size_t(t.ksize));
    const double fixed_one = std::ldexp(1.0, kPrecisionBits);
    for (int xx = 0; xx < out; ++xx) {
        const double center = (xx + 0.5) * scale;
        const int xmin = std::max(int(center - support + 0.5), 0);
        const int xmax = std::min(int(center + support + 0.5), in);
        const int n = std::max(xmax - xmin, 0);
        double sum = 0.0;
        for (int x = 0; x < n; ++x) {
            const double d = (x + xmin - center + 0.5) / filterscale;
            w[size_t(x)] = lanczos ? lanczos_filter(d) : bicubic_pillow_filter(d);
            sum += w[size_t(x)];
        }
        for (int x = 0; x < n; ++x) {
            if (sum != 0.0) w[size_t(x)] /= sum;
            // Lanczos as Pillow: +-0.5 then truncated toward zero. Bicubic as mtmd: +-0.5 then rounded
            // again to nearest, which moves some weights by one unit from Pillow's.
            const double biased = w[size_t(x)] * fixed_one + (w[size_t(x)] < 0 ? -0.5 : 0.5);
            t.weights[size_t(xx) * size_t(t.ksize) + size_t(x)] = int32_t(lanczos ? biased : std::round(biased));
        }
        t.first[size_t(xx)] = xmin;
        t.count[size_t(xx)] = n;
    }
    return t;
}

uint8_t clip8(int32_t v) { return uint8_t(std::clamp<int32_t>(v >> kPrecisionBits, 0, 255)); }

// One pass along x (horizontal) or y: out has the other dimension of in.
RgbImage pillow_pass(const RgbImage& in, int out_len, bool horizontal, const Taps& t) {
    RgbImage dst = horizontal ? blank(uint32_t(out_len), in.ny) : blank(in.nx, uint32_t(out_len));
    for (int y = 0; y < int(dst.ny); ++y) {
        for (int x = 0; x < int(dst.nx); ++x) {
            const int o = horizontal ? x : y;
            const int32_t* w = &t.weights[size_t(o) * size_t(t.ksize)];
            int32_t acc[3] = {1 << (kPrecisionBits - 1), 1 << (kPrecisionBits - 1), 1 << (kPrecisionBits - 1)};
            for (int k = 0; k < t.count[size_t(o)]; ++k) {
                const int s = t.first[size_t(o)] + k;
                const uint8_t* p = horizontal ? pixel(in, s, y) : pixel(in, x, s);
                for (int c = 0; c < 3; ++c) acc[c] += int32_t(p[c]) * w[k];
            }
            uint8_t* out = pixel(dst, x, y);
            for (int c = 0; c < 3; ++c) out[c] = clip8(acc[c]);
        }
    }
    return dst;
}

RgbImage pillow(const RgbImage& src, uint32_t nx, uint32_t ny, bool lanczos) {
    RgbImage img = src;
    if (nx != src.nx) img = pillow_pass(img, int(nx), true, pillow_taps(int(src.nx), int(nx), lanczos));
    if (ny != src.ny) img = pillow_pass(img, int(ny), false, pillow_taps(int(src.ny), int(ny), lanczos));
    return img;
}

RgbImage filtered(const RgbImage& src, uint32_t nx, uint32_t ny, ResizeFilter filter) {
    if (src.nx == 0 || src.ny == 0 || nx == 0 || ny == 0 || src.rgb.size() != size_t(src.nx) * src.ny * 3)
        throw std::invalid_argument("image resize: empty source or target, or pixels that do not match the size");
    switch (filter) {
        case ResizeFilter::Bilinear: return bilinear(src, nx, ny);
        case ResizeFilter::Bicubic: return bicubic(src, nx, ny);
        case ResizeFilter::BicubicPillow: return pillow(src, nx, ny, false);
        case ResizeFilter::LanczosPillow: return pillow(src, nx, ny, true);
    }
    throw std::invalid_argument("image resize: unknown filter");
}

}  // namespace

RgbImage resize_rgb(const RgbImage& src, uint32_t nx, uint32_t ny, ResizeFilter filter) {
    if (src.nx == nx && src.ny == ny) return src;
    return filtered(src, nx, ny, filter);
}

RgbImage resize_fit(const RgbImage& src, uint32_t nx, uint32_t ny, ResizeFilter filter, PadStyle pad,
                    std::array<uint8_t, 3> pad_colour) {
    if ((src.nx == nx && src.ny == ny) || pad == PadStyle::None) return resize_rgb(src, nx, ny, filter);
    // Float, as mtmd computes the fit: scale = min(target / source) per axis.
    const float scale = std::min(float(nx) / float(src.nx), float(ny) / float(src.ny));
    const float fw = float(src.nx) * scale, fh = float(src.ny) * scale;
    const bool nearest = pad == PadStyle::Nearest;
    // An edge of 0 (a sliver rounded to nearest) is 1 here; mtmd would stop on an assertion.
    const uint32_t w = std::clamp<uint32_t>(uint32_t(nearest ? std::round(fw) : std::ceil(fw)), 1, nx);
    const uint32_t h = std::clamp<uint32_t>(uint32_t(nearest ? std::round(fh) : std::ceil(fh)), 1, ny);
    const RgbImage fitted = filtered(src, w, h, filter);
    RgbImage canvas = blank(nx, ny);
    for (size_t i = 0; i < canvas.rgb.size(); i += 3) std::copy(pad_colour.begin(), pad_colour.end(), &canvas.rgb[i]);
    const uint32_t ox = nearest ? uint32_t(std::round(float(nx - w) / 2.0f)) : (nx - w) / 2;
    const uint32_t oy = nearest ? uint32_t(std::round(float(ny - h) / 2.0f)) : (ny - h) / 2;
    for (uint32_t y = 0; y < h && oy + y < ny; ++y)
        for (uint32_t x = 0; x < w && ox + x < nx; ++x)
            std::copy_n(pixel(fitted, int(x), int(y)), 3, pixel(canvas, int(ox + x), int(oy + y)));
    return canvas;
}

RgbImage crop_rgb(const RgbImage& src, uint32_t x, uint32_t y, uint32_t w, uint32_t h) {
    if (w == 0 || h == 0 || x > src.nx || y > src.ny || w > src.nx - x || h > src.ny - y)
        throw std::invalid_argument("image crop: the rectangle is empty or outside the image");
    RgbImage dst = blank(w, h);
    for (uint32_t r = 0; r < h; ++r) std::copy_n(pixel(src, int(x), int(y + r)), size_t(w) * 3, pixel(dst, 0, int(r)));
    return dst;
}

}  // namespace vkllm
