#include "serving/server/ollama_requests.h"

#include "model/grammar/json_schema.h"
#include "serving/chat_template/chat_prompt.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

namespace vkllm::server::ollama {

using chat_template::json_type_name;

namespace {

constexpr int64_t kI32Max = std::numeric_limits<int32_t>::max();

// --- field readers: 400s naming the field as the client wrote it ("options.top_k") -----------------

[[noreturn]] void wrong(const std::string& name, const char* expected, const json& v) {
    throw invalid_field(name, fmt::format("Invalid '{}': expected {}, but got {}.", name, expected, json_type_name(v)));
}

[[noreturn]] void out_of_range(const std::string& name, const std::string& range, const json& v) {
    throw invalid_field(name, fmt::format("Invalid '{}': expected {}, but got {}.", name, range, v.dump()));
}

const json* given(const json& obj, const char* key) {
    auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
}

int64_t read_int(const json& v, const std::string& name, int64_t lo, int64_t hi) {
    // In integers, not doubles: a 64-bit seed keeps every digit.
    int64_t x = 0;
    if (v.is_number_unsigned())
        x = v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()) ? std::numeric_limits<int64_t>::max()
                                                                              : int64_t(v.get<uint64_t>());
    else if (v.is_number_integer())
        x = v.get<int64_t>();
    else if (v.is_number_float() && std::isfinite(v.get<double>()) && std::trunc(v.get<double>()) == v.get<double>() &&
             std::fabs(v.get<double>()) < 9e18)
        x = int64_t(v.get<double>());  // 5.0 from a client that only has doubles
    else if (v.is_number())
        out_of_range(name, fmt::format("an integer from {} to {}", lo, hi), v);
    else
        wrong(name, "an integer", v);
    if (x < lo || x > hi) out_of_range(name, fmt::format("an integer from {} to {}", lo, hi), v);
    return x;
}

double read_number(const json& v, const std::string& name, double lo, double hi) {
    if (!v.is_number()) wrong(name, "a number", v);
    const double x = v.get<double>();
    if (!std::isfinite(x) || x < lo || x > hi) out_of_range(name, fmt::format("a number from {} to {}", lo, hi), v);
    return x;
}

bool read_bool(const json& v, const std::string& name) {
    if (!v.is_boolean()) wrong(name, "a boolean", v);
    return v.get<bool>();
}

std::string read_string(const json& v, const std::string& name) {
    if (!v.is_string()) wrong(name, "a string", v);
    return v.get<std::string>();
}

// --- options --------------------------------------------------------------------------------------

// Each option Ollama documents, as data: what its value must be and what it does here. `set` null:
// it tunes Ollama's own runtime (GPU layers, threads, memory mapping, batching) and changes nothing
// vkllm computes, so it is checked for its type and ignored.
enum class Kind { Int, Number, Bool, Strings };
using Setter = void (*)(Request&, const json& v, const std::string& name);

struct OptionRule {
    const char* name;
    Kind kind;
    Setter set;
};

// A sampling option vkllm does not have: accepted at the value that turns it off, refused by name otherwise.
template <int kNeutralTimes100>
void neutral_only(Request&, const json& v, const std::string& name) {
    const double neutral = kNeutralTimes100 / 100.0;
    if (v.is_boolean() ? v.get<bool>() != bool(kNeutralTimes100) : v.get<double>() != neutral)
        throw invalid_field(
            name, fmt::format("Invalid '{}': vkllm's sampler has no such step; only {} (off) is "
                              "accepted, but got {}.",
                              name, v.is_boolean() ? (neutral != 0 ? "true" : "false") : fmt::format("{}", neutral),
                              v.dump()));
}

const OptionRule kOptions[] = {
    {"temperature", Kind::Number,
     [](Request& r, const json& v, const std::string& n) {
         r.parsed.engine.sampler.temperature = float(read_number(v, n, 0, 100));
     }},
    {"top_k", Kind::Int,
     [](Request& r, const json& v, const std::string& n) {
         r.parsed.engine.sampler.top_k = int32_t(read_int(v, n, -1, kI32Max));  // <= 0: off, as Ollama
     }},
    {"top_p", Kind::Number,
     [](Request& r, const json& v, const std::string& n) {
         const double p = read_number(v, n, 0, 1);
         r.parsed.engine.sampler.top_p = p <= 0 ? 1.0f : float(p);  // Ollama reads 0 as off
     }},
    {"min_p", Kind::Number,
     [](Request& r, const json& v, const std::string& n) {
         const double p = read_number(v, n, 0, 1);
         if (p >= 1) out_of_range(n, "a number from 0 to below 1", v);
         r.parsed.engine.sampler.min_p = float(p);
     }},
    {"seed", Kind::Int,
     [](Request& r, const json& v, const std::string& n) {
         // Ollama's -1 (any negative) is "random": the server's seed stays.
         if (v.is_number_unsigned()) {  // any 64-bit seed
             r.parsed.engine.sampler.seed = v.get<uint64_t>();
             return;
         }
         const int64_t s = read_int(v, n, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
         if (s >= 0) r.parsed.engine.sampler.seed = uint64_t(s);
     }},
    {"num_predict", Kind::Int,
     [](Request& r, const json& v, const std::string& n) {
         // -1: no limit, -2: until the context is full; both are the engine's "until the end or the
         // context" here. 0 is no limit in Ollama's runner too.
         const int64_t k = read_int(v, n, -2, kI32Max);
         r.parsed.engine.max_tokens = k > 0 ? int32_t(k) : -1;
     }},
    {"stop", Kind::Strings,
     [](Request& r, const json& v, const std::string& n) {
         auto add = [&](const json& s) {
             if (!s.is_string()) wrong(n, "a string or an array of strings", s);
             if (s.get<std::string>().size() > 256)
                 throw invalid_field(n, fmt::format("Invalid '{}': a stop sequence may be at most 256 bytes long.", n));
             if (!s.get<std::string>().empty()) r.parsed.engine.stop.push_back(s.get<std::string>());
         };
         if (!v.is_array()) return add(v);
         if (v.size() > 16)
             throw invalid_field(n, fmt::format("Invalid '{}': at most 16 stop sequences, but got {}.", n, v.size()));
         for (const json& s : v) add(s);
     }},
    {"repeat_penalty", Kind::Number,
     [](Request& r, const json& v, const std::string& n) {
         const double p = read_number(v, n, 0, 100);
         if (p <= 0) out_of_range(n, "a number above 0", v);
         r.parsed.engine.sampler.repeat_penalty = float(p);
     }},
    {"repeat_last_n", Kind::Int,
     [](Request& r, const json& v, const std::string& n) {
         const int64_t k = read_int(v, n, -1, kI32Max);
         r.parsed.engine.sampler.repeat_last_n = k < 0 ? int32_t(kI32Max) : int32_t(k);  // -1: the whole context
     }},
    {"presence_penalty", Kind::Number,
     [](Request& r, const json& v, const std::string& n) {
         r.parsed.engine.sampler.presence_penalty = float(read_number(v, n, -2, 2));
     }},
    {"frequency_penalty", Kind::Number,
     [](Request& r, const json& v, const std::string& n) {
         r.parsed.engine.sampler.frequency_penalty = float(read_number(v, n, -2, 2));
     }},
    {"num_ctx", Kind::Int,
     [](Request& r, const json& v, const std::string& n) { r.num_ctx = uint32_t(read_int(v, n, 1, kI32Max)); }},
    // Sampling steps vkllm does not have: only their "off" values.
    {"typical_p", Kind::Number, neutral_only<100>},
    {"tfs_z", Kind::Number, neutral_only<100>},
    {"mirostat", Kind::Int, neutral_only<0>},
    {"penalize_newline", Kind::Bool, nullptr},  // checked with the penalties below
    // Mirostat's parameters matter only with mirostat on, which is refused.
    {"mirostat_tau", Kind::Number, nullptr},
    {"mirostat_eta", Kind::Number, nullptr},
    // Ollama's runtime: how it loads and runs the model, not what the model computes.
    {"num_keep", Kind::Int, nullptr},
    {"num_batch", Kind::Int, nullptr},
    {"num_gpu", Kind::Int, nullptr},
    {"main_gpu", Kind::Int, nullptr},
    {"num_thread", Kind::Int, nullptr},
    {"numa", Kind::Bool, nullptr},
    {"low_vram", Kind::Bool, nullptr},
    {"f16_kv", Kind::Bool, nullptr},
    {"logits_all", Kind::Bool, nullptr},
    {"vocab_only", Kind::Bool, nullptr},
    {"use_mmap", Kind::Bool, nullptr},
    {"use_mlock", Kind::Bool, nullptr},
    {"embedding_only", Kind::Bool, nullptr},
    {"num_gqa", Kind::Int, nullptr},
    {"rope_frequency_base", Kind::Number, nullptr},
    {"rope_frequency_scale", Kind::Number, nullptr},
};

void check_kind(const OptionRule& rule, const json& v, const std::string& name) {
    switch (rule.kind) {
        case Kind::Int:  // the type only: each option's own rule checks its range
            if (!v.is_number_unsigned())
                read_int(v, name, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
            break;
        case Kind::Number:
            if (!v.is_number()) wrong(name, "a number", v);
            break;
        case Kind::Bool: read_bool(v, name); break;
        case Kind::Strings:
            if (!v.is_string() && !v.is_array()) wrong(name, "a string or an array of strings", v);
            break;
    }
}

// --- the fields both generating routes share ------------------------------------------------------

void parse_format(const json& body, ParsedRequest& r) {
    const json* f = given(body, "format");
    if (!f) return;
    try {
        if (f->is_string()) {
            const std::string s = f->get<std::string>();
            if (s.empty()) return;
            if (s != "json")
                throw invalid_field(
                    "format", fmt::format("Invalid 'format': '{}'. Expected \"json\" or a JSON schema object.", s));
            r.engine.grammar =
                std::make_shared<const grammar::Grammar>(grammar::Grammar::parse(grammar::json_object_gbnf()));
        } else if (f->is_object()) {
            r.engine.grammar = std::make_shared<const grammar::Grammar>(grammar::json_schema_grammar(f->dump()));
        } else {
            wrong("format", "\"json\" or a JSON schema object", *f);
        }
        grammar::Matcher check(*r.engine.grammar);  // a grammar too ambiguous to even start
    } catch (const grammar::SchemaError& e) {
        throw invalid_field("format", fmt::format("Invalid 'format': {}", e.what()));
    } catch (const grammar::GrammarError& e) {
        throw invalid_field("format", fmt::format("Invalid 'format': {}", e.what()));
    }
}

void parse_think(const json& body, Request& r) {
    const json* t = given(body, "think");
    if (!t) return;
    if (t->is_boolean()) {
        r.think = t->get<bool>() ? Think::On : Think::Off;
    } else if (t->is_string()) {
        const std::string level = t->get<std::string>();
        if (level != "high" && level != "medium" && level != "low")
            throw invalid_field("think", fmt::format("Invalid 'think': '{}'. Expected true, false, \"high\", "
                                                     "\"medium\" or \"low\".",
                                                     level));
        r.think = Think::On;
        r.think_level = level;
    } else {
        wrong("think", "a boolean or \"high\", \"medium\", \"low\"", *t);
    }
}

void parse_common(const json& body, uint64_t seed, Request& r) {
    const json* model = given(body, "model");
    if (model && !model->is_string()) wrong("model", "a string", *model);
    if (!model || model->get<std::string>().empty()) throw model_required();
    r.model = model->get<std::string>();
    if (const json* s = given(body, "stream")) r.stream = read_bool(*s, "stream");
    // keep_alive: how long Ollama keeps a model loaded after the request. vkllm serves one model
    // for its whole life: checked for its type ("5m", 300, -1) and otherwise accepted.
    if (const json* k = given(body, "keep_alive"); k && !k->is_string() && !k->is_number())
        wrong("keep_alive", "a duration string or a number of seconds", *k);
    r.parsed.engine.sampler.seed = seed;
    parse_options(body, r);
    parse_format(body, r.parsed);
    parse_think(body, r);
    if (const json* lp = given(body, "logprobs")) r.parsed.logprobs = read_bool(*lp, "logprobs");
    if (const json* tl = given(body, "top_logprobs")) {
        if (!tl->is_number() || tl->get<double>() < 0 || tl->get<double>() > 20)
            throw invalid_field("top_logprobs", "top_logprobs must be between 0 and 20");
        r.parsed.top_logprobs = uint32_t(read_int(*tl, "top_logprobs", 0, 20));
    }
    r.parsed.engine.logprobs = r.parsed.logprobs;
    r.parsed.engine.top_logprobs = r.parsed.logprobs ? r.parsed.top_logprobs : 0;
    r.parsed.stream = r.stream;
    r.parsed.model = r.model;
    // The engine cannot hold a grammar and stop strings at once: a stop could cut the structured text.
    if (r.parsed.engine.grammar && !r.parsed.engine.stop.empty())
        throw invalid_field("options.stop",
                            "Invalid 'options.stop': stop sequences cannot be combined with "
                            "'format' (they could cut the structured output).");
}

// OpenAI's parse of the converted messages, the images' fields then named as Ollama's request names them.
json parse_messages_with_images(const json& messages, const std::vector<std::string>& image_params,
                                std::vector<chat_template::ImageRef>& images) {
    json out = server::parse_messages(messages, &images);
    for (size_t k = 0; k < images.size() && k < image_params.size(); ++k) images[k].param = image_params[k];
    return out;
}

// A message's `images` (base64 strings; `name` is the field) as OpenAI's content parts before its
// text, so that they take the same way into the prompt: each a data URL (its type is read from the
// bytes), its field appended to `params`.
void images_as_parts(json& m, const json& images, const std::string& name, std::vector<std::string>& params) {
    if (!images.is_array()) wrong(name, "an array of base64 strings", images);
    if (images.empty()) return;
    json parts = json::array();
    for (size_t k = 0; k < images.size(); ++k) {
        const std::string param = fmt::format("{}[{}]", name, k);
        const std::string b64 = read_string(images[k], param);
        parts.push_back(json{{"type", "image_url"}, {"image_url", {{"url", "data:image/*;base64," + b64}}}});
        params.push_back(param);
    }
    const json* content = given(m, "content");
    if (content && content->is_string() && !content->get_ref<const std::string&>().empty())
        parts.push_back(json{{"type", "text"}, {"text", *content}});
    m["content"] = std::move(parts);
}

// Ollama's chat messages as the chat template reads them (OpenAI's shape): `images` as image parts
// before the text (their fields in `image_params`), `thinking` (a reasoning block the client sends
// back) as reasoning_content, a tool result's `tool_name` as `name`; tool_calls' arguments are
// objects already, as templates take them.
json chat_messages(const json& messages, std::vector<std::string>& image_params) {
    if (!messages.is_array()) wrong("messages", "an array", messages);
    json out = json::array();
    for (size_t i = 0; i < messages.size(); ++i) {
        json m = messages[i];
        const std::string at = fmt::format("messages[{}]", i);
        if (!m.is_object()) wrong(at, "an object", m);
        if (const json* img = given(m, "images")) {
            const json images = *img;
            m.erase("images");
            images_as_parts(m, images, at + ".images", image_params);
        }
        if (const json* th = given(m, "thinking")) {
            const std::string text = read_string(*th, at + ".thinking");
            if (!text.empty() && !m.contains("reasoning_content")) m["reasoning_content"] = text;
            m.erase("thinking");
        }
        if (const json* tn = given(m, "tool_name")) {
            const std::string name = read_string(*tn, at + ".tool_name");
            if (!m.contains("name")) m["name"] = name;
        }
        out.push_back(std::move(m));
    }
    return out;
}

}  // namespace

void check_images(const Request& r, bool takes_images) {
    if (takes_images || r.parsed.images.empty()) return;
    const std::string& where = r.parsed.images[0].param;
    throw invalid_field(where, fmt::format("Invalid '{}': this model takes no images: it is served without a vision "
                                           "encoder (--mmproj).",
                                           where));
}

ApiError model_required() { return ApiError(400, "model is required", "invalid_request_error", "model"); }

void parse_options(const json& body, Request& r) {
    const json* opts = given(body, "options");
    if (!opts) return;
    if (!opts->is_object()) wrong("options", "an object", *opts);
    for (const auto& [key, value] : opts->items()) {
        const std::string name = "options." + key;
        const OptionRule* rule = nullptr;
        for (const OptionRule& o : kOptions)
            if (key == o.name) rule = &o;
        if (!rule)
            throw invalid_field(name, fmt::format("Invalid 'options': unknown option '{}'. docs/serving.md lists the "
                                                  "options vkllm honours and the ones it accepts and ignores.",
                                                  key));
        if (value.is_null()) continue;
        check_kind(*rule, value, name);
        if (rule->set) rule->set(r, value, name);
    }
    // penalize_newline false exempts the newline token from the penalties, which vkllm's sampler
    // applies to every token alike: refused only where a penalty is on (elsewhere it changes nothing).
    const SamplerParams& s = r.parsed.engine.sampler;
    if (const json* pn = given(*opts, "penalize_newline"); pn && !pn->get<bool>() && s.penalized())
        throw invalid_field("options.penalize_newline",
                            "Invalid 'options.penalize_newline': vkllm penalizes the newline token like every other "
                            "token; false cannot be honoured while a penalty is set.");
}

Request parse_chat(const json& body, uint64_t seed) {
    Request r;
    r.route = Route::Chat;
    r.parsed.endpoint = Endpoint::Chat;
    parse_common(body, seed, r);
    const json* msgs = given(body, "messages");
    std::vector<std::string> image_params;
    json converted = msgs ? chat_messages(*msgs, image_params) : json::array();
    if (converted.empty()) {
        r.load_only = true;
        return r;
    }
    r.parsed.messages = parse_messages_with_images(converted, image_params, r.parsed.images);
    if (const json* tools = given(body, "tools")) {
        if (!tools->is_array()) wrong("tools", "an array", *tools);
        try {
            answer::check_tools(*tools);
        } catch (const answer::ToolError& e) {
            throw invalid_field(e.param(), e.what());
        }
        if (!tools->empty()) r.parsed.tools = *tools;
    }
    return r;
}

Request parse_generate(const json& body, uint64_t seed) {
    Request r;
    r.route = Route::Generate;
    parse_common(body, seed, r);
    const std::string prompt = given(body, "prompt") ? read_string(body["prompt"], "prompt") : "";
    const std::string system = given(body, "system") ? read_string(body["system"], "system") : "";
    if (given(body, "template") && !read_string(body["template"], "template").empty())
        throw invalid_field("template",
                            "Invalid 'template': vkllm renders the model's own chat template (Jinja) and "
                            "cannot take Ollama's Go templates; leave 'template' out, or send 'raw': true "
                            "with the prompt already formatted.");
    const std::string suffix = given(body, "suffix") ? read_string(body["suffix"], "suffix") : "";
    json user = json{{"role", "user"}, {"content", prompt}};
    std::vector<std::string> image_params;
    if (const json* img = given(body, "images")) images_as_parts(user, *img, "images", image_params);
    if (const json* raw = given(body, "raw")) r.raw = read_bool(*raw, "raw");
    if (const json* ctx = given(body, "context")) {
        if (!ctx->is_array()) wrong("context", "an array of token ids", *ctx);
        for (size_t i = 0; i < ctx->size(); ++i)
            r.context.push_back(int32_t(read_int((*ctx)[i], fmt::format("context[{}]", i), 0, kI32Max)));
    }
    if (r.raw && (!system.empty() || !r.context.empty()))
        throw invalid_field("raw", "raw mode does not support template, system, or context");
    if (prompt.empty() && image_params.empty()) {
        r.load_only = true;
        return r;
    }
    // The images go where the chat template puts the prompt: a raw or fill-in-the-middle prompt,
    // or one continuing a context, has no place for them.
    if (!image_params.empty() && (r.raw || !suffix.empty() || !r.context.empty()))
        throw invalid_field("images", fmt::format("Invalid 'images': images go into the chat template's prompt, which "
                                                  "a generate with '{}' does not use; leave it out.",
                                                  r.raw             ? "raw"
                                                  : !suffix.empty() ? "suffix"
                                                                    : "context"));
    if (!suffix.empty()) {
        // Fill in the middle: the prompt is the code before the cursor, laid out with the
        // vocabulary's FIM tokens as /infill does (a model without them: a 400 naming suffix).
        if (!system.empty() || !r.context.empty())
            throw invalid_field("suffix", "Invalid 'suffix': fill-in-the-middle does not take 'system' or 'context'.");
        r.parsed.endpoint = Endpoint::Completion;
        r.parsed.prompts = {PromptInput{prompt, {}, false}};
        r.parsed.suffix = suffix;
        return r;
    }
    if (r.raw) {
        r.parsed.endpoint = Endpoint::Completion;
        r.parsed.prompts = {PromptInput{prompt, {}, false}};
        return r;
    }
    // A templated generate is a chat of one turn (and a system message): the reply is what the model
    // answers it, its reasoning split off as in a chat.
    r.parsed.endpoint = Endpoint::Chat;
    json messages = json::array();
    if (!system.empty()) messages.push_back(json{{"role", "system"}, {"content", system}});
    messages.push_back(std::move(user));
    r.parsed.messages = parse_messages_with_images(messages, image_params, r.parsed.images);
    return r;
}

void apply_think(Request& r, bool thinks, bool harmony) {
    ParsedRequest& p = r.parsed;
    if (p.endpoint != Endpoint::Chat) {  // raw or suffix: the text as the model writes it
        if (r.think != Think::Default)
            throw invalid_field("think",
                                "Invalid 'think': a raw or fill-in-the-middle generate renders no chat "
                                "template, so reasoning cannot be turned on or off; leave 'think' out.");
        p.reasoning_format = "none";
        return;
    }
    if (r.think == Think::On && !thinks)
        throw ApiError(400, fmt::format("\"{}\" does not support thinking", r.model), "invalid_request_error", "think");
    if (r.think == Think::Off && harmony)
        throw invalid_field("think", fmt::format("\"{}\" cannot turn its reasoning off (gpt-oss always reasons); "
                                                 "send \"think\": \"low\" for the least of it.",
                                                 r.model));
    if (r.think == Think::Default) return;
    // The template's switch (enable_thinking, thinking, gpt-oss' reasoning_effort) is set where the
    // server prepares every chat request (request_plan.h).
    p.reasoning = r.think == Think::On ? chat_template::Reasoning::On : chat_template::Reasoning::Off;
    if (!r.think_level.empty()) p.reasoning_effort = r.think_level;
    if (r.think == Think::Off) p.reasoning_format = "none";  // what the model writes anyway stays in the content
}

uint32_t context_limit(const Request& r, uint32_t server_ctx) {
    if (r.num_ctx == 0) return server_ctx;
    if (r.num_ctx > server_ctx)
        throw invalid_field("options.num_ctx",
                            fmt::format("Invalid 'options.num_ctx': {} is larger than this server's context of {} "
                                        "tokens per request; ask for at most {}, or start vkllm serve with a larger "
                                        "--ctx.",
                                        r.num_ctx, server_ctx, server_ctx));
    return r.num_ctx;
}

EmbedRequest parse_embed(const json& body) {
    EmbedRequest e;
    Request checked;  // the options are checked like a generating request's; none applies to embeddings
    const json* model = given(body, "model");
    if (model && !model->is_string()) wrong("model", "a string", *model);
    if (!model || model->get<std::string>().empty()) throw model_required();
    e.model = model->get<std::string>();
    parse_options(body, checked);
    if (const json* k = given(body, "keep_alive"); k && !k->is_string() && !k->is_number())
        wrong("keep_alive", "a duration string or a number of seconds", *k);
    if (const json* in = given(body, "input")) {
        if (in->is_string()) {
            if (!in->get<std::string>().empty()) e.inputs.push_back(in->get<std::string>());
        } else if (in->is_array()) {
            for (size_t i = 0; i < in->size(); ++i)
                e.inputs.push_back(read_string((*in)[i], fmt::format("input[{}]", i)));
        } else {
            wrong("input", "a string or an array of strings", *in);
        }
    }
    if (e.inputs.size() > 2048)
        throw invalid_field("input", fmt::format("Invalid 'input': at most 2048 inputs, but got {}.", e.inputs.size()));
    if (const json* t = given(body, "truncate")) e.truncate = read_bool(*t, "truncate");
    if (const json* d = given(body, "dimensions")) e.dimensions = read_int(*d, "dimensions", 1, kI32Max);
    return e;
}

EmbedRequest parse_embeddings(const json& body) {
    EmbedRequest e;
    Request checked;
    const json* model = given(body, "model");
    if (model && !model->is_string()) wrong("model", "a string", *model);
    if (!model || model->get<std::string>().empty()) throw model_required();
    e.model = model->get<std::string>();
    parse_options(body, checked);
    if (const json* p = given(body, "prompt")) {
        const std::string prompt = read_string(*p, "prompt");
        if (!prompt.empty()) e.inputs.push_back(prompt);
    }
    return e;
}

void check_dimensions(const EmbedRequest& r, uint32_t width) {
    if (r.dimensions != 0 && r.dimensions != int64_t(width))
        throw invalid_field("dimensions",
                            fmt::format("Invalid 'dimensions': this model's vectors have {} dimensions and vkllm does "
                                        "not shorten them (only a model trained for it keeps its meaning when "
                                        "truncated); leave 'dimensions' out or send {}.",
                                        width, width));
}

}  // namespace vkllm::server::ollama
