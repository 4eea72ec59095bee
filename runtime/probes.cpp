#include "runtime/probes.h"

#include "runtime/vk_check.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <vector>

namespace vkllm {

namespace {

// Runs the recorded stream `reps` times and returns the fastest GPU (or host) time in seconds.
double best_time(Context& ctx, CommandStream& s, int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        s.submit_and_wait();
        double host = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        auto t = s.timings();
        double gpu = 0;
        for (auto& d : t) gpu += d.ns * 1e-9;
        best = std::min(best, ctx.caps().timestamps && gpu > 0 ? gpu : host);
    }
    return best;
}

}  // namespace

ProbeResult probe_bandwidth(Context& ctx, size_t bytes, int reps) {
    bytes = std::min<size_t>(bytes, ctx.caps().max_storage_buffer_range) / 16 * 16;
    const uint32_t n_vec4 = uint32_t(bytes / 16), wg = 256;
    std::vector<float> host(bytes / 4);
    for (size_t i = 0; i < host.size(); ++i) host[i] = float(i % 7) * 0.25f;
    Buffer src = ctx.create_buffer(bytes, MemoryUsage::Device, "probe_src");
    ctx.upload(src, host.data(), bytes);
    const Pipeline& p =
        ctx.pipeline({ctx.caps().subgroup_ops() ? ShaderId::probe_bandwidth_sg : ShaderId::probe_bandwidth, {wg}});
    // The grid that streams fastest differs by device (a GPU wants thousands of workgroups, a CPU
    // driver a few long-running ones): try several and keep the best, which is what a kernel can
    // reach.
    ProbeResult r;
    for (uint32_t groups : {4096u, 512u, 64u, 16u}) {
        groups = std::min<uint32_t>(groups, std::max<uint32_t>(1, n_vec4 / wg));
        Buffer dst = ctx.create_buffer(groups * 4ull, MemoryUsage::Device, "probe_dst");
        struct {
            uint32_t n_vec4, stride;
        } pc{n_vec4, groups * wg};
        CommandStream s(ctx);
        s.begin(true);
        s.dispatch(p, {src.slice(), dst.slice()}, pc, {groups, 1, 1}, "bandwidth");
        s.end();
        double t = best_time(ctx, s, reps);
        if (r.seconds == 0 || t < r.seconds) {
            r.seconds = t;
            std::vector<float> sums(groups);
            ctx.download(dst, sums.data(), sums.size() * 4);
            r.check = 0;
            for (float x : sums) r.check += x;
        }
    }
    r.value = double(bytes) / r.seconds * 1e-9;
    return r;
}

namespace {

// The arithmetic probes (probe_fma.comp, probe_int_dot.comp): 256 x 256 invocations of `iters`
// iterations of 64 operations each, the push constants {iters, seed bits}; value in G ops / s, and
// invocation 0's result word in `first`.
ProbeResult arithmetic_probe(Context& ctx, ShaderId shader, const char* label, uint32_t iters, uint32_t seed_bits,
                             int reps, uint32_t& first) {
    const uint32_t wg = 256, groups = 256;
    Buffer dst = ctx.create_buffer(uint64_t(wg) * groups * 4, MemoryUsage::Device, std::string(shader_name(shader)));
    const Pipeline& p = ctx.pipeline({shader, {wg}});
    struct {
        uint32_t iters, seed;
    } pc{iters, seed_bits};
    CommandStream s(ctx);
    s.begin(true);
    s.dispatch(p, {dst.slice()}, pc, {groups, 1, 1}, label);
    s.end();
    ProbeResult r;
    r.seconds = best_time(ctx, s, reps);
    r.value = double(wg) * groups * iters * 64.0 / r.seconds * 1e-9;
    ctx.download(dst, &first, 4);
    return r;
}

}  // namespace

ProbeResult probe_fma(Context& ctx, uint32_t iters, int reps) {
    uint32_t first = 0;
    ProbeResult r =
        arithmetic_probe(ctx, ShaderId::probe_fma, "fma", iters, std::bit_cast<uint32_t>(1.0f), reps, first);
    r.check = std::bit_cast<float>(first);
    return r;
}

namespace {
constexpr uint32_t kIntDotSeed = 12345;
}  // namespace

uint32_t probe_int_dot_expected(uint32_t iters) {
    const int8_t m[4] = {-2, 2, -1, 1};  // probe_int_dot.comp's M, byte 0 first
    uint32_t a[8], r = 0;
    for (uint32_t j = 0; j < 8; ++j) a[j] = kIntDotSeed + j;
    for (uint32_t i = 0; i < iters; ++i)
        for (uint32_t j = 0; j < 8; ++j) {
            int32_t d = 0;
            for (int b = 0; b < 4; ++b) d += int32_t(int8_t(uint8_t(a[j] >> (8 * b)))) * m[b];
            a[j] = uint32_t(d) + a[j];
        }
    for (uint32_t j = 0; j < 8; ++j) r ^= a[j];
    return r;
}

ProbeResult probe_int_dot(Context& ctx, uint32_t iters, int reps) {
    if (!ctx.caps().int_dot_product)
        throw DeviceLimitError("probe_int_dot: the device has no VK_KHR_shader_integer_dot_product");
    uint32_t first = 0;
    ProbeResult r = arithmetic_probe(ctx, ShaderId::probe_int_dot, "int_dot", iters, kIntDotSeed, reps, first);
    r.check = first;
    return r;
}

}  // namespace vkllm
