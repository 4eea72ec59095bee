#include "support/test_context.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>

namespace vkllm::test {

namespace {

std::mutex g_mutex;
std::vector<std::string> g_errors;

void sink(MessageSeverity s, std::string_view msg) {
    if (s != MessageSeverity::Error) return;
    std::lock_guard lock(g_mutex);
    g_errors.emplace_back(msg);
}

ContextOptions options(const CapsOverride& caps, std::optional<std::filesystem::path> cache_dir) {
    ContextOptions o;
    o.caps = caps;
    // The cooperative-matrix kernels round X and W to half: the cases that compare with the exact
    // reference run the other kernels, as a GPU with matrix units would otherwise give them those;
    // coopmat_context() (and a forced coopmat row) ask for them.
    const bool coopmat_asked =
        caps.coopmat || std::any_of(caps.kernels.begin(), caps.kernels.end(),
                                    [](const std::string& k) { return k.find("coopmat") != std::string::npos; });
    if (!coopmat_asked) o.caps.no_coopmat = true;
    o.instance.validation = true;
    o.instance.require_validation = true;
    o.instance.sink = sink;
    o.pipeline_cache = cache_dir.has_value();
    o.cache_dir = std::move(cache_dir);
    return o;
}

constexpr uint32_t kCanary = 0xA5C3E1F7u;

}  // namespace

namespace {
// The cached contexts are owned here, not by function-local statics, so that release_contexts()
// can destroy them before main() returns (see there).
std::mutex g_contexts_mutex;
std::unique_ptr<Context> g_default_context;
std::map<std::string, std::unique_ptr<Context>> g_variant_contexts;
}  // namespace

Context& context() {
    std::lock_guard lock(g_contexts_mutex);
    if (!g_default_context) g_default_context = std::make_unique<Context>(options({}, std::nullopt));
    return *g_default_context;
}

Context& float_path_context() {
    Context& c = context();
    return c.caps().int_dot_kernels ? context_for("no-int-dot") : c;
}

Context* coopmat_context() {
    Context& c = context_for("coopmat");
    if (c.caps().coopmat_kernels) return &c;
    const char* required = std::getenv("VKLLM_TEST_REQUIRE_COOPMAT");
    if (required && std::string(required) == "1")
        FAIL("VKLLM_TEST_REQUIRE_COOPMAT=1 but '" << c.caps().name << "' cannot run the cooperative-matrix kernels");
    MESSAGE("skipped: '" << c.caps().name << "' has no usable VK_KHR_cooperative_matrix (scripts/mesa26.sh runs these)");
    return nullptr;
}

Context& context_for(const std::string& caps_spec) {
    if (caps_spec.empty()) return context();
    std::lock_guard lock(g_contexts_mutex);
    auto& c = g_variant_contexts[caps_spec];
    if (!c) c = std::make_unique<Context>(options(CapsOverride::parse(caps_spec), std::nullopt));
    return *c;
}

std::vector<std::string> release_contexts() {
    {
        std::lock_guard lock(g_contexts_mutex);
        g_variant_contexts.clear();
        g_default_context.reset();
    }
    return take_validation_errors();
}

std::unique_ptr<Context> make_context(const CapsOverride& caps, std::optional<std::filesystem::path> cache_dir,
                                      const DeviceSelector& device) {
    ContextOptions o = options(caps, std::move(cache_dir));
    o.device = device;
    return std::make_unique<Context>(o);
}

std::vector<std::string> take_validation_errors() {
    std::lock_guard lock(g_mutex);
    return std::exchange(g_errors, {});
}

ValidationGuard::ValidationGuard() { take_validation_errors(); }

ValidationGuard::~ValidationGuard() {
    auto errors = take_validation_errors();
    for (size_t i = 0; i < errors.size() && i < 5; ++i) {
        std::string msg = "Vulkan validation error: " + errors[i];
        FAIL_CHECK(msg);
    }
    if (errors.size() > 5) {
        std::string msg = std::to_string(errors.size() - 5) + " more validation errors";
        FAIL_CHECK(msg);
    }
}

std::vector<float> random_floats(size_t n, uint32_t seed, float lo, float hi) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = dist(rng);
    return v;
}

Compare validate_result(const std::string& tensor, const float* gpu, const float* ref, size_t n, const Tolerance& tol) {
    Compare c;
    double err = 0, norm = 0;
    int printed = 0;
    for (size_t i = 0; i < n; ++i) {
        double g = gpu[i], r = ref[i];
        if (!std::isfinite(g)) {
            ++c.non_finite;
            if (printed++ < 5) MESSAGE(fmt::format("{}[{}]: gpu {} (not finite), ref {}", tensor, i, g, r));
            continue;
        }
        double d = std::fabs(g - r);
        err += d * d;
        norm += r * r;
        c.max_abs = std::max(c.max_abs, d);
        if (d > tol.atol + tol.rtol * std::fabs(r)) {
            ++c.bad;
            if (printed++ < 5) MESSAGE(fmt::format("{}[{}]: gpu {:.7g}, ref {:.7g}, |diff| {:.3g}", tensor, i, g, r, d));
        }
    }
    c.nmse = norm > 0 ? err / norm : err;
    INFO(fmt::format("{}: n={} nmse={:.3g} max_abs={:.3g} bad={} non_finite={}", tensor, n, c.nmse, c.max_abs, c.bad,
                     c.non_finite));
    CHECK(c.non_finite == 0);
    CHECK(c.nmse <= tol.nmse);
    CHECK(c.bad == 0);
    return c;
}

GuardedBuffer::GuardedBuffer(Context& ctx, size_t bytes, const std::string& name)
    : ctx_(ctx), bytes_(bytes), guard_(ctx.allocator().alignment()), name_(name) {
    size_t total = (bytes + 3) / 4 * 4 + 2 * guard_;
    buf_ = ctx.create_buffer(total, MemoryUsage::Device, name);
    std::vector<uint32_t> canary((total + 3) / 4, kCanary);
    ctx.upload(buf_, canary.data(), total);
}

BufferSlice GuardedBuffer::slice() const { return buf_.slice(guard_, bytes_); }
void GuardedBuffer::upload(const void* src, size_t bytes) { ctx_.upload(buf_, src, bytes, guard_); }
void GuardedBuffer::download(void* dst, size_t bytes) const { ctx_.download(buf_, dst, bytes, guard_); }

std::vector<float> GuardedBuffer::download_floats(size_t n) const {
    std::vector<float> v(n);
    download(v.data(), n * 4);
    return v;
}

void GuardedBuffer::check_guards() const {
    std::vector<uint32_t> head(guard_ / 4), tail(guard_ / 4);
    ctx_.download(buf_, head.data(), guard_, 0);
    // The tail guard starts at the payload rounded up to a word: the canary is compared in words.
    ctx_.download(buf_, tail.data(), guard_, guard_ + (bytes_ + 3) / 4 * 4);
    size_t bad_head = 0, bad_tail = 0;
    for (uint32_t w : head) bad_head += w != kCanary;
    for (uint32_t w : tail) bad_tail += w != kCanary;
    INFO("out-of-bounds write check for " << name_);
    CHECK_MESSAGE(bad_head == 0, name_ << ": " << bad_head << " words written before the buffer");
    CHECK_MESSAGE(bad_tail == 0, name_ << ": " << bad_tail << " words written after the buffer");
}

namespace {
std::filesystem::path env_or(const char* name, const char* fallback) {
    const char* v = std::getenv(name);
    return std::filesystem::path(v && *v ? v : fallback);
}
}  // namespace

std::filesystem::path models_dir() { return env_or("VKLLM_TEST_MODELS_DIR", VKLLM_MODELS_DIR); }
std::filesystem::path binary_dir() { return env_or("VKLLM_TEST_SCRATCH_DIR", VKLLM_BINARY_DIR); }
std::filesystem::path fixtures_dir() { return env_or("VKLLM_TEST_FIXTURES_DIR", VKLLM_SOURCE_DIR "/tests/fixtures"); }

std::string model_path(const std::string& file) {
    std::filesystem::path p = ::vkllm::test::models_dir() / file;
    if (!std::filesystem::exists(p)) {
        MESSAGE("skipping: " << p.string() << " not found");
        return {};
    }
    return p.string();
}

const std::vector<std::string>& device_variants() {
    static const std::vector<std::string> v = [] {
        const std::string real, weak = "no-fp16,no-int64,no-subgroup-ops,shared-mem=16384,max-uniform-range=16384,soft-half",
                                gpu = "no-storage16,no-storage8,no-int8,gpu-tuning";
        const char* e = std::getenv("VKLLM_TEST_DEVICE_VARIANTS");
        const std::string which = e && *e ? e : "all";
        if (which == "all") return std::vector<std::string>{real, weak, gpu};
        if (which == "subgroup") return std::vector<std::string>{real, gpu};
        if (which == "real") return std::vector<std::string>{real};
        // A typo must not quietly run fewer cases: stop the whole test run with the reason.
        std::fprintf(stderr, "VKLLM_TEST_DEVICE_VARIANTS=%s: expected all, subgroup or real\n", which.c_str());
        std::abort();
    }();
    return v;
}

}  // namespace vkllm::test
