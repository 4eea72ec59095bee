#include "serving/server/native_responses.h"

#include "serving/server/openai_responses.h"

#include <fmt/format.h>

#include <algorithm>

namespace vkllm::server {

namespace {

json byte_list(const std::string& s) {
    json out = json::array();
    for (unsigned char c : s) out.push_back(int(c));
    return out;
}

double per(double a, double b) { return b > 0 ? a / b : 0.0; }

}  // namespace

json generation_settings(const NativeRequest& req) {
    const SamplerParams& s = req.engine.sampler;
    json stop = json::array();
    for (const std::string& x : req.engine.stop) stop.push_back(x);
    return json{
        {"seed", req.seed_given ? json(s.seed) : json(4294967295u)},
        {"temperature", s.temperature},
        {"dynatemp_range", 0.0},
        {"dynatemp_exponent", 1.0},
        {"top_k", s.top_k},
        {"top_p", s.top_p},
        {"min_p", s.min_p},
        {"top_n_sigma", -1.0},
        {"xtc_probability", 0.0},
        {"xtc_threshold", 0.1},
        {"typical_p", 1.0},
        {"repeat_last_n", s.repeat_last_n},
        {"repeat_penalty", s.repeat_penalty},
        {"presence_penalty", s.presence_penalty},
        {"frequency_penalty", s.frequency_penalty},
        {"dry_multiplier", 0.0},
        {"mirostat", 0},
        {"stop", stop},
        {"max_tokens", req.n_predict},
        {"n_predict", req.n_predict},
        {"n_keep", 0},
        {"ignore_eos", req.engine.ignore_eos},
        {"stream", req.stream},
        {"n_probs", req.n_probs},
        {"min_keep", 0},
        {"grammar", ""},
        {"samplers", json::array({"penalties", "top_k", "top_p", "min_p", "temperature"})},
        {"timings_per_token", false},
        {"post_sampling_probs", false},
        {"lora", json::array()},
    };
}

const char* native_stop_type(const engine::Event& done) {
    if (done.finish == engine::FinishReason::Stop) return done.stop_word.empty() ? "eos" : "word";
    return "limit";
}

json pick_fields(const json& full, const std::vector<std::string>& fields) {
    json out = json::object();
    for (const std::string& path : fields) {
        const json* at = &full;
        size_t from = 0;
        for (;;) {
            const size_t slash = path.find('/', from);
            const std::string key = path.substr(from, slash == std::string::npos ? std::string::npos : slash - from);
            if (!at->is_object() || !at->contains(key)) {
                at = nullptr;
                break;
            }
            at = &(*at)[key];
            if (slash == std::string::npos) break;
            from = slash + 1;
        }
        if (at) out[path] = *at;
    }
    return out;
}

NativeResult::NativeResult(const NativeRequest& req, const Tokenizer& tok, std::string model, size_t index,
                           std::vector<int32_t> prompt, std::string image_marker, std::vector<uint32_t> image_starts)
    : req_(req),
      tok_(tok),
      model_(std::move(model)),
      index_(index),
      prompt_(std::move(prompt)),
      image_marker_(std::move(image_marker)),
      image_starts_(std::move(image_starts)) {}

json NativeResult::probabilities(const std::vector<engine::TokenLogprob>& lps) const {
    json out = json::array();
    for (const engine::TokenLogprob& lp : lps) {
        json top = json::array();
        for (size_t i = 0; i < lp.top.size(); ++i)
            top.push_back(json{{"id", i < lp.top_ids.size() ? lp.top_ids[i] : -1},
                               {"token", lp.top[i].first},
                               {"bytes", byte_list(lp.top[i].first)},
                               {"logprob", lp.top[i].second}});
        out.push_back(json{{"id", lp.token},
                           {"token", lp.text},
                           {"bytes", byte_list(lp.text)},
                           {"logprob", lp.logprob},
                           {"top_logprobs", std::move(top)}});
    }
    return out;
}

std::string NativeResult::stream_text(const engine::Event& ev) {
    if (ev.text.empty() && ev.tokens.empty() && ev.logprobs.empty()) return {};
    predicted_ += uint32_t(ev.tokens.size());
    json chunk = {{"index", index_},
                  {"content", ev.text},
                  {"tokens", ev.tokens},
                  {"stop", false},
                  {"id_slot", -1},
                  {"tokens_predicted", predicted_},
                  {"tokens_evaluated", prompt_.size()}};
    if (req_.n_probs > 0) chunk["completion_probabilities"] = probabilities(ev.logprobs);
    return sse_data(chunk);
}

std::string NativeResult::stream_final(const engine::Event& done) { return sse_data(final_json(done)); }

void NativeResult::add(const engine::Event& ev) {
    content_ += ev.text;
    tokens_.insert(tokens_.end(), ev.tokens.begin(), ev.tokens.end());
    lps_.insert(lps_.end(), ev.logprobs.begin(), ev.logprobs.end());
}

json NativeResult::final_json(const engine::Event& done) const {
    std::string prompt_text;
    for (size_t i = 0; i < prompt_.size(); ++i)
        if (prompt_[i] >= 0)
            prompt_text += tok_.token_to_piece(prompt_[i], true);
        else if (std::find(image_starts_.begin(), image_starts_.end(), uint32_t(i)) != image_starts_.end())
            prompt_text += image_marker_;  // an image's rows: one marker
    const uint32_t evaluated = done.prompt_tokens - std::min(done.prompt_tokens, done.cached_tokens);
    const uint32_t predicted = done.completion_tokens;
    json timings = {
        {"cache_n", done.cached_tokens},
        {"prompt_n", evaluated},
        {"prompt_ms", done.prompt_ms},
        {"prompt_per_token_ms", per(done.prompt_ms, evaluated)},
        {"prompt_per_second", per(1000.0 * evaluated, done.prompt_ms)},
        {"predicted_n", predicted},
        {"predicted_ms", done.generate_ms},
        {"predicted_per_token_ms", per(done.generate_ms, predicted)},
        {"predicted_per_second", per(1000.0 * predicted, done.generate_ms)},
    };
    if (done.draft_tokens > 0) {  // speculative decoding, as llama-server reports it
        timings["draft_n"] = done.draft_tokens;
        timings["draft_n_accepted"] = done.accepted_tokens;
    }
    json out = {
        {"index", index_},
        {"content", content_},
        {"tokens", req_.return_tokens ? json(tokens_) : json::array()},
        {"id_slot", done.slot},
        {"stop", true},
        {"model", model_},
        {"tokens_predicted", predicted},
        {"tokens_evaluated", done.prompt_tokens},
        {"generation_settings", generation_settings(req_)},
        {"prompt", prompt_text},
        {"has_new_line", content_.find('\n') != std::string::npos},
        {"truncated", false},  // a prompt that does not fit is refused, never cut
        {"stop_type", native_stop_type(done)},
        {"stopping_word", done.stop_word},
        // The last token is sampled but not yet in the cache, as llama-server counts.
        {"tokens_cached", done.prompt_tokens + (predicted > 0 ? predicted - 1 : 0)},
        {"timings", std::move(timings)},
    };
    if (req_.n_probs > 0) out["completion_probabilities"] = probabilities(lps_);
    return req_.response_fields.empty() ? out : pick_fields(out, req_.response_fields);
}

json props_json(const PropsInfo& p) {
    NativeRequest defaults;
    json settings = generation_settings(defaults);
    return json{
        {"default_generation_settings", json{{"id", 0}, {"id_task", -1}, {"n_ctx", p.n_ctx}, {"params", settings}}},
        {"total_slots", p.total_slots},
        {"model_alias", p.model_alias},
        {"model_path", p.model_path},
        {"modalities", json{{"vision", p.vision}, {"video", false}, {"audio", false}}},
        {"media_marker", p.vision ? json(p.media_marker) : json()},
        {"endpoint_slots", true},
        {"endpoint_props", false},
        {"endpoint_metrics", true},
        {"chat_template", p.chat_template},
        {"bos_token", p.bos_token},
        {"eos_token", p.eos_token},
        {"build_info", fmt::format("vkllm {}", VKLLM_VERSION_STRING)},
        {"is_sleeping", false},
    };
}

json slots_json(const std::vector<bool>& busy, uint32_t n_ctx) {
    json out = json::array();
    for (size_t i = 0; i < busy.size(); ++i)
        out.push_back(json{{"id", i}, {"n_ctx", n_ctx}, {"speculative", false}, {"is_processing", bool(busy[i])}});
    return out;
}

}  // namespace vkllm::server
