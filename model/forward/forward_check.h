// Compares the device forward pass with the host reference, layer by layer: the tests use it,
// and `vkllm run --check` reports the first layer and tensor whose result diverges.
#pragma once

#include "model/forward/model_cpu.h"
#include "model/forward/model_gpu.h"

#include <span>
#include <string>

namespace vkllm {

struct TensorDiff {
    double nmse = 0;  // sum (gpu - ref)^2 / sum ref^2
    double max_abs = 0;
    size_t non_finite = 0;
};
TensorDiff diff_tensors(std::span<const float> gpu, std::span<const float> ref);

struct CheckReport {
    bool ok = true;
    std::string first_divergence;  // "layer 3 tensor attn_out: nmse 2.1e-03 (threshold 1e-04)"
    double worst_tensor_nmse = 0;
    std::string worst_tensor;
    double logits_nmse = 0;
    int32_t gpu_argmax = -1, cpu_argmax = -1;
};

// The NMSE thresholds `vkllm run --check` uses: the float path agrees with the host reference to
// summation order; the integer-dot matvecs (ModelGpu::int_dot_matvecs) quantize each projection's
// input to 8 bits per element, which random 4-layer models show at up to 1e-3 (tests/model/
// forward/test_forward.cpp), far below a wrong kernel's ~1.
inline constexpr double kCheckNmse = 1e-4, kCheckNmseIntDot = 1e-2;

// Evaluates `tokens` on both (each at its own n_past, which should be equal) and compares every
// layer's tensors against `tensor_nmse` and the logits (an encoder's hidden states) against `logits_nmse`.
CheckReport check_forward(ModelGpu& gpu, ModelCpu& cpu, std::span<const int32_t> tokens, double tensor_nmse = 1e-4,
                          double logits_nmse = 1e-4);

}  // namespace vkllm
