#include "model/forward/forward_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace vkllm {

TensorDiff diff_tensors(std::span<const float> gpu, std::span<const float> ref) {
    TensorDiff d;
    double err = 0, norm = 0;
    for (size_t i = 0; i < std::min(gpu.size(), ref.size()); ++i) {
        if (!std::isfinite(gpu[i])) {
            ++d.non_finite;
            continue;
        }
        double e = double(gpu[i]) - ref[i];
        err += e * e;
        norm += double(ref[i]) * ref[i];
        d.max_abs = std::max(d.max_abs, std::fabs(e));
    }
    d.nmse = norm > 0 ? err / norm : err;
    if (gpu.size() != ref.size() || d.non_finite) d.nmse = INFINITY;
    return d;
}

CheckReport check_forward(ModelGpu& gpu, ModelCpu& cpu, std::span<const int32_t> tokens, double tensor_nmse,
                          double logits_nmse) {
    CheckReport r;
    std::map<uint32_t, LayerTensors> cpu_layers;
    std::vector<float> cpu_logits = cpu.eval(tokens, [&](uint32_t l, const LayerTensors& t) { cpu_layers[l] = t; });
    // The device evaluates in ubatch chunks; only the last chunk's tensors are compared (they are
    // the last rows of the host's).
    std::map<uint32_t, LayerTensors> gpu_layers;
    gpu.eval(tokens, [&](uint32_t l, const LayerTensors& t) { gpu_layers[l] = t; });
    for (auto& [layer, tensors] : gpu_layers) {
        for (auto& [name, g] : tensors) {
            const std::vector<float>& c = cpu_layers.at(layer).at(name);
            std::span<const float> ref(c.data() + (c.size() - std::min(c.size(), g.size())),
                                       std::min(c.size(), g.size()));
            TensorDiff d = diff_tensors(g, ref);
            if (d.nmse > r.worst_tensor_nmse || r.worst_tensor.empty()) {
                r.worst_tensor_nmse = d.nmse;
                r.worst_tensor = fmt::format("layer {} {}", layer, name);
            }
            if (r.ok && !(d.nmse <= tensor_nmse)) {
                r.ok = false;
                r.first_divergence = fmt::format(
                    "layer {} tensor {}: nmse {:.3g}, max |diff| {:.3g}{} (threshold {:.1g})", layer, name, d.nmse,
                    d.max_abs, d.non_finite ? fmt::format(", {} non-finite", d.non_finite) : "", tensor_nmse);
            }
        }
    }
    // An encoder's output is its hidden states (compared against logits_nmse as well).
    const bool head = gpu.config().arch->stack.lm_head;
    std::vector<float> g = head ? gpu.logits() : gpu.hidden_states();
    TensorDiff d = diff_tensors(g, cpu_logits);
    r.logits_nmse = d.nmse;
    r.gpu_argmax = int32_t(std::max_element(g.begin(), g.end()) - g.begin());
    r.cpu_argmax = int32_t(std::max_element(cpu_logits.begin(), cpu_logits.end()) - cpu_logits.begin());
    if (r.ok && !(d.nmse <= logits_nmse)) {
        r.ok = false;
        r.first_divergence =
            fmt::format("{}: nmse {:.3g} (threshold {:.1g})", head ? "logits" : "hidden states", d.nmse, logits_nmse);
    }
    return r;
}

}  // namespace vkllm
