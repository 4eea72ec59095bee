#include "serving/answer/tool_calls.h"

#include "serving/answer/reasoning.h"
#include "serving/answer/tool_family.h"
#include "serving/answer/tool_grammar.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <iterator>
#include <random>
#include <set>

namespace vkllm::answer {

using json = nlohmann::ordered_json;

namespace detail {

namespace {

// Detection order matters: more specific markers first (Qwen3-Coder's and GLM's templates also
// hold "<tool_call>", Mistral Small 3.2's also "[TOOL_CALLS]"). Generic, which needs no marker,
// comes last.
constexpr const FamilyRow* kRows[] = {
    &kQwenCoderRow,    &kFunctionaryV31Row, &kGlm45Row,   &kHermesRow,  &kMistralV11Row, &kMistralNemoRow,
    &kDeepSeekR1Row,   &kDeepSeekV31Row,    &kHarmonyRow, &kKimiK2Row,  &kGraniteRow,    &kCommandR7BRow,
    &kCommandRPlusRow, &kFunctionaryV32Row, &kLlama3Row,  &kGenericRow,
};

}  // namespace

const FamilyRow& row_of(const ToolFormat& f) {
    for (const FamilyRow* r : kRows)
        if (&r->format == &f) return *r;
    for (const FamilyRow* r : kRows)
        if (r->format.family == f.family) return *r;
    return *kRows[std::size(kRows) - 1];
}

}  // namespace detail

using detail::FamilyRow;
using detail::kRows;

std::span<const ToolFormat> tool_formats() {
    static const std::vector<ToolFormat> formats = [] {
        std::vector<ToolFormat> v;
        for (const FamilyRow* r : kRows) v.push_back(r->format);
        return v;
    }();
    return formats;
}

const ToolFormat& tool_format(ToolFamily f) {
    for (const FamilyRow* r : kRows)
        if (r->format.family == f) return r->format;
    return kRows[std::size(kRows) - 1]->format;
}

const ToolFormat& detect_tool_format(std::string_view src) {
    for (const FamilyRow* r : kRows) {
        if (!r->template_markers[0]) return r->format;
        if (src.find(r->template_markers[0]) != std::string_view::npos &&
            (!r->template_markers[1] || src.find(r->template_markers[1]) != std::string_view::npos))
            return r->format;
    }
    return kRows[std::size(kRows) - 1]->format;
}

bool template_renders_tools(std::string_view src) { return src.find("tools") != std::string_view::npos; }

std::vector<std::string> tool_markup(const ToolFormat& format) {
    const FamilyRow& row = detail::row_of(format);
    if (row.markup_of) return row.markup_of();
    std::vector<std::string> out;
    for (const char* m : row.markup)
        if (m) out.emplace_back(m);
    return out;
}

bool offers_tool(const json& tools, std::string_view name) {
    if (!tools.is_array()) return true;
    return std::any_of(tools.begin(), tools.end(), [&](const json& t) {
        return t.is_object() && t.contains("function") && t["function"].is_object() &&
               t["function"].value("name", "") == name;
    });
}

ToolError::ToolError(const std::string& what, std::string param)
    : std::invalid_argument(what), param_(std::move(param)) {}

void check_tools(const json& tools) {
    if (!tools.is_array()) throw ToolError("Invalid 'tools': expected an array.", "tools");
    std::set<std::string> names;
    for (size_t i = 0; i < tools.size(); ++i) {
        const json& t = tools[i];
        const std::string at = fmt::format("tools[{}]", i);
        if (!t.is_object()) throw ToolError(fmt::format("Invalid '{}': expected an object.", at), at);
        if (!t.contains("type") || t["type"] != "function")
            throw ToolError(fmt::format("Invalid '{}.type': expected 'function'.", at), at + ".type");
        if (!t.contains("function") || !t["function"].is_object())
            throw ToolError(fmt::format("Missing required parameter: '{}.function'.", at), at + ".function");
        const json& f = t["function"];
        if (!f.contains("name") || !f["name"].is_string())
            throw ToolError(fmt::format("Missing required parameter: '{}.function.name'.", at), at + ".function.name");
        const std::string name = f["name"].get<std::string>();
        // OpenAI's rule; it also keeps names from closing the markup they sit in ("<function=NAME>").
        const bool good = !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
            return std::isalnum(uint8_t(c)) || c == '_' || c == '-' || c == '.';
        });
        if (!good)
            throw ToolError(
                fmt::format("Invalid '{}.function.name': '{}' must be 1 to 64 letters, digits, '_', '-' or '.'.", at,
                            name),
                at + ".function.name");
        if (!names.insert(name).second)
            throw ToolError(fmt::format("Invalid '{}.function.name': another tool is also named '{}'.", at, name),
                            at + ".function.name");
        if (f.contains("parameters") && !f["parameters"].is_object())
            throw ToolError(fmt::format("Invalid '{}.function.parameters': expected a JSON Schema object.", at),
                            at + ".function.parameters");
    }
}

// --- forcing a call ------------------------------------------------------------------------------

ForcedCall forced_call(const ToolFormat& format, const json& tools, const std::string& only, bool parallel) {
    if (!tools.is_array() || tools.empty())
        throw ToolError("Invalid 'tool_choice': the request has no tools to call.", "tool_choice");
    std::vector<size_t> chosen;
    for (size_t i = 0; i < tools.size(); ++i)
        if (only.empty() || detail::function_name(tools[i]) == only) chosen.push_back(i);
    if (chosen.empty())
        throw ToolError(fmt::format("Invalid 'tool_choice': no tool in 'tools' is named '{}'.", only), "tool_choice");
    if (format.force == ForceKind::NamedPrefix && chosen.size() != 1)
        throw ToolError(fmt::format("Invalid 'tool_choice': this model's tool-call format ({}) names the tool in "
                                    "the header of the call's message, which the prompt must hold; name the function "
                                    "in 'tool_choice'.",
                                    format.name),
                        "tool_choice");
    const FamilyRow& row = detail::row_of(format);
    return row.forced(row, tools, chosen, parallel && format.parallel);
}

LazyCall lazy_call(const ToolFormat& format, const json& tools, bool parallel) {
    if (!tools.is_array() || tools.empty()) return {};
    std::vector<size_t> all(tools.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    const FamilyRow& row = detail::row_of(format);
    try {
        return row.lazy(row, tools, all, parallel && format.parallel);
    } catch (const ToolError&) {
        // Parameters outside the schema subset: 'auto' promised no grammar, so the calls are parsed
        // as the model writes them (a required call with these tools is refused instead).
        return LazyCall{};
    }
}

std::string tool_instructions(const json& tools) {
    // Short: every token of it is paid in every request's prompt.
    std::string out =
        "To call tools, reply only with {\"tool_calls\": [{\"name\": ..., \"arguments\": {...}}]}. Tools:\n";
    for (const json& t : tools) out += t["function"].dump() + "\n";
    return out;
}

json parse_json_bounded(std::string_view text) {
    static constexpr int kMaxDepth = 64;
    bool too_deep = false;
    const json::parser_callback_t guard = [&too_deep](int depth, json::parse_event_t, json&) {
        if (depth > kMaxDepth) too_deep = true;
        return !too_deep;
    };
    // Past the bound the callback discards every value, so nothing deep is ever built.
    json j = json::parse(text, guard, false);
    return too_deep ? json(json::value_t::discarded) : j;
}

ToolChoice parse_tool_choice(const std::string& text, std::string& name) {
    name.clear();
    if (text.empty())
        throw ToolError("Invalid 'tool_choice': empty; expected auto, none, required or a tool's name.", "tool_choice");
    if (text == "auto") return ToolChoice::Auto;
    if (text == "none") return ToolChoice::None;
    if (text == "required") return ToolChoice::Required;
    name = text;
    return ToolChoice::Named;
}

std::string forced_prompt(std::string rendered, const ToolPlan& plan) {
    if (!plan.forced) return rendered;
    // Templates open a "<think>" block in the prompt (QwQ, DeepSeek R1); Command R7B's none.
    if (prompt_opens_reasoning(rendered, think_tags())) rendered += "\n</think>\n\n";
    return rendered + plan.reply_prefix;
}

ToolPlan plan_tool_use(const ToolFormat& format, bool template_renders_tools, const json& tools, ToolChoice choice,
                       const std::string& name, bool parallel) {
    ToolPlan plan;
    if (choice == ToolChoice::Named && name.empty())
        throw ToolError("Invalid 'tool_choice.function.name': empty.", "tool_choice.function.name");
    const bool forced = choice == ToolChoice::Required || choice == ToolChoice::Named;
    if (tools.is_null() || (tools.is_array() && tools.empty())) {
        if (forced)
            throw ToolError("Invalid 'tool_choice': a tool must be called, but the request has no 'tools'.",
                            "tool_choice");
        return plan;
    }
    if (choice == ToolChoice::None) return plan;
    plan.parse_as = &format;
    plan.parallel = parallel;
    if (format.family == ToolFamily::Generic && !template_renders_tools) plan.system_text = tool_instructions(tools);
    // Parsed and started once here, so that every front end gets a grammar it can follow.
    auto followable = [](const std::string& gbnf) {
        auto g = std::make_shared<const grammar::Grammar>(grammar::Grammar::parse(gbnf));
        grammar::Matcher start(*g);
        return g;
    };
    if (forced) {
        ForcedCall fc = forced_call(format, tools, choice == ToolChoice::Named ? name : std::string(), parallel);
        plan.forced = true;
        plan.reply_prefix = std::move(fc.prompt_prefix);
        try {
            plan.grammar = followable(fc.gbnf);
        } catch (const grammar::GrammarError& e) {
            throw ToolError(
                fmt::format("Invalid 'tools': the parameters cannot be followed as a grammar: {}", e.what()), "tools");
        }
    } else if (LazyCall lc = lazy_call(format, tools, parallel); !lc.gbnf.empty()) {
        try {
            plan.grammar = followable(lc.gbnf);
            plan.triggers = std::move(lc.triggers);
        } catch (const grammar::GrammarError&) {
            // Too big to follow: the calls are parsed as written, as 'auto' promises no more.
        }
    }
    return plan;
}

std::string random_id_chars(size_t n) {
    static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    thread_local std::mt19937_64 rng{std::random_device{}()};
    std::uniform_int_distribution<size_t> pick(0, sizeof(kAlphabet) - 2);
    std::string out;
    for (size_t k = 0; k < n; ++k) out += kAlphabet[pick(rng)];
    return out;
}

std::string new_tool_call_id(ToolFamily family) {
    return detail::row_of(tool_format(family)).short_ids ? random_id_chars(9) : "call_" + random_id_chars(24);
}

json tool_call_deltas_json(const std::vector<CallDelta>& deltas) {
    json out = json::array();
    for (const CallDelta& d : deltas) {
        json c = json::object();
        c["index"] = d.index;
        json fn = json::object();
        if (!d.name.empty()) {
            c["id"] = d.id;
            c["type"] = "function";
            fn["name"] = d.name;
        }
        fn["arguments"] = d.arguments;
        c["function"] = std::move(fn);
        out.push_back(std::move(c));
    }
    return out;
}

json tool_calls_json(const std::vector<ToolCall>& calls, ToolFamily family, bool streamed) {
    json out = json::array();
    for (size_t i = 0; i < calls.size(); ++i) {
        json c = json::object();
        if (streamed) c["index"] = i;
        c["id"] = calls[i].id.empty() ? new_tool_call_id(family) : calls[i].id;
        c["type"] = "function";
        c["function"] = {{"name", calls[i].name}, {"arguments", calls[i].arguments}};
        out.push_back(std::move(c));
    }
    return out;
}

void arguments_as_objects(json& message) {
    if (!message.is_object() || !message.contains("tool_calls") || !message["tool_calls"].is_array()) return;
    for (json& call : message["tool_calls"]) {
        if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
        json& fn = call["function"];
        if (!fn.contains("arguments") || fn["arguments"].is_null()) {
            fn["arguments"] = json::object();
        } else if (fn["arguments"].is_string()) {
            const std::string& text = fn["arguments"].get_ref<const std::string&>();
            if (text.find_first_not_of(" \t\r\n") == std::string::npos) {  // "" : a call without arguments
                fn["arguments"] = json::object();
                continue;
            }
            json parsed = parse_json_bounded(text);
            if (!parsed.is_discarded()) fn["arguments"] = std::move(parsed);
        }
    }
}

void add_system_text(json& messages, const std::string& text) {
    if (text.empty()) return;
    if (!messages.empty() && messages[0].value("role", "") == "system" && messages[0].contains("content") &&
        messages[0]["content"].is_string())
        messages[0]["content"] = messages[0]["content"].get<std::string>() + "\n\n" + text;
    else
        messages.insert(messages.begin(), json{{"role", "system"}, {"content", text}});
}

}  // namespace vkllm::answer
