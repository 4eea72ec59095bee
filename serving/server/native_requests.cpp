#include "serving/server/native_requests.h"

#include "serving/chat_template/chat_prompt.h"
#include "serving/engine/text_stream.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace vkllm::server {

using detail::field;
using detail::get_bool;
using detail::get_integer;
using detail::get_number;
using detail::get_string;
using detail::wrong_type;

namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

// Sampler fields with their ranges, as data: each read into SamplerParams when given.
struct FloatField {
    const char* name;
    double lo, hi;
    float SamplerParams::*member;
};
constexpr FloatField kFloatFields[] = {
    {"temperature", 0, 100, &SamplerParams::temperature},
    {"min_p", 0, 1, &SamplerParams::min_p},
    {"repeat_penalty", 0, 100, &SamplerParams::repeat_penalty},
    {"presence_penalty", -2, 2, &SamplerParams::presence_penalty},
    {"frequency_penalty", -2, 2, &SamplerParams::frequency_penalty},
};

// llama-server's samplers vkllm does not have: accepted only at the value that turns them off.
struct OffField {
    const char* name;
    double off;
    bool at_most;  // "off" is any value <= off (top_n_sigma's -1), else exactly `off`
};
constexpr OffField kOffFields[] = {
    {"mirostat", 0, false},        {"typical_p", 1, false},        {"dynatemp_range", 0, false},
    {"xtc_probability", 0, false}, {"dry_multiplier", 0, false},   {"top_n_sigma", -1, true},
    {"n_indent", 0, false},        {"t_max_predict_ms", 0, false},
};
// Fields that change what is computed, refused when true / not empty.
constexpr const char* kOffFlags[] = {"post_sampling_probs", "timings_per_token", "return_progress"};
constexpr const char* kOffLists[] = {"lora", "image_data", "multimodal_data", "samplers"};

[[noreturn]] void unsupported(const std::string& name, const std::string& why) {
    throw invalid_field(name, fmt::format("Invalid '{}': {}", name, why));
}

void check_off_fields(const json& body) {
    for (const OffField& f : kOffFields) {
        const std::optional<double> v = get_number(body, f.name, -1e9, 1e9);
        if (v && (f.at_most ? *v > f.off : *v != f.off))
            unsupported(f.name, fmt::format("this server has no such sampler; only {} (off) is accepted.", f.off));
    }
    for (const char* name : kOffFlags)
        if (get_bool(body, name).value_or(false)) unsupported(name, "this server does not support it; only false.");
    for (const char* name : kOffLists)
        if (const json* v = field(body, name); v && !(v->is_array() && v->empty()))
            unsupported(name, name == std::string("samplers")
                                  ? "this server's sampler order is fixed (penalties, top_k, top_p, min_p, "
                                    "temperature); leave it out."
                              : name == std::string("multimodal_data")
                                  ? "images go inside the prompt: {\"prompt\": {\"prompt_string\": \"... "
                                    "<media marker> ...\", \"multimodal_data\": [base64, ...]}}, the marker "
                                    "from GET /props (media_marker)."
                                  : "this server does not support it; leave it out.");
}

// A prompt with images, as llama-server takes it: {"prompt_string": text with one media marker
// per image, "multimodal_data": [base64 of each image]}. Checked here; the images are read where
// the model's encoder is (native_routes.cpp).
void check_multimodal_prompt(const json& p, const std::string& param) {
    const json* text = field(p, "prompt_string");
    if (!text || !text->is_string())
        throw invalid_field(param,
                            fmt::format("Invalid '{}': a prompt object needs 'prompt_string', a string.", param));
    if (const json* data = field(p, "multimodal_data")) {
        if (!data->is_array()) wrong_type(param + ".multimodal_data", "an array of base64 strings", *data);
        for (size_t k = 0; k < data->size(); ++k)
            if (!(*data)[k].is_string())
                wrong_type(fmt::format("{}.multimodal_data[{}]", param, k), "a base64 string", (*data)[k]);
    }
    for (const auto& [key, v] : p.items())
        if (key != "prompt_string" && key != "multimodal_data")
            throw invalid_field(param + "." + key,
                                fmt::format("Invalid '{}.{}': a prompt object has only 'prompt_string' and "
                                            "'multimodal_data'.",
                                            param, key));
}

// A prompt of token ids and strings (at least one of each makes it "mixed"); integers must be ids.
bool is_ids_and_strings(const json& p) {
    return p.is_array() &&
           std::all_of(p.begin(), p.end(), [](const json& x) { return x.is_number_integer() || x.is_string(); });
}

// Splits `prompt` into the prompts llama-server reads from it.
std::vector<json> split_prompts(const json& p) {
    if (p.is_string()) return {p};
    if (p.is_object()) {
        check_multimodal_prompt(p, "prompt");
        return {p};
    }
    if (!p.is_array())
        wrong_type("prompt", "a string, an array of token ids, a prompt object, or an array of prompts", p);
    if (p.empty()) throw invalid_field("prompt", "Invalid 'prompt': it must not be empty.");
    const bool any_id = std::any_of(p.begin(), p.end(), [](const json& x) { return x.is_number_integer(); });
    if (any_id && is_ids_and_strings(p)) return {p};  // token ids, or ids and strings: one prompt
    std::vector<json> out;
    for (size_t i = 0; i < p.size(); ++i) {
        const json& x = p[i];
        if (x.is_object())
            check_multimodal_prompt(x, fmt::format("prompt[{}]", i));
        else if (!x.is_string() && !is_ids_and_strings(x))
            throw invalid_field(fmt::format("prompt[{}]", i),
                                fmt::format("Invalid 'prompt[{}]': each prompt must be a string, an array of "
                                            "token ids and strings, or a prompt object, got {}.",
                                            i, chat_template::json_type_name(x)));
        out.push_back(x);
    }
    if (out.size() > kMaxNativePrompts)
        throw invalid_field("prompt", fmt::format("Invalid 'prompt': at most {} prompts per request, got {}.",
                                                  kMaxNativePrompts, out.size()));
    return out;
}

// llama-server's logit_bias: [[token id or text, bias or false], ...] or {"token id or text": bias}.
void parse_logit_bias(const json& body, NativeRequest& r) {
    const json* lb = field(body, "logit_bias");
    if (!lb) return;
    auto add = [&](const json& key, const json& bias, const std::string& where) {
        float b = 0;
        if (bias.is_boolean() && !bias.get<bool>())
            b = -100.0f;  // false: never this token (the sampler bans at -100)
        else if (bias.is_number() && std::isfinite(bias.get<double>()) && std::fabs(bias.get<double>()) <= 100)
            b = float(bias.get<double>());
        else
            throw invalid_field("logit_bias", fmt::format("Invalid '{}': a bias is a number from -100 to 100 (-100 "
                                                          "bans the token) or false, got {}.",
                                                          where, bias.dump()));
        if (key.is_number_integer()) {
            const int64_t id = key.get<int64_t>();
            if (id < 0 || id > kInt32Max)
                throw invalid_field("logit_bias", fmt::format("Invalid '{}': {} is not a token id.", where, id));
            r.engine.sampler.logit_bias.emplace_back(int32_t(id), b);
        } else if (key.is_string()) {
            r.text_bias.emplace_back(key.get<std::string>(), b);
        } else {
            throw invalid_field("logit_bias",
                                fmt::format("Invalid '{}': a token is an id or a text, got {}.", where, key.dump()));
        }
    };
    if (lb->is_array()) {
        for (size_t i = 0; i < lb->size(); ++i) {
            const json& e = (*lb)[i];
            if (!e.is_array() || e.size() != 2)
                throw invalid_field("logit_bias", fmt::format("Invalid 'logit_bias[{}]': expected [token, bias].", i));
            add(e[0], e[1], fmt::format("logit_bias[{}]", i));
        }
    } else if (lb->is_object()) {
        for (const auto& [key, bias] : lb->items()) {
            const bool digits = !key.empty() && key.size() <= 10 &&
                                std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
            add(digits ? json(std::stoll(key)) : json(key), bias, fmt::format("logit_bias[{}]", key));
        }
    } else {
        wrong_type("logit_bias", "an array of [token, bias] pairs or an object", *lb);
    }
}

// The fields /completion and /infill share: sampling, stopping, streaming, structure.
void parse_native_common(const json& body, uint64_t seed, uint32_t n_slots, NativeRequest& r) {
    check_off_fields(body);
    engine::CompletionRequest& e = r.engine;
    SamplerParams& s = e.sampler;
    for (const FloatField& f : kFloatFields)
        if (auto v = get_number(body, f.name, f.lo, f.hi)) s.*f.member = float(*v);
    if (auto v = get_number(body, "top_p", 0, 1)) s.top_p = *v == 0 ? 1.0f : float(*v);  // 0 is "off" too
    if (s.min_p >= 1) throw invalid_field("min_p", "Invalid 'min_p': expected a value from 0 to below 1.");
    if (s.repeat_penalty <= 0)
        throw invalid_field("repeat_penalty", "Invalid 'repeat_penalty': expected a value above 0 (1 is off), got 0.");
    if (auto v = get_integer(body, "top_k", std::numeric_limits<int32_t>::min(), kInt32Max))
        s.top_k = int32_t(std::max<int64_t>(*v, 0));
    if (auto v = get_integer(body, "repeat_last_n", -1, kInt32Max))
        s.repeat_last_n = *v < 0 ? kInt32Max : int32_t(*v);  // -1: the whole context, as llama-server
    s.seed = seed;
    if (auto v = get_integer(body, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
        v && *v != -1 && uint64_t(*v) != 0xFFFFFFFFu) {  // -1 and 4294967295: llama-server's "random"
        s.seed = uint64_t(*v);
        r.seed_given = true;
    }
    parse_logit_bias(body, r);
    e.ignore_eos = get_bool(body, "ignore_eos").value_or(false);

    // n_predict, or OpenAI's max_tokens when n_predict is absent.
    std::optional<int64_t> n = get_integer(body, "n_predict", -1, kInt32Max);
    if (!n) n = get_integer(body, "max_tokens", -1, kInt32Max);
    if (n) r.n_predict = *n;
    if (r.n_predict == 0)
        throw invalid_field("n_predict", "Invalid 'n_predict': 0 generates nothing; give -1 (no limit) or more.");
    e.max_tokens = int32_t(r.n_predict);

    if (const json* stop = field(body, "stop")) {
        if (!stop->is_array()) wrong_type("stop", "an array of strings", *stop);
        for (const json& x : *stop) {
            if (!x.is_string()) wrong_type("stop", "an array of strings", x);
            if (x.get<std::string>().size() > 256)
                throw invalid_field("stop", "Invalid 'stop': a stop string may be at most 256 bytes long.");
            if (!x.get<std::string>().empty()) e.stop.push_back(x.get<std::string>());
        }
        if (e.stop.size() > 16)
            throw invalid_field("stop", fmt::format("Invalid 'stop': at most 16 stop strings, got {}.", e.stop.size()));
    }
    detail::parse_structure(body, e);
    if (e.grammar && !e.stop.empty())
        throw invalid_field("stop",
                            "Invalid 'stop': stop strings cannot be combined with 'grammar' or 'json_schema' "
                            "(they could cut the structured output).");

    r.stream = get_bool(body, "stream").value_or(false);
    if (auto v = get_integer(body, "n_probs", 0, 20)) r.n_probs = uint32_t(*v);
    e.logprobs = r.n_probs > 0;
    e.top_logprobs = r.n_probs;
    r.return_tokens = get_bool(body, "return_tokens").value_or(false);
    get_bool(body, "cache_prompt");  // the engine always reuses a slot's cached prefix
    get_integer(body, "n_keep", -1, kInt32Max);  // nothing is ever shifted out: a prompt must fit
    get_integer(body, "min_keep", 0, kInt32Max);
    if (auto v = get_integer(body, "id_slot", -1, kInt32Max); v && *v >= 0) {
        if (*v >= int64_t(n_slots))
            throw invalid_field("id_slot", fmt::format("Invalid 'id_slot': this server has {} slots (0 to {}), got {}.",
                                                       n_slots, n_slots - 1, *v));
        r.id_slot = int32_t(*v);
        e.slot = r.id_slot;
    }
    if (const json* rf = field(body, "response_fields")) {
        if (!rf->is_array()) wrong_type("response_fields", "an array of strings", *rf);
        for (const json& x : *rf) {
            if (!x.is_string()) wrong_type("response_fields", "an array of strings", x);
            r.response_fields.push_back(x.get<std::string>());
        }
    }
}

}  // namespace

NativeRequest parse_native_completion(const json& body, uint64_t seed, uint32_t n_slots) {
    NativeRequest r;
    const json* p = field(body, "prompt");
    if (!p) throw invalid_field("prompt", "Missing required parameter: 'prompt'.");
    r.prompts = split_prompts(*p);
    parse_native_common(body, seed, n_slots, r);
    return r;
}

NativeRequest parse_infill_request(const json& body, uint64_t seed, uint32_t n_slots) {
    NativeRequest r;
    r.infill = true;
    for (const char* name : {"input_prefix", "input_suffix"}) {
        const json* v = field(body, name);
        if (!v) throw invalid_field(name, fmt::format("Missing required parameter: '{}'.", name));
        if (!v->is_string() && !is_ids_and_strings(*v)) wrong_type(name, "a string or an array of token ids", *v);
        (std::string(name) == "input_prefix" ? r.input_prefix : r.input_suffix) = *v;
    }
    if (const json* extra = field(body, "input_extra")) {
        if (!extra->is_array()) wrong_type("input_extra", "an array of {\"filename\", \"text\"} objects", *extra);
        for (size_t i = 0; i < extra->size(); ++i) {
            const json& chunk = (*extra)[i];
            const std::string where = fmt::format("input_extra[{}]", i);
            if (!chunk.is_object()) wrong_type(where, "an object with 'text' and 'filename'", chunk);
            const json* text = field(chunk, "text");
            if (!text)
                throw invalid_field(where + ".text", fmt::format("Missing required parameter: '{}.text'.", where));
            if (!text->is_string()) wrong_type(where + ".text", "a string", *text);
            FimFile f;
            f.text = text->get<std::string>();
            if (const json* name = field(chunk, "filename")) {
                if (!name->is_string()) wrong_type(where + ".filename", "a string", *name);
                f.filename = name->get<std::string>();
            }
            r.input_extra.push_back(std::move(f));
        }
    }
    const std::optional<std::string> prompt = get_string(body, "prompt");
    r.prompts = {json(prompt.value_or(""))};
    parse_native_common(body, seed, n_slots, r);
    return r;
}

std::vector<int32_t> prompt_ids(const Tokenizer& tok, const json& prompt, bool add_special, bool parse_special,
                                const std::string& param) {
    if (prompt.is_string()) return tok.encode(prompt.get<std::string>(), add_special, parse_special);
    if (prompt.is_object())  // a prompt object without images (native_routes.cpp reads those with images)
        return tok.encode(prompt.at("prompt_string").get<std::string>(), add_special, parse_special);
    std::vector<int32_t> out;
    bool first = true;
    for (const json& x : prompt) {
        if (x.is_string()) {
            const std::vector<int32_t> ids = tok.encode(x.get<std::string>(), first && add_special, parse_special);
            out.insert(out.end(), ids.begin(), ids.end());
        } else {
            const int64_t id =
                x.is_number_unsigned() && x.get<uint64_t>() > uint64_t(kInt32Max) ? -1 : x.get<int64_t>();
            if (id < 0 || size_t(id) >= tok.n_vocab())
                throw invalid_field(
                    param, fmt::format("Invalid '{}': token id {} is not in the vocabulary ({} tokens).", param,
                                       x.dump(), tok.n_vocab()));
            out.push_back(int32_t(id));
        }
        first = false;
    }
    return out;
}

void resolve_logit_bias(const Tokenizer& tok, NativeRequest& req) {
    auto& bias = req.engine.sampler.logit_bias;
    for (const auto& [text, b] : req.text_bias)
        for (int32_t id : tok.encode(text, false, false)) bias.emplace_back(id, b);
    req.text_bias.clear();
    for (const auto& [id, b] : bias)
        if (size_t(id) >= tok.n_vocab())
            throw invalid_field("logit_bias", fmt::format("Invalid 'logit_bias': token id {} is not in the vocabulary "
                                                          "({} tokens).",
                                                          id, tok.n_vocab()));
}

std::vector<int32_t> infill_prompt(const Tokenizer& tok, const NativeRequest& req, uint32_t n_ctx) {
    if (const std::string missing = fim_missing(tok); !missing.empty())
        throw ApiError(501, "Infill is not supported by this model: " + missing, "not_supported_error");
    FimInput in;
    in.prefix = prompt_ids(tok, req.input_prefix, false, false, "input_prefix");
    in.suffix = prompt_ids(tok, req.input_suffix, false, false, "input_suffix");
    in.prompt = prompt_ids(tok, req.prompts.at(0), false, true);
    in.extra = req.input_extra;
    return fim_prompt(tok, in, fim_budget(n_ctx, req.n_predict));
}

bool parse_with_pieces(const json& body) { return get_bool(body, "with_pieces").value_or(false); }

json tokens_with_pieces(const Tokenizer& tok, const std::vector<int32_t>& ids) {
    json out = json::array();
    for (int32_t id : ids) {
        const std::string piece = tok.token_to_piece(id, true);
        json p = json::array();
        if (engine::sanitize_utf8(piece) == piece) {
            p = piece;
        } else {
            for (unsigned char c : piece) p.push_back(int(c));
        }
        out.push_back(json{{"id", id}, {"piece", std::move(p)}});
    }
    return out;
}

}  // namespace vkllm::server
