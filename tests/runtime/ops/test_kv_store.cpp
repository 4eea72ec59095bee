#include "support/test_context.h"

#include "support/small_ops_testing.h"

#include "runtime/ops/kv_store.h"
#include "runtime/ops/rope.h"
#include "runtime/quant/tensor_types.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

using namespace vkllm;
using small_ops_testing::ShiftedBuffer;
using ops::KvType;

namespace {

constexpr uint32_t kStale = 0x3c003c00u;  // what the cache held before: f16 1.0 pairs (f32: 0.0078)

std::vector<int32_t> positions_from(int32_t first, uint32_t n) {
    std::vector<int32_t> p(n);
    std::iota(p.begin(), p.end(), first);
    return p;
}

// Values that exercise the f16 conversion: ties to even, values just above and below ties, f16
// subnormals and their rounding, overflow to inf, inf, NaN, signed zeros, f32 denormals.
std::vector<float> special_values() {
    std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 1e6f,
                            std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), 6.1035156e-05f /* 2^-14 */,
                            5.9604645e-08f /* 2^-24 */, 2.9802322e-08f /* 2^-25: tie to 0 */, 2.98024e-08f,
                            8.940697e-08f /* 1.5 * 2^-24: tie to 2 * 2^-24 */, 1e-10f, -1e-10f, 1e-40f /* f32 denormal */};
    for (uint32_t m : {0x3f801000u, 0x3f803000u, 0x3f801001u, 0x3f800fffu, 0x387fe000u, 0x387ff000u, 0x33000001u}) {
        float f;
        std::memcpy(&f, &m, 4);
        v.push_back(f);
        v.push_back(-f);
    }
    return v;
}

// A q8_0 cache against the reference's. Unwritten rows must keep kStale bit for bit. A written block
// is checked against the definition, not for bits: the device's 1 / d and amax / 127 may be a few
// ulps off (Vulkan allows 2.5 ulp for a division), which can move a value at a rounding tie to the
// other neighbour. So: the scale within 4 ulps of the reference's, each q within 1 of it, and every
// value within half a step of what it stores, |x - d q| <= d / 2 (round to nearest).
void check_q8_0(const std::vector<uint8_t>& got, const std::vector<uint8_t>& ref, const std::vector<float>& src,
                const std::vector<int32_t>& pos, uint32_t n_ctx, uint32_t row_elems) {
    const size_t row_words = ops::kv_row_bytes(KvType::Q8_0, row_elems) / 4;
    std::vector<int32_t> token_of_row(n_ctx, -1);
    for (size_t t = 0; t < pos.size(); ++t)
        if (pos[t] >= 0) token_of_row[uint32_t(pos[t]) % n_ctx] = int32_t(t);
    auto word = [](const std::vector<uint8_t>& b, size_t i) {
        uint32_t w;
        std::memcpy(&w, &b[i * 4], 4);
        return w;
    };
    size_t bad = 0;
    auto fail = [&](const std::string& what) {
        if (bad++ < 5) MESSAGE(what);
    };
    constexpr float kMax = std::numeric_limits<float>::max();
    for (uint32_t r = 0; r < n_ctx; ++r) {
        if (token_of_row[r] < 0) {
            for (size_t w = 0; w < row_words; ++w)
                if (word(got, r * row_words + w) != kStale) fail(fmt::format("unwritten row {} word {} changed", r, w));
            continue;
        }
        const float* x = src.data() + size_t(token_of_row[r]) * row_elems;
        for (uint32_t b = 0; b < row_elems / ops::kKvQ8Block; ++b) {
            const size_t w0 = r * row_words + b * ops::kKvQ8BlockWords;
            const float dg = std::bit_cast<float>(word(got, w0)), dr = std::bit_cast<float>(word(ref, w0));
            if (!(std::fabs(dg - dr) <= 4 * std::numeric_limits<float>::epsilon() * dr) && !(dr == 0 && dg == 0))
                fail(fmt::format("row {} block {}: scale {} , reference {}", r, b, dg, dr));
            for (uint32_t i = 0; i < ops::kKvQ8Block; ++i) {
                const int qg = int8_t(uint8_t(word(got, w0 + 1 + i / 4) >> (8 * (i % 4))));
                const int qr = int8_t(uint8_t(word(ref, w0 + 1 + i / 4) >> (8 * (i % 4))));
                const float xi = x[b * ops::kKvQ8Block + i];
                const double xc = std::isnan(xi) ? 0.0 : std::clamp(xi, -kMax, kMax);
                // A block whose scale would be subnormal is stored as zeros (see op_types.h).
                const double err_bound = dg > 0 ? 0.5 * double(dg) * (1 + 1e-4) : 127.0 * std::numeric_limits<float>::min();
                if (std::abs(qg - qr) > 1 || std::fabs(xc - double(dg) * qg) > err_bound)
                    fail(fmt::format("row {} elem {}: x {} stored as {} x {}, reference {}", r, b * 32 + i, xi, dg, qg, qr));
            }
        }
    }
    CHECK(bad == 0);
}

// Stores n_tokens rows at `pos` into a cache of n_ctx rows pre-filled with kStale, and compares
// the whole cache bit for bit with the reference (unwritten rows must keep kStale).
// `custom`, when not empty, is the source itself (n_tokens x row_elems values).
void run_kv_store(Context& ctx, KvType type, uint32_t n_ctx, uint32_t row_elems, const std::vector<int32_t>& pos,
                  bool specials = false, uint32_t shift = 0, const std::vector<float>& custom = {}) {
    const uint32_t n_tokens = uint32_t(pos.size());
    CAPTURE(int(type));
    CAPTURE(n_ctx);
    CAPTURE(row_elems);
    CAPTURE(n_tokens);
    CAPTURE(pos.front());
    CAPTURE(shift);
    const size_t n_src = size_t(n_tokens) * row_elems;
    auto src = test::random_floats(n_src, 500 + n_tokens + row_elems, -3.0f, 3.0f);
    if (specials) {
        auto sv = special_values();
        for (size_t i = 0; i < n_src; ++i) src[i] = sv[i % sv.size()];
    }
    if (!custom.empty()) {
        REQUIRE(custom.size() == n_src);
        src = custom;
    }
    const size_t cache_bytes = size_t(n_ctx) * ops::kv_row_bytes(type, row_elems);
    std::vector<uint8_t> ref(cache_bytes);
    for (size_t i = 0; i < cache_bytes; i += 4) std::memcpy(&ref[i], &kStale, std::min<size_t>(4, cache_bytes - i));
    ref::kv_store(src.data(), ref.data(), pos.data(), n_tokens, row_elems, n_ctx, type);

    ShiftedBuffer dsrc(ctx, n_src * 4, shift, "src"), dcache(ctx, cache_bytes, shift, "cache"),
        dpos(ctx, pos.size() * 4, shift, "pos");
    dsrc.upload(src.data(), n_src * 4);
    std::vector<uint8_t> init(cache_bytes);
    for (size_t i = 0; i < cache_bytes; i += 4) std::memcpy(&init[i], &kStale, std::min<size_t>(4, cache_bytes - i));
    dcache.upload(init.data(), cache_bytes);
    dpos.upload(pos.data(), pos.size() * 4);
    CommandStream s(ctx);
    s.begin();
    ops::kv_store(ctx, s, dsrc.slice(), dcache.slice(), dpos.slice(), n_tokens, row_elems, n_ctx, type);
    s.end();
    s.submit_and_wait();
    std::vector<uint8_t> got(cache_bytes);
    dcache.download(got.data(), cache_bytes);

    if (type == KvType::Q8_0) {
        check_q8_0(got, ref, src, pos, n_ctx, row_elems);
        dcache.check_guards();
        return;
    }
    const size_t esz = type == KvType::F16 ? 2 : 4, n_el = cache_bytes / esz;
    size_t bad = 0;
    for (size_t i = 0; i < n_el; ++i) {
        if (std::memcmp(&got[i * esz], &ref[i * esz], esz) == 0) continue;
        if (bad++ < 5) {
            uint32_t g = 0, r = 0;
            std::memcpy(&g, &got[i * esz], esz);
            std::memcpy(&r, &ref[i * esz], esz);
            MESSAGE(fmt::format("cache row {} elem {}: gpu {:#x}, ref {:#x}", i / row_elems, i % row_elems, g, r));
        }
    }
    CHECK(bad == 0);
    dcache.check_guards();
}

// kv_store_pair: K and V rows (different values) into two caches in one dispatch per window; each
// cache must equal the reference's single store, and unwritten rows keep kStale.
void run_kv_store_pair(Context& ctx, KvType type, uint32_t n_ctx, uint32_t row_elems, const std::vector<int32_t>& pos,
                       uint32_t shift = 0) {
    const uint32_t n_tokens = uint32_t(pos.size());
    CAPTURE(int(type));
    CAPTURE(n_ctx);
    CAPTURE(row_elems);
    CAPTURE(n_tokens);
    CAPTURE(shift);
    const size_t n_src = size_t(n_tokens) * row_elems;
    const size_t cache_bytes = size_t(n_ctx) * ops::kv_row_bytes(type, row_elems);
    std::vector<uint8_t> init(cache_bytes);
    for (size_t i = 0; i < cache_bytes; i += 4) std::memcpy(&init[i], &kStale, std::min<size_t>(4, cache_bytes - i));
    std::vector<float> src[2] = {test::random_floats(n_src, 700 + row_elems, -3.0f, 3.0f),
                                 test::random_floats(n_src, 800 + row_elems, -0.5f, 0.5f)};
    ShiftedBuffer dsrc0(ctx, n_src * 4, shift, "k src"), dsrc1(ctx, n_src * 4, shift, "v src"),
        dcache0(ctx, cache_bytes, shift, "k cache"), dcache1(ctx, cache_bytes, shift, "v cache"),
        dpos(ctx, pos.size() * 4, shift, "pos");
    ShiftedBuffer* dsrc[2] = {&dsrc0, &dsrc1};
    ShiftedBuffer* dcache[2] = {&dcache0, &dcache1};
    for (int i = 0; i < 2; ++i) {
        dsrc[i]->upload(src[i].data(), n_src * 4);
        dcache[i]->upload(init.data(), cache_bytes);
    }
    dpos.upload(pos.data(), pos.size() * 4);
    CommandStream s(ctx);
    s.begin();
    ops::kv_store_pair(ctx, s, dsrc0.slice(), dcache0.slice(), dsrc1.slice(), dcache1.slice(), dpos.slice(), n_tokens,
                       row_elems, n_ctx, type);
    s.end();
    s.submit_and_wait();
    for (int i = 0; i < 2; ++i) {
        CAPTURE(i);
        std::vector<uint8_t> ref = init, got(cache_bytes);
        ref::kv_store(src[i].data(), ref.data(), pos.data(), n_tokens, row_elems, n_ctx, type);
        dcache[i]->download(got.data(), cache_bytes);
        if (type == KvType::Q8_0)
            check_q8_0(got, ref, src[i], pos, n_ctx, row_elems);
        else
            CHECK(got == ref);  // f16 and f32: bit-exact
        dcache[i]->check_guards();
    }
}

}  // namespace

TEST_CASE("kv_store_pair: K and V in one dispatch, every KV type, split windows and unaligned slices") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (KvType t : {KvType::F16, KvType::F32, KvType::Q8_0}) {
            run_kv_store_pair(ctx, t, 8, 64, {3});            // decode
            run_kv_store_pair(ctx, t, 300, 256, positions_from(40, 37));  // a prompt chunk
            run_kv_store_pair(ctx, t, 64, 256, {5, 70, 9}, 4);  // 70 wraps to row 6; unaligned slices
        }
    }
    Context& small = test::context_for("max-storage-range=65536");
    for (KvType t : {KvType::F16, KvType::Q8_0}) run_kv_store_pair(small, t, 200, 1024, positions_from(20, 40));
    // One dispatch per cache window, not two.
    Context& ctx = test::context();
    Buffer b = ctx.create_buffer(1 << 16, MemoryUsage::Device, "b");
    CommandStream s(ctx);
    s.begin();
    ops::kv_store_pair(ctx, s, b.slice(0, 1024), b.slice(4096, 8192), b.slice(1024, 1024), b.slice(16384, 8192),
                       b.slice(32768, 4), 1, 256, 8, KvType::F32);
    s.end();
    CHECK(s.stats().dispatches == 1);
}

TEST_CASE("kv_store: tiny shapes, every KV type (f16 and f32 bit-exact)") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (KvType t : {KvType::F16, KvType::F32}) {
            run_kv_store(ctx, t, 1, 2, {0});
            run_kv_store(ctx, t, 8, 2, {3, 4, 7});
            run_kv_store(ctx, t, 16, 172, positions_from(5, 7));
            run_kv_store(ctx, t, 16, 64, {15, 0, 9});  // any order
        }
        run_kv_store(ctx, KvType::Q8_0, 1, 32, {0});
        run_kv_store(ctx, KvType::Q8_0, 8, 32, {3, 4, 7});
        run_kv_store(ctx, KvType::Q8_0, 16, 160, positions_from(5, 7));
        run_kv_store(ctx, KvType::Q8_0, 16, 64, {15, 0, 9});
        run_kv_store(ctx, KvType::F32, 9, 7, {8, 2, 0});  // odd rows are fine for f32
        run_kv_store(ctx, KvType::F32, 5, 1, {4, 3});
    }
}

TEST_CASE("kv_store: f16 conversion is round-to-nearest-even, bit-identical to f32_to_f16") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        run_kv_store(ctx, KvType::F16, 4, 48, {1, 3}, true);
        run_kv_store(ctx, KvType::F32, 4, 48, {2, 0}, true);
    }
}

TEST_CASE("kv_store: q8_0 blocks from their definition, special values (NaN stored as 0, inf clamped)") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        run_kv_store(ctx, KvType::Q8_0, 4, 64, {1, 3}, true);
        run_kv_store(ctx, KvType::Q8_0, 6, 256, {5, 0, 2}, true);
        // One block each: all zeros (d = 0); a NaN among ordinary values; exact ties k + 0.5 with
        // amax 127 (d = 1: half away from zero, not to even); the largest magnitude negative; a
        // block so small that its scale would be subnormal (stored as zeros); ordinary values.
        std::vector<float> blocks(6 * 32, 0.0f);
        for (uint32_t i = 0; i < 32; ++i) {
            blocks[32 + i] = i == 7 ? std::numeric_limits<float>::quiet_NaN() : 0.1f * float(i) - 1.5f;
            blocks[64 + i] = i == 0 ? 127.0f : float(int(i) - 16) + 0.5f;
            blocks[96 + i] = i == 3 ? -5.0f : 0.01f * float(i);
            blocks[128 + i] = 1e-37f * float(i % 5);
            blocks[160 + i] = std::sin(float(i));
        }
        run_kv_store(ctx, KvType::Q8_0, 4, 64, {2, 0, 3}, false, 0, blocks);
    }
}

TEST_CASE("kv_store: LLaMA shapes: decode in the middle of the cache, prefill, positions beyond n_ctx wrap") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (KvType t : {KvType::F16, KvType::F32, KvType::Q8_0}) {
            // 8 KV heads x 128 (LLaMA-3 8B); 4 x 64 (TinyLlama).
            run_kv_store(ctx, t, 4096, 1024, {2049});
            run_kv_store(ctx, t, 2048, 256, positions_from(1000, 7));
            run_kv_store(ctx, t, 1024, 1024, positions_from(0, 512));
            // The cache is a ring: a prefill that runs past the context wraps to rows 0..2; negative
            // positions are skipped.
            run_kv_store(ctx, t, 512, 256, positions_from(505, 10));
            run_kv_store(ctx, t, 64, 256, {-1, 63, 64 + 5, (1 << 30) + 7, std::numeric_limits<int32_t>::min(), 2});
            // A sliding-window ring far past its length: 80 rows, positions 5000.. (rows 40..79, 0..6).
            run_kv_store(ctx, t, 80, 256, positions_from(5000, 47));
            run_kv_store(ctx, t, 80, 256, {std::numeric_limits<int32_t>::max(), 79, 80 * 1000});
        }
    }
}

TEST_CASE("kv_store: a recorded command buffer follows the positions buffer") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    const uint32_t n_ctx = 16, row = 256;
    test::GuardedBuffer dsrc(ctx, row * 4, "src"), dcache(ctx, n_ctx * row * 2, "cache"), dpos(ctx, 4, "pos");
    std::vector<uint16_t> ref(n_ctx * row, 0);
    dcache.upload(ref.data(), ref.size() * 2);
    CommandStream s(ctx);
    s.begin();
    ops::kv_store(ctx, s, dsrc.slice(), dcache.slice(), dpos.slice(), 1, row, n_ctx, KvType::F16);
    s.end();
    for (int32_t p = 0; p < int32_t(n_ctx); ++p) {
        auto src = test::random_floats(row, 900 + p);
        dsrc.upload(src.data(), row * 4);
        dpos.upload(&p, 4);
        s.submit_and_wait();
        ref::kv_store(src.data(), ref.data(), &p, 1, row, n_ctx, KvType::F16);
    }
    std::vector<uint16_t> got(ref.size());
    dcache.download(got.data(), got.size() * 2);
    CHECK(got == ref);
    dcache.check_guards();
}

TEST_CASE("kv_store: caches and batches larger than one binding are split over dispatches") {
    test::ValidationGuard guard;
    Context& ctx = test::context_for("max-storage-range=65536");
    // f16 rows of 1024 are 2 KiB: 31 cache rows per window; src rows of 4 KiB: 15 tokens per window.
    run_kv_store(ctx, KvType::F16, 200, 1024, positions_from(20, 40));
    run_kv_store(ctx, KvType::F32, 100, 1000, {99, 0, 31, 32, 64, 162, 163});
    run_kv_store(ctx, KvType::F16, 100, 1000, {99, 0, 31, 32, 64, 162, 163}, false, 4);
    run_kv_store(ctx, KvType::F16, 100, 1024, positions_from(4970, 60));  // a ring wrapping across windows
    // q8_0 rows of 1024 are 1152 bytes: 56 cache rows per window.
    run_kv_store(ctx, KvType::Q8_0, 200, 1024, positions_from(20, 40));
    run_kv_store(ctx, KvType::Q8_0, 100, 1024, {99, 0, 55, 56, 57, 162, 163}, false, 4);
}

TEST_CASE("kv_store: slices at offsets below the storage-buffer alignment") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (KvType t : {KvType::F16, KvType::F32, KvType::Q8_0})
            run_kv_store(ctx, t, 64, 256, {5, 70, 9}, false, 4);  // 70 wraps to row 6
    }
}

TEST_CASE("kv_store: odd f16 rows, q8_0 rows of partial blocks and short buffers are rejected") {
    Context& ctx = test::context();
    Buffer b = ctx.create_buffer(1 << 16, MemoryUsage::Device, "b");
    CommandStream s(ctx);
    s.begin();
    CHECK_THROWS_AS(ops::kv_store(ctx, s, b.slice(), b.slice(), b.slice(), 1, 7, 4, KvType::F16), std::invalid_argument);
    CHECK_THROWS_AS(ops::kv_store(ctx, s, b.slice(), b.slice(), b.slice(), 1, 48, 4, KvType::Q8_0), std::invalid_argument);
    CHECK_THROWS_AS(ops::kv_store(ctx, s, b.slice(), b.slice(), b.slice(), 1, 1024, 64, KvType::Q8_0),
                    std::invalid_argument);  // 64 rows of 1152 bytes do not fit 64 KiB
    CHECK_THROWS_AS(ops::kv_store(ctx, s, b.slice(), b.slice(), b.slice(), 1, 1024, 64, KvType::F16),
                    std::invalid_argument);
    CHECK(s.stats().dispatches == 0);
    s.end();
}
