// The generation loop shared by `vkllm run` and `vkllm bench`: prompt in chunks, then one token at
// a time, streaming text pieces to a callback as they are decoded.
#pragma once

#include "model/forward/model_gpu.h"
#include "model/sampler.h"
#include "model/tokenizer/tokenizer.h"

#include <functional>
#include <span>
#include <string_view>

namespace vkllm {

struct GenerateParams {
    int32_t n_predict = 128;  // tokens to generate (stops earlier at an end-of-generation token or BOS)
    SamplerParams sampler;
};

struct GenerateStats {
    uint32_t prompt_tokens = 0, generated_tokens = 0;
    double prompt_ms = 0;       // prompt evaluation (first logits ready)
    uint32_t decode_steps = 0;  // single-token forward passes (generated tokens - 1, typically)
    double decode_ms = 0;       // time in those passes, sampling and text decoding included
    bool stopped_at_eos = false;  // at any end-of-generation token (Tokenizer::is_eog: eos, eot, eom, ...)
    double prompt_tps() const { return prompt_ms > 0 ? prompt_tokens * 1000.0 / prompt_ms : 0; }
    double generate_tps() const { return decode_ms > 0 ? decode_steps * 1000.0 / decode_ms : 0; }
};

// Generates after `prompt` (which continues the model's conversation at its n_past()). Checks that
// prompt + n_predict fit the context before evaluating anything (ContextFullError otherwise).
GenerateStats generate(ModelGpu& model, const Tokenizer& tok, std::span<const int32_t> prompt, const GenerateParams& p,
                       const std::function<void(std::string_view)>& on_piece);

}  // namespace vkllm
