// Quantizers for the block types of block_formats.h, written from the layouts documented there.
//
// Every type is quantized in two steps: find a real-valued scale (and, for the affine types, an
// offset) per block or sub-block, then round the values on the grid that the *stored* fields give
// back, so the error a caller sees is exactly the error the dequantizer produces. The K-quants and
// IQ4_XS first fit each sub-block, then round the sub-block scales to codes of the f16 super-block
// scale, and only then round the values.
//
// Scale search: each (sub-)block tries a handful of candidate grids around the min/max estimate,
// refines each by least squares for the levels it assigned, and keeps the one with the least
// squared error (on a tie, the finer grid). Two kinds of candidates matter:
//   - grids whose extreme elements land exactly on the outermost levels or one or two levels
//     inside: when the input already lies on a grid (decoded data), one of them reproduces it;
//   - slightly narrower and wider grids, which trade clipping the extremes for finer steps.
// A candidate is only accepted if no element ends up more than one step (of that candidate's
// grid) away from its value: clipping at the ends stays within half a step beyond the rounding.
// Rounding the sub-block scales to codes then moves each level by at most its index times half a
// code step (a whole step where a signed code clamps); tests/runtime/quant/test_quantize.cpp checks
// every element against that bound, computed from the stored fields.
//
// Re-quantizing decoded data gives the same values (not always the same bytes): besides the
// candidates above, the super-block stage takes codes that reproduce a sub-block exactly, and
// keeps the code of the largest sub-block at the end of the code range so the super-block scale
// comes out the same.
//
// Non-finite inputs: NaN is quantized as 0, and every value is clamped to +-1e30 first (so +-Inf
// saturates the block); f16 scales are clamped to the finite f16 range, so no block ever holds an
// Inf or NaN field. Every float-to-int conversion is of a value clamped first (round_clamp), so
// none is undefined whatever the input.
#include "runtime/quant/block_formats.h"

#include "runtime/quant/tensor_types.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>

namespace vkllm::quant {

namespace {

constexpr float kF16Max = 65504.0f;
constexpr float kInputLimit = 1e30f;

// NaN -> 0, everything else clamped to +-kInputLimit: keeps every scale and level finite. (Squared
// errors of such blocks may overflow to +Inf; that only makes the fits keep their first candidate.)
void sanitize(const float* src, float* dst, int n) {
    for (int i = 0; i < n; ++i) {
        const float v = src[i];
        dst[i] = v != v ? 0.0f : std::clamp(v, -kInputLimit, kInputLimit);
    }
}

// Stores v as f16 at p (clamped to the finite range) and returns the value a reader gets back.
float put_half(uint8_t* p, float v) {
    const uint16_t h = f32_to_f16(std::clamp(v, -kF16Max, kF16Max));
    std::memcpy(p, &h, 2);
    return f16_to_f32(h);
}

// Nearest integer in [lo, hi] (ties to even); NaN gives lo. Defined for every float, unlike a bare
// conversion, and branch-free: adding and subtracting 1.5 * 2^23 rounds a float of magnitude below
// 2^22 to an integer in the default rounding mode.
int round_clamp(float v, int lo, int hi) {
    v = v > float(lo) ? v : float(lo);
    v = v < float(hi) ? v : float(hi);
    constexpr float kMagic = 12582912.0f;
    return int((v + kMagic) - kMagic);
}

// Sums f(i) for i < n (a multiple of 8) in 8 independent lanes: no serial dependency chain
// through one accumulator, and the compiler may vectorize it.
template <class F>
float lane_sum(int n, F f) {
    float acc[8] = {};
    for (int i = 0; i < n; i += 8)
        for (int k = 0; k < 8; ++k) acc[k] += f(i + k);
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

void min_max(const float* x, int n, float& lo, float& hi) {
    lo = hi = x[0];
    for (int i = 1; i < n; ++i) {
        lo = std::min(lo, x[i]);
        hi = std::max(hi, x[i]);
    }
}

// The element of largest magnitude, with its sign (the first one on ties).
float signed_absmax(const float* x, int n) {
    float m = 0;
    for (int i = 0; i < n; ++i)
        if (std::fabs(x[i]) > std::fabs(m)) m = x[i];
    return m;
}

// Whether r is within rounding noise of a whole number c (decoded values are float products, so
// a grid read back from them is off by a few ulps).
bool near_integer(float r, int& c) {
    c = round_clamp(r, -1000, 1000);
    return std::fabs(r - float(c)) <= 1e-3f;
}

// Candidate comparison for the fits: clearly less error wins; within rounding noise of a tie
// (tol) the finer grid wins. Choosing the finer of two grids that fit equally well is what makes
// re-quantizing decoded data choose the grid it came from, and a finer sub-block grid keeps the
// super-block scale finer.
bool better(float err, float scale, float best_err, float best_scale, float tol) {
    return err < best_err - tol || (err <= best_err + tol && std::fabs(scale) < std::fabs(best_scale));
}

float energy(const float* x, int n) {
    return lane_sum(n, [&](int i) { return x[i] * x[i]; });
}

// --- affine grids: x ~ scale * q + offset, q in 0..nmax ------------------------------------------

struct AffineFit {
    float scale;
    float offset;
};

// Rounds x onto the grid (q written when q_out is non-null) and returns the squared error.
float affine_round(const float* x, int n, int nmax, float scale, float offset, uint8_t* q_out = nullptr) {
    const float inv = scale > 0 ? 1.0f / scale : 0.0f;
    return lane_sum(n, [&](int i) {
        const int q = round_clamp((x[i] - offset) * inv, 0, nmax);
        if (q_out) q_out[i] = uint8_t(q);
        const float e = x[i] - (scale * float(q) + offset);
        return e * e;
    });
}

// Best affine grid for x. With `nonpositive_offset` (K-quants store the offset as a subtracted
// non-negative min) the offset is kept <= 0.
AffineFit fit_affine(const float* x, int n, int nmax, bool nonpositive_offset) {
    float xlo, xhi;
    min_max(x, n, xlo, xhi);
    const float lo = nonpositive_offset ? std::min(xlo, 0.0f) : xlo;
    const float hi = xhi;
    if (!(hi > lo)) return {0.0f, lo};
    AffineFit best{(hi - lo) / float(nmax), lo};
    float best_err = affine_round(x, n, nmax, best.scale, best.offset);
    const float sx = lane_sum(n, [&](int i) { return x[i]; });
    const float tol = 1e-9f * energy(x, n);
    // Spans of the candidate grids in steps across [lo, hi], each refined by least squares for the
    // levels it assigns. Integers reproduce inputs already on a grid whose top level or two are
    // unused; the half steps trade clipping for resolution.
    const float spans[] = {float(nmax), float(nmax) - 1.0f, float(nmax) - 2.0f, float(nmax) + 0.5f};
    for (float span : spans) {
        if (span <= 0) continue;
        const float iscale = span / (hi - lo);
        float sl = 0, sll = 0, sxl = 0;
        {
            float al[8] = {}, all[8] = {}, axl[8] = {};
            for (int i = 0; i < n; i += 8)
                for (int k = 0; k < 8; ++k) {
                    const float l = float(round_clamp((x[i + k] - lo) * iscale, 0, nmax));
                    al[k] += l;
                    all[k] += l * l;
                    axl[k] += x[i + k] * l;
                }
            for (int k = 0; k < 8; ++k) {
                sl += al[k];
                sll += all[k];
                sxl += axl[k];
            }
        }
        const float det = float(n) * sll - sl * sl;
        if (!(det > 0)) continue;
        float a = (float(n) * sxl - sl * sx) / det;
        float b = (sx - a * sl) / float(n);
        if (nonpositive_offset && b > 0) {
            b = 0;
            a = sxl / sll;
        }
        if (!(a > 0)) continue;
        // At most one step of error at either end (see the file comment).
        if ((xlo - b) / a < -1.0f || (xhi - b) / a > float(nmax) + 1.0f) continue;
        const float err = affine_round(x, n, nmax, a, b);
        if (better(err, a, best_err, best.scale, tol)) {
            best_err = err;
            best = {a, b};
        }
    }
    return best;
}

// --- symmetric grids: x ~ scale * q, q in -nneg..npos -------------------------------------------

float symmetric_round(const float* x, int n, int nneg, int npos, float scale, int8_t* q_out = nullptr) {
    const float inv = scale != 0 ? 1.0f / scale : 0.0f;
    return lane_sum(n, [&](int i) {
        const int q = round_clamp(x[i] * inv, -nneg, npos);
        if (q_out) q_out[i] = int8_t(q);
        const float e = x[i] - scale * float(q);
        return e * e;
    });
}

// Best symmetric grid for x. The scale may be negative: by default the largest element maps to
// -nneg, the end of the range with one more level, as ggml does.
float fit_symmetric(const float* x, int n, int nneg, int npos) {
    const float amax = signed_absmax(x, n);
    if (amax == 0) return 0.0f;
    float xlo, xhi;
    min_max(x, n, xlo, xhi);
    float best = amax / float(-nneg);
    float best_err = symmetric_round(x, n, nneg, npos, best);
    const float tol = 1e-9f * energy(x, n);
    // Levels the largest element may land on, each refined by least squares for the levels it
    // assigns: the two outermost at either end reproduce inputs already on a grid; half a level
    // past the end trades clipping for resolution.
    const float levels[] = {float(-nneg), float(-nneg + 1), float(npos), float(npos - 1), float(-nneg) - 0.5f};
    for (float level : levels) {
        const float inv = level / amax;
        float axl[8] = {}, all[8] = {};
        for (int i = 0; i < n; i += 8)
            for (int k = 0; k < 8; ++k) {
                const float l = float(round_clamp(x[i + k] * inv, -nneg, npos));
                axl[k] += x[i + k] * l;
                all[k] += l * l;
            }
        float sxl = 0, sll = 0;
        for (int k = 0; k < 8; ++k) {
            sxl += axl[k];
            sll += all[k];
        }
        if (!(sll > 0)) continue;
        const float a = sxl / sll;
        if (a == 0) continue;
        const float t1 = xlo / a, t2 = xhi / a;
        if (std::min(t1, t2) < float(-nneg - 1) || std::max(t1, t2) > float(npos + 1)) continue;
        const float err = symmetric_round(x, n, nneg, npos, a);
        if (better(err, a, best_err, best, tol)) {
            best_err = err;
            best = a;
        }
    }
    return best;
}

// --- the IQ4 non-uniform grid: x ~ scale * kIq4Values[q] ----------------------------------------

// Index of the level nearest t, from a table over floor(2t): every midpoint between neighbouring
// levels is a multiple of 0.5, so each half-unit interval lies on one side of all of them. (A t
// exactly on a midpoint goes up; both neighbours are equally near then.) t is clamped to
// [-160, 160) first, beyond which the end levels are nearest anyway; NaN becomes -160.
constexpr int kIq4TableHalf = 320;

struct Iq4Table {
    uint8_t idx[2 * kIq4TableHalf];
    constexpr Iq4Table() : idx{} {
        for (int k = 0; k < 2 * kIq4TableHalf; ++k) {
            const double t = (k - kIq4TableHalf + 0.5) / 2.0;
            int best = 0;
            for (int i = 1; i < 16; ++i) {
                const double di = t - kIq4Values[i], db = t - kIq4Values[best];
                if (di * di < db * db) best = i;
            }
            idx[k] = uint8_t(best);
        }
    }
};
constexpr Iq4Table kIq4Table;

int iq4_index(float x, float inv) {
    float t = 2.0f * x * inv + float(kIq4TableHalf);
    t = t > 0.0f ? t : 0.0f;
    t = t < float(2 * kIq4TableHalf - 1) ? t : float(2 * kIq4TableHalf - 1);
    return kIq4Table.idx[int(t)];
}

constexpr int kIq4MaxGap = 24;  // largest distance between neighbouring levels (89 -> 113)

float iq4_round(const float* x, int n, float scale, uint8_t* q_out = nullptr) {
    const float inv = scale != 0 ? 1.0f / scale : 0.0f;
    return lane_sum(n, [&](int i) {
        const int q = iq4_index(x[i], inv);
        if (q_out) q_out[i] = uint8_t(q);
        const float e = x[i] - scale * float(kIq4Values[q]);
        return e * e;
    });
}

float fit_iq4(const float* x, int n) {
    const float amax = signed_absmax(x, n);
    if (amax == 0) return 0.0f;
    float xlo, xhi;
    min_max(x, n, xlo, xhi);
    float best = amax / float(kIq4Values[0]);
    float best_err = iq4_round(x, n, best);
    const float tol = 1e-9f * energy(x, n);
    // As fit_symmetric: the largest element on one of the two outermost levels at either end, or
    // a little past the negative end, each refined by least squares.
    const float levels[] = {-127.0f, -104.0f, 113.0f, 89.0f, -135.0f};
    for (float level : levels) {
        const float inv = level / amax;
        float axv[8] = {}, avv[8] = {};
        for (int i = 0; i < n; i += 8)
            for (int k = 0; k < 8; ++k) {
                const float v = float(kIq4Values[iq4_index(x[i + k], inv)]);
                axv[k] += x[i + k] * v;
                avv[k] += v * v;
            }
        float sxv = 0, svv = 0;
        for (int k = 0; k < 8; ++k) {
            sxv += axv[k];
            svv += avv[k];
        }
        const float a = sxv / svv;  // svv >= 1: every level is non-zero
        if (a == 0) continue;
        const float t1 = xlo / a, t2 = xhi / a;
        if (std::min(t1, t2) < float(kIq4Values[0] - kIq4MaxGap) ||
            std::max(t1, t2) > float(kIq4Values[15] + kIq4MaxGap))
            continue;
        const float err = iq4_round(x, n, a);
        if (better(err, a, best_err, best, tol)) {
            best_err = err;
            best = a;
        }
    }
    return best;
}

// --- packing helpers -----------------------------------------------------------------------------

// 32 values (0..15) into 16 bytes: element j low nibble, j + 16 high nibble of byte j.
void pack_nibbles32(const uint8_t* q, uint8_t* qs) {
    for (int j = 0; j < 16; ++j) qs[j] = uint8_t((q[j] & 15) | (q[j + 16] & 15) << 4);
}

// Bit 4 of 32 5-bit values, element e at bit e.
uint32_t high_bits32(const uint8_t* q) {
    uint32_t qh = 0;
    for (int e = 0; e < 32; ++e) qh |= uint32_t((q[e] >> 4) & 1) << e;
    return qh;
}

template <class Fn>
void for_blocks(const float* src, uint8_t* dst, size_t n, int elems, size_t bytes, Fn fn) {
    float x[256];
    for (size_t b = 0; b < n / size_t(elems); ++b) {
        sanitize(src + b * size_t(elems), x, elems);
        std::memset(dst + b * bytes, 0, bytes);
        fn(x, dst + b * bytes);
    }
}

// Affine 32-element blocks (Q4_1, Q5_1): d and m stored as f16, values re-rounded against them.
void affine_block32(const float* x, int nmax, uint8_t* d_at, uint8_t* m_at, uint8_t* q) {
    const AffineFit f = fit_affine(x, 32, nmax, false);
    const float d = put_half(d_at, f.scale);
    const float m = put_half(m_at, f.offset);
    const float inv = d > 0 ? 1.0f / d : 0.0f;
    for (int e = 0; e < 32; ++e) q[e] = uint8_t(round_clamp((x[e] - m) * inv, 0, nmax));
}

// K-quant affine super-block: per sub-block fits, then the scales and mins as codes (0..code_max)
// against the f16 d and dmin, then the values (0..nmax) against the stored codes.
template <int kSubs>
void affine_super_block(const float* x, int nmax, int code_max, uint8_t* d_at, uint8_t* dmin_at, uint8_t* sc,
                        uint8_t* mn, uint8_t* q) {
    constexpr int len = 256 / kSubs;
    AffineFit fits[kSubs];
    float max_scale = 0, max_min = 0;
    for (int s = 0; s < kSubs; ++s) {
        fits[s] = fit_affine(x + s * len, len, nmax, true);
        max_scale = std::max(max_scale, fits[s].scale);
        max_min = std::max(max_min, -fits[s].offset);
    }
    const float d = put_half(d_at, max_scale / float(code_max));
    const float dmin = put_half(dmin_at, max_min / float(code_max));
    const float id = d > 0 ? 1.0f / d : 0.0f, idmin = dmin > 0 ? 1.0f / dmin : 0.0f;
    for (int s = 0; s < kSubs; ++s) {
        const float* xs = x + s * len;
        uint8_t* qs = q + s * len;
        sc[s] = uint8_t(round_clamp(fits[s].scale * id, 0, code_max));
        mn[s] = uint8_t(round_clamp(-fits[s].offset * idmin, 0, code_max));
        float best = affine_round(xs, len, nmax, d * float(sc[s]), -dmin * float(mn[s]), qs);
        if (!(d > 0)) continue;
        // Only exact fits are taken: for other data the rounded fit stays, so the largest scale and
        // min keep the top codes and d, dmin are found again from the decoded block.
        const float exact = 1e-8f * energy(xs, len);
        auto consider = [&](int c, int cm) {
            if (c < 0 || c > code_max || (c == sc[s] && cm == mn[s])) return;
            uint8_t qt[32];
            const float err = affine_round(xs, len, nmax, d * float(c), -dmin * float(cm), qt);
            if (err < best && err <= exact) {
                best = err;
                sc[s] = uint8_t(c);
                mn[s] = uint8_t(cm);
                std::memcpy(qs, qt, len);
            }
        };
        // Inputs already on a grid (decoded data) whose lowest or highest levels are unused: the
        // codes that put the lowest and highest elements exactly on levels near the ends
        // reproduce them.
        float lo, hi;
        min_max(xs, len, lo, hi);
        for (int lo_level = 0; lo_level <= 2; ++lo_level)
            for (int hi_level = nmax; hi_level >= std::max(lo_level + 1, nmax - 7); --hi_level) {
                const float a = (hi - lo) / float(hi_level - lo_level);
                int c, cm = 0;
                if (!near_integer(a / d, c)) continue;
                const float m = a * float(lo_level) - lo;
                if (dmin > 0 ? !near_integer(m / dmin, cm) : std::fabs(m) > 1e-6f * a) continue;
                consider(c, cm);
            }
    }
}

// Signed sub-block codes for symmetric super-blocks: code c in -code_neg..code_neg-1 gives the grid
// d * c * level. Per sub-block: the rounded fit, unless a code that puts the largest element exactly
// on one of `levels` reproduces the sub-block exactly (decoded data, as in affine_super_block).
// Returns the total squared error.
template <class Round>
float choose_signed_codes(const float* x, int subs, int len, const float* scales, float d, int code_neg,
                          std::initializer_list<int> levels, int8_t* codes, Round round) {
    const float id = d != 0 ? 1.0f / d : 0.0f;
    float total = 0;
    for (int s = 0; s < subs; ++s) {
        const float* xs = x + s * len;
        const int c0 = round_clamp(scales[s] * id, -code_neg, code_neg - 1);
        codes[s] = int8_t(c0);
        float best = round(s, d * float(c0), true);
        if (d == 0) {
            total += best;
            continue;
        }
        const float exact = 1e-8f * energy(xs, len);
        const float amax = signed_absmax(xs, len);
        for (int level : levels) {
            int c;
            if (!near_integer(amax / (d * float(level)), c) || c == 0 || c < -code_neg || c > code_neg - 1 ||
                c == codes[s])
                continue;
            const float err = round(s, d * float(c), false);
            if (err < best && err <= exact) {
                best = err;
                codes[s] = int8_t(c);
                round(s, d * float(c), true);
            }
        }
        total += best;
    }
    return total;
}

// Stores d = scales[top] / -code_neg and runs choose_signed_codes; with `try_flip` also tries the
// mirrored top sub-block (d negated), keeping the better. The sign of d follows the sub-block with
// the largest scale; when that sub-block fits mirrored just as well (its values never reach the
// longer end, as in decoded data) the other sign can be the one that leaves no other code
// clamped. The top sub-block keeps code -code_neg either way, so |d| is what re-quantizing the
// decoded block finds again. round(s, a, q) rounds sub-block s with scale a into q (may be null)
// and returns its error.
template <class Round>
void choose_signed_codes_both(const float* x, int subs, int len, const float* scales, int top, int code_neg,
                              std::initializer_list<int> levels, bool try_flip, uint8_t* d_at, int8_t* codes, int8_t* q,
                              Round round) {
    const float d = put_half(d_at, scales[top] / float(-code_neg));
    const float e1 = choose_signed_codes(x, subs, len, scales, d, code_neg, levels, codes,
                                         [&](int s, float a, bool store) { return round(s, a, store ? q : nullptr); });
    if (d == 0 || !try_flip) return;
    float mirrored[16];
    std::memcpy(mirrored, scales, sizeof(float) * size_t(subs));
    mirrored[top] = -scales[top];
    int8_t codes2[16], q2[256];
    const float e2 = choose_signed_codes(x, subs, len, mirrored, -d, code_neg, levels, codes2,
                                         [&](int s, float a, bool store) { return round(s, a, store ? q2 : nullptr); });
    if (e2 < e1) {
        put_half(d_at, -scales[top] / float(-code_neg));
        std::memcpy(codes, codes2, size_t(subs));
        std::memcpy(q, q2, size_t(subs * len));
    }
}

// Symmetric super-block with 16 sub-blocks of 16 (Q3_K, Q6_K): values in -nneg..npos.
void symmetric_super_block(const float* x, int nneg, int npos, int code_neg, uint8_t* d_at, int8_t* sc, int8_t* q) {
    float scales[16];
    int top = 0;
    for (int s = 0; s < 16; ++s) {
        scales[s] = fit_symmetric(x + 16 * s, 16, nneg, npos);
        if (std::fabs(scales[s]) > std::fabs(scales[top])) top = s;
    }
    // The largest sub-block fits mirrored equally well when none of its values sits at -nneg.
    bool mirrors = npos >= nneg - 1;
    const float inv_top = scales[top] != 0 ? 1.0f / scales[top] : 0.0f;
    for (int e = 16 * top; e < 16 * top + 16; ++e)
        mirrors = mirrors && round_clamp(x[e] * inv_top, -nneg, npos) != -nneg;
    choose_signed_codes_both(x, 16, 16, scales, top, code_neg, {-nneg, -nneg + 1, -nneg + 2, npos, npos - 1, npos - 2},
                             mirrors, d_at, sc, q, [&](int s, float a, int8_t* qs) {
                                 return symmetric_round(x + 16 * s, 16, nneg, npos, a, qs ? qs + 16 * s : nullptr);
                             });
}

}  // namespace

void quantize_q4_1(const float* src, uint8_t* dst, size_t n) {
    for_blocks(src, dst, n, 32, q4_1::kBytes, [](const float* x, uint8_t* b) {
        uint8_t q[32];
        affine_block32(x, 15, b + q4_1::kD, b + q4_1::kM, q);
        pack_nibbles32(q, b + q4_1::kQs);
    });
}

void quantize_q5_0(const float* src, uint8_t* dst, size_t n) {
    for_blocks(src, dst, n, 32, q5_0::kBytes, [](const float* x, uint8_t* b) {
        const float d = put_half(b + q5_0::kD, fit_symmetric(x, 32, 16, 15));
        const float inv = d != 0 ? 1.0f / d : 0.0f;
        uint8_t q[32];
        for (int e = 0; e < 32; ++e) q[e] = uint8_t(round_clamp(x[e] * inv, -16, 15) + 16);
        pack_nibbles32(q, b + q5_0::kQs);
        const uint32_t qh = high_bits32(q);
        std::memcpy(b + q5_0::kQh, &qh, 4);
    });
}

void quantize_q5_1(const float* src, uint8_t* dst, size_t n) {
    for_blocks(src, dst, n, 32, q5_1::kBytes, [](const float* x, uint8_t* b) {
        uint8_t q[32];
        affine_block32(x, 31, b + q5_1::kD, b + q5_1::kM, q);
        pack_nibbles32(q, b + q5_1::kQs);
        const uint32_t qh = high_bits32(q);
        std::memcpy(b + q5_1::kQh, &qh, 4);
    });
}

void quantize_iq4_nl(const float* src, uint8_t* dst, size_t n) {
    for_blocks(src, dst, n, 32, iq4_nl::kBytes, [](const float* x, uint8_t* b) {
        const float d = put_half(b + iq4_nl::kD, fit_iq4(x, 32));
        const float inv = d != 0 ? 1.0f / d : 0.0f;
        uint8_t q[32];
        for (int e = 0; e < 32; ++e) q[e] = uint8_t(iq4_index(x[e], inv));
        pack_nibbles32(q, b + iq4_nl::kQs);
    });
}

// MXFP4: the scale is a power of two, so fitting it is choosing an exponent: the smallest one whose
// largest level (12 d) reaches the block's largest magnitude, or the one below it (levels twice as
// fine, the largest elements clipped to 12 d), whichever leaves the smaller squared error.
void quantize_mxfp4(const float* src, uint8_t* dst, size_t n) {
    // Nearest magnitude of 0 1 2 3 4 6 8 12 (in units of d), by the midpoints between them.
    auto index = [](float x, float d) {
        const float a = std::fabs(x) / d;  // not times 1 / d: 1 / 2^-128 overflows
        const int m = a < 0.5f    ? 0
                      : a < 1.5f  ? 1
                      : a < 2.5f  ? 2
                      : a < 3.5f  ? 3
                      : a < 5.0f  ? 4
                      : a < 7.0f  ? 5
                      : a < 10.0f ? 6
                                  : 7;
        return m != 0 && x < 0 ? m + 8 : m;
    };
    for_blocks(src, dst, n, 32, mxfp4::kBytes, [&](const float* x, uint8_t* b) {
        float amax = 0;
        for (int e = 0; e < 32; ++e) amax = std::max(amax, std::fabs(x[e]));
        int ex = 0;
        std::frexp(amax / 12.0f, &ex);
        int e_hi = std::clamp(128 + ex, 0, 254);
        while (e_hi < 254 && 12.0f * mxfp4_scale(uint8_t(e_hi)) < amax) ++e_hi;
        while (e_hi > 0 && 12.0f * mxfp4_scale(uint8_t(e_hi - 1)) >= amax) --e_hi;
        float best_err = -1;
        for (int e = e_hi; e >= std::max(0, e_hi - 1); --e) {
            const float d = mxfp4_scale(uint8_t(e));
            uint8_t q[32];
            const float err = lane_sum(32, [&](int i) {
                q[i] = uint8_t(index(x[i], d));
                const float r = x[i] - d * float(kMxfp4Values[q[i]]);
                return r * r;
            });
            if (best_err < 0 || err < best_err) {
                best_err = err;
                b[mxfp4::kE] = uint8_t(e);
                pack_nibbles32(q, b + mxfp4::kQs);
            }
        }
    });
}

void quantize_q2_k(const float* src, uint8_t* dst, size_t n) {
    for_blocks(src, dst, n, 256, q2_k::kBytes, [](const float* x, uint8_t* b) {
        uint8_t sc[16], mn[16], q[256];
        affine_super_block<16>(x, 3, 15, b + q2_k::kD, b + q2_k::kDmin, sc, mn, q);
        for (int s = 0; s < 16; ++s) b[q2_k::kScales + s] = uint8_t(sc[s] | mn[s] << 4);
        for (int e = 0; e < 256; ++e) {
            const int h = e / 128, j = (e % 128) / 32, l = e % 32;
            b[q2_k::kQs + 32 * h + l] |= uint8_t(q[e] << (2 * j));
        }
    });
}

void quantize_q3_k(const float* src, uint8_t* dst, size_t n) {
    for_blocks(src, dst, n, 256, q3_k::kBytes, [](const float* x, uint8_t* b) {
        int8_t sc[16], q[256];
        symmetric_super_block(x, 4, 3, 32, b + q3_k::kD, sc, q);
        for (int s = 0; s < 16; ++s) {
            const int code = sc[s] + 32;  // 0..63
            b[q3_k::kScales + s % 8] |= uint8_t((code & 15) << (4 * (s / 8)));
            b[q3_k::kScales + 8 + s % 4] |= uint8_t((code >> 4) << (2 * (s / 4)));
        }
        for (int e = 0; e < 256; ++e) {
            const int h = e / 128, j = (e % 128) / 32, l = e % 32;
            const int u = q[e] + 4;  // 0..7: bit 2 set in hmask means "no -4"
            b[q3_k::kQs + 32 * h + l] |= uint8_t((u & 3) << (2 * j));
            b[q3_k::kHmask + l] |= uint8_t((u >> 2) << (4 * h + j));
        }
    });
}

namespace {

// The 12 packed scale bytes of Q4_K / Q5_K (inverse of scale_min_k4).
void pack_scales_k4(const uint8_t* sc, const uint8_t* mn, uint8_t* scales) {
    for (int s = 0; s < 4; ++s) {
        scales[s] = uint8_t(sc[s] | (sc[s + 4] >> 4) << 6);
        scales[s + 4] = uint8_t(mn[s] | (mn[s + 4] >> 4) << 6);
        scales[s + 8] = uint8_t((sc[s + 4] & 15) | (mn[s + 4] & 15) << 4);
    }
}

// Low nibbles of Q4_K / Q5_K: element e at qs[32 (e / 64) + e % 32], high nibble when e % 64 >= 32.
void pack_k4_nibbles(const uint8_t* q, uint8_t* qs) {
    for (int e = 0; e < 256; ++e) qs[32 * (e / 64) + e % 32] |= uint8_t((q[e] & 15) << (e % 64 < 32 ? 0 : 4));
}

}  // namespace

void quantize_q4_k(const float* src, uint8_t* dst, size_t n) {
    for_blocks(src, dst, n, 256, q4_k::kBytes, [](const float* x, uint8_t* b) {
        uint8_t sc[8], mn[8], q[256];
        affine_super_block<8>(x, 15, 63, b + q4_k::kD, b + q4_k::kDmin, sc, mn, q);
        pack_scales_k4(sc, mn, b + q4_k::kScales);
        pack_k4_nibbles(q, b + q4_k::kQs);
    });
}

void quantize_q5_k(const float* src, uint8_t* dst, size_t n) {
    for_blocks(src, dst, n, 256, q5_k::kBytes, [](const float* x, uint8_t* b) {
        uint8_t sc[8], mn[8], q[256];
        affine_super_block<8>(x, 31, 63, b + q5_k::kD, b + q5_k::kDmin, sc, mn, q);
        pack_scales_k4(sc, mn, b + q5_k::kScales);
        pack_k4_nibbles(q, b + q5_k::kQs);
        for (int e = 0; e < 256; ++e) b[q5_k::kQh + e % 32] |= uint8_t(((q[e] >> 4) & 1) << (e / 32));
    });
}

void quantize_q6_k(const float* src, uint8_t* dst, size_t n) {
    for_blocks(src, dst, n, 256, q6_k::kBytes, [](const float* x, uint8_t* b) {
        int8_t sc[16], q[256];
        symmetric_super_block(x, 32, 31, 128, b + q6_k::kD, sc, q);
        std::memcpy(b + q6_k::kScales, sc, 16);
        for (int e = 0; e < 256; ++e) {
            const int h = e / 128, g = (e % 128) / 32, l = e % 32;
            const int u = q[e] + 32;  // 0..63
            b[q6_k::kQl + 64 * h + 32 * (g & 1) + l] |= uint8_t((u & 15) << (g < 2 ? 0 : 4));
            b[q6_k::kQh + 32 * h + l] |= uint8_t((u >> 4) << (2 * g));
        }
    });
}

void quantize_iq4_xs(const float* src, uint8_t* dst, size_t n) {
    for_blocks(src, dst, n, 256, iq4_xs::kBytes, [](const float* x, uint8_t* b) {
        float scales[8];
        int top = 0;
        for (int s = 0; s < 8; ++s) {
            scales[s] = fit_iq4(x + 32 * s, 32);
            if (std::fabs(scales[s]) > std::fabs(scales[top])) top = s;
        }
        int8_t codes[8], q[256];
        // No mirroring: the IQ4 levels are not symmetric, so a sub-block never fits both ways.
        choose_signed_codes_both(x, 8, 32, scales, top, 32, {-127, -104, -83, 113, 89, 69}, false, b + iq4_xs::kD,
                                 codes, q, [&](int s, float a, int8_t* qs) {
                                     return iq4_round(x + 32 * s, 32, a,
                                                      qs ? reinterpret_cast<uint8_t*>(qs) + 32 * s : nullptr);
                                 });
        uint16_t scales_h = 0;
        for (int s = 0; s < 8; ++s) {
            const int ls = codes[s] + 32;
            b[iq4_xs::kScalesL + s / 2] |= uint8_t((ls & 15) << (4 * (s % 2)));
            scales_h = uint16_t(scales_h | (ls >> 4) << (2 * s));
            pack_nibbles32(reinterpret_cast<const uint8_t*>(q) + 32 * s, b + iq4_xs::kQs + 16 * s);
        }
        std::memcpy(b + iq4_xs::kScalesH, &scales_h, 2);
    });
}

}  // namespace vkllm::quant
