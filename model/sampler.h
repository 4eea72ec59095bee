// Token sampling from a logits row: greedy, temperature, top-k, top-p, min-p and repetition
// penalty, with a seeded generator so that the same seed gives the same text.
#pragma once

#include <cstdint>
#include <deque>
#include <random>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace vkllm {

struct SamplerParams {
    float temperature = 0.8f;  // 0 = greedy
    int32_t top_k = 40;  // <= 0: off
    float top_p = 0.95f;  // 1: off
    float min_p = 0.05f;  // 0: off
    float repeat_penalty = 1.0f;  // 1: off (the default, so that --temp 0 is plain argmax)
    int32_t repeat_last_n = 64;  // tokens the penalties look back over
    // OpenAI's penalties (-2..2; 0: off): a token generated so far (the prompt does not count)
    // loses presence_penalty once and frequency_penalty per occurrence.
    float presence_penalty = 0.0f;
    float frequency_penalty = 0.0f;
    uint64_t seed = 0;
    // OpenAI's logit_bias: added to a token's logit before everything else; -100 or less bans the
    // token (a logit so low it is never chosen while any other token is allowed).
    std::vector<std::pair<int32_t, float>> logit_bias;

    bool greedy() const { return temperature <= 0.0f; }
    bool penalized() const {
        return (repeat_penalty != 1.0f && repeat_last_n > 0) || presence_penalty != 0.0f || frequency_penalty != 0.0f;
    }
    // Whether the logits change before the choice: greedy then needs them on the host, not the
    // device's argmax.
    bool adjusts_logits() const { return penalized() || !logit_bias.empty(); }
    // Throws std::invalid_argument naming the parameter when a value is out of range.
    void validate() const;
};

// Which tokens may come next (a grammar, model/grammar/token_constraint.h). The sampler applies it
// before every other step: the penalties, top-k, min-p, top-p and temperature see only allowed
// tokens, exactly as if every other logit were -inf.
class TokenFilter {
public:
    virtual ~TokenFilter() = default;
    virtual bool allowed(int32_t token) = 0;
    // Every token's answer (1: allowed) once the filter has decided the whole vocabulary, else
    // empty: the sampler then reads the remaining tokens off it in one pass rather than asking on
    // in logit order.
    virtual std::span<const uint8_t> decided() const { return {}; }
};

class Sampler {
public:
    explicit Sampler(const SamplerParams& p);
    // Picks the next token from logits (modified in place by the penalty). With a filter, only
    // among the tokens it allows; -1 when it allows none.
    int32_t sample(std::span<float> logits, TokenFilter* filter = nullptr);
    // Records a token for the penalties: every token (prompt or generated) for the repetition
    // penalty's window, generated ones also for the presence and frequency penalties.
    void accept(int32_t token, bool generated = false);
    const SamplerParams& params() const { return p_; }

private:
    SamplerParams p_;
    std::mt19937_64 rng_;
    std::deque<int32_t> recent_;
    std::unordered_map<int32_t, uint32_t> generated_;  // token -> times generated
};

}  // namespace vkllm
