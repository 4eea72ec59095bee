// llama-server's native API response bodies as data: /completion's and /infill's result (whole, or
// streamed as `data: {...}` events ending with the one whose stop is true), completion_probabilities,
// generation_settings, /props and /slots. No HTTP here: unit-tested on plain JSON
// (tests/serving/server/test_native_responses.cpp).
#pragma once

#include "serving/server/native_requests.h"

#include "serving/engine/engine.h"

#include <cstdint>
#include <string>
#include <vector>

namespace vkllm::server {

// The sampler settings of a request (or the server's defaults) under llama-server's names; the
// samplers vkllm does not have appear at their "off" values.
json generation_settings(const NativeRequest& req);

// The result of one prompt of a /completion or /infill request.
class NativeResult {
public:
    // `index`: the prompt's place in the request; `prompt`: its token ids (what "prompt" shows; an
    // image's placeholder ids, which are negative, as one `image_marker` at each of `image_starts`).
    NativeResult(const NativeRequest& req, const Tokenizer& tok, std::string model, size_t index,
                 std::vector<int32_t> prompt, std::string image_marker = {}, std::vector<uint32_t> image_starts = {});

    // Streaming: the event for each Text event ("" when it carries nothing), and the final event.
    std::string stream_text(const engine::Event& ev);
    std::string stream_final(const engine::Event& done);
    // Whole responses: add every Text event, then the body for the Done event.
    void add(const engine::Event& ev);
    json final_json(const engine::Event& done) const;

private:
    json probabilities(const std::vector<engine::TokenLogprob>& lps) const;

    const NativeRequest& req_;
    const Tokenizer& tok_;
    std::string model_;
    size_t index_;
    std::vector<int32_t> prompt_;
    std::string image_marker_;
    std::vector<uint32_t> image_starts_;
    std::string content_;  // whole responses: the text so far
    std::vector<int32_t> tokens_;
    std::vector<engine::TokenLogprob> lps_;
    uint32_t predicted_ = 0;  // tokens so far (streams count them per event)
};

// "stop_type": "eos" (an end token or a complete grammar), "word" (a stop string), "limit".
const char* native_stop_type(const engine::Event& done);

// Only the fields named ("a/b" is b inside a, under the key "a/b"); absent ones are left out.
json pick_fields(const json& full, const std::vector<std::string>& fields);

// GET /props: what a client reads to learn the server's model, slots and defaults.
struct PropsInfo {
    std::string model_alias, model_path, chat_template, bos_token, eos_token;
    uint32_t n_ctx = 0, total_slots = 0;
    bool vision = false;  // the model takes images (modalities.vision)
    std::string media_marker;  // what marks an image in /completion's prompt_string (with vision)
};
json props_json(const PropsInfo& p);

// GET /slots: each slot's id, context and whether it runs a request.
json slots_json(const std::vector<bool>& busy, uint32_t n_ctx);

}  // namespace vkllm::server
