// Tool calls as each model family writes them: which family a chat template speaks (detected from
// its source), how its replies split into content and calls (whole or streamed), and how a call is
// forced when the client requires one (a prompt prefix that opens the call plus a grammar for the
// rest, arguments following each tool's parameter schema).
//
// The families are rows of one table (tool_formats(); docs/structured-output.md lists them). A
// reply is parsed by one ReplyStream whether it arrives whole or token by token, so both give the
// same content and calls by construction. Call markup never reaches the content: text that may
// begin a call marker is held back until the next text decides it, and calls that turn out
// malformed (bad JSON, an unknown tool, arguments that are not an object) come back as content: all
// the markup from the first call marker on, never a part of the calls.
#pragma once

#include "model/grammar/grammar.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace vkllm::answer {

enum class ToolFamily {
    Generic,  // no native format: the reply is {"tool_calls": [{"name", "arguments"}]}
    Hermes,  // Hermes 2/3, Qwen2.5, Qwen3, QwQ: <tool_call>{"name", "arguments"}</tool_call>
    QwenCoder,  // Qwen3-Coder: <tool_call><function=NAME><parameter=KEY>VALUE</parameter>...
    Llama3,  // Llama 3.1-3.3: {"name", "parameters"} as the whole reply, or after <|python_tag|>
    MistralNemo,  // [TOOL_CALLS][{"name", "arguments", "id"}]
    MistralV11,  // Mistral Small 3.2: [TOOL_CALLS]NAME[ARGS]{...}
    DeepSeekR1,  // <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME ```json {...} ```
    DeepSeekV31,  // <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}
    FunctionaryV31,  // <function=NAME>{...}</function>
    FunctionaryV32,  // >>>all\nTEXT for the user, >>>NAME\n{...} for a call (the prompt ends with ">>>")
    Granite,  // IBM Granite 3: <|tool_call|>[{"name", "arguments"}, ...]
    KimiK2,  // <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{...}...
    Glm45,  // GLM-4.5/4.6: <tool_call>NAME\n<arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>...</tool_call>
    CommandRPlus,  // Action:\n```json\n[{"tool_name", "parameters"}, ...]```
    CommandR7B,  // <|START_ACTION|>[{"tool_call_id", "tool_name", "parameters"}, ...]<|END_ACTION|>; text for the
    // user between <|START_RESPONSE|> and <|END_RESPONSE|> (dropped from the content)
    Harmony,  // gpt-oss: a reply of messages whose headers say where each body goes; calls are
    // messages to functions.NAME. Read by HarmonyStream (harmony.h), reasoning and all.
};

// How a client's required call is forced in a family.
enum class ForceKind {
    CallObject,  // the call is JSON naming its tool: any tool set, one grammar
    NamedMarkup,  // markup names the tool (text, or control tokens the request speaks; Qwen3-Coder's and
    // GLM's each parameter too, string values bare): any tool set, a branch per tool
    NamedPrefix,  // the tool's name is in a header the prompt holds (gpt-oss): one tool only, named there
};

struct ToolFormat {
    ToolFamily family;
    const char* name;  // "hermes", in logs, errors and docs
    const char* models;  // who writes it
    ForceKind force;
    bool parallel;  // the format can hold several calls in one reply
};

// The table, in detection order.
std::span<const ToolFormat> tool_formats();
const ToolFormat& tool_format(ToolFamily f);
// The family a template speaks, from markers in its source; Generic when it has none (then the
// template does not render `tools` itself, and tool_instructions() tells the model).
const ToolFormat& detect_tool_format(std::string_view template_source);
// Whether the template source renders the `tools` variable at all.
bool template_renders_tools(std::string_view template_source);
// The marker texts of the format ("[TOOL_CALLS]", "<｜tool▁sep｜>", ...). A vocabulary may have them
// as control tokens, which generated text hides unless asked to show them.
std::vector<std::string> tool_markup(const ToolFormat& format);

class ToolError : public std::invalid_argument {
public:
    // param: the request field at fault ("tools[1].function.parameters", "tool_choice", ...).
    ToolError(const std::string& what, std::string param);
    const std::string& param() const { return param_; }

private:
    std::string param_;
};

// OpenAI's `tools` checked: an array of {"type": "function", "function": {"name", "description"?,
// "parameters"?}}. ToolError naming the field otherwise, or for two tools with one name.
void check_tools(const nlohmann::ordered_json& tools);

// Whether `tools` (a request's tools) offers a function named `name`; true for null or any other
// non-array (no tool list to check against).
bool offers_tool(const nlohmann::ordered_json& tools, std::string_view name);

struct ToolCall {
    std::string id;  // the model's own id where the format has one (Mistral's; Kimi K2's "functions.NAME:IDX"), else ""
    std::string name;
    std::string arguments;  // compact JSON text of an object
};

// One piece of a call as a stream sends it (OpenAI's tool-call deltas): a call's first delta has
// its id and name, later ones only the next fragment of its arguments.
struct CallDelta {
    size_t index = 0;
    std::string id, name;  // the first delta of a call only ("" after)
    std::string arguments;  // the next fragment of the arguments' JSON text
};

// The content and calls of one reply. Feed the generated text in any pieces; push() returns the
// content that can be shown now, finish() the rest and the calls.
class ReplyStream {
public:
    // `tools`: the request's tools (calls naming any other tool are malformed); `prefix`: text the
    // server put at the start of the reply in the prompt (a forced call's opening markup), parsed as
    // if the model had written it.
    // `parallel` false: only the first call is kept (parallel_tool_calls).
    ReplyStream(const ToolFormat& format, nlohmann::ordered_json tools, std::string prefix = {}, bool parallel = true);
    ~ReplyStream();
    ReplyStream(ReplyStream&&) noexcept;
    ReplyStream& operator=(ReplyStream&&) noexcept;

    std::string push(std::string_view text);
    struct Rest {
        std::string content;
        std::vector<ToolCall> calls;
        std::vector<CallDelta> deltas;  // with stream_arguments(): what completes the calls after take_deltas()
    };
    // `cut`: the generation was cut short (max_tokens): a call left unfinished is dropped and the
    // calls before it kept, rather than the whole markup coming back as content.
    Rest finish(bool cut = false);

    // Calls go out while they are written: take_deltas() after each push() gives the calls begun
    // (id and name once the name is written) and their argument fragments since; finish()'s deltas
    // complete them, and the fragments of a call add up to its `arguments`. Only for families whose
    // calls are JSON objects naming the tool first (hermes, llama3, mistral-nemo, granite, generic; a no-op
    // elsewhere), and only where a grammar holds the calls (a call, once begun, then ends well
    // formed unless the generation is cut inside it: finish() then gives no calls and, since the
    // markup went out as that call's deltas, no content for it).
    void stream_arguments();
    bool streams_arguments() const;
    std::vector<CallDelta> take_deltas();

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// Whole text at once: the content (what push() and finish() released, joined) and the calls.
ReplyStream::Rest parse_reply(const ToolFormat& format, const nlohmann::ordered_json& tools, std::string_view text);

// A required call: `prompt_prefix` goes after the rendered prompt (the model continues inside the
// call), and the generated text must be a sentence of `gbnf`. `only` names the tool of a named
// tool_choice ("" for any). ToolError when the family cannot force this choice or a tool's
// parameters are outside the schema subset (param names the field); in the families that write
// string arguments bare (Qwen3-Coder, GLM), also for string constraints other than enum / const and
// object keywords beyond properties / required.
struct ForcedCall {
    std::string prompt_prefix;
    std::string gbnf;
};
ForcedCall forced_call(const ToolFormat& format, const nlohmann::ordered_json& tools, const std::string& only,
                       bool parallel);

// tool_choice 'auto': a grammar for the calls the model may write, lazy (grammar::LazyStart): it holds
// from the family's call marker on (or from a reply that opens with '{"name"' / '{"tool_calls"' where the call is the whole
// reply), so a call, once begun, follows its tool's parameters; text before it is free. Markers that
// are control tokens (Mistral v11's, DeepSeek's, Kimi K2's, gpt-oss's) count as their text: the
// request shows them. Functionary v3.2 starts at a head that names a tool ("NAME\n" at the start,
// ">>>NAME\n" after), gpt-oss at a header's "to=functions.", Command R+ at "Action:" (its template's
// own "directly-answer" action allowed). Empty (no gbnf) for tools whose parameters are outside the
// schema subset: those calls are parsed as written.
struct LazyCall {
    std::string gbnf;
    std::vector<grammar::Trigger> triggers;
};
LazyCall lazy_call(const ToolFormat& format, const nlohmann::ordered_json& tools, bool parallel);

// For the Generic family with a template that does not render tools: a system-prompt text listing
// the tools and the reply shape that calls them.
std::string tool_instructions(const nlohmann::ordered_json& tools);

// tool_choice: 'auto' (the model may call), 'none' (it may not: replies are not parsed), 'required'
// (it must call one of the tools), or a named function (it must call that one).
enum class ToolChoice { Auto, None, Required, Named };

// What a chat request with tools needs, decided once for every front end (server, C API, CLI).
struct ToolPlan {
    const ToolFormat* parse_as = nullptr;  // replies are parsed in this family; null: plain content
    bool forced = false;  // a call is required: the reply is the call
    std::string reply_prefix;  // forced: the prompt ends with it, the reply starts with it
    // forced: the grammar of the rest of the reply; auto: of the calls, from a trigger on (lazy_call);
    // null: none.
    std::shared_ptr<const grammar::Grammar> grammar;
    std::vector<grammar::Trigger> triggers;  // auto: where `grammar` starts to hold; empty when forced
    std::string system_text;  // for the system message (Generic tools the template cannot show)
    bool parallel = true;  // several calls may be kept (parallel_tool_calls)
};
// `tools` checked (check_tools) and not empty, or null. ToolError (param names the field) for a choice
// the family cannot force.
ToolPlan plan_tool_use(const ToolFormat& format, bool template_renders_tools, const nlohmann::ordered_json& tools,
                       ToolChoice choice, const std::string& name, bool parallel);
// `n` random ASCII letters and digits: the random part of response and call ids.
std::string random_id_chars(size_t n);
// A fresh call id: "call_" and 24 letters and digits, or the 9 letters and digits Mistral's
// templates insist on.
std::string new_tool_call_id(ToolFamily family);
// OpenAI's tool_calls ([{"id", "type": "function", "function": {"name", "arguments"}}]) of `calls`,
// ids made where the model gave none; `streamed`: each with its "index", as stream deltas have it.
nlohmann::ordered_json tool_calls_json(const std::vector<ToolCall>& calls, ToolFamily family, bool streamed);
// OpenAI's tool_calls deltas of a stream chunk.
nlohmann::ordered_json tool_call_deltas_json(const std::vector<CallDelta>& deltas);
// An assistant message's function.arguments given as OpenAI's JSON text become the object chat
// templates read (Hugging Face's convention); text that is not JSON stays as it is.
void arguments_as_objects(nlohmann::ordered_json& message);

// JSON text parsed with nesting bounded (copying or rendering a value nested 100,000 deep would
// overflow the stack); discarded (is_discarded()) when it is not JSON or nests deeper than 64.
nlohmann::ordered_json parse_json_bounded(std::string_view text);

// tool_choice as text ("auto", "none", "required", or a tool's name), for the C API and the CLI.
// ToolError for "".
ToolChoice parse_tool_choice(const std::string& text, std::string& name);

// The prompt text of a request with `plan`: `rendered` (the template's output) with the forced
// call's opening markup after it; a reasoning block the template left open is closed first, since
// a forced call is the whole answer.
std::string forced_prompt(std::string rendered, const ToolPlan& plan);

// Appends `text` to the first message when it is a system message, else inserts one.
void add_system_text(nlohmann::ordered_json& messages, const std::string& text);

}  // namespace vkllm::answer
