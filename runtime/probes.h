// Device probes: the read bandwidth and f32 FMA rate this device really reaches, so that every
// benchmark figure can be stated as a fraction of what the hardware can do.
#pragma once

#include "runtime/context.h"

namespace vkllm {

struct ProbeResult {
    double value = 0;  // GB/s (bandwidth), GFLOP/s (fma) or GOP/s (int_dot): best of the repetitions
    double seconds = 0;  // GPU time of the best repetition
    double check = 0;  // the kernel's result, for tests (sum of the buffer for bandwidth)
};

// Streams `bytes` (rounded down to 16, at most one binding) `reps` times; timed with timestamps
// when the device has them, with the host clock around the submission otherwise.
ProbeResult probe_bandwidth(Context& ctx, size_t bytes = 64u << 20, int reps = 5);
ProbeResult probe_fma(Context& ctx, uint32_t iters = 4096, int reps = 5);
// The signed 4x8-bit packed dot rate in integer ops (two per multiply-add, as FLOP count them);
// needs caps().int_dot_product (throws DeviceLimitError without it). check: invocation 0's result.
ProbeResult probe_int_dot(Context& ctx, uint32_t iters = 4096, int reps = 5);
// What probe_int_dot's invocation 0 computes, on the host (for tests).
uint32_t probe_int_dot_expected(uint32_t iters);
// The name benchmarks give the arithmetic peak a kernel is measured against: probe_int_dot's for the
// integer-dot kernels, probe_fma's for the others (the JSON's "peak" / "prefill_roofline").
inline const char* arithmetic_peak_name(bool int_dot) { return int_dot ? "int8 dot" : "f32 FMA"; }

}  // namespace vkllm
