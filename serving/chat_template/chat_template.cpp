#include "serving/chat_template/chat_template.h"

#include "serving/chat_template/jinja/interpreter.h"
#include "serving/chat_template/jinja/parser.h"

#include <atomic>
#include <fstream>
#include <iterator>
#include <new>

namespace vkllm::chat_template {

struct ChatTemplate::Parsed {
    jinja::Body body;
    // Whether the template prints an assistant turn's null content as Python's "None": -1 not
    // probed yet (probing twice at once is harmless: the answer is the same).
    std::atomic<int> prints_null = -1;
};

namespace {

std::string located(const std::string& name, int line, const std::string& msg) {
    std::string where = "template '" + name + "'";
    if (line > 0) where += ", line " + std::to_string(line);
    return where + ": " + msg;
}

// "YYYY-MM-DD HH:MM:SS" (or just the date) as a broken-down time; weekday and day of the year
// are computed so that %a, %A, %j, %U... print right.
std::tm parse_now(const std::string& s) {
    std::tm tm{};
    int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0;
    const int n = std::sscanf(s.c_str(), "%d-%d-%d %d:%d:%d", &y, &mo, &d, &h, &mi, &sec);
    if (n != 3 && n != 6) throw TemplateError("the fixed time '" + s + "' is not \"YYYY-MM-DD HH:MM:SS\"");
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = sec;
    tm.tm_isdst = -1;
    std::tm copy = tm;
    if (timegm(&copy) == -1 && !(y == 1969 && mo == 12 && d == 31))
        throw TemplateError("the fixed time '" + s + "' is out of range");
    tm.tm_wday = copy.tm_wday;
    tm.tm_yday = copy.tm_yday;
    return tm;
}

}  // namespace

ChatTemplate::ChatTemplate(std::string source, std::string name, RenderLimits limits)
    : source_(std::move(source)), name_(std::move(name)), parsed_(std::make_unique<Parsed>()) {
    limits_ = limits;
    try {
        jinja::ParseLimits pl;
        pl.max_block_depth = limits.max_depth;
        parsed_->body = jinja::parse_template(source_, pl);
    } catch (const jinja::Error& e) {
        throw TemplateError(located(name_, e.line, e.what()));
    } catch (const std::bad_alloc&) {
        throw TemplateError(located(name_, 0, "out of memory while parsing"));
    }
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const ChatInputs& in) const {
    using jinja::Value;
    try {
        jinja::RenderConfig config;
        config.max_output_bytes = limits_.max_output_bytes;
        config.max_steps = limits_.max_steps;
        config.max_depth = limits_.max_depth;
        if (!in.now.empty()) config.now = parse_now(in.now);

        // Hugging Face's variables: messages, tools (none without tools), documents (none),
        // add_generation_prompt, bos_token, eos_token; then the caller's extras.
        auto globals = std::make_shared<jinja::Scope>();
        jinja::add_builtins(*globals);
        globals->vars["messages"] = Value::from_json(in.messages);
        globals->vars["tools"] = Value::from_json(in.tools);
        globals->vars["documents"] = Value::none();
        globals->vars["add_generation_prompt"] = Value(in.add_generation_prompt);
        globals->vars["bos_token"] = Value(in.bos_token);
        globals->vars["eos_token"] = Value(in.eos_token);
        if (in.extra.is_object())
            for (const auto& [k, v] : in.extra.items()) globals->vars[k] = Value::from_json(v);

        jinja::Interpreter interp(config);
        return interp.render(parsed_->body, globals);
    } catch (const jinja::Error& e) {
        throw TemplateError(located(name_, e.line, e.what()));
    } catch (const TemplateError&) {
        throw;
    } catch (const std::bad_alloc&) {
        throw TemplateError(located(name_, 0, "out of memory while rendering"));
    } catch (const std::length_error& e) {
        throw TemplateError(located(name_, 0, std::string("a value grew too large: ") + e.what()));
    }
}

namespace {

// Assistant tool calls whose function.arguments are objects, turned back into JSON text; false
// when there were none.
bool arguments_as_text(nlohmann::ordered_json& messages) {
    bool changed = false;
    if (!messages.is_array()) return false;
    for (auto& m : messages) {
        if (!m.is_object() || !m.contains("tool_calls") || !m["tool_calls"].is_array()) continue;
        for (auto& call : m["tool_calls"]) {
            if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
            auto& fn = call["function"];
            if (fn.contains("arguments") && !fn["arguments"].is_string()) {
                fn["arguments"] =
                    fn["arguments"].dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
                changed = true;
            }
        }
    }
    return changed;
}

// Whether an assistant turn that calls tools has no content (null or absent).
bool has_null_content_call(const nlohmann::ordered_json& messages) {
    if (!messages.is_array()) return false;
    for (const auto& m : messages)
        if (m.is_object() && m.value("role", "") == "assistant" && m.contains("tool_calls") &&
            (!m.contains("content") || m["content"].is_null()))
            return true;
    return false;
}

size_t count_of(std::string_view text, std::string_view what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string_view::npos; at = text.find(what, at + 1)) ++n;
    return n;
}

}  // namespace

std::string ChatTemplate::render_calls(const ChatInputs& in) const {
    try {
        return render(in);
    } catch (const TemplateError&) {
        // Hugging Face's convention hands templates the arguments as an object; a few templates
        // (Functionary v3.2) concatenate them as text and fail on an object: they get the text.
        ChatInputs text = in;
        if (!arguments_as_text(text.messages)) throw;
        try {
            return render(text);
        } catch (const TemplateError&) {}
        throw;
    }
}

bool ChatTemplate::prints_null_content() const {
    int known = parsed_->prints_null.load();
    if (known >= 0) return known == 1;
    // One assistant turn that calls a tool, rendered with null content and with "": a template
    // that prints "None" for the null (GLM-4.6 writes {{ content }}) shows it once more, and one
    // that needs the null (DeepSeek R1's renders the calls only then) loses the call with "".
    ChatInputs probe;
    probe.add_generation_prompt = false;
    probe.tools = nlohmann::ordered_json::parse(
        R"([{"type":"function","function":{"name":"probe_tool","description":"d","parameters":{"type":"object",)"
        R"("properties":{"a":{"type":"integer","description":"d"}}}}}])");
    // The turn as a follow-up request has it: the tool's result after it.
    probe.messages = nlohmann::ordered_json::parse(
        R"([{"role":"user","content":"Hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"call0prob","type":)"
        R"("function","function":{"name":"probe_tool","arguments":{"a":1}}}]},)"
        R"({"role":"tool","tool_call_id":"call0prob","content":"42"}])");
    bool prints = false;
    try {
        const std::string with_null = render_calls(probe);
        probe.messages[1]["content"] = "";
        const std::string with_empty = render_calls(probe);
        // The tool's name appears as often with "" (the call is still shown; templates that list
        // the tools show the name there too, in both).
        prints = count_of(with_null, "None") > count_of(with_empty, "None") &&
                 count_of(with_empty, "probe_tool") >= count_of(with_null, "probe_tool");
    } catch (const TemplateError&) {
        // A template that cannot render the probe (one that insists on a system turn, ...) keeps the null.
    }
    parsed_->prints_null.store(prints ? 1 : 0);
    return prints;
}

std::string ChatTemplate::apply(const ChatInputs& in) const {
    if (!has_null_content_call(in.messages) || !prints_null_content()) return render_calls(in);
    // OpenAI's null content means no text: "" for a template that would print "None".
    ChatInputs empty = in;
    for (auto& m : empty.messages)
        if (m.is_object() && m.value("role", "") == "assistant" && m.contains("tool_calls") &&
            (!m.contains("content") || m["content"].is_null()))
            m["content"] = "";
    return render_calls(empty);
}

ChatTemplate resolve_chat_template(const std::string& option, const std::string& from_model) {
    if (!option.empty()) {
        for (const std::string& n : builtin_template_names())
            if (n == option) return ChatTemplate(builtin_template_source(n), n);
        std::ifstream f(option, std::ios::binary);
        if (!f) {
            std::string names;
            for (const std::string& n : builtin_template_names()) names += (names.empty() ? "" : ", ") + n;
            throw TemplateError("chat template '" + option + "' is neither a built-in (" + names +
                                ") nor a readable file");
        }
        std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        return ChatTemplate(std::move(text), option);
    }
    if (!from_model.empty()) return ChatTemplate(from_model, "tokenizer.chat_template");
    // As llama.cpp and most GGUF tools do: a file without a template gets ChatML (a guess from the
    // architecture would pick Llama 2's format for every llama-architecture file, most of which are
    // not Llama 2 chat models).
    return ChatTemplate(builtin_template_source("chatml"), "chatml");
}

}  // namespace vkllm::chat_template
