// Building the grammars of tool calls, inside serving/answer: a tool's parameters as a call's
// grammar takes them, the JSON schema of a call object, and the GBNF of calls whose markup names
// the tool (one row's NamedCalls says how it writes them). The families' rows put these together
// into their forced (tool_choice required) and lazy (tool_choice auto) grammars.
#pragma once

#include "serving/answer/tool_family.h"

#include "model/grammar/json_schema.h"

#include <nlohmann/json.hpp>

#include <set>
#include <string>
#include <vector>

namespace vkllm::answer::detail {

const std::string& function_name(const json& tool);

// A tool's parameters with every local reference moved under "#/$defs/<def>", where the wrapper
// schema of forced_call() keeps them.
json rebase_refs(const json& s, const std::string& def);

// A tool's parameters as a forced call's grammar takes them: the arguments are an object (the
// parser refuses anything else), also where the schema leaves the type open ("parameters": {}).
json forced_parameters(const json& tool, size_t index);

// The GBNF rules of `schema` as rule "tool-call"; a SchemaError becomes the client's error naming
// the tool's parameters (`where` under "/$defs/tool-<i>" maps back to tools[i]).
// `wrapped`: the schema is forced_call()'s wrapper, whose "/$defs/tool-<k>" is the k-th chosen tool's
// parameters; else it is the one chosen tool's parameters themselves (whose own $defs may have any
// names).
std::string call_rules(const json& schema, const std::vector<size_t>& tool_index, bool wrapped);

// --- call objects --------------------------------------------------------------------------------

// How a CallObject family holds its calls.
enum class CallList {
    One,  // the call object itself
    Array,  // a JSON list of calls (one unless `many`)
    ToolCalls,  // {"tool_calls": [calls]} (the generic format)
};
struct CallObjectShape {
    const char* name_key;  // "name"; Cohere's "tool_name"
    const char* args_key;  // "arguments"; Llama 3's and Cohere's "parameters"
    CallList list;
    // Command R7B's template numbers the calls of a conversation ("0", "1", ...) before each name.
    bool numbered;
    // Mistral Nemo's template writes the call's id after its arguments (nine letters and digits).
    bool id_after_args;
};
// The schema of a CallObject family's calls (each chosen tool's {"name", arguments}, the
// parameters under "#/$defs/tool-<k>"): a list where the format holds one, one call otherwise.
json call_object_schema(const CallObjectShape& shape, const json& tools, const std::vector<size_t>& chosen, bool many);

// --- calls named in markup -----------------------------------------------------------------------

// The markup around the calls of a NamedMarkup family (named-call is one call from after its
// opening marker on): [trigger opening] named-call ([between] named-call)* [close]? markup-ws.
// `opening` and `between` are GBNF (with markup-ws where templates put whitespace).
struct CallsMarkup {
    std::string
        forced_prefix;  // a forced call's: the prompt ends with it (the trigger and the opening, as templates write them)
    std::string trigger;  // where tool_choice auto's grammar starts ("": no lazy grammar)
    std::string opening;  // after the trigger, before the first call
    std::string between;  // between two calls
    std::string close;  // optional, after the last call
};

// A call whose arguments are one JSON object: the GBNF before it (from the end of the opening
// marker, naming the tool) and after it.
struct CallFrame {
    std::string head, tail;
};

// A call that lists each argument in markup (Qwen3-Coder's "<parameter=KEY>", GLM's
// "<arg_key>KEY</arg_key>"), string values bare: the texts around the name and each argument.
struct ListedArgs {
    const char* call_open;  // before the tool's name
    const char* name_close;  // after it
    const char* arg_open;  // before an argument's name
    const char* value_open;  // between its name and its value
    const char* value_close;  // after its value
    const char* tag;  // where a bare value ends (value_close without its whitespace)
    const char* call_close;  // after the last argument
    bool python_literals;  // booleans and null also as Python writes them (True, False, None)
};

// One family's calls named in markup: the markup around them, and either the frame around a call's
// JSON arguments (`frame`, which throws ToolError for a tool the format cannot call) or its listed
// arguments.
struct NamedCalls {
    CallsMarkup (*markup)();  // nullptr: the family builds its own root (gpt-oss)
    CallFrame (*frame)(const std::string& name, size_t index);
    const ListedArgs* listed;
};

// Rule named-call for the families whose markup names the tool as text (or between control tokens,
// which a request may speak: TokenPieces), from the end of the opening marker on: one branch per
// chosen tool. In most the arguments are one JSON object between the family's frame; Qwen3-Coder
// and GLM list each parameter in markup, in the order of `properties` (the required ones always),
// string values bare. `own`: the caller's rule names, which these avoid.
std::string named_call_rules(const NamedCalls& calls, const json& tools, const std::vector<size_t>& chosen,
                             std::set<std::string> own);

// The rules of a NamedMarkup family's calls after `start` (GBNF), one call unless `many`.
std::string named_calls_gbnf(const NamedCalls& calls, const json& tools, const std::vector<size_t>& chosen, bool many,
                             const std::string& start);

// The forced and lazy grammars of a NamedMarkup row, from its NamedCalls' markup.
ForcedCall forced_named(const FamilyRow& row, const json& tools, const std::vector<size_t>& chosen, bool many);
LazyCall lazy_named(const FamilyRow& row, const json& tools, const std::vector<size_t>& all, bool many);

}  // namespace vkllm::answer::detail
