// Shared fixtures for every test: one Vulkan context with the Khronos validation layer on (any
// validation error fails the test that caused it), seeded random data, and the comparison helper
// used by all kernel tests.
#pragma once

#include "runtime/context.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

namespace vkllm::test {

// The process-wide context on the default device, validation on and required. Options from the
// environment are not used: tests that need other caps create their own with make_context().
Context& context();
// The default device with the float matvecs: context() itself unless the device takes the
// integer-dot ones by default (an accelerated packed dot), then context_for("no-int-dot"). For
// comparisons with the host reference's f32 activations; the integer-dot path has its own tests.
Context& float_path_context();
// A cached validation-on context per capability-override spec ("" = the default context).
Context& context_for(const std::string& caps_spec);
// `device`: another device than the default (the multi-device tests).
std::unique_ptr<Context> make_context(const CapsOverride& caps, std::optional<std::filesystem::path> cache_dir = {},
                                      const DeviceSelector& device = {});

// Validation errors seen since the last call (and clears them). Checked by ValidationGuard.
std::vector<std::string> take_validation_errors();

// Destroys the cached contexts and returns the validation errors their destruction raised (a
// Vulkan object still alive when its device goes). main() calls it before returning: left to
// static destruction, the contexts would be destroyed after the validation layer's own globals
// (created later, so destroyed earlier), and their vkDestroy* calls would never reach the driver.
std::vector<std::string> release_contexts();

// Declare one at the top of a test case: at scope exit every validation error recorded meanwhile
// is reported through doctest and fails the test.
struct ValidationGuard {
    ValidationGuard();
    ~ValidationGuard();
};

std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f);

// Result of comparing a device tensor with its reference.
struct Compare {
    double nmse = 0;       // sum (gpu - ref)^2 / sum ref^2
    double max_abs = 0;    // max |gpu - ref|
    size_t non_finite = 0; // NaN/Inf in gpu output
    size_t bad = 0;        // elements with |gpu - ref| > atol + rtol * |ref|
};

struct Tolerance {
    double nmse = 1e-7;
    double atol = 1e-5;
    double rtol = 1e-4;
};

// Compares, prints the first mismatches naming `tensor`, and CHECKs nmse, NaN/Inf and the
// element-wise bound. Returns the figures for reporting.
Compare validate_result(const std::string& tensor, const float* gpu, const float* ref, size_t n, const Tolerance& tol);
inline Compare validate_result(const std::string& tensor, const std::vector<float>& gpu, const std::vector<float>& ref,
                               const Tolerance& tol) {
    REQUIRE(gpu.size() == ref.size());
    return validate_result(tensor, gpu.data(), ref.data(), gpu.size(), tol);
}

// A device buffer with guard regions on both sides, filled with a canary pattern. check_guards()
// fails the test when a kernel wrote outside [0, bytes).
class GuardedBuffer {
public:
    GuardedBuffer(Context& ctx, size_t bytes, const std::string& name);
    BufferSlice slice() const;  // the payload only
    const Buffer& buffer() const { return buf_; }
    size_t payload_offset() const { return guard_; }
    void upload(const void* src, size_t bytes);
    void download(void* dst, size_t bytes) const;
    std::vector<float> download_floats(size_t n) const;
    void check_guards() const;

private:
    Context& ctx_;
    Buffer buf_;
    size_t bytes_, guard_;
    std::string name_;
};

// The shared test models (../shared/models beside the checkout) and the directory tests write
// scratch files under (the build tree). The paths are compiled in; VKLLM_TEST_MODELS_DIR and
// VKLLM_TEST_SCRATCH_DIR replace them where the executables run away from the build, as in the
// device bundle (scripts/device_bundle.sh).
std::filesystem::path models_dir();
std::filesystem::path binary_dir();
// The checked-in fixtures (tests/fixtures of the source tree; VKLLM_TEST_FIXTURES_DIR replaces it).
// From the source directory compiled in, not from __FILE__, which a build may make relative
// (ccache's base_dir, -ffile-prefix-map).
std::filesystem::path fixtures_dir();

// Path of a file in models_dir(), or empty (with a doctest MESSAGE) when absent.
std::string model_path(const std::string& file);

// The capability-override specs every kernel test runs under: the real device, and the weak
// device paths (no fp16, no 64-bit integers, no subgroup arithmetic, 16 KiB shared memory and
// uniform buffers, f16 converted without unpackHalf2x16), and GPU tuning without 8/16-bit storage.
// VKLLM_TEST_DEVICE_VARIANTS picks: `all` (default), `subgroup` (the real device and GPU tuning, the
// variants whose kernels use subgroup arithmetic: scripts/test.sh's stages at other subgroup
// sizes), `real` (scripts/slow_driver_tests.sh, for the drivers where compiling each variant's
// pipelines costs minutes: arm64 lavapipe under qemu, Mesa 25 lavapipe).
// Use with context_for().
const std::vector<std::string>& device_variants();

// The context with the cooperative-matrix kernels forced (`--caps coopmat`), or nullptr with a
// doctest MESSAGE where the device cannot run them (Mesa 22.3 and 25 lavapipe: no
// VK_KHR_cooperative_matrix). VKLLM_TEST_REQUIRE_COOPMAT=1 (scripts/test.sh's Mesa 26 stage) turns
// that absence into a failure, so the stage that exists to run these cases cannot skip them.
Context* coopmat_context();

}  // namespace vkllm::test
