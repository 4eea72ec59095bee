// `vkllm run`'s generation: one request through a one-slot Engine, the same loop (sampling, stop
// tokens, non-finite checks, text streaming) that `vkllm serve` and the C API run, driven from the
// calling thread until it ends.
#pragma once

#include "model/forward/model_gpu.h"
#include "model/grammar/grammar.h"
#include "model/sampler.h"
#include "model/tokenizer/tokenizer.h"
#include "serving/engine/engine.h"

#include <functional>
#include <memory>
#include <span>
#include <string_view>

namespace vkllm::engine {

struct GenerateParams {
    int32_t n_predict = 128;  // tokens to generate (stops earlier at an end-of-generation token or BOS)
    SamplerParams sampler;
    std::shared_ptr<const grammar::Grammar> grammar;  // constrains the text (null: free text)
    grammar::LazyStart grammar_start;  // with triggers: where the grammar starts to hold
    std::vector<PromptEmbeddings> images;  // the prompt's images over their placeholder tokens
    // Speculative decoding (EngineOptions'): the model must have been loaded with draft_rows >= draft_max.
    std::shared_ptr<Drafter> drafter;
    uint32_t draft_max = 8, draft_min = 1;
};

struct GenerateStats {
    uint32_t prompt_tokens = 0, generated_tokens = 0;
    double prompt_ms = 0;  // from the start to the first generated token
    double generate_ms = 0;  // from the first generated token to the end
    uint32_t decode_steps = 0;  // decode forward passes in generate_ms
    uint32_t draft_tokens = 0, accepted_tokens = 0;  // speculative decoding's verified and kept drafts
    double sample_ms = 0;  // of all that, host time choosing tokens (sampler and grammar)
    bool stopped_at_eos = false;  // at an end-of-generation token (Tokenizer::is_eog: eos, eot, eom, ...) or
        // where the grammar was complete
    double prompt_tps() const { return prompt_ms > 0 ? prompt_tokens * 1000.0 / prompt_ms : 0; }
    // Tokens the decode steps chose (each step one, and the drafts it kept) per second.
    double generate_tps() const {
        return generate_ms > 0 ? (decode_steps + accepted_tokens) * 1000.0 / generate_ms : 0;
    }
};

// Generates after `prompt` on sequence 0 of `model` (a fresh conversation: whatever the sequence
// held is replaced, or reused where it shares the prompt's first tokens). Checks that prompt +
// n_predict fit the context before evaluating anything (ContextFullError otherwise); a failure
// during generation is rethrown as itself (NonFiniteError for NaN or Inf logits, VulkanError, ...)
// after the text before it was passed to on_piece (whole UTF-8 characters only).
GenerateStats generate(ModelGpu& model, const Tokenizer& tok, std::span<const int32_t> prompt, const GenerateParams& p,
                       const std::function<void(std::string_view)>& on_piece);

}  // namespace vkllm::engine
