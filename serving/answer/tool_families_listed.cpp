// The families that list each argument of a call in markup, string values bare (ValueForm):
// Qwen3-Coder and GLM-4.5 / 4.6. Their grammars hold one parameter after another in the order of
// the tool's `properties` (tool_grammar.h's ListedArgs).
#include "serving/answer/tool_cursor.h"
#include "serving/answer/tool_family.h"
#include "serving/answer/tool_grammar.h"

namespace vkllm::answer::detail {

namespace {

// --- Qwen3-Coder: <tool_call><function=NAME><parameter=KEY>VALUE</parameter>... ------------------

void parse_qwen_coder(Cursor& c) {
    do {
        c.expect("<tool_call>");
        c.skip_ws();
        c.expect("<function=");
        const std::string name = c.until(">");
        const json* params = c.tool_parameters(name);
        json args = json::object();
        for (c.skip_ws(); c.ok() && c.accept("<parameter=");) {
            const std::string key = c.until(">");
            // The template writes "\n" around each value: one on each side is markup.
            if (!read_tagged_arg(c, key, "</parameter>", true, params, args)) break;
        }
        c.expect_or_end("</function>");
        c.add_call(name, std::move(args));
        c.expect_or_end("</tool_call>");
        c.skip_ws();
    } while (c.ok() && c.next_is("<tool_call>"));
}

CallsMarkup qwen_coder_markup() {
    return {"<tool_call>\n", "<tool_call>", "markup-ws",
            "markup-ws " + grammar::gbnf_literal("<tool_call>") + " markup-ws", ""};
}

constexpr ListedArgs kQwenCoderArgs{
    "<function=", ">\n", "<parameter=", ">\n", "\n</parameter>\n", "</parameter>", "</function>\n</tool_call>", true};
constexpr NamedCalls kQwenCoderCalls{qwen_coder_markup, nullptr, &kQwenCoderArgs};

// --- GLM-4.5 / 4.6: <tool_call>NAME\n<arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>...</tool_call>

void parse_glm45(Cursor& c) {
    do {
        c.expect("<tool_call>");
        // The name ends its line; a call without arguments may close right after it.
        const std::string_view rest = c.rest();
        const size_t name_end = std::min(rest.find("<arg_key>"), rest.find("</tool_call>"));
        if (name_end == std::string_view::npos) c.fail();
        const std::string name(trim(rest.substr(0, name_end)));
        c.expect(rest.substr(0, name_end));
        const json* params = c.tool_parameters(name);
        json args = json::object();
        while (c.ok() && c.accept("<arg_key>")) {
            const std::string key = c.until("</arg_key>");
            c.skip_ws();
            c.expect("<arg_value>");
            // The template writes a value as it is between the tags, strings bare (as
            // Qwen3-Coder's does).
            if (!read_tagged_arg(c, key, "</arg_value>", false, params, args)) break;
        }
        c.add_call(name, std::move(args));
        c.expect_or_end("</tool_call>");
        c.skip_ws();
    } while (c.ok() && c.next_is("<tool_call>"));
}

CallsMarkup glm45_markup() {
    return {"<tool_call>", "<tool_call>", "", "markup-ws " + grammar::gbnf_literal("<tool_call>"), ""};
}

constexpr ListedArgs kGlm45Args{
    "", "\n", "<arg_key>", "</arg_key>\n<arg_value>", "</arg_value>\n", "</arg_value>", "</tool_call>", false};
constexpr NamedCalls kGlm45Calls{glm45_markup, nullptr, &kGlm45Args};

}  // namespace

// Detected before Hermes: their templates also hold "<tool_call>".
constinit const FamilyRow kQwenCoderRow{
    .format = {ToolFamily::QwenCoder, "qwen3-coder", "Qwen3-Coder", ForceKind::NamedMarkup, true},
    .template_markers = {"<function=", "<parameter="},
    .call_marker = "<tool_call>",
    .call_is_reply = false,
    .markup = {"<tool_call>", "</tool_call>"},
    .dropped = {},
    .parse = parse_qwen_coder,
    .find_call = find_marker,
    .scan = nullptr,
    .forced = forced_named,
    .lazy = lazy_named,
    .named = &kQwenCoderCalls,
};

constinit const FamilyRow kGlm45Row{
    .format = {ToolFamily::Glm45, "glm-4.5", "GLM-4.5 / 4.6", ForceKind::NamedMarkup, true},
    .template_markers = {"<arg_key>", nullptr},
    .call_marker = "<tool_call>",
    .call_is_reply = false,
    .markup = {"<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"},
    .dropped = {},
    .parse = parse_glm45,
    .find_call = find_marker,
    .scan = nullptr,
    .forced = forced_named,
    .lazy = lazy_named,
    .named = &kGlm45Calls,
};

}  // namespace vkllm::answer::detail
