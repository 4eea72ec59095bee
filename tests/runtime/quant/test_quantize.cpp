// Quantizers and reference dequantizers of every tensor type (no device needed): error bounds on
// Gaussian rows, per-element bounds derived from the stored block fields, zeros, idempotence,
// determinism, edge cases (constant blocks, outliers, values near the f16 range, NaN/Inf), and
// hand-built blocks that check the dequantizers against the documented layouts byte by byte.
#include "runtime/quant/block_formats.h"
#include "runtime/quant/tensor_types.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

using namespace vkllm;

namespace {

std::string name_of(TensorType t) { return std::string(type_traits(t).name); }

bool is_block_type(TensorType t) { return type_traits(t).block_elems > 1; }

std::vector<float> gaussian(size_t n, uint32_t seed, float sigma = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, sigma);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

std::vector<uint8_t> quantize(TensorType t, const std::vector<float>& x) {
    std::vector<uint8_t> q(row_bytes(t, x.size()));
    quantize_row(t, x.data(), q.data(), x.size());
    return q;
}

std::vector<float> dequantize(TensorType t, const std::vector<uint8_t>& q, size_t n) {
    std::vector<float> y(n);
    dequantize_row(t, q.data(), y.data(), n);
    return y;
}

float half(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return f16_to_f32(h);
}

// The largest error the quantizer may leave on element e of a block, from the block's stored
// fields. Every quantizer fits each (sub-)block with a grid that leaves no element more than one
// step from its value (rounding within the range, clipping at most half a step beyond it), then:
//   - single-scale types store that grid's scale (and offset) as f16: the f16 rounding moves the
//     level q by at most |q| * |d| * 2^-11 (and the offset by |m| * 2^-11);
//   - two-level types round each sub-block scale to a code of the super-block scale d, which moves
//     the scale by at most d/2 for the affine K types (and the min by dmin/2), at most |d| for the
//     signed codes (Q3_K, Q6_K, IQ4_XS, where a code can clamp at the positive end); level q moves
//     by |q| times that, with |q| at most the largest level plus one for the clipped element.
// Q8_0 and Q4_0 (ggml's rules) round with the scale before its f16 rounding, which moves level q by
// |q| * |d| * 2^-11 too: half a step for Q8_0, one step for Q4_0 (the opposite end has one level
// less). F16/BF16 round to nearest: half an ulp.
double element_bound(TensorType t, const uint8_t* b, int e, float x) {
    constexpr double kF16Rel = 1.0 / 2048;
    switch (t) {
    case TensorType::F32: return 0;
    case TensorType::F16: return std::fabs(x) * kF16Rel + 3e-8;
    case TensorType::BF16: return std::fabs(x) / 256.0;
    case TensorType::Q8_0: return std::fabs(half(b)) * (0.5 + 128 * kF16Rel);
    case TensorType::Q4_0: return std::fabs(half(b)) * (1 + 9 * kF16Rel);
    case TensorType::Q4_1: return half(b) + (16 * half(b) + std::fabs(half(b + 2))) * kF16Rel;
    case TensorType::Q5_1: return half(b) + (32 * half(b) + std::fabs(half(b + 2))) * kF16Rel;
    case TensorType::Q5_0: return std::fabs(half(b)) * (1 + 17 * kF16Rel);
    case TensorType::IQ4_NL: return std::fabs(half(b)) * (24 + 151 * kF16Rel);
    case TensorType::MXFP4: {
        // Power-of-two scale, exact: half the widest gap (8 -> 12) inside the range, the clipped
        // excess beyond 12 d outside it.
        const double d = quant::mxfp4_scale(b[quant::mxfp4::kE]);
        return std::max(2 * d, std::fabs(x) - 12 * d);
    }
    case TensorType::Q2_K: {
        const float d = half(b + quant::q2_k::kD), dmin = half(b + quant::q2_k::kDmin);
        return d * float(b[quant::q2_k::kScales + e / 16] & 15) + 4 * d / 2 + dmin / 2;
    }
    case TensorType::Q4_K:
    case TensorType::Q5_K: {
        const float d = half(b), dmin = half(b + 2);
        uint8_t sc, mn;
        quant::scale_min_k4(b + 4, e / 32, sc, mn);
        const int levels = t == TensorType::Q4_K ? 16 : 32;
        return d * float(sc) + levels * d / 2 + dmin / 2;
    }
    case TensorType::Q3_K: {
        const float d = std::fabs(half(b + quant::q3_k::kD));
        return d * std::fabs(float(quant::scale_q3_k(b + quant::q3_k::kScales, e / 16) - 32)) + 5 * d;
    }
    case TensorType::Q6_K: {
        const float d = std::fabs(half(b + quant::q6_k::kD));
        return d * std::fabs(float(int8_t(b[quant::q6_k::kScales + e / 16]))) + 33 * d;
    }
    case TensorType::IQ4_XS: {
        const float d = std::fabs(half(b));
        uint16_t sh;
        std::memcpy(&sh, b + quant::iq4_xs::kScalesH, 2);
        const int s = e / 32;
        const int ls = ((b[quant::iq4_xs::kScalesL + s / 2] >> (4 * (s % 2))) & 15) | ((sh >> (2 * s)) & 3) << 4;
        return 24 * d * std::fabs(float(ls - 32)) + 151 * d;
    }
    }
    return 0;
}

// Checks every element of the row against element_bound (plus float rounding noise).
void check_element_bounds(TensorType t, const std::vector<float>& x, const std::vector<uint8_t>& q,
                          const std::vector<float>& y) {
    const TypeTraits& tt = type_traits(t);
    const size_t be = tt.block_elems;
    int reported = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        const size_t blk = i / be;
        float amax = 0;
        for (size_t j = blk * be; j < (blk + 1) * be; ++j) amax = std::max(amax, std::fabs(x[j]));
        const double bound = element_bound(t, q.data() + blk * tt.block_bytes, int(i % be), x[i]) + 1e-5 * amax;
        const double err = std::fabs(double(x[i]) - double(y[i]));
        if (!(err <= bound) && reported++ < 5) {
            CAPTURE(name_of(t));
            CAPTURE(i);
            CAPTURE(x[i]);
            CAPTURE(y[i]);
            CAPTURE(bound);
            CHECK(err <= bound);
        }
    }
    CHECK(reported == 0);
}

double rel_rms(const std::vector<float>& x, const std::vector<float>& y) {
    double e = 0, s = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        e += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
        s += double(x[i]) * x[i];
    }
    return std::sqrt(e / s);
}

}  // namespace

TEST_CASE("quantize: Gaussian rows stay within each type's relative RMS bound and per-element bounds") {
    std::string report;
    for (TensorType t : kAllTensorTypes) {
        CAPTURE(name_of(t));
        double err2 = 0, sig2 = 0, worst = 0;
        for (uint32_t seed : {1u, 2u, 3u})
            for (size_t n : {256u, 768u, 4096u, 16384u}) {
                CAPTURE(seed);
                CAPTURE(n);
                const std::vector<float> x = gaussian(n, seed * 7919 + uint32_t(n));
                const std::vector<uint8_t> q = quantize(t, x);
                const std::vector<float> y = dequantize(t, q, n);
                const double r = rel_rms(x, y);
                CHECK(r <= type_traits(t).rel_rms_bound);
                worst = std::max(worst, r);
                for (size_t i = 0; i < n; ++i) {
                    err2 += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
                    sig2 += double(x[i]) * x[i];
                }
                check_element_bounds(t, x, q, y);
            }
        report += "\n  " + name_of(t) + ": relative RMS " + std::to_string(std::sqrt(err2 / sig2)) + " (worst row " +
                  std::to_string(worst) + ", bound " + std::to_string(type_traits(t).rel_rms_bound) + ")";
    }
    MESSAGE("measured on N(0,1) rows:" << report);
}

TEST_CASE("quantize: heavy tails and outliers keep the per-element bounds") {
    for (TensorType t : kAllTensorTypes) {
        CAPTURE(name_of(t));
        // Student-t-like rows (Gaussian / |Gaussian|^0.5) and rows with one large outlier per block.
        std::vector<float> x = gaussian(4096, 11), z = gaussian(4096, 12);
        for (size_t i = 0; i < x.size(); ++i) x[i] /= std::sqrt(std::fabs(z[i]) + 0.05f);
        std::vector<float> o = gaussian(4096, 13);
        for (size_t i = 0; i < o.size(); i += 97) o[i] = (i % 2 ? 1 : -1) * 300.0f;
        for (const std::vector<float>* row : {&x, &o}) {
            const std::vector<uint8_t> q = quantize(t, *row);
            const std::vector<float> y = dequantize(t, q, row->size());
            check_element_bounds(t, *row, q, y);
        }
    }
}

TEST_CASE("quantize: zeros, constants and re-quantizing decoded values") {
    for (TensorType t : kAllTensorTypes) {
        CAPTURE(name_of(t));
        const size_t n = 512;
        const std::vector<float> zeros(n, 0.0f);
        for (float v : dequantize(t, quantize(t, zeros), n)) CHECK(v == 0.0f);

        for (float c : {1.0f, -0.75f, 0.3f, 1234.5f, 1e-3f}) {
            CAPTURE(c);
            const std::vector<float> x(n, c);
            const std::vector<uint8_t> q = quantize(t, x);
            const std::vector<float> y = dequantize(t, q, n);
            check_element_bounds(t, x, q, y);
            // A constant lands on a level of every block type with a free scale, up to the f16
            // rounding of the scale (MXFP4's is a power of two: the element bound above is its
            // guarantee). For 1e-3 the super-block scales of the two-level types (1e-3 / 127 / 32
            // for IQ4_XS) are f16 subnormals, with a few percent of precision.
            const float tol = c == 1e-3f ? 4e-2f : 2e-3f;
            if (is_block_type(t) && t != TensorType::MXFP4)
                for (float v : y) CHECK(std::fabs(v - c) <= tol * std::fabs(c));
        }

        // quantize(dequantize(quantize(x))) decodes to the same values: the decoded values lie on
        // a grid the quantizer finds again.
        for (uint32_t seed : {21u, 22u, 23u}) {
            const std::vector<float> x = gaussian(8192, seed);
            const std::vector<float> y = dequantize(t, quantize(t, x), x.size());
            const std::vector<float> z = dequantize(t, quantize(t, y), y.size());
            int bad = 0;
            for (size_t i = 0; i < y.size(); ++i)
                if (!(std::fabs(y[i] - z[i]) <= 1e-6f * (1.0f + std::fabs(y[i]))) && bad++ < 3) {
                    CAPTURE(i);
                    CAPTURE(y[i]);
                    CAPTURE(z[i]);
                    CHECK(y[i] == z[i]);
                }
            CHECK(bad == 0);
        }
    }
}

TEST_CASE("quantize: deterministic, block by block, and rows must be whole blocks") {
    for (TensorType t : kAllTensorTypes) {
        CAPTURE(name_of(t));
        const TypeTraits& tt = type_traits(t);
        const std::vector<float> x = gaussian(2048, 5);
        const std::vector<uint8_t> a = quantize(t, x);
        CHECK(quantize(t, x) == a);
        // Each block is quantized on its own: the row equals its blocks quantized one at a time.
        std::vector<uint8_t> pieces(a.size());
        for (size_t b = 0; b < x.size() / tt.block_elems; ++b)
            quantize_row(t, x.data() + b * tt.block_elems, pieces.data() + b * tt.block_bytes, tt.block_elems);
        CHECK(pieces == a);
        if (!is_block_type(t)) continue;
        std::vector<uint8_t> out(row_bytes(t, 2048));
        std::vector<float> back(2048);
        for (size_t bad : {tt.block_elems - 1, tt.block_elems + 16, size_t(1000)}) {
            if (bad % tt.block_elems == 0) continue;
            CAPTURE(bad);
            CHECK_THROWS_AS(quantize_row(t, x.data(), out.data(), bad), std::invalid_argument);
            CHECK_THROWS_AS(dequantize_row(t, out.data(), back.data(), bad), std::invalid_argument);
        }
    }
}

TEST_CASE("quantize: extreme and non-finite inputs give finite blocks") {
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    for (TensorType t : kAllTensorTypes) {
        if (!is_block_type(t)) continue;  // F16/BF16 keep Inf and NaN, as they should
        CAPTURE(name_of(t));
        const size_t n = 256;
        // Values near and beyond the f16 range: scales clamp to the largest finite f16.
        for (float big : {60000.0f, 65504.0f, 1e6f, 3e38f}) {
            CAPTURE(big);
            std::vector<float> x = gaussian(n, 3);
            for (size_t i = 0; i < n; i += 5) x[i] = (i % 2 ? big : -big);
            const std::vector<float> y = dequantize(t, quantize(t, x), n);
            for (float v : y) CHECK(std::isfinite(v));
        }
        // Documented behaviour (quantize.cpp; Q8_0 / Q4_0 in tensor_types.cpp): NaN quantizes as 0,
        // +-Inf saturates the block.
        std::vector<float> x = gaussian(n, 4);
        x[3] = nan;
        x[40] = inf;
        x[41] = -inf;
        const std::vector<uint8_t> q1 = quantize(t, x), q2 = quantize(t, x);
        CHECK(q1 == q2);
        const std::vector<float> y = dequantize(t, q1, n);
        for (float v : y) CHECK(std::isfinite(v));
        CHECK(y[40] > 0);
        CHECK(y[41] < 0);
        // A block of only NaN is a zero block.
        const std::vector<float> all_nan(n, nan);
        for (float v : dequantize(t, quantize(t, all_nan), n)) CHECK(v == 0.0f);
    }
}

// --- the dequantizers against blocks built byte by byte from block_formats.h ---------------------

namespace {

constexpr uint16_t kHalfOne = 0x3c00, kHalfHalf = 0x3800, kHalfTwo = 0x4000, kHalfMinusOne = 0xbc00,
                   kHalfQuarter = 0x3400;

void put16(std::vector<uint8_t>& b, size_t at, uint16_t v) { std::memcpy(b.data() + at, &v, 2); }

std::vector<float> decode(TensorType t, const std::vector<uint8_t>& block) {
    REQUIRE(block.size() == type_traits(t).block_bytes);
    return dequantize(t, block, type_traits(t).block_elems);
}

}  // namespace

TEST_CASE("dequantize: hand-built 32-element blocks") {
    SUBCASE("Q4_1: x = q * d + m") {
        std::vector<uint8_t> b(20, 0);
        put16(b, 0, kHalfHalf);      // d = 0.5
        put16(b, 2, kHalfMinusOne);  // m = -1
        b[4 + 0] = 0x3a;             // element 0 low nibble 10, element 16 high nibble 3
        b[4 + 15] = 0xf1;            // element 15: 1, element 31: 15
        const std::vector<float> y = decode(TensorType::Q4_1, b);
        CHECK(y[0] == 4.0f);    // 10 * 0.5 - 1
        CHECK(y[16] == 0.5f);   // 3 * 0.5 - 1
        CHECK(y[15] == -0.5f);  // 1 * 0.5 - 1
        CHECK(y[31] == 6.5f);   // 15 * 0.5 - 1
        CHECK(y[7] == -1.0f);   // q = 0
    }
    SUBCASE("Q5_0: bit e of qh is bit 4 of element e; x = (q - 16) * d") {
        std::vector<uint8_t> b(22, 0);
        put16(b, 0, kHalfQuarter);                // d = 0.25
        const uint32_t qh = (1u << 0) | (1u << 17) | (1u << 31);
        std::memcpy(b.data() + 2, &qh, 4);
        b[6 + 0] = 0x52;   // element 0: 2 (+16 from qh), element 16: 5
        b[6 + 1] = 0x07;   // element 1: 7, element 17: 0 (+16)
        b[6 + 15] = 0xf0;  // element 15: 0, element 31: 15 (+16)
        const std::vector<float> y = decode(TensorType::Q5_0, b);
        CHECK(y[0] == 0.5f);     // (18 - 16) / 4
        CHECK(y[16] == -2.75f);  // (5 - 16) / 4
        CHECK(y[1] == -2.25f);   // (7 - 16) / 4
        CHECK(y[17] == 0.0f);    // (16 - 16) / 4
        CHECK(y[15] == -4.0f);   // (0 - 16) / 4
        CHECK(y[31] == 3.75f);   // (31 - 16) / 4
    }
    SUBCASE("Q5_1: x = q * d + m, qh at byte 4, qs at byte 8") {
        std::vector<uint8_t> b(24, 0);
        put16(b, 0, kHalfOne);  // d = 1
        put16(b, 2, kHalfTwo);  // m = 2
        const uint32_t qh = 1u << 20;
        std::memcpy(b.data() + 4, &qh, 4);
        b[8 + 4] = 0x9c;  // element 4: 12, element 20: 9 (+16)
        const std::vector<float> y = decode(TensorType::Q5_1, b);
        CHECK(y[4] == 14.0f);   // 12 + 2
        CHECK(y[20] == 27.0f);  // 25 + 2
        CHECK(y[5] == 2.0f);
    }
    SUBCASE("IQ4_NL: x = d * level[q] with ggml's 16 levels") {
        std::vector<uint8_t> b(18, 0);
        put16(b, 0, kHalfTwo);  // d = 2
        b[2 + 0] = 0xf0;        // element 0: level 0 (-127), element 16: level 15 (113)
        b[2 + 9] = 0x78;        // element 9: level 8 (1), element 25: level 7 (-10)
        const std::vector<float> y = decode(TensorType::IQ4_NL, b);
        CHECK(y[0] == -254.0f);
        CHECK(y[16] == 226.0f);
        CHECK(y[9] == 2.0f);
        CHECK(y[25] == -20.0f);
        CHECK(y[1] == -254.0f);  // nibble 0
    }
    SUBCASE("MXFP4: x = 2^(e - 128) * doubled E2M1 level, e an E8M0 byte at 0, nibbles from byte 1") {
        std::vector<uint8_t> b(17, 0);
        b[0] = 127;         // 2^-1: the levels 0 1 2 3 4 6 8 12 become the E2M1 values 0 .. 6
        b[1 + 0] = 0xf7;    // element 0: level 7 (6), element 16: level 15 (-6)
        b[1 + 9] = 0x39;    // element 9: level 9 (-0.5), element 25: level 3 (1.5)
        b[1 + 15] = 0x85;   // element 15: level 5 (3), element 31: level 8 (-0 = 0)
        std::vector<float> y = decode(TensorType::MXFP4, b);
        CHECK(y[0] == 6.0f);
        CHECK(y[16] == -6.0f);
        CHECK(y[9] == -0.5f);
        CHECK(y[25] == 1.5f);
        CHECK(y[15] == 3.0f);
        CHECK(y[31] == 0.0f);
        CHECK(y[1] == 0.0f);
        b[0] = 130;  // 2^2
        y = decode(TensorType::MXFP4, b);
        CHECK(y[0] == 48.0f);
        b[0] = 1;  // subnormal scale 2^-127
        y = decode(TensorType::MXFP4, b);
        CHECK(y[0] == 12.0f * 0x1p-127f);
    }
}

TEST_CASE("dequantize: hand-built K-quant and IQ4_XS super-blocks") {
    SUBCASE("Q2_K: scales[s] = scale | min << 4, 2-bit q at shift 2j of qs[32h + l]") {
        std::vector<uint8_t> b(84, 0);
        put16(b, 80, kHalfOne);   // d = 1
        put16(b, 82, kHalfHalf);  // dmin = 0.5
        b[0] = 0x23;              // sub-block 0 (elements 0..15): scale 3, min 2
        b[13] = 0x5f;             // sub-block 13 (elements 208..223): scale 15, min 5
        b[16 + 5] = 0x02 | 0x03 << 6;  // qs[5]: element 5 (h 0, j 0) q=2; element 101 (j 3) q=3
        b[16 + 32 + 17] = 0x01 << 4;   // qs[49]: h 1, l 17, j 2: element 128 + 64 + 17 = 209, q=1
        const std::vector<float> y = decode(TensorType::Q2_K, b);
        CHECK(y[5] == 5.0f);      // 1 * 3 * 2 - 0.5 * 2
        CHECK(y[0] == -1.0f);     // q = 0: -0.5 * 2
        CHECK(y[209] == 12.5f);   // 1 * 15 * 1 - 0.5 * 5
        CHECK(y[101] == 0.0f);    // sub-block 6 has scale 0 and min 0
        CHECK(y[208] == -2.5f);   // q = 0 in sub-block 13
    }
    SUBCASE("Q3_K: 6-bit scales split in 4 + 2 bits, hmask bit clear means -4") {
        std::vector<uint8_t> b(110, 0);
        put16(b, 108, kHalfHalf);  // d = 0.5
        // Sub-block 0: scale 40 (bias 32 -> 8): low nibble of scales[0], high bits 2 in scales[8] bits 0-1.
        b[96 + 0] = 40 & 15;
        b[96 + 8] = 40 >> 4;
        // Sub-block 13: scale 5 (-> -27): low nibble in scales[13 % 8] high half, high bits 0.
        b[96 + 5] = uint8_t((5 & 15) << 4);
        // Other sub-blocks: code 0 -> scale -32.
        b[32 + 3] = 0x03;          // qs[3]: element 3 (h 0, j 0) low bits 3
        b[0 + 3] = 0x01;           // hmask[3] bit 0 set: element 3 keeps q = 3
        b[32 + 32 + 16] = 0x02 << 4;  // qs[48]: h 1, j 2, l 16: element 128 + 64 + 16 = 208, low bits 2
        // hmask[16] bit 4h + j = 6 clear: element 208 gets q = 2 - 4 = -2
        const std::vector<float> y = decode(TensorType::Q3_K, b);
        CHECK(y[3] == 12.0f);    // 0.5 * 8 * 3
        CHECK(y[4] == -16.0f);   // q = 0 - 4, scale 8: 0.5 * 8 * -4
        CHECK(y[208] == 27.0f);  // 0.5 * -27 * -2
        CHECK(y[16] == 64.0f);   // sub-block 1: scale -32, q = -4
    }
    SUBCASE("Q4_K: get_scale_min_k4 packing, nibbles by 64-element chunks") {
        std::vector<uint8_t> b(144, 0);
        put16(b, 0, kHalfOne);   // d = 1
        put16(b, 2, kHalfHalf);  // dmin = 0.5
        // Sub-block 0: scale 1, min 2 (scales[0], scales[4] low 6 bits).
        b[4 + 0] = 1;
        b[4 + 4] = 2;
        // Sub-block 5: scale 37 = 0b10'0101, min 50 = 0b11'0010: low nibbles in scales[9],
        // high bits of the scale in scales[1] bits 6-7, of the min in scales[5] bits 6-7.
        b[4 + 9] = 0x25;
        b[4 + 1] |= 2 << 6;
        b[4 + 5] |= 3 << 6;
        b[16 + 0] = 7;         // element 0: c 0, r 0, low nibble
        b[16 + 64 + 3] = 0x90;  // element 163: c 2, r 35 -> qs[67] high nibble 9
        const std::vector<float> y = decode(TensorType::Q4_K, b);
        CHECK(y[0] == 6.0f);      // 1 * 1 * 7 - 0.5 * 2
        CHECK(y[1] == -1.0f);     // q = 0
        CHECK(y[163] == 308.0f);  // 37 * 9 - 0.5 * 50
        CHECK(y[160] == -25.0f);  // q = 0 in sub-block 5
        CHECK(y[32] == 0.0f);     // sub-block 1: scale (scales[1] & 63) = 0, min 0
    }
    SUBCASE("Q5_K: as Q4_K plus bit e / 32 of qh[e % 32]") {
        std::vector<uint8_t> b(176, 0);
        put16(b, 0, kHalfTwo);  // d = 2
        put16(b, 2, kHalfOne);  // dmin = 1
        b[4 + 3] = 3;           // sub-block 3: scale 3
        b[4 + 7] = 4;           // sub-block 3: min 4
        b[16 + 10] = 1 << 3;    // qh[10] bit 3: element 3 * 32 + 10 = 106 gets +16
        b[48 + 32 + 10] = 0x50;  // element 106: c 1, r 42 -> qs[42] high nibble 5
        const std::vector<float> y = decode(TensorType::Q5_K, b);
        CHECK(y[106] == 122.0f);  // 2 * 3 * 21 - 1 * 4
        CHECK(y[96] == -4.0f);
    }
    SUBCASE("Q6_K: ql nibbles, qh 2-bit pairs, int8 scales") {
        std::vector<uint8_t> b(210, 0);
        put16(b, 208, kHalfQuarter);  // d = 0.25
        b[192 + 0] = uint8_t(int8_t(-4));  // sub-block 0 scale -4
        b[192 + 11] = 8;                   // sub-block 11 (elements 176..191) scale 8
        b[0 + 2] = 0x0d;          // element 2: h 0, g 0, l 2 -> ql[2] low nibble 13
        b[128 + 2] = 0x02;        // qh[2] bits 0-1 = 2: q = 13 + 32 = 45
        // Element 180: h 1, g 1, l 20 -> ql[64 + 32 + 20] low nibble, qh[32 + 20] bits 2-3.
        b[64 + 32 + 20] = 0x06;
        b[128 + 32 + 20] = 0x03 << 2;  // q = 6 + 48 = 54
        const std::vector<float> y = decode(TensorType::Q6_K, b);
        CHECK(y[2] == -13.0f);   // 0.25 * -4 * (45 - 32)
        CHECK(y[180] == 44.0f);  // 0.25 * 8 * (54 - 32)
        CHECK(y[0] == 32.0f);    // 0.25 * -4 * (0 - 32)
    }
    SUBCASE("IQ4_XS: 6-bit scales from scales_l nibbles and scales_h pairs") {
        std::vector<uint8_t> b(136, 0);
        put16(b, 0, kHalfHalf);  // d = 0.5
        // Sub-block 3: ls = 0b10'0110 = 38 (-> 6): low nibble in the high half of scales_l[1],
        // high bits in scales_h bits 6-7.
        b[4 + 1] = 6 << 4;
        const uint16_t sh = 2 << 6;
        std::memcpy(b.data() + 2, &sh, 2);
        b[8 + 16 * 3 + 4] = 0xf0;  // sub-block 3: element 96 + 4 level 0 (-127), element 96 + 20 level 15
        const std::vector<float> y = decode(TensorType::IQ4_XS, b);
        CHECK(y[100] == -381.0f);  // 0.5 * 6 * -127
        CHECK(y[116] == 339.0f);   // 0.5 * 6 * 113
        CHECK(y[0] == 2032.0f);    // sub-block 0: ls 0 -> -32, level 0: 0.5 * -32 * -127
    }
}
