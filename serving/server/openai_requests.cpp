#include "serving/server/openai_requests.h"

#include "model/grammar/json_schema.h"
#include "serving/chat_template/chat_prompt.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace vkllm::server {

using chat_template::json_type_name;

namespace detail {

[[noreturn]] void wrong_type(const std::string& name, const char* expected, const json& v) {
    throw invalid_field(name, fmt::format("Invalid type for '{}': expected {}, but got {} instead.", name, expected,
                                          json_type_name(v)));
}

const json* field(const json& body, const char* name) {
    auto it = body.find(name);
    if (it == body.end() || it->is_null()) return nullptr;
    return &*it;
}

std::optional<double> get_number(const json& body, const char* name, double lo, double hi) {
    const json* v = field(body, name);
    if (!v) return std::nullopt;
    if (!v->is_number()) wrong_type(name, "a number", *v);
    double x = v->get<double>();
    if (!std::isfinite(x) || x < lo || x > hi)
        throw invalid_field(name, fmt::format("Invalid '{}': expected a value between {} and {}, but got {} instead.",
                                              name, lo, hi, v->dump()));
    return x;
}

std::optional<int64_t> get_integer(const json& body, const char* name, int64_t lo, int64_t hi) {
    const json* v = field(body, name);
    if (!v) return std::nullopt;
    int64_t x = 0;
    if (v->is_number_integer()) {
        if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
            x = std::numeric_limits<int64_t>::max();
        else
            x = v->get<int64_t>();
    } else if (v->is_number_float() && std::isfinite(v->get<double>()) &&
               std::trunc(v->get<double>()) == v->get<double>() && std::fabs(v->get<double>()) < 9e18) {
        x = int64_t(v->get<double>());  // 5.0 from a client that only has doubles
    } else {
        wrong_type(name, "an integer", *v);
    }
    if (x < lo || x > hi)
        throw invalid_field(
            name, fmt::format("Invalid '{}': expected an integer between {} and {}, but got {} instead.", name, lo, hi,
                              v->dump()));
    return x;
}

std::optional<bool> get_bool(const json& body, const char* name) {
    const json* v = field(body, name);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) wrong_type(name, "a boolean", *v);
    return v->get<bool>();
}

std::optional<std::string> get_string(const json& body, const char* name) {
    const json* v = field(body, name);
    if (!v) return std::nullopt;
    if (!v->is_string()) wrong_type(name, "a string", *v);
    return v->get<std::string>();
}

}  // namespace detail

using detail::field;
using detail::get_bool;
using detail::get_integer;
using detail::get_number;
using detail::get_string;
using detail::wrong_type;

namespace detail {

void parse_structure(const json& body, engine::CompletionRequest& e) {
    std::vector<std::string> given;
    for (const char* k : {"response_format", "grammar", "json_schema"})
        if (field(body, k)) given.push_back(k);
    if (given.empty()) return;
    if (given.size() > 1)
        throw invalid_field(given[1], fmt::format("Invalid '{}': give at most one of 'response_format', 'grammar' and "
                                                  "'json_schema', got '{}' and '{}'.",
                                                  given[1], given[0], given[1]));
    const std::string& key = given[0];
    const json& v = *field(body, key.c_str());
    std::string gbnf;  // grammar and json_object; a schema sets e.grammar itself
    std::string param = key;
    auto compile_schema = [&](const json& schema, const std::string& where) {
        if (!schema.is_object() && !schema.is_boolean()) wrong_type(where, "an object", schema);
        try {
            e.grammar = std::make_shared<const grammar::Grammar>(grammar::json_schema_grammar(schema.dump()));
        } catch (const grammar::SchemaError& err) {
            throw invalid_field(where, fmt::format("Invalid '{}': {}", where, err.what()));
        }
        param = where;
    };
    if (key == "grammar") {
        if (!v.is_string()) wrong_type("grammar", "a string (GBNF)", v);
        gbnf = v.get<std::string>();
    } else if (key == "json_schema") {
        compile_schema(v, "json_schema");
    } else {
        if (!v.is_object()) wrong_type("response_format", "an object", v);
        const json* type = field(v, "type");
        if (!type || !type->is_string())
            throw invalid_field("response_format.type", "Missing required parameter: 'response_format.type'.");
        const std::string t = type->get<std::string>();
        if (t == "text") return;
        if (t == "json_object") {
            gbnf = grammar::json_object_gbnf();
        } else if (t == "json_schema") {
            if (const json* js = field(v, "json_schema")) {
                if (!js->is_object()) wrong_type("response_format.json_schema", "an object", *js);
                if (const json* name = field(*js, "name"); name && !name->is_string())
                    wrong_type("response_format.json_schema.name", "a string", *name);
                if (const json* strict = field(*js, "strict"); strict && !strict->is_boolean())
                    wrong_type("response_format.json_schema.strict", "a boolean", *strict);
                const json* schema = field(*js, "schema");
                // OpenAI: a json_schema without a schema allows any JSON value.
                compile_schema(schema ? *schema : json::object(), "response_format.json_schema.schema");
            } else if (const json* schema = field(v, "schema")) {  // the shape some clients send
                compile_schema(*schema, "response_format.schema");
            } else {
                throw invalid_field("response_format.json_schema",
                                    "Missing required parameter: 'response_format.json_schema'.");
            }
        } else {
            throw invalid_field("response_format.type",
                                fmt::format("Invalid 'response_format.type': '{}'. Supported: 'text', "
                                            "'json_object', 'json_schema'.",
                                            t));
        }
    }
    try {
        if (!e.grammar) e.grammar = std::make_shared<const grammar::Grammar>(grammar::Grammar::parse(gbnf));
        grammar::Matcher check(*e.grammar);  // a grammar too ambiguous to even start
    } catch (const grammar::GrammarError& err) {
        throw invalid_field(param, fmt::format("Invalid '{}': {}", param, err.what()));
    }
}

}  // namespace detail

namespace {

// The fields both endpoints share: sampling, penalties, stopping, streaming.
void parse_common(const json& body, uint64_t seed, ParsedRequest& r) {
    engine::CompletionRequest& e = r.engine;
    r.model = get_string(body, "model").value_or("");
    get_string(body, "user");  // checked for its type, otherwise unused

    if (auto n = get_integer(body, "n", 1, kMaxChoices)) r.n = uint32_t(*n);

    r.stream = get_bool(body, "stream").value_or(false);
    if (const json* so = field(body, "stream_options")) {
        if (!r.stream)
            throw invalid_field("stream_options",
                                "The 'stream_options' parameter is only allowed when 'stream' is enabled.");
        if (!so->is_object()) wrong_type("stream_options", "an object", *so);
        if (const json* iu = field(*so, "include_usage")) {
            if (!iu->is_boolean()) wrong_type("stream_options.include_usage", "a boolean", *iu);
            r.include_usage = iu->get<bool>();
        }
    }

    // max_completion_tokens is the newer name of max_tokens; when both are given it wins.
    constexpr int64_t kMaxTokens = std::numeric_limits<int32_t>::max();
    std::optional<int64_t> max_tokens = get_integer(body, "max_tokens", 1, kMaxTokens);
    if (auto mct = get_integer(body, "max_completion_tokens", 1, kMaxTokens)) max_tokens = mct;
    if (max_tokens) e.max_tokens = int32_t(*max_tokens);

    SamplerParams& s = e.sampler;
    if (auto v = get_number(body, "temperature", 0, 2)) s.temperature = float(*v);
    if (auto v = get_number(body, "top_p", 0, 1)) {
        if (*v == 0)
            throw invalid_field("top_p", "Invalid 'top_p': expected a value above 0 and at most 1, but got 0 instead.");
        s.top_p = float(*v);
    }
    if (auto v = get_integer(body, "top_k", 0, std::numeric_limits<int32_t>::max())) s.top_k = int32_t(*v);
    if (auto v = get_number(body, "min_p", 0, 1)) {
        if (*v >= 1)
            throw invalid_field("min_p", "Invalid 'min_p': expected a value from 0 to below 1, but got 1 instead.");
        s.min_p = float(*v);
    }
    if (auto v = get_number(body, "repeat_penalty", 0, 100)) {
        if (*v <= 0)
            throw invalid_field("repeat_penalty",
                                "Invalid 'repeat_penalty': expected a value above 0, but got 0 instead.");
        s.repeat_penalty = float(*v);
    }
    if (auto v = get_integer(body, "repeat_last_n", 0, std::numeric_limits<int32_t>::max()))
        s.repeat_last_n = int32_t(*v);
    s.seed = seed;
    if (auto v = get_integer(body, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()))
        s.seed = uint64_t(*v);
    if (auto v = get_number(body, "presence_penalty", -2, 2)) s.presence_penalty = float(*v);
    if (auto v = get_number(body, "frequency_penalty", -2, 2)) s.frequency_penalty = float(*v);
    if (const json* lb = field(body, "logit_bias")) {
        if (!lb->is_object()) wrong_type("logit_bias", "an object of token ids to numbers", *lb);
        for (const auto& [key, bias] : lb->items()) {
            // Token ids as decimal strings (JSON object keys), biases in OpenAI's -100..100.
            const bool digits = !key.empty() && key.size() <= 9 &&
                                std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
            if (!digits)
                throw invalid_field("logit_bias", fmt::format("Invalid 'logit_bias': '{}' is not a token id.", key));
            if (!bias.is_number() || !std::isfinite(bias.get<double>()) || std::fabs(bias.get<double>()) > 100)
                throw invalid_field("logit_bias",
                                    fmt::format("Invalid 'logit_bias[{}]': expected a number from -100 to 100, "
                                                "got {}.",
                                                key, bias.dump()));
            s.logit_bias.emplace_back(int32_t(std::stol(key)), float(bias.get<double>()));
        }
    }
    e.ignore_eos = get_bool(body, "ignore_eos").value_or(false);

    if (const json* stop = field(body, "stop")) {
        auto add = [&](const json& x) {
            if (!x.is_string()) wrong_type("stop", "a string or an array of strings", x);
            // The engine looks for every stop string's prefixes after each token: keep them short.
            if (x.get<std::string>().size() > 256)
                throw invalid_field("stop", "Invalid 'stop': a stop sequence may be at most 256 bytes long.");
            if (!x.get<std::string>().empty()) e.stop.push_back(x.get<std::string>());  // "" could never match
        };
        if (stop->is_array()) {
            if (stop->size() > 4)
                throw invalid_field(
                    "stop",
                    fmt::format("Invalid 'stop': expected at most 4 stop sequences, but got {}.", stop->size()));
            for (const json& x : *stop) add(x);
        } else {
            add(*stop);
        }
    }
    detail::parse_structure(body, r.engine);
    // A stop string could cut the structured text short: refused rather than half-honoured.
    if (e.grammar && !e.stop.empty())
        throw invalid_field("stop",
                            "Invalid 'stop': stop sequences cannot be combined with 'response_format', 'grammar' "
                            "or 'json_schema' (they could cut the structured output).");
}

}  // namespace

// --- errors ---------------------------------------------------------------------------------------

ApiError::ApiError(int status, const std::string& message, std::string type, std::string param, std::string code)
    : std::runtime_error(message),
      status_(status),
      type_(std::move(type)),
      param_(std::move(param)),
      code_(std::move(code)) {}

ApiError invalid_field(const std::string& param, const std::string& message) {
    return ApiError(400, message, "invalid_request_error", param);
}

json parse_body(const std::string& body) {
    // Nesting is bounded while parsing: copying or rendering a value nested 100,000 deep would
    // overflow the stack (no real request nests more than a few levels).
    static constexpr int kMaxDepth = 64;
    const json::parser_callback_t depth_guard = [](int depth, json::parse_event_t, json&) {
        if (depth > kMaxDepth)
            throw ApiError(400, fmt::format("The JSON body is nested more than {} levels deep.", kMaxDepth));
        return true;
    };
    json j = json::parse(body, depth_guard, false);
    if (j.is_discarded())
        throw ApiError(400,
                       "We could not parse the JSON body of your request. (The body must be a JSON object; see "
                       "https://platform.openai.com/docs/api-reference.)");
    if (!j.is_object())
        throw ApiError(400, fmt::format("The JSON body must be an object, but got {}.", json_type_name(j)));
    return j;
}

// --- requests ---------------------------------------------------------------------------------

json parse_messages(const json& messages, std::vector<chat_template::ImageRef>* images) {
    try {
        return chat_template::parse_messages(messages, images);
    } catch (const chat_template::MessageError& e) {
        throw invalid_field(e.param(), e.what());
    }
}

namespace {

json parse_tools(const json& body) {
    const json* tools = field(body, "tools");
    if (!tools) return nullptr;
    if (!tools->is_array()) wrong_type("tools", "an array", *tools);
    try {
        answer::check_tools(*tools);
    } catch (const answer::ToolError& e) {
        throw invalid_field(e.param(), e.what());
    }
    return tools->empty() ? json(nullptr) : *tools;  // [] is no tools, as templates read `tools is defined`
}

json parse_template_kwargs(const json& body) {
    const json* kw = field(body, "chat_template_kwargs");
    if (!kw) return nullptr;
    if (!kw->is_object()) wrong_type("chat_template_kwargs", "an object", *kw);
    return *kw;
}

}  // namespace

ParsedRequest parse_chat_request(const json& body, uint64_t seed, bool takes_images) {
    ParsedRequest r;
    r.endpoint = Endpoint::Chat;
    auto m = body.find("messages");
    if (m == body.end()) throw invalid_field("messages", "Missing required parameter: 'messages'.");
    r.messages = server::parse_messages(*m, takes_images ? &r.images : nullptr);
    r.tools = parse_tools(body);
    r.template_kwargs = parse_template_kwargs(body);
    if (const json* tc = field(body, "tool_choice")) {
        if (tc->is_string()) {
            const std::string c = tc->get<std::string>();
            if (c == "required")
                r.tool_choice = ToolChoice::Required;
            else if (c == "none")
                r.tool_choice = ToolChoice::None;
            else if (c != "auto")
                throw invalid_field("tool_choice", fmt::format("Invalid 'tool_choice': '{}'. Expected 'none', 'auto', "
                                                               "'required' or a function.",
                                                               c));
        } else if (tc->is_object()) {
            const json* type = field(*tc, "type");
            if (!type || *type != "function")
                throw invalid_field("tool_choice.type", "Invalid 'tool_choice.type': expected 'function'.");
            const json* fn = field(*tc, "function");
            if (fn && !fn->is_object()) wrong_type("tool_choice.function", "an object", *fn);
            const json* name = fn ? field(*fn, "name") : nullptr;
            if (!name)
                throw invalid_field("tool_choice.function.name",
                                    "Missing required parameter: 'tool_choice.function.name'.");
            if (!name->is_string()) wrong_type("tool_choice.function.name", "a string", *name);
            r.tool_choice = ToolChoice::Named;
            r.tool_name = name->get<std::string>();
        } else {
            wrong_type("tool_choice", "a string or an object", *tc);
        }
    }
    r.parallel_tool_calls = get_bool(body, "parallel_tool_calls").value_or(true);
    if (auto re = get_string(body, "reasoning_effort")) {
        if (*re != "none" && *re != "minimal" && *re != "low" && *re != "medium" && *re != "high")
            throw invalid_field("reasoning_effort",
                                fmt::format("Invalid 'reasoning_effort': '{}'. Expected 'none', 'minimal', 'low', "
                                            "'medium' or 'high'.",
                                            *re));
        r.reasoning_effort = *re;
    }
    if (auto rf = get_string(body, "reasoning_format")) {
        if (*rf != "auto" && *rf != "none" && *rf != "deepseek")
            throw invalid_field("reasoning_format",
                                fmt::format("Invalid 'reasoning_format': '{}'. Expected 'auto', 'deepseek' "
                                            "or 'none'.",
                                            *rf));
        r.reasoning_format = *rf;
    }
    parse_common(body, seed, r);
    r.logprobs = get_bool(body, "logprobs").value_or(false);
    if (auto tl = get_integer(body, "top_logprobs", 0, 20)) {
        if (!r.logprobs && *tl > 0)
            throw invalid_field("top_logprobs",
                                "Invalid 'top_logprobs': 'logprobs' must be set to true when "
                                "'top_logprobs' is used.");
        r.top_logprobs = uint32_t(*tl);
    }
    r.engine.logprobs = r.logprobs;
    r.engine.top_logprobs = r.top_logprobs;
    return r;
}

namespace {

// A token id as the client wrote it: in range, or a 400 naming `param`.
int32_t token_id(const json& x, const std::string& param) {
    const int64_t id = x.is_number_unsigned() && x.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())
                           ? -1
                           : x.get<int64_t>();
    if (id < 0 || id > std::numeric_limits<int32_t>::max())
        throw invalid_field(param, fmt::format("Invalid '{}': token id {} is out of range.", param, x.dump()));
    return int32_t(id);
}

bool all_integers(const json& a) {
    return std::all_of(a.begin(), a.end(), [](const json& x) { return x.is_number_integer(); });
}

}  // namespace

std::vector<PromptInput> parse_prompts(const json& p) {
    auto tokens_of = [](const json& a, const std::string& param) {
        PromptInput in;
        in.is_tokens = true;
        for (const json& x : a) in.tokens.push_back(token_id(x, param));
        return in;
    };
    std::vector<PromptInput> out;
    if (p.is_string()) {
        out.push_back(PromptInput{p.get<std::string>(), {}, false});
    } else if (p.is_array() && !p.empty() && all_integers(p)) {
        out.push_back(tokens_of(p, "prompt"));  // one prompt as token ids
    } else if (p.is_array() && !p.empty()) {
        // A batch: strings, or arrays of token ids, one choice (or n) each.
        if (p.size() > kMaxPrompts)
            throw invalid_field("prompt", fmt::format("Invalid 'prompt': {} prompts in one request; this server takes "
                                                      "at most {}.",
                                                      p.size(), kMaxPrompts));
        for (size_t i = 0; i < p.size(); ++i) {
            const json& x = p[i];
            const std::string param = fmt::format("prompt[{}]", i);
            if (x.is_string())
                out.push_back(PromptInput{x.get<std::string>(), {}, false});
            else if (x.is_array() && !x.empty() && all_integers(x))
                out.push_back(tokens_of(x, param));
            else
                throw invalid_field(param,
                                    fmt::format("Invalid '{}': expected a string or a non-empty array of token "
                                                "ids, but got {}.",
                                                param, x.is_array() ? "an array of other values" : x.type_name()));
        }
    } else if (p.is_array()) {
        throw invalid_field("prompt",
                            "Invalid 'prompt': empty array. Expected a string, an array of token ids, or an "
                            "array of prompts.");
    } else {
        wrong_type("prompt", "a string or an array", p);
    }
    return out;
}

ParsedRequest parse_completion_request(const json& body, uint64_t seed) {
    ParsedRequest r;
    r.endpoint = Endpoint::Completion;
    auto p = body.find("prompt");
    if (p == body.end() || p->is_null()) throw invalid_field("prompt", "Missing required parameter: 'prompt'.");
    r.prompts = parse_prompts(*p);
    parse_common(body, seed, r);
    // The legacy completions API stops after 16 tokens unless told otherwise.
    if (r.engine.max_tokens < 0) r.engine.max_tokens = 16;
    if (r.prompts.size() * r.n > kMaxPrompts)
        throw invalid_field("n",
                            fmt::format("Invalid 'n': {} prompts with n = {} make {} choices; this server makes at "
                                        "most {} per request.",
                                        r.prompts.size(), r.n, r.prompts.size() * r.n, kMaxPrompts));
    if (auto lp = get_integer(body, "logprobs", 0, 20)) {
        r.logprobs = true;
        r.top_logprobs = uint32_t(*lp);
    }
    r.suffix = get_string(body, "suffix");
    if (get_bool(body, "echo").value_or(false))
        throw invalid_field("echo", "Invalid 'echo': echoing the prompt is not supported by this server.");
    if (auto bo = get_integer(body, "best_of", 1, 1000); bo && *bo != 1)
        throw invalid_field("best_of", fmt::format("Invalid 'best_of': only 1 is supported, got {}.", *bo));
    r.engine.logprobs = r.logprobs;
    r.engine.top_logprobs = r.top_logprobs;
    return r;
}

TemplateRequest parse_apply_template_request(const json& body, bool takes_images) {
    TemplateRequest r;
    auto m = body.find("messages");
    if (m == body.end()) throw invalid_field("messages", "Missing required parameter: 'messages'.");
    std::vector<chat_template::ImageRef> images;  // only rendered as markers: never read
    r.messages = server::parse_messages(*m, takes_images ? &images : nullptr);
    r.tools = parse_tools(body);
    r.template_kwargs = parse_template_kwargs(body);
    return r;
}

void apply_tool_format(ParsedRequest& req, const answer::ToolFormat& format, bool template_renders_tools) {
    if (req.endpoint != Endpoint::Chat) return;
    answer::ToolPlan plan;
    try {
        plan = answer::plan_tool_use(format, template_renders_tools, req.tools, req.tool_choice, req.tool_name,
                                     req.parallel_tool_calls);
    } catch (const answer::ToolError& e) {
        throw invalid_field(e.param(), e.what());
    }
    if (plan.forced) {
        if (req.engine.grammar)
            throw invalid_field("tool_choice",
                                "Invalid 'tool_choice': a required tool call cannot be combined with "
                                "'response_format', 'grammar' or 'json_schema'.");
        if (!req.engine.stop.empty())
            throw invalid_field("stop",
                                "Invalid 'stop': stop strings cannot be combined with a required tool call (the "
                                "call's grammar decides where it ends).");
        req.engine.grammar = plan.grammar;
    } else if (plan.grammar && !req.engine.grammar) {
        // 'auto': the calls follow their parameters from the call marker on. A grammar the request
        // brings (response_format) holds the whole reply instead.
        req.engine.grammar = plan.grammar;
        req.engine.grammar_start.triggers = plan.triggers;
    }
    answer::add_system_text(req.messages, plan.system_text);
    req.tool_plan = std::move(plan);
}

void check_logit_bias(const ParsedRequest& req, size_t n_vocab) {
    for (const auto& [token, bias] : req.engine.sampler.logit_bias)
        if (size_t(token) >= n_vocab)
            throw invalid_field("logit_bias",
                                fmt::format("Invalid 'logit_bias': token id {} is not in the vocabulary ({} "
                                            "tokens).",
                                            token, n_vocab));
}

ApiError context_length_error(Endpoint ep, size_t prompt_tokens, uint32_t n_ctx) {
    if (ep == Endpoint::Chat)
        return ApiError(
            400,
            fmt::format("This model's maximum context length is {} tokens. However, your messages resulted in "
                        "{} tokens. Please reduce the length of the messages.",
                        n_ctx, prompt_tokens),
            "invalid_request_error", "messages", "context_length_exceeded");
    return ApiError(400,
                    fmt::format("This model's maximum context length is {} tokens, however you requested {} tokens in "
                                "your prompt. Please reduce your prompt.",
                                n_ctx, prompt_tokens),
                    "invalid_request_error", "prompt", "context_length_exceeded");
}

}  // namespace vkllm::server
