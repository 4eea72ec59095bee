// The tool-call families as rows, inside serving/answer: one row holds everything that sets a
// family apart (the markers that detect it in a template, where its calls begin in a reply, its
// parser, what its stream follows while calls are written, and its forced and lazy grammars), so
// that ReplyStream, forced_call() and lazy_call() look the row up rather than branch on the family.
// Each row sits beside its family's code (tool_families_*.cpp); tool_calls.cpp lists them in
// detection order.
#pragma once

#include "serving/answer/tool_calls.h"

#include <nlohmann/json.hpp>

#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace vkllm::answer::detail {

using json = nlohmann::ordered_json;

class Cursor;
struct FamilyRow;

// The text a ReplyStream has not released yet, no call found in it.
struct Pending {
    std::string text;
    bool seen_text = false;  // released or held non-whitespace: a call_is_reply format can no longer start
    // Functionary v3.2: `text` begins with a part's head that has no ">>>" (the prompt's), as the
    // reply does; text after calls does not.
    bool head_at_start = false;
};

// Families whose calls are JSON objects {"name": N, <arguments>: {...}}: those can be followed
// while they are written (ReplyStream::stream_arguments). The markup around the objects, matched
// token by token with whitespace allowed between tokens (a list ends at its first empty token).
struct ObjectScan {
    std::array<std::string_view, 4> open;  // before the first call object
    bool open_optional;  // the first call may also be the whole reply (Llama 3)
    std::string_view args_key;  // the arguments' key, quoted, second after "name"
    std::array<std::string_view, 3> between;  // after a call's arguments, to the next call object
    bool id_after_args;  // a call's "id" may follow its arguments (Mistral Nemo)
};

using ParseCalls = void (*)(Cursor& c);
// Where a call begins in `p.text` (npos: none); `hold`: where text begins that may still become a
// call's start (npos: none).
using FindCall = size_t (*)(const FamilyRow& row, Pending& p, const json& tools, size_t& hold);
using ForceCalls = ForcedCall (*)(const FamilyRow& row, const json& tools, const std::vector<size_t>& chosen,
                                  bool many);
using LazyCalls = LazyCall (*)(const FamilyRow& row, const json& tools, const std::vector<size_t>& all, bool many);

struct NamedCalls;  // tool_grammar.h

struct FamilyRow {
    ToolFormat format;
    // The template source must hold both (nullptr: no second marker) to speak this format.
    std::array<const char*, 2> template_markers;
    // Where a call begins in a reply (nullptr: none), and whether a reply that starts with a JSON
    // object is a call too (formats whose call is the whole reply).
    const char* call_marker;
    bool call_is_reply;
    // Every marker text of the format: where a vocabulary has one as a control token, the engine
    // shows it in the text for the parser (other control tokens stay hidden).
    std::array<const char*, 6> markup;
    // Markers that frame text for the user (or reasoning left in it): dropped from the content.
    std::array<const char*, 4> dropped;
    // The calls at the cursor, which starts at the call marker (or at the JSON object of a
    // call_is_reply format); failing the cursor when they are malformed.
    ParseCalls parse;
    FindCall find_call;
    // Calls followed while written; nullptr where they are not.
    const ObjectScan* scan;
    // A required call's prompt prefix and grammar, `chosen` the tools it may call; tool_choice
    // auto's lazy grammar and triggers over `all` the tools. Both throw ToolError for parameters
    // they cannot hold.
    ForceCalls forced;
    LazyCalls lazy;
    // The call shape of a family whose markup names the tool (tool_grammar.h); nullptr elsewhere.
    const NamedCalls* named;
    // Call ids made here are 9 letters and digits, as Mistral's templates insist, not "call_...".
    bool short_ids;
    // The marker texts where another reader owns them (gpt-oss's: harmony_markup()); nullptr: `markup`.
    std::vector<std::string> (*markup_of)();
};

// A format's row (tool_calls.cpp holds them in detection order).
const FamilyRow& row_of(const ToolFormat& f);

// The generic FindCall: the row's call marker, or a reply that opens with a JSON object.
size_t find_marker(const FamilyRow& row, Pending& p, const json& tools, size_t& hold);

// The rows (tool_families_json.cpp, tool_families_listed.cpp, tool_families_markup.cpp).
extern const FamilyRow kHermesRow, kLlama3Row, kMistralNemoRow, kGraniteRow, kCommandRPlusRow, kCommandR7BRow,
    kGenericRow;
extern const FamilyRow kQwenCoderRow, kGlm45Row;
extern const FamilyRow kFunctionaryV31Row, kFunctionaryV32Row, kMistralV11Row, kDeepSeekR1Row, kDeepSeekV31Row,
    kKimiK2Row, kHarmonyRow;

}  // namespace vkllm::answer::detail
