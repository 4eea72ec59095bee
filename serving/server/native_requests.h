// llama-server's native API bodies as data: POST /completion and /infill parsed and checked into
// engine requests, the prompt forms llama-server takes (text, token ids, both mixed, several
// prompts at once), /tokenize's with_pieces and /slots' query. No HTTP and no model here, so all of
// it is unit-tested on plain JSON and a real vocabulary (tests/serving/server/test_native_requests.cpp).
// Responses are in native_responses.h.
//
// Fields llama-server honours that vkllm's sampler has no equivalent for (mirostat, typical_p,
// dynamic temperature, XTC, DRY, top-n-sigma, a custom sampler order, post-sampling probabilities,
// LoRA, llama-server's older image_data) are refused with a 400 naming the field when set to anything but their "off" value:
// a request is honoured exactly or not at all.
#pragma once

#include "model/tokenizer/tokenizer.h"
#include "serving/server/fim_prompt.h"
#include "serving/server/openai_requests.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace vkllm::server {

// Prompts per /completion request (each runs as a request of its own).
inline constexpr size_t kMaxNativePrompts = 16;

struct NativeRequest {
    // /completion: each prompt as given, checked: a string, an array of token ids and strings, or a
    // prompt object {"prompt_string": text, "multimodal_data": [base64 images]} (images, llama-server's
    // form, with /props' media_marker in the text per image).
    std::vector<json> prompts;
    // /infill: the code around the cursor (strings or arrays like a prompt), the other files, and
    // the text at the cursor (prompts[0], a string, "" when absent).
    json input_prefix, input_suffix;
    std::vector<FimFile> input_extra;
    bool infill = false;

    engine::CompletionRequest engine;  // everything but the prompt; max_tokens from n_predict
    int64_t n_predict = -1;  // as the client gave it (-1: until an end token or the context is full)
    bool seed_given = false;  // generation_settings echo 4294967295 (llama-server's "random") otherwise
    bool stream = false;
    uint32_t n_probs = 0;  // alternatives per token in completion_probabilities (0: none)
    bool return_tokens = false;
    int32_t id_slot = -1;  // the slot to run in (-1: the engine picks)
    // The only fields the final response keeps ("a/b" reads b inside a), when not empty.
    std::vector<std::string> response_fields;
    // logit_bias entries whose token is text: tokenized by resolve_logit_bias.
    std::vector<std::pair<std::string, float>> text_bias;
};

// 400 naming the field for a wrong type or value, or a field set to something vkllm cannot honour.
// `seed`: the one used when the request gives none. `n_slots`: id_slot must be below it.
NativeRequest parse_native_completion(const json& body, uint64_t seed, uint32_t n_slots);
NativeRequest parse_infill_request(const json& body, uint64_t seed, uint32_t n_slots);

// A prompt's token ids as llama-server makes them: a string with BOS (as the vocabulary asks) and
// control-token texts parsed; ids as given; in a mixed array only the first element, when a string,
// gets the BOS; a prompt object's prompt_string as a string (its images are not read here). 400
// naming `param` for an id outside the vocabulary.
std::vector<int32_t> prompt_ids(const Tokenizer& tok, const json& prompt, bool add_special, bool parse_special,
                                const std::string& param = "prompt");
// Adds the text entries of logit_bias: every token of each text gets the bias (a 400 naming
// logit_bias for an id outside the vocabulary).
void resolve_logit_bias(const Tokenizer& tok, NativeRequest& req);

// The token ids of an /infill request: fim_prompt with the slot's context (400 naming the field for
// an id outside the vocabulary; 501 when the vocabulary has no FIM tokens, as llama-server answers).
std::vector<int32_t> infill_prompt(const Tokenizer& tok, const NativeRequest& req, uint32_t n_ctx);

// POST /tokenize with llama-server's with_pieces: [{"id", "piece"}], each piece the token's text,
// or its bytes as an array of numbers when they are not valid UTF-8 on their own.
json tokens_with_pieces(const Tokenizer& tok, const std::vector<int32_t>& ids);
bool parse_with_pieces(const json& body);

}  // namespace vkllm::server
