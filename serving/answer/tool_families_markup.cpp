// The families whose markup names the tool around one JSON object of arguments
// (ForceKind::NamedMarkup): Functionary v3.1 and v3.2, Mistral v11, DeepSeek R1 and V3.1, Kimi K2;
// and gpt-oss (ForceKind::NamedPrefix), whose replies HarmonyStream reads but whose calls' grammars
// are built the same way.
#include "serving/answer/harmony.h"
#include "serving/answer/tool_cursor.h"
#include "serving/answer/tool_family.h"
#include "serving/answer/tool_grammar.h"

#include <fmt/format.h>

#include <algorithm>

namespace vkllm::answer::detail {

namespace {

using grammar::gbnf_literal;

// DeepSeek's markers: full-width bars and U+2581 (the SentencePiece space) inside.
constexpr std::string_view kDsCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kDsCallsEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kDsCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kDsCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kDsSep = "<｜tool▁sep｜>";

// --- Functionary v3.1: <function=NAME>{...}</function> ------------------------------------------

void parse_functionary_v31(Cursor& c) {
    do {
        c.expect("<function=");
        const std::string name = c.until(">");
        c.add_call(name, c.value());
        c.expect_or_end("</function>");
        c.skip_ws();
    } while (c.ok() && c.next_is("<function="));
}

CallsMarkup functionary_v31_markup() {
    return {"<function=", "<function=", "", "markup-ws " + gbnf_literal("<function="), ""};
}

CallFrame functionary_v31_frame(const std::string& name, size_t) {
    return {gbnf_literal(name + ">"), gbnf_literal("</function>")};
}

constexpr NamedCalls kFunctionaryV31Calls{functionary_v31_markup, functionary_v31_frame, nullptr};

// --- Functionary v3.2: >>>all\nTEXT for the user, >>>NAME\n{...} for a call ---------------------

void parse_functionary_v32(Cursor& c) {
    // The reply's first part has no ">>>": the generation prompt ends with it.
    c.accept(">>>");
    do {
        const std::string name = c.until("\n");
        c.add_call(name, c.value());
        c.skip_ws();
        // ">>>all\n" goes back to the user: the text after it is the tail.
    } while (c.ok() && !c.next_is(">>>all\n") && c.accept(">>>"));
}

bool names_tool(const json& tools, std::string_view name) {
    if (!tools.is_array()) return !name.empty() && name.find_first_of(" \t\r{}<>") == std::string_view::npos;
    return offers_tool(tools, name);
}
bool may_begin_head(const json& tools, std::string_view name) {
    if (std::string_view("all").starts_with(name) || !tools.is_array()) return name.size() <= 64;
    return std::any_of(tools.begin(), tools.end(), [&](const json& t) {
        return t.contains("function") && std::string_view(t["function"].value("name", "")).starts_with(name);
    });
}

// Functionary v3.2 heads each part of a reply with its recipient after ">>>": "all\n" before
// text for the user, "NAME\n" before a call's arguments. ">>>" alone is no call marker (text may
// hold it: a Python prompt), so a head is read up to its newline: a user part's head is dropped
// from the pending text, a call's is where the call begins (returned; npos: none). `hold`: where a
// head begins that may still become either (npos: none).
size_t find_heads(const FamilyRow&, Pending& p, const json& tools, size_t& hold) {
    std::string& pending = p.text;
    hold = std::string::npos;
    for (size_t from = 0;;) {
        const bool first = p.head_at_start;
        const size_t at = first ? 0 : pending.find(">>>", from);
        if (at == std::string::npos) return at;
        if (!first && at + 3 < pending.size() && pending[at + 3] == '>') {
            // The head's ">>>" ends a run of '>': read the same however the run was split.
            from = at + 1;
            continue;
        }
        const size_t name_at = first ? 0 : at + 3;
        const size_t nl = pending.find('\n', name_at);
        const std::string_view name =
            std::string_view(pending).substr(name_at, nl == std::string::npos ? std::string::npos : nl - name_at);
        if (nl == std::string::npos && may_begin_head(tools, name)) {
            hold = at;
            return std::string::npos;
        }
        if (nl != std::string::npos && name != "all" && names_tool(tools, name)) return at;
        p.head_at_start = false;
        if (nl != std::string::npos && name == "all") {
            pending.erase(at, nl + 1 - at);
            from = at;
        } else {
            from = name_at;
        }
    }
}

// The generation prompt ends with ">>>", and every part of a reply begins with a head: a call's
// head cannot be told from the others' by a trigger.
CallsMarkup functionary_v32_markup() { return {"", "", "", gbnf_literal(">>>"), ""}; }

CallFrame functionary_v32_frame(const std::string& name, size_t index) {
    // ">>>all" heads the text for the user: a tool of that name could never be called.
    if (name == "all")
        throw ToolError(fmt::format("Invalid 'tools[{}].function.name': this model's format (functionary-v3.2) "
                                    "reserves 'all' for its answers to the user.",
                                    index),
                        fmt::format("tools[{}].function.name", index));
    return {gbnf_literal(name + "\n"), ""};
}

constexpr NamedCalls kFunctionaryV32Calls{functionary_v32_markup, functionary_v32_frame, nullptr};

LazyCall lazy_functionary_v32(const FamilyRow&, const json& tools, const std::vector<size_t>& all, bool many) {
    LazyCall lc;
    // Every part of a reply opens with a head naming its recipient ("all" for the user; the
    // first part's ">>>" is the prompt's): the heads that name a tool are the triggers.
    for (const size_t i : all) {
        const std::string& name = function_name(tools[i]);
        lc.triggers.push_back({name + "\n", true});
        lc.triggers.push_back({">>>" + name + "\n", false});
    }
    lc.gbnf = named_calls_gbnf(kFunctionaryV32Calls, tools, all, many, "(\">>>\")?");
    return lc;
}

// Markers that are control tokens in the vocabularies of the models below: a request with tools
// shows them, so its grammar may write them (TokenPieces).

// --- Mistral v11: [TOOL_CALLS]NAME[ARGS]{...} ----------------------------------------------------

void parse_mistral_v11(Cursor& c) {
    while (c.ok() && c.accept("[TOOL_CALLS]")) {
        const size_t args_at = c.rest().find("[ARGS]");
        const size_t id_at = c.rest().find("[CALL_ID]");
        std::string name, id;
        if (id_at != std::string_view::npos && id_at < args_at) {
            name = c.until("[CALL_ID]");
            id = c.until("[ARGS]");
        } else {
            name = c.until("[ARGS]");
        }
        c.add_call(name, c.value(), id);
        c.skip_ws();
    }
}

CallsMarkup mistral_v11_markup() {
    return {"[TOOL_CALLS]", "[TOOL_CALLS]", "", "markup-ws " + gbnf_literal("[TOOL_CALLS]"), ""};
}

// The call id is the client's to give; the model may write one it saw in the history.
CallFrame mistral_v11_frame(const std::string& name, size_t) {
    return {gbnf_literal(name) + " (\"[CALL_ID]\" [a-zA-Z0-9]{9})? \"[ARGS]\"", ""};
}

constexpr NamedCalls kMistralV11Calls{mistral_v11_markup, mistral_v11_frame, nullptr};

// --- DeepSeek: <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME ```json {...} ``` (R1), -----------
// --- <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...} (V3.1) -------------------------------------------

void parse_deepseek(Cursor& c, bool r1) {
    c.expect(kDsCallsBegin);
    do {
        c.skip_ws();
        c.expect(kDsCallBegin);
        std::string name;
        json args;
        if (r1) {
            c.accept("function");
            c.expect(kDsSep);
            name = c.until("\n");
            c.skip_ws();
            c.expect("```json");
            args = c.value();
            c.expect_or_end("```");
        } else {
            name = c.until(kDsSep);
            args = c.value();
        }
        c.add_call(name, std::move(args));
        c.expect_or_end(kDsCallEnd);
        c.skip_ws();
    } while (c.ok() && c.next_is(kDsCallBegin));
    c.expect_or_end(kDsCallsEnd);
}
void parse_deepseek_r1(Cursor& c) { parse_deepseek(c, true); }
void parse_deepseek_v31(Cursor& c) { parse_deepseek(c, false); }

// DeepSeek R1's template leaves the closing marker out after a single call.
CallsMarkup deepseek_markup() {
    const std::string ds_call = gbnf_literal(kDsCallBegin);
    return {std::string(kDsCallsBegin) + std::string(kDsCallBegin), std::string(kDsCallsBegin), "markup-ws " + ds_call,
            "markup-ws " + ds_call, "markup-ws " + gbnf_literal(kDsCallsEnd)};
}

CallFrame deepseek_r1_frame(const std::string& name, size_t) {
    return {gbnf_literal("function" + std::string(kDsSep) + name + "\n```json\n"),
            gbnf_literal("\n```" + std::string(kDsCallEnd))};
}
CallFrame deepseek_v31_frame(const std::string& name, size_t) {
    return {gbnf_literal(name + std::string(kDsSep)), gbnf_literal(std::string(kDsCallEnd))};
}

constexpr NamedCalls kDeepSeekR1Calls{deepseek_markup, deepseek_r1_frame, nullptr};
constexpr NamedCalls kDeepSeekV31Calls{deepseek_markup, deepseek_v31_frame, nullptr};

// --- Kimi K2: <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{...}

void parse_kimi_k2(Cursor& c) {
    c.expect("<|tool_calls_section_begin|>");
    do {
        c.skip_ws();
        c.expect("<|tool_call_begin|>");
        // "functions.NAME:INDEX" is also the call's id: the template writes it back that way
        // in the history, and the tool's result refers to it.
        const std::string id = c.until("<|tool_call_argument_begin|>");
        std::string_view name = id;
        if (name.starts_with("functions.")) name.remove_prefix(std::string_view("functions.").size());
        const size_t colon = name.rfind(':');
        if (colon != std::string_view::npos && colon + 1 < name.size() &&
            std::all_of(name.begin() + colon + 1, name.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
            name = name.substr(0, colon);
        c.add_call(std::string(name), c.value(), id);
        c.expect_or_end("<|tool_call_end|>");
        c.skip_ws();
    } while (c.ok() && c.next_is("<|tool_call_begin|>"));
    c.expect_or_end("<|tool_calls_section_end|>");
}

CallsMarkup kimi_k2_markup() {
    const std::string kimi_call = gbnf_literal("<|tool_call_begin|>");
    return {"<|tool_calls_section_begin|><|tool_call_begin|>", "<|tool_calls_section_begin|>", "markup-ws " + kimi_call,
            "markup-ws " + kimi_call, "markup-ws " + gbnf_literal("<|tool_calls_section_end|>")};
}

CallFrame kimi_k2_frame(const std::string& name, size_t) {
    return {gbnf_literal("functions." + name + ":") + " [0-9]{1,3} \"<|tool_call_argument_begin|>\"",
            gbnf_literal("<|tool_call_end|>")};
}

constexpr NamedCalls kKimiK2Calls{kimi_k2_markup, kimi_k2_frame, nullptr};

// --- gpt-oss (Harmony): a call is a message to functions.NAME ------------------------------------

void parse_harmony(Cursor& c) { c.fail(); }  // HarmonyStream's

// The rest of the call message's header after "to=functions." (rule harmony-head, the caller's);
// the body ends at <|call|>, an end of generation.
CallFrame harmony_frame(const std::string& name, size_t) { return {gbnf_literal(name) + " harmony-head", ""}; }

constexpr NamedCalls kHarmonyCalls{nullptr, harmony_frame, nullptr};

ForcedCall forced_harmony(const FamilyRow&, const json& tools, const std::vector<size_t>& chosen, bool) {
    // The call is a message whose header names the tool (its body ends at <|call|>, an end of
    // generation): forced_call() has made sure `chosen` is that one tool.
    const json& tool = tools[chosen[0]];
    const std::string& name = function_name(tool);
    ForcedCall fc;
    fc.prompt_prefix = "<|channel|>commentary to=functions." + name + " <|constrain|>json<|message|>";
    fc.gbnf = "root ::= tool-call\n" + call_rules(forced_parameters(tool, chosen[0]), chosen, false);
    return fc;
}

LazyCall lazy_harmony(const FamilyRow&, const json& tools, const std::vector<size_t>& all, bool) {
    // A call is a message whose header names the tool, before its channel (as the template
    // writes it) or after (as the model often does). One call ends the reply (<|call|>).
    LazyCall lc;
    lc.triggers = {{"to=functions.", false}};
    lc.gbnf =
        "root ::= \"to=functions.\" named-call\n"
        "harmony-head ::= (\"<|channel|>\" (\"commentary\" | \"analysis\"))? "
        "(\" \" \"<|constrain|>\"? \"json\" | \"<|constrain|>json\")? \"<|message|>\"\n" +
        named_call_rules(kHarmonyCalls, tools, all, {"root", "harmony-head"});
    return lc;
}

}  // namespace

// Detected before Hermes (Qwen3-Coder's template also holds "<function=").
constinit const FamilyRow kFunctionaryV31Row{
    .format = {ToolFamily::FunctionaryV31, "functionary-v3.1", "Functionary medium v3.1", ForceKind::NamedMarkup, true},
    .template_markers = {"<function=", nullptr},
    .call_marker = "<function=",
    .call_is_reply = false,
    .markup = {},
    .dropped = {},
    .parse = parse_functionary_v31,
    .find_call = find_marker,
    .scan = nullptr,
    .forced = forced_named,
    .lazy = lazy_named,
    .named = &kFunctionaryV31Calls,
};

// The call marker begins every part of the reply, a call or not: parts for the user are told
// apart while the stream reads them (find_heads).
constinit const FamilyRow kFunctionaryV32Row{
    .format = {ToolFamily::FunctionaryV32, "functionary-v3.2", "Functionary medium v3.2", ForceKind::NamedMarkup, true},
    .template_markers = {">>>all", nullptr},
    .call_marker = ">>>",
    .call_is_reply = false,
    .markup = {">>>"},
    .dropped = {},
    .parse = parse_functionary_v32,
    .find_call = find_heads,
    .scan = nullptr,
    .forced = forced_named,
    .lazy = lazy_functionary_v32,
    .named = &kFunctionaryV32Calls,
};

constinit const FamilyRow kMistralV11Row{
    .format = {ToolFamily::MistralV11, "mistral-v11", "Mistral Small 3.2, Magistral, Devstral", ForceKind::NamedMarkup,
               true},
    .template_markers = {"[TOOL_CALLS]", "[ARGS]"},
    .call_marker = "[TOOL_CALLS]",
    .call_is_reply = false,
    .markup = {"[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"},
    .dropped = {},
    .parse = parse_mistral_v11,
    .find_call = find_marker,
    .scan = nullptr,
    .forced = forced_named,
    .lazy = lazy_named,
    .named = &kMistralV11Calls,
    .short_ids = true,
};

constinit const FamilyRow kDeepSeekR1Row{
    .format = {ToolFamily::DeepSeekR1, "deepseek-r1", "DeepSeek R1 and its distills", ForceKind::NamedMarkup, true},
    .template_markers = {"tool▁calls▁begin", "```json"},
    .call_marker = "<｜tool▁calls▁begin｜>",
    .call_is_reply = false,
    .markup = {"<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>",
               "<｜tool▁sep｜>"},
    .dropped = {},
    .parse = parse_deepseek_r1,
    .find_call = find_marker,
    .scan = nullptr,
    .forced = forced_named,
    .lazy = lazy_named,
    .named = &kDeepSeekR1Calls,
};

constinit const FamilyRow kDeepSeekV31Row{
    .format = {ToolFamily::DeepSeekV31, "deepseek-v3.1", "DeepSeek V3 / V3.1", ForceKind::NamedMarkup, true},
    .template_markers = {"tool▁calls▁begin", nullptr},
    .call_marker = "<｜tool▁calls▁begin｜>",
    .call_is_reply = false,
    .markup = {"<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>",
               "<｜tool▁sep｜>"},
    .dropped = {},
    .parse = parse_deepseek_v31,
    .find_call = find_marker,
    .scan = nullptr,
    .forced = forced_named,
    .lazy = lazy_named,
    .named = &kDeepSeekV31Calls,
};

constinit const FamilyRow kKimiK2Row{
    .format = {ToolFamily::KimiK2, "kimi-k2", "Kimi K2", ForceKind::NamedMarkup, true},
    .template_markers = {"tool_calls_section", nullptr},
    .call_marker = "<|tool_calls_section_begin|>",
    .call_is_reply = false,
    .markup = {"<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
               "<|tool_call_argument_begin|>", "<|tool_call_end|>"},
    .dropped = {},
    .parse = parse_kimi_k2,
    .find_call = find_marker,
    .scan = nullptr,
    .forced = forced_named,
    .lazy = lazy_named,
    .named = &kKimiK2Calls,
};

// Harmony replies are read by HarmonyStream (harmony.h), not by ReplyStream: this row names the
// format; its markers are harmony_markup()'s.
constinit const FamilyRow kHarmonyRow{
    .format = {ToolFamily::Harmony, "gpt-oss", "gpt-oss (Harmony)", ForceKind::NamedPrefix, true},
    .template_markers = {"<|channel|>", nullptr},
    .call_marker = nullptr,
    .call_is_reply = false,
    .markup = {},
    .dropped = {},
    .parse = parse_harmony,
    .find_call = find_marker,
    .scan = nullptr,
    .forced = forced_harmony,
    .lazy = lazy_harmony,
    .named = &kHarmonyCalls,
    .short_ids = false,
    .markup_of = harmony_markup,
};

}  // namespace vkllm::answer::detail
