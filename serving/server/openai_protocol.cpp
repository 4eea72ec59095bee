#include "serving/server/openai_protocol.h"

#include "model/grammar/json_schema.h"
#include "serving/template/chat_prompt.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace vkllm::server {

namespace {

// --- field readers: absent or null means "not given"; a wrong type or range is a 400 naming the
// field, worded as OpenAI words it ("Invalid type for 'temperature': expected a number, but got a
// string instead.").

using chat::json_type_name;

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
        throw invalid_field(name, fmt::format("Invalid '{}': expected a value between {} and {}, but got {} instead.", name,
                                              lo, hi, v->dump()));
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
    } else if (v->is_number_float() && std::isfinite(v->get<double>()) && std::trunc(v->get<double>()) == v->get<double>() &&
               std::fabs(v->get<double>()) < 9e18) {
        x = int64_t(v->get<double>());  // 5.0 from a client that only has doubles
    } else {
        wrong_type(name, "an integer", *v);
    }
    if (x < lo || x > hi)
        throw invalid_field(name, fmt::format("Invalid '{}': expected an integer between {} and {}, but got {} instead.",
                                              name, lo, hi, v->dump()));
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

// The fields both endpoints share: sampling, penalties, stopping, streaming.
// The structure the output must have: response_format (json_object, json_schema), or llama-server's
// grammar / json_schema fields. At most one; a schema or grammar that cannot be enforced exactly is
// a 400 naming the keyword or the line and column, never free text with a 200.
void parse_structure(const json& body, ParsedRequest& r) {
    std::vector<std::string> given;
    for (const char* k : {"response_format", "grammar", "json_schema"})
        if (field(body, k)) given.push_back(k);
    if (given.empty()) return;
    if (given.size() > 1)
        throw invalid_field(given[1], fmt::format("Invalid '{}': give at most one of 'response_format', 'grammar' and "
                                                  "'json_schema', got '{}' and '{}'.", given[1], given[0], given[1]));
    const std::string& key = given[0];
    const json& v = *field(body, key.c_str());
    std::string gbnf;  // grammar and json_object; a schema sets r.engine.grammar itself
    std::string param = key;
    auto compile_schema = [&](const json& schema, const std::string& where) {
        if (!schema.is_object() && !schema.is_boolean()) wrong_type(where, "an object", schema);
        try {
            r.engine.grammar = std::make_shared<const grammar::Grammar>(grammar::json_schema_grammar(schema.dump()));
        } catch (const grammar::SchemaError& e) {
            throw invalid_field(where, fmt::format("Invalid '{}': {}", where, e.what()));
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
        if (!type || !type->is_string()) throw invalid_field("response_format.type", "Missing required parameter: 'response_format.type'.");
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
                throw invalid_field("response_format.json_schema", "Missing required parameter: 'response_format.json_schema'.");
            }
        } else {
            throw invalid_field("response_format.type", fmt::format("Invalid 'response_format.type': '{}'. Supported: 'text', "
                                                                    "'json_object', 'json_schema'.", t));
        }
    }
    try {
        if (!r.engine.grammar) r.engine.grammar = std::make_shared<const grammar::Grammar>(grammar::Grammar::parse(gbnf));
        grammar::Matcher check(*r.engine.grammar);  // a grammar too ambiguous to even start
    } catch (const grammar::GrammarError& e) {
        throw invalid_field(param, fmt::format("Invalid '{}': {}", param, e.what()));
    }
}

void parse_common(const json& body, uint64_t seed, ParsedRequest& r) {
    serving::CompletionRequest& e = r.engine;
    r.model = get_string(body, "model").value_or("");
    get_string(body, "user");  // checked for its type, otherwise unused

    if (auto n = get_integer(body, "n", 1, kMaxChoices)) r.n = uint32_t(*n);

    r.stream = get_bool(body, "stream").value_or(false);
    if (const json* so = field(body, "stream_options")) {
        if (!r.stream)
            throw invalid_field("stream_options", "The 'stream_options' parameter is only allowed when 'stream' is enabled.");
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
        if (*v == 0) throw invalid_field("top_p", "Invalid 'top_p': expected a value above 0 and at most 1, but got 0 instead.");
        s.top_p = float(*v);
    }
    if (auto v = get_integer(body, "top_k", 0, std::numeric_limits<int32_t>::max())) s.top_k = int32_t(*v);
    if (auto v = get_number(body, "min_p", 0, 1)) {
        if (*v >= 1) throw invalid_field("min_p", "Invalid 'min_p': expected a value from 0 to below 1, but got 1 instead.");
        s.min_p = float(*v);
    }
    if (auto v = get_number(body, "repeat_penalty", 0, 100)) {
        if (*v <= 0) throw invalid_field("repeat_penalty", "Invalid 'repeat_penalty': expected a value above 0, but got 0 instead.");
        s.repeat_penalty = float(*v);
    }
    if (auto v = get_integer(body, "repeat_last_n", 0, std::numeric_limits<int32_t>::max())) s.repeat_last_n = int32_t(*v);
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
                throw invalid_field("logit_bias", fmt::format("Invalid 'logit_bias[{}]': expected a number from -100 to 100, "
                                                              "got {}.", key, bias.dump()));
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
                throw invalid_field("stop", fmt::format("Invalid 'stop': expected at most 4 stop sequences, but got {}.",
                                                        stop->size()));
            for (const json& x : *stop) add(x);
        } else {
            add(*stop);
        }
    }
    parse_structure(body, r);
    // A stop string could cut the structured text short: refused rather than half-honoured.
    if (e.grammar && !e.stop.empty())
        throw invalid_field("stop", "Invalid 'stop': stop sequences cannot be combined with 'response_format', 'grammar' "
                                    "or 'json_schema' (they could cut the structured output).");
}

}  // namespace

// --- errors and serialization ---------------------------------------------------------------------

ApiError::ApiError(int status, const std::string& message, std::string type, std::string param, std::string code)
    : std::runtime_error(message), status_(status), type_(std::move(type)), param_(std::move(param)), code_(std::move(code)) {}

ApiError invalid_field(const std::string& param, const std::string& message) {
    return ApiError(400, message, "invalid_request_error", param);
}

json error_json(const ApiError& e) {
    json err = json::object();
    err["message"] = e.what();
    err["type"] = e.type();
    err["param"] = e.param().empty() ? json(nullptr) : json(e.param());
    err["code"] = e.code().empty() ? json(nullptr) : json(e.code());
    return json{{"error", err}};
}

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string sse_data(const json& j) { return "data: " + dump_json(j) + "\n\n"; }

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
        throw ApiError(400, "We could not parse the JSON body of your request. (The body must be a JSON object; see "
                            "https://platform.openai.com/docs/api-reference.)");
    if (!j.is_object()) throw ApiError(400, fmt::format("The JSON body must be an object, but got {}.", json_type_name(j)));
    return j;
}

// --- requests ---------------------------------------------------------------------------------

json parse_messages(const json& messages) {
    try {
        return chat::parse_messages(messages);
    } catch (const chat::MessageError& e) {
        throw invalid_field(e.param(), e.what());
    }
}

namespace {

json parse_tools(const json& body) {
    const json* tools = field(body, "tools");
    if (!tools) return nullptr;
    if (!tools->is_array()) wrong_type("tools", "an array", *tools);
    try {
        chat::check_tools(*tools);
    } catch (const chat::ToolError& e) {
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

ParsedRequest parse_chat_request(const json& body, uint64_t seed) {
    ParsedRequest r;
    r.endpoint = Endpoint::Chat;
    auto m = body.find("messages");
    if (m == body.end()) throw invalid_field("messages", "Missing required parameter: 'messages'.");
    r.messages = parse_messages(*m);
    r.tools = parse_tools(body);
    r.template_kwargs = parse_template_kwargs(body);
    if (const json* tc = field(body, "tool_choice")) {
        if (tc->is_string()) {
            const std::string c = tc->get<std::string>();
            if (c == "required") r.tool_choice = ToolChoice::Required;
            else if (c == "none") r.tool_choice = ToolChoice::None;
            else if (c != "auto")
                throw invalid_field("tool_choice", fmt::format("Invalid 'tool_choice': '{}'. Expected 'none', 'auto', "
                                                               "'required' or a function.", c));
        } else if (tc->is_object()) {
            const json* type = field(*tc, "type");
            if (!type || *type != "function")
                throw invalid_field("tool_choice.type", "Invalid 'tool_choice.type': expected 'function'.");
            const json* fn = field(*tc, "function");
            if (fn && !fn->is_object()) wrong_type("tool_choice.function", "an object", *fn);
            const json* name = fn ? field(*fn, "name") : nullptr;
            if (!name) throw invalid_field("tool_choice.function.name", "Missing required parameter: 'tool_choice.function.name'.");
            if (!name->is_string()) wrong_type("tool_choice.function.name", "a string", *name);
            r.tool_choice = ToolChoice::Named;
            r.tool_name = name->get<std::string>();
        } else {
            wrong_type("tool_choice", "a string or an object", *tc);
        }
    }
    r.parallel_tool_calls = get_bool(body, "parallel_tool_calls").value_or(true);
    if (auto rf = get_string(body, "reasoning_format")) {
        if (*rf != "auto" && *rf != "none" && *rf != "deepseek")
            throw invalid_field("reasoning_format", fmt::format("Invalid 'reasoning_format': '{}'. Expected 'auto', 'deepseek' "
                                                                "or 'none'.", *rf));
        r.reasoning_format = *rf;
    }
    parse_common(body, seed, r);
    r.logprobs = get_bool(body, "logprobs").value_or(false);
    if (auto tl = get_integer(body, "top_logprobs", 0, 20)) {
        if (!r.logprobs && *tl > 0)
            throw invalid_field("top_logprobs", "Invalid 'top_logprobs': 'logprobs' must be set to true when "
                                                "'top_logprobs' is used.");
        r.top_logprobs = uint32_t(*tl);
    }
    r.engine.logprobs = r.logprobs;
    r.engine.top_logprobs = r.top_logprobs;
    return r;
}

ParsedRequest parse_completion_request(const json& body, uint64_t seed) {
    ParsedRequest r;
    r.endpoint = Endpoint::Completion;
    auto p = body.find("prompt");
    if (p == body.end() || p->is_null()) throw invalid_field("prompt", "Missing required parameter: 'prompt'.");
    if (p->is_string()) {
        r.prompt_text = p->get<std::string>();
    } else if (p->is_array()) {
        // One prompt per request: a list of one string, or one list of token ids.
        if (p->size() == 1 && (*p)[0].is_string()) {
            r.prompt_text = (*p)[0].get<std::string>();
        } else if (!p->empty() && std::all_of(p->begin(), p->end(), [](const json& x) { return x.is_number_integer(); })) {
            r.prompt_is_tokens = true;
            for (const json& x : *p) {
                int64_t id = x.is_number_unsigned() && x.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())
                                 ? -1 : x.get<int64_t>();
                if (id < 0 || id > std::numeric_limits<int32_t>::max())
                    throw invalid_field("prompt", fmt::format("Invalid 'prompt': token id {} is out of range.", x.dump()));
                r.prompt_tokens.push_back(int32_t(x.get<int64_t>()));
            }
        } else if (p->empty()) {
            throw invalid_field("prompt", "Invalid 'prompt': empty array. Expected a string or an array with one string.");
        } else {
            throw invalid_field("prompt", fmt::format("Invalid 'prompt': this server takes one prompt per request (a string, "
                                                      "an array of one string, or an array of token ids), but got an array "
                                                      "of {} elements.", p->size()));
        }
    } else {
        wrong_type("prompt", "a string or an array", *p);
    }
    parse_common(body, seed, r);
    // The legacy completions API stops after 16 tokens unless told otherwise.
    if (r.engine.max_tokens < 0) r.engine.max_tokens = 16;
    if (auto lp = get_integer(body, "logprobs", 0, 20)) {
        r.logprobs = true;
        r.top_logprobs = uint32_t(*lp);
    }
    if (get_bool(body, "echo").value_or(false))
        throw invalid_field("echo", "Invalid 'echo': echoing the prompt is not supported by this server.");
    if (auto bo = get_integer(body, "best_of", 1, 1000); bo && *bo != 1)
        throw invalid_field("best_of", fmt::format("Invalid 'best_of': only 1 is supported, got {}.", *bo));
    r.engine.logprobs = r.logprobs;
    r.engine.top_logprobs = r.top_logprobs;
    return r;
}

TokenizeRequest parse_tokenize_request(const json& body) {
    TokenizeRequest r;
    auto c = body.find("content");
    if (c == body.end()) throw invalid_field("content", "Missing required parameter: 'content'.");
    if (!c->is_string()) wrong_type("content", "a string", *c);
    r.content = c->get<std::string>();
    r.add_special = get_bool(body, "add_special").value_or(false);
    r.parse_special = get_bool(body, "parse_special").value_or(true);
    return r;
}

std::vector<int32_t> parse_detokenize_request(const json& body, size_t n_vocab) {
    auto t = body.find("tokens");
    if (t == body.end()) throw invalid_field("tokens", "Missing required parameter: 'tokens'.");
    if (!t->is_array()) wrong_type("tokens", "an array of integers", *t);
    std::vector<int32_t> ids;
    for (size_t i = 0; i < t->size(); ++i) {
        const json& x = (*t)[i];
        if (!x.is_number_integer()) wrong_type(fmt::format("tokens[{}]", i), "an integer", x);
        bool ok = x.is_number_unsigned() ? x.get<uint64_t>() < n_vocab : x.get<int64_t>() >= 0 && uint64_t(x.get<int64_t>()) < n_vocab;
        if (!ok)
            throw invalid_field(fmt::format("tokens[{}]", i), fmt::format("Invalid 'tokens[{}]': {} is not a token id "
                                                                          "(the vocabulary has {} tokens).", i, x.dump(), n_vocab));
        ids.push_back(int32_t(x.get<int64_t>()));
    }
    return ids;
}

TemplateRequest parse_apply_template_request(const json& body) {
    TemplateRequest r;
    auto m = body.find("messages");
    if (m == body.end()) throw invalid_field("messages", "Missing required parameter: 'messages'.");
    r.messages = parse_messages(*m);
    r.tools = parse_tools(body);
    r.template_kwargs = parse_template_kwargs(body);
    return r;
}

void apply_tool_format(ParsedRequest& req, const chat::ToolFormat& format, bool template_renders_tools) {
    if (req.endpoint != Endpoint::Chat) return;
    chat::ToolPlan plan;
    try {
        plan = chat::plan_tool_use(format, template_renders_tools, req.tools, req.tool_choice, req.tool_name,
                                   req.parallel_tool_calls);
    } catch (const chat::ToolError& e) {
        throw invalid_field(e.param(), e.what());
    }
    if (plan.forced) {
        if (req.engine.grammar)
            throw invalid_field("tool_choice", "Invalid 'tool_choice': a required tool call cannot be combined with "
                                               "'response_format', 'grammar' or 'json_schema'.");
        if (!req.engine.stop.empty())
            throw invalid_field("stop", "Invalid 'stop': stop strings cannot be combined with a required tool call (the "
                                        "call's grammar decides where it ends).");
        req.engine.grammar = plan.grammar;
    } else if (plan.grammar && !req.engine.grammar) {
        // 'auto': the calls follow their parameters from the call marker on. A grammar the request
        // brings (response_format) holds the whole reply instead.
        req.engine.grammar = plan.grammar;
        req.engine.grammar_start.triggers = plan.triggers;
    }
    chat::add_system_text(req.messages, plan.system_text);
    req.tool_plan = std::move(plan);
}

void check_logit_bias(const ParsedRequest& req, size_t n_vocab) {
    for (const auto& [token, bias] : req.engine.sampler.logit_bias)
        if (size_t(token) >= n_vocab)
            throw invalid_field("logit_bias", fmt::format("Invalid 'logit_bias': token id {} is not in the vocabulary ({} "
                                                          "tokens).", token, n_vocab));
}

serving::Event combined_usage(const std::vector<serving::Event>& done) {
    serving::Event sum = done.at(0);
    for (size_t i = 1; i < done.size(); ++i) sum.completion_tokens += done[i].completion_tokens;
    return sum;
}

json merge_choices(std::vector<json> responses, const std::vector<serving::Event>& done) {
    json out = std::move(responses.at(0));
    for (size_t i = 1; i < responses.size(); ++i) out["choices"].push_back(std::move(responses[i]["choices"][0]));
    const serving::Event sum = combined_usage(done);
    out["usage"]["completion_tokens"] = sum.completion_tokens;
    out["usage"]["total_tokens"] = sum.prompt_tokens + sum.completion_tokens;
    return out;
}

EmbeddingsRequest parse_embeddings_request(const json& body, size_t n_vocab, uint32_t width) {
    EmbeddingsRequest r;
    r.model = get_string(body, "model").value_or("");
    const auto in = body.find("input");
    if (in == body.end()) throw invalid_field("input", "Missing required parameter: 'input'.");
    constexpr size_t kMaxInputs = 2048;
    auto token_list = [&](const json& a, const std::string& where) {
        if (a.empty()) throw invalid_field("input", fmt::format("Invalid '{}': an input cannot be empty.", where));
        std::vector<int32_t> ids;
        for (size_t i = 0; i < a.size(); ++i) {
            const json& x = a[i];
            const std::string at = fmt::format("{}[{}]", where, i);
            if (!x.is_number_integer()) wrong_type(at, "an integer", x);
            const bool ok = x.is_number_unsigned() ? x.get<uint64_t>() < n_vocab
                                                   : x.get<int64_t>() >= 0 && uint64_t(x.get<int64_t>()) < n_vocab;
            if (!ok)
                throw invalid_field("input", fmt::format("Invalid '{}': {} is not a token id (the vocabulary has {} tokens).",
                                                         at, x.dump(), n_vocab));
            ids.push_back(int32_t(x.get<int64_t>()));
        }
        return ids;
    };
    if (in->is_string()) {
        r.texts.push_back(in->get<std::string>());
    } else if (in->is_array() && !in->empty() && (*in)[0].is_number()) {
        r.token_ids.push_back(token_list(*in, "input"));
    } else if (in->is_array() && !in->empty()) {
        if (in->size() > kMaxInputs)
            throw invalid_field("input", fmt::format("Invalid 'input': {} inputs; at most {} per request.", in->size(), kMaxInputs));
        const bool strings = (*in)[0].is_string();
        for (size_t i = 0; i < in->size(); ++i) {
            const json& x = (*in)[i];
            const std::string at = fmt::format("input[{}]", i);
            if (strings) {
                if (!x.is_string()) wrong_type(at, "a string (every input of the array alike)", x);
                r.texts.push_back(x.get<std::string>());
            } else {
                if (!x.is_array()) wrong_type(at, "a string or an array of token ids", x);
                r.token_ids.push_back(token_list(x, at));
            }
        }
    } else {
        if (in->is_array()) throw invalid_field("input", "Invalid 'input': an input cannot be empty.");
        wrong_type("input", "a string, an array of strings or an array of token ids", *in);
    }
    for (size_t i = 0; i < r.texts.size(); ++i)
        if (r.texts[i].empty())
            throw invalid_field("input", r.texts.size() == 1 ? std::string("Invalid 'input': an input cannot be empty.")
                                                             : fmt::format("Invalid 'input[{}]': an input cannot be empty.", i));
    const std::string format = get_string(body, "encoding_format").value_or("float");
    if (format != "float" && format != "base64")
        throw invalid_field("encoding_format", fmt::format("Invalid 'encoding_format': '{}'; expected 'float' or 'base64'.", format));
    r.base64 = format == "base64";
    if (auto d = body.find("dimensions"); d != body.end() && !d->is_null()) {
        if (!d->is_number_integer()) wrong_type("dimensions", "an integer", *d);
        if (d->get<int64_t>() != int64_t(width))
            throw invalid_field("dimensions", fmt::format("Invalid 'dimensions': {}. This model's embeddings have {} "
                                                          "dimensions and cannot be shortened.", d->dump(), width));
    }
    return r;
}

std::string base64_floats(const std::vector<float>& v) {
    static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string bytes(v.size() * 4, '\0');
    for (size_t i = 0; i < v.size(); ++i) {
        uint32_t u;
        std::memcpy(&u, &v[i], 4);
        for (int b = 0; b < 4; ++b) bytes[4 * i + b] = char((u >> (8 * b)) & 0xff);  // little-endian
    }
    std::string out;
    out.reserve((bytes.size() + 2) / 3 * 4);
    for (size_t i = 0; i < bytes.size(); i += 3) {
        const size_t n = std::min<size_t>(3, bytes.size() - i);
        uint32_t w = 0;
        for (size_t b = 0; b < 3; ++b) w = (w << 8) | (b < n ? static_cast<unsigned char>(bytes[i + b]) : 0u);
        for (size_t c = 0; c < 4; ++c) out += c <= n ? kAlphabet[(w >> (18 - 6 * c)) & 63] : '=';
    }
    return out;
}

json embeddings_response(const std::vector<std::vector<float>>& vectors, bool base64, const std::string& model,
                         uint64_t prompt_tokens) {
    json data = json::array();
    for (size_t i = 0; i < vectors.size(); ++i) {
        json e = {{"object", "embedding"}, {"index", i}};
        if (base64) e["embedding"] = base64_floats(vectors[i]);
        else e["embedding"] = vectors[i];
        data.push_back(std::move(e));
    }
    return {{"object", "list"}, {"data", std::move(data)}, {"model", model},
            {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}};
}

RerankRequest parse_rerank_request(const json& body) {
    RerankRequest r;
    r.model = get_string(body, "model").value_or("");
    const std::optional<std::string> query = get_string(body, "query");
    if (!query) throw invalid_field("query", "Missing required parameter: 'query'.");
    if (query->empty()) throw invalid_field("query", "Invalid 'query': it cannot be empty.");
    r.query = *query;
    const char* name = field(body, "documents") ? "documents" : "texts";
    const json* docs = field(body, name);
    if (!docs) throw invalid_field("documents", "Missing required parameter: 'documents'.");
    if (!docs->is_array()) wrong_type(name, "an array of strings", *docs);
    constexpr size_t kMaxDocuments = 2048;
    if (docs->empty()) throw invalid_field(name, fmt::format("Invalid '{}': give at least one document.", name));
    if (docs->size() > kMaxDocuments)
        throw invalid_field(name, fmt::format("Invalid '{}': {} documents; at most {} per request.", name, docs->size(),
                                              kMaxDocuments));
    for (size_t i = 0; i < docs->size(); ++i) {
        const json& d = (*docs)[i];
        const std::string at = fmt::format("{}[{}]", name, i);
        const json* text = d.is_object() ? field(d, "text") : &d;
        if (!text || !text->is_string()) wrong_type(at, "a string or an object with a string 'text'", d);
        if (text->get_ref<const std::string&>().empty())
            throw invalid_field(at, fmt::format("Invalid '{}': a document cannot be empty.", at));
        r.documents.push_back(text->get<std::string>());
    }
    if (const json* n = field(body, "top_n")) {
        if (!n->is_number_integer()) wrong_type("top_n", "an integer", *n);
        // Parsed JSON holds non-negative integers as unsigned (above INT64_MAX too).
        if (n->is_number_unsigned() ? n->get<uint64_t>() == 0 : n->get<int64_t>() < 1)
            throw invalid_field("top_n", fmt::format("Invalid 'top_n': {}; expected a positive integer.", n->dump()));
        r.top_n = size_t(std::min<uint64_t>(n->get<uint64_t>(), r.documents.size()));
    }
    if (const json* b = field(body, "return_documents")) {
        if (!b->is_boolean()) wrong_type("return_documents", "a boolean", *b);
        r.return_documents = b->get<bool>();
    }
    return r;
}

json rerank_response(const RerankRequest& req, const std::vector<float>& scores, const std::string& model,
                     uint64_t prompt_tokens) {
    std::vector<size_t> order(scores.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] > scores[b]; });
    if (req.top_n) order.resize(std::min(order.size(), req.top_n));
    json results = json::array();
    for (size_t i : order) {
        json r = {{"index", i}, {"relevance_score", scores[i]}};
        if (req.return_documents) r["document"] = {{"text", req.documents.at(i)}};
        results.push_back(std::move(r));
    }
    return {{"object", "list"}, {"results", std::move(results)}, {"model", model},
            {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}};
}

ApiError rerank_length_error(size_t index, size_t tokens, uint32_t limit) {
    return ApiError(400, fmt::format("The query and document {} are {} tokens together; this model takes at most {} "
                                     "tokens per pair. Please shorten them.", index, tokens, limit),
                    "invalid_request_error", "documents", "context_length_exceeded");
}

ApiError embedding_length_error(size_t index, size_t tokens, uint32_t limit) {
    return ApiError(400, fmt::format("Input {} has {} tokens; this model takes at most {} tokens per input. Please "
                                     "shorten the input.", index, tokens, limit),
                    "invalid_request_error", "input", "context_length_exceeded");
}

ApiError context_length_error(Endpoint ep, size_t prompt_tokens, uint32_t n_ctx) {
    if (ep == Endpoint::Chat)
        return ApiError(400, fmt::format("This model's maximum context length is {} tokens. However, your messages resulted in "
                                         "{} tokens. Please reduce the length of the messages.", n_ctx, prompt_tokens),
                        "invalid_request_error", "messages", "context_length_exceeded");
    return ApiError(400, fmt::format("This model's maximum context length is {} tokens, however you requested {} tokens in "
                                     "your prompt. Please reduce your prompt.", n_ctx, prompt_tokens),
                    "invalid_request_error", "prompt", "context_length_exceeded");
}

const char* openai_finish_reason(serving::FinishReason r) {
    switch (r) {
    case serving::FinishReason::Length:
    case serving::FinishReason::Timeout: return "length";
    default: return "stop";
    }
}

std::string new_response_id(Endpoint ep) {
    return (ep == Endpoint::Chat ? "chatcmpl-" : "cmpl-") + chat::random_id_chars(24);
}

// --- responses --------------------------------------------------------------------------------

namespace {

chat::AnswerFormat answer_format(const ParsedRequest& req) {
    chat::AnswerFormat f;
    f.harmony = req.harmony;
    f.inline_reasoning = req.reasoning_format == "none";
    f.split_reasoning = req.split_reasoning;
    f.inside = req.reply_in_reasoning;
    f.plan = &req.tool_plan;
    f.tools = req.tools;
    return f;
}

}  // namespace

ResponseBuilder::ResponseBuilder(const ParsedRequest& req, std::string id, std::string model, int64_t created,
                                 uint32_t index)
    : endpoint_(req.endpoint), logprobs_(req.logprobs), include_usage_(req.stream && req.include_usage), id_(std::move(id)),
      model_(std::move(model)), created_(created), index_(index), answer_(answer_format(req)) {
    // Where the tools' grammar holds the calls, a call once begun ends well formed: its arguments
    // can go out as they are written. Not where the grammar skips a reasoning block that stays in
    // the content (reasoning_format none): the parser would read a call the model only thought about.
    const bool grammar_holds = req.tool_plan.grammar && req.engine.grammar == req.tool_plan.grammar;
    const bool sees_what_grammar_sees = req.engine.grammar_start.skip_close.empty() || req.split_reasoning;
    if (!req.harmony && req.stream && grammar_holds && sees_what_grammar_sees) answer_.stream_arguments();
}


json ResponseBuilder::chunk_base() const {
    json j = json::object();
    j["id"] = id_;
    j["object"] = endpoint_ == Endpoint::Chat ? "chat.completion.chunk" : "text_completion";
    j["created"] = created_;
    j["model"] = model_;
    j["system_fingerprint"] = "vkllm";
    return j;
}

json ResponseBuilder::usage(const serving::Event& done) const {
    return json{{"prompt_tokens", done.prompt_tokens},
                {"completion_tokens", done.completion_tokens},
                {"total_tokens", done.prompt_tokens + done.completion_tokens},
                {"prompt_tokens_details", {{"cached_tokens", done.cached_tokens}}}};
}

namespace {

json token_bytes(const std::string& s) {
    json b = json::array();
    for (unsigned char c : s) b.push_back(int(c));
    return b;
}

}  // namespace

json ResponseBuilder::chat_logprobs(const std::vector<serving::TokenLogprob>& lps) const {
    json content = json::array();
    for (const serving::TokenLogprob& lp : lps) {
        json top = json::array();
        for (const auto& [text, logprob] : lp.top)
            top.push_back(json{{"token", text}, {"logprob", logprob}, {"bytes", token_bytes(text)}});
        content.push_back(json{{"token", lp.text}, {"logprob", lp.logprob}, {"bytes", token_bytes(lp.text)}, {"top_logprobs", top}});
    }
    return json{{"content", content}, {"refusal", nullptr}};
}

json ResponseBuilder::completion_logprobs(const std::vector<serving::TokenLogprob>& lps, size_t text_offset) const {
    json tokens = json::array(), token_logprobs = json::array(), top = json::array(), offsets = json::array();
    for (const serving::TokenLogprob& lp : lps) {
        tokens.push_back(lp.text);
        token_logprobs.push_back(lp.logprob);
        json alts = json::object();
        for (const auto& [text, logprob] : lp.top) alts[text] = logprob;
        top.push_back(alts);
        offsets.push_back(text_offset);
        text_offset += lp.text.size();
    }
    return json{{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}, {"text_offset", offsets}};
}

std::string ResponseBuilder::stream_start() const {
    if (endpoint_ != Endpoint::Chat) return {};
    json j = chunk_base();
    j["choices"] = json::array({json{{"index", index_},
                                     {"delta", {{"role", "assistant"}, {"content", ""}}},
                                     {"logprobs", nullptr},
                                     {"finish_reason", nullptr}}});
    if (include_usage_) j["usage"] = nullptr;
    return sse_data(j);
}

std::string ResponseBuilder::calls_chunk(const std::vector<chat::CallDelta>& deltas) const {
    if (deltas.empty()) return {};
    json c = chunk_base();
    c["choices"] = json::array({json{{"index", index_},
                                     {"delta", {{"tool_calls", chat::tool_call_deltas_json(deltas)}}},
                                     {"logprobs", nullptr},
                                     {"finish_reason", nullptr}}});
    if (include_usage_) c["usage"] = nullptr;
    return sse_data(c);
}

std::string ResponseBuilder::stream_text(const serving::Event& ev) {
    const chat::AnswerStream::Piece piece = answer_.push(ev.text);
    const std::string& text = piece.content;
    const std::string calls = calls_chunk(answer_.take_deltas());
    if (text.empty() && piece.reasoning.empty() && (!logprobs_ || ev.logprobs.empty())) return calls;
    json j = chunk_base();
    json choice = json::object();
    choice["index"] = index_;
    json lp = nullptr;
    if (endpoint_ == Endpoint::Chat) {
        choice["delta"] = json::object();
        if (!piece.reasoning.empty()) choice["delta"]["reasoning_content"] = piece.reasoning;
        if (!text.empty() || piece.reasoning.empty()) choice["delta"]["content"] = text;
        if (logprobs_) lp = chat_logprobs(ev.logprobs);
        choice["logprobs"] = lp;
    } else {
        choice["text"] = text;
        if (logprobs_) lp = completion_logprobs(ev.logprobs, streamed_bytes_);
        for (const auto& t : ev.logprobs) streamed_bytes_ += t.text.size();
        choice["logprobs"] = lp;
    }
    choice["finish_reason"] = nullptr;
    j["choices"] = json::array({choice});
    if (include_usage_) j["usage"] = nullptr;
    return sse_data(j) + calls;
}

std::string ResponseBuilder::stream_finish(const serving::Event& done) {
    std::string out;
    const char* finish = openai_finish_reason(done.finish);
    auto delta_chunk = [&](json delta) {
        json c = chunk_base();
        c["choices"] = json::array({json{{"index", index_}, {"delta", std::move(delta)}, {"logprobs", nullptr}, {"finish_reason", nullptr}}});
        if (include_usage_) c["usage"] = nullptr;
        out += sse_data(c);
    };
    // The text held back at the end, then the calls: whole (a call is sent once it is known to be
    // well formed: a malformed one comes back as content instead), or where arguments stream, what
    // completes them.
    const chat::AnswerStream::Rest rest = answer_.finish();
    if (!rest.reasoning.empty()) delta_chunk(json{{"reasoning_content", rest.reasoning}});
    if (!rest.content.empty()) delta_chunk(json{{"content", rest.content}});
    if (answer_.streams_arguments())
        out += calls_chunk(rest.deltas);
    else if (!rest.calls.empty())
        delta_chunk(json{{"tool_calls", chat::tool_calls_json(rest.calls, answer_.family(), true)}});
    if (!rest.calls.empty()) finish = "tool_calls";
    json j = chunk_base();
    json choice = json::object();
    choice["index"] = index_;
    if (endpoint_ == Endpoint::Chat)
        choice["delta"] = json::object();
    else
        choice["text"] = "";
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = finish;
    j["choices"] = json::array({choice});
    if (include_usage_) j["usage"] = nullptr;
    out += sse_data(j);
    return out;
}

std::string ResponseBuilder::stream_end(const serving::Event& usage_of) const {
    std::string out;
    if (include_usage_) {
        json u = chunk_base();
        u["choices"] = json::array();
        u["usage"] = usage(usage_of);
        out += sse_data(u);
    }
    return out + kSseDone;
}

std::string ResponseBuilder::stream_done(const serving::Event& done) { return stream_finish(done) + stream_end(done); }


std::string ResponseBuilder::stream_error(const ApiError& e) { return sse_data(error_json(e)); }

void ResponseBuilder::add(const serving::Event& ev) {
    const chat::AnswerStream::Piece piece = answer_.push(ev.text);
    reasoning_text_ += piece.reasoning;
    text_ += piece.content;
    if (logprobs_) lps_.insert(lps_.end(), ev.logprobs.begin(), ev.logprobs.end());
}

json ResponseBuilder::response(const serving::Event& done) {
    json j = json::object();
    j["id"] = id_;
    j["object"] = endpoint_ == Endpoint::Chat ? "chat.completion" : "text_completion";
    j["created"] = created_;
    j["model"] = model_;
    j["system_fingerprint"] = "vkllm";
    json choice = json::object();
    choice["index"] = index_;
    const char* finish = openai_finish_reason(done.finish);
    if (endpoint_ == Endpoint::Chat) {
        const chat::AnswerStream::Rest rest = answer_.finish();
        const std::string content = text_ + rest.content;
        json message = json{{"role", "assistant"}, {"content", content}};
        const std::string reasoning = reasoning_text_ + rest.reasoning;
        if (!reasoning.empty()) message["reasoning_content"] = reasoning;
        message["refusal"] = nullptr;
        if (!rest.calls.empty()) {
            // OpenAI: a reply that is only calls has null content.
            if (content.empty()) message["content"] = nullptr;
            message["tool_calls"] = chat::tool_calls_json(rest.calls, answer_.family(), false);
            finish = "tool_calls";
        }
        choice["message"] = std::move(message);
        choice["logprobs"] = logprobs_ ? chat_logprobs(lps_) : json(nullptr);
    } else {
        choice["text"] = text_;
        choice["logprobs"] = logprobs_ ? completion_logprobs(lps_, 0) : json(nullptr);
    }
    choice["finish_reason"] = finish;
    j["choices"] = json::array({choice});
    j["usage"] = usage(done);
    return j;
}

}  // namespace vkllm::server
