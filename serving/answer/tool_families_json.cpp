// The families whose calls are JSON objects naming the tool (ForceKind::CallObject): Hermes,
// Llama 3, Mistral Nemo, Granite, the generic format, and Cohere's Command R+ and R7B. One schema
// holds a forced call, each tool's parameters under its $defs; most of these calls can be followed
// while they are written (ObjectScan).
#include "serving/answer/tool_cursor.h"
#include "serving/answer/tool_family.h"
#include "serving/answer/tool_grammar.h"

namespace vkllm::answer::detail {

namespace {

// The action Command R+'s tool-use template offers besides the request's tools: no tool is needed.
constexpr const char* kDirectlyAnswer = "directly-answer";

// A forced call: `prefix` in the prompt, then `root` over rule tool-call, a sentence of `schema`.
ForcedCall forced_object(std::string prefix, const std::string& root, const json& schema,
                         const std::vector<size_t>& chosen) {
    return {std::move(prefix), root + "\n" + call_rules(schema, chosen, true)};
}

// tool_choice auto: `root` from a trigger on. Markup around the JSON is written by the model here:
// whitespace as its template may put it.
LazyCall lazy_object(std::vector<grammar::Trigger> triggers, const std::string& root, const json& schema,
                     const std::vector<size_t>& all) {
    return {root + "\nmarkup-ws ::= [ \\t\\n]{0,8}\n" + call_rules(schema, all, true), std::move(triggers)};
}

// A list of call objects after a marker (Mistral Nemo, Granite).
void parse_marked_list(Cursor& c, std::string_view marker) {
    c.expect(marker);
    const json list = c.value();
    if (!list.is_array() || list.empty()) c.fail();
    for (size_t i = 0; c.ok() && i < list.size(); ++i) c.add_call_object(list[i], "arguments");
}

// --- Hermes: <tool_call>{"name", "arguments"}</tool_call> ---------------------------------------

constexpr CallObjectShape kHermesShape{"name", "arguments", CallList::One, false, false};
constexpr ObjectScan kHermesScan{{"<tool_call>"}, false, "\"arguments\"", {"}", "</tool_call>", "<tool_call>"}, false};

void parse_hermes(Cursor& c) {
    do {
        c.expect("<tool_call>");
        c.add_call_object(c.value(), "arguments");
        c.expect_or_end("</tool_call>");
        c.skip_ws();
    } while (c.ok() && c.next_is("<tool_call>"));
}

ForcedCall forced_hermes(const FamilyRow&, const json& tools, const std::vector<size_t>& chosen, bool many) {
    const json schema = call_object_schema(kHermesShape, tools, chosen, many);
    std::string root = "root ::= tool-call \"\\n</tool_call>\"";
    if (many) root += " (\"\\n<tool_call>\\n\" tool-call \"\\n</tool_call>\")*";
    return forced_object("<tool_call>\n", root, schema, chosen);
}

LazyCall lazy_hermes(const FamilyRow&, const json& tools, const std::vector<size_t>& all, bool many) {
    const std::string root =
        "root ::= tool-call-markup" + std::string(many ? " (markup-ws tool-call-markup)*" : "") +
        " markup-ws\ntool-call-markup ::= \"<tool_call>\" markup-ws tool-call markup-ws \"</tool_call>\"";
    return lazy_object({{"<tool_call>", false}}, root, call_object_schema(kHermesShape, tools, all, many), all);
}

// --- Llama 3: {"name", "parameters"} as the whole reply, or after <|python_tag|> -----------------

constexpr CallObjectShape kLlama3Shape{"name", "parameters", CallList::One, false, false};
constexpr ObjectScan kLlama3Scan{{"<|python_tag|>"}, true, "\"parameters\"", {"}", ";"}, false};

void parse_llama3(Cursor& c) {
    c.accept("<|python_tag|>");
    do {
        c.add_call_object(c.value(), "parameters", "arguments", false);
        c.skip_ws();
    } while (c.ok() && c.accept(";"));
    if (!c.at_end()) c.fail();  // the calls are the whole reply: text after them makes it an answer
}

ForcedCall forced_llama3(const FamilyRow&, const json& tools, const std::vector<size_t>& chosen, bool many) {
    return forced_object("", "root ::= tool-call", call_object_schema(kLlama3Shape, tools, chosen, many), chosen);
}

LazyCall lazy_llama3(const FamilyRow&, const json& tools, const std::vector<size_t>& all, bool many) {
    // Not any answer that opens with '{': one that asks for JSON is no call.
    return lazy_object({{"<|python_tag|>", false}, {"{\"name\"", true}, {"{ \"name\"", true}},
                       "root ::= (\"<|python_tag|>\" markup-ws)? tool-call markup-ws",
                       call_object_schema(kLlama3Shape, tools, all, many), all);
}

// --- Mistral Nemo: [TOOL_CALLS][{"name", "arguments", "id"}] ------------------------------------

constexpr CallObjectShape kMistralNemoShape{"name", "arguments", CallList::Array, false, true};
constexpr ObjectScan kMistralNemoScan{{"[TOOL_CALLS]", "["}, false, "\"arguments\"", {"}", ","}, true};

void parse_mistral_nemo(Cursor& c) { parse_marked_list(c, "[TOOL_CALLS]"); }

ForcedCall forced_mistral_nemo(const FamilyRow&, const json& tools, const std::vector<size_t>& chosen, bool many) {
    return forced_object("[TOOL_CALLS]", "root ::= tool-call",
                         call_object_schema(kMistralNemoShape, tools, chosen, many), chosen);
}

LazyCall lazy_mistral_nemo(const FamilyRow&, const json& tools, const std::vector<size_t>& all, bool many) {
    return lazy_object({{"[TOOL_CALLS]", false}}, "root ::= \"[TOOL_CALLS]\" markup-ws tool-call markup-ws",
                       call_object_schema(kMistralNemoShape, tools, all, many), all);
}

// --- Granite: <|tool_call|>[{"name", "arguments"}, ...] ------------------------------------------

constexpr CallObjectShape kGraniteShape{"name", "arguments", CallList::Array, false, false};
constexpr ObjectScan kGraniteScan{{"<|tool_call|>", "["}, false, "\"arguments\"", {"}", ","}, false};

void parse_granite(Cursor& c) { parse_marked_list(c, "<|tool_call|>"); }

ForcedCall forced_granite(const FamilyRow&, const json& tools, const std::vector<size_t>& chosen, bool many) {
    return forced_object("<|tool_call|>", "root ::= tool-call", call_object_schema(kGraniteShape, tools, chosen, many),
                         chosen);
}

LazyCall lazy_granite(const FamilyRow&, const json& tools, const std::vector<size_t>& all, bool many) {
    return lazy_object({{"<|tool_call|>", false}}, "root ::= \"<|tool_call|>\" markup-ws tool-call markup-ws",
                       call_object_schema(kGraniteShape, tools, all, many), all);
}

// --- Command R+: Action:\n```json\n[{"tool_name", "parameters"}, ...]``` ------------------------

constexpr CallObjectShape kCommandRPlusShape{"tool_name", "parameters", CallList::Array, false, false};

void parse_command_r_plus(Cursor& c) {
    c.expect("Action:");
    c.skip_ws();
    // The template fences the list; a model may leave the fence out.
    const bool fenced = c.accept("```json") || c.accept("```");
    // An answer whose only action is "directly-answer" has no call: it is content, as written
    // (the template's flow answers in a turn of its own, which the request did not ask for).
    c.add_actions(c.value(), kDirectlyAnswer);
    if (fenced) c.expect_or_end("```");
}

ForcedCall forced_command_r_plus(const FamilyRow&, const json& tools, const std::vector<size_t>& chosen, bool many) {
    return forced_object("Action:\n```json\n", "root ::= tool-call \"\\n```\"",
                         call_object_schema(kCommandRPlusShape, tools, chosen, many), chosen);
}

LazyCall lazy_command_r_plus(const FamilyRow&, const json& tools, const std::vector<size_t>& all, bool many) {
    json schema = call_object_schema(kCommandRPlusShape, tools, all, many);
    // Command R+'s template offers a "directly-answer" action of its own, which the model writes
    // when no tool is needed: the grammar lets it (the parser takes it for no call).
    if (!offers_tool(tools, kDirectlyAnswer)) {
        json& items = schema["items"];
        if (!items.contains("anyOf")) items = json{{"anyOf", json::array({items})}};
        items["anyOf"].push_back({{"type", "object"},
                                  {"properties",
                                   {{"tool_name", {{"const", kDirectlyAnswer}}},
                                    {"parameters", {{"type", "object"}, {"additionalProperties", false}}}}},
                                  {"required", {"tool_name"}},
                                  {"additionalProperties", false}});
    }
    // The template asks for "Action:" in every answer, fenced or not (as the parser reads it).
    return lazy_object({{"Action:", false}},
                       "root ::= \"Action:\" markup-ws (\"```\" \"json\"? markup-ws tool-call markup-ws \"```\" | "
                       "tool-call) markup-ws",
                       schema, all);
}

// --- Command R7B: <|START_ACTION|>[{"tool_call_id", "tool_name", "parameters"}, ...]<|END_ACTION|> --

constexpr CallObjectShape kCommandR7BShape{"tool_name", "parameters", CallList::Array, true, false};

void parse_command_r7b(Cursor& c) {
    // Its "tool_call_id" is the call's place in the conversation, which the template counts
    // itself: not an id to give back.
    c.expect("<|START_ACTION|>");
    c.add_actions(c.value());
    c.skip_ws();
    c.expect_or_end("<|END_ACTION|>");
}

ForcedCall forced_command_r7b(const FamilyRow&, const json& tools, const std::vector<size_t>& chosen, bool many) {
    return forced_object("<|START_ACTION|>", "root ::= [ \\t\\n]{0,8} tool-call [ \\t\\n]{0,8} \"<|END_ACTION|>\"",
                         call_object_schema(kCommandR7BShape, tools, chosen, many), chosen);
}

LazyCall lazy_command_r7b(const FamilyRow&, const json& tools, const std::vector<size_t>& all, bool many) {
    return lazy_object({{"<|START_ACTION|>", false}},
                       "root ::= \"<|START_ACTION|>\" markup-ws tool-call markup-ws \"<|END_ACTION|>\" markup-ws",
                       call_object_schema(kCommandR7BShape, tools, all, many), all);
}

// --- generic: {"tool_calls": [{"name", "arguments"}]} as the whole reply -------------------------

constexpr CallObjectShape kGenericShape{"name", "arguments", CallList::ToolCalls, false, false};
constexpr ObjectScan kGenericScan{{"{", "\"tool_calls\"", ":", "["}, false, "\"arguments\"", {"}", ","}, false};

void parse_generic(Cursor& c) {
    const json obj = c.value();
    if (!obj.is_object() || obj.size() != 1 || !obj.contains("tool_calls") || !obj["tool_calls"].is_array() ||
        obj["tool_calls"].empty())
        c.fail();
    for (size_t i = 0; c.ok() && i < obj["tool_calls"].size(); ++i)
        c.add_call_object(obj["tool_calls"][i], "arguments");
}

ForcedCall forced_generic(const FamilyRow&, const json& tools, const std::vector<size_t>& chosen, bool many) {
    return forced_object("", "root ::= tool-call", call_object_schema(kGenericShape, tools, chosen, many), chosen);
}

LazyCall lazy_generic(const FamilyRow&, const json& tools, const std::vector<size_t>& all, bool many) {
    return lazy_object({{"{\"tool_calls\"", true}, {"{ \"tool_calls\"", true}}, "root ::= tool-call markup-ws",
                       call_object_schema(kGenericShape, tools, all, many), all);
}

}  // namespace

constinit const FamilyRow kHermesRow{
    .format = {ToolFamily::Hermes, "hermes", "Hermes 2 Pro / 3, Qwen2.5, Qwen3, QwQ", ForceKind::CallObject, true},
    .template_markers = {"<tool_call>", nullptr},
    .call_marker = "<tool_call>",
    .call_is_reply = false,
    .markup = {"<tool_call>", "</tool_call>"},
    .dropped = {},
    .parse = parse_hermes,
    .find_call = find_marker,
    .scan = &kHermesScan,
    .forced = forced_hermes,
    .lazy = lazy_hermes,
};

constinit const FamilyRow kLlama3Row{
    .format = {ToolFamily::Llama3, "llama3", "Llama 3.1, 3.2, 3.3", ForceKind::CallObject, false},
    .template_markers = {"<|start_header_id|>", "ipython"},
    .call_marker = "<|python_tag|>",
    .call_is_reply = true,
    .markup = {"<|python_tag|>"},
    .dropped = {},
    .parse = parse_llama3,
    .find_call = find_marker,
    .scan = &kLlama3Scan,
    .forced = forced_llama3,
    .lazy = lazy_llama3,
};

constinit const FamilyRow kMistralNemoRow{
    .format = {ToolFamily::MistralNemo, "mistral-nemo", "Mistral Nemo, Mistral 7B v0.3", ForceKind::CallObject, true},
    .template_markers = {"[TOOL_CALLS]", nullptr},
    .call_marker = "[TOOL_CALLS]",
    .call_is_reply = false,
    .markup = {"[TOOL_CALLS]"},
    .dropped = {},
    .parse = parse_mistral_nemo,
    .find_call = find_marker,
    .scan = &kMistralNemoScan,
    .forced = forced_mistral_nemo,
    .lazy = lazy_mistral_nemo,
    .named = nullptr,
    .short_ids = true,
};

constinit const FamilyRow kGraniteRow{
    .format = {ToolFamily::Granite, "granite", "IBM Granite 3", ForceKind::CallObject, true},
    .template_markers = {"<|tool_call|>", nullptr},
    .call_marker = "<|tool_call|>",
    .call_is_reply = false,
    .markup = {"<|tool_call|>"},
    .dropped = {},
    .parse = parse_granite,
    .find_call = find_marker,
    .scan = &kGraniteScan,
    .forced = forced_granite,
    .lazy = lazy_granite,
};

// Command R7B's template also has Command R+'s turn tokens, but its calls are another format. Its
// plan (<|START_THINKING|>) is a reasoning block (reasoning.h); the markers are control tokens.
constinit const FamilyRow kCommandR7BRow{
    .format = {ToolFamily::CommandR7B, "command-r7b", "Command R7B", ForceKind::CallObject, true},
    .template_markers = {"<|START_ACTION|>", nullptr},
    .call_marker = "<|START_ACTION|>",
    .call_is_reply = false,
    .markup = {"<|START_ACTION|>", "<|END_ACTION|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_THINKING|>",
               "<|END_THINKING|>"},
    .dropped = {"<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_THINKING|>", "<|END_THINKING|>"},
    .parse = parse_command_r7b,
    .find_call = find_marker,
    .scan = nullptr,
    .forced = forced_command_r7b,
    .lazy = lazy_command_r7b,
};

constinit const FamilyRow kCommandRPlusRow{
    .format = {ToolFamily::CommandRPlus, "command-r-plus", "Command R / R+ (tool-use template)", ForceKind::CallObject,
               true},
    .template_markers = {"START_OF_TURN_TOKEN", "Action:"},
    .call_marker = "Action:",
    .call_is_reply = false,
    .markup = {"Action:"},
    .dropped = {},
    .parse = parse_command_r_plus,
    .find_call = find_marker,
    .scan = nullptr,
    .forced = forced_command_r_plus,
    .lazy = lazy_command_r_plus,
};

constinit const FamilyRow kGenericRow{
    .format = {ToolFamily::Generic, "generic", "every other template", ForceKind::CallObject, true},
    .template_markers = {nullptr, nullptr},
    .call_marker = nullptr,
    .call_is_reply = true,
    .markup = {},
    .dropped = {},
    .parse = parse_generic,
    .find_call = find_marker,
    .scan = &kGenericScan,
    .forced = forced_generic,
    .lazy = lazy_generic,
};

}  // namespace vkllm::answer::detail
