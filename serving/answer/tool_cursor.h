// Reading a reply's call markup, inside serving/answer: the Cursor every family's parser walks, and
// how Qwen3-Coder's and GLM's templates write a parameter's value between tags (ValueForm), which
// the parsers and the grammars that must agree with them share.
#pragma once

#include "serving/answer/tool_calls.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vkllm::answer::detail {

using json = nlohmann::ordered_json;

bool is_ws(char c);
std::string_view trim(std::string_view s);

// The end of the JSON object or array that starts at s[pos] (one past its closing bracket), or npos
// when it does not close within s. Only brackets and strings are tracked: json::parse checks the rest.
size_t json_end(std::string_view s, size_t pos);

// A cursor over a reply's call markup. Every method that fails leaves `ok` false; the caller then
// treats the whole markup as content.
class Cursor {
public:
    Cursor(std::string_view s, const json& tools) : s_(s), tools_(tools) {}

    bool ok() const { return ok_; }
    bool at_end() const { return pos_ >= s_.size(); }
    size_t pos() const { return pos_; }
    std::string_view rest() const { return s_.substr(std::min(pos_, s_.size())); }
    void fail() { ok_ = false; }

    void skip_ws() {
        while (pos_ < s_.size() && is_ws(s_[pos_])) ++pos_;
    }
    bool next_is(std::string_view lit) const { return ok_ && s_.substr(pos_).starts_with(lit); }
    bool accept(std::string_view lit) {
        if (!next_is(lit)) return false;
        pos_ += lit.size();
        return true;
    }
    void expect(std::string_view lit) {
        if (!accept(lit)) ok_ = false;
    }
    // A closing marker the reply may lack at its very end (the grammar of a forced call ends the
    // generation right after the JSON, or the model ended its turn there).
    void expect_or_end(std::string_view lit);
    // The text up to `lit` (consumed), trimmed.
    std::string until(std::string_view lit);
    json value();

    // A call from its parts: a tool the request offers (when it offered any), arguments an object
    // (or a string holding one, as some models write).
    void add_call(std::string name, json args, std::string id = {});
    // Cohere's list of actions: [{"tool_name", "parameters"?}, ...], with a call among them.
    // Actions named `no_call` (unless the request offers such a tool) are the model saying that no
    // tool is needed: not calls.
    void add_actions(const json& list, const char* no_call = nullptr);
    // {"name": ..., <args_key>: {...}} (Llama 3 also writes "arguments").
    // A tool without parameters may be called without arguments, except where the call is the whole
    // reply and the key is what tells a call from an answer that happens to be JSON (Llama 3).
    void add_call_object(const json& obj, const char* args_key, const char* alt_key = nullptr,
                         bool args_optional = true);
    const json* tool_parameters(const std::string& name) const;
    std::vector<ToolCall> take_calls() { return std::move(calls_); }

private:
    bool known(const std::string& name) const { return offers_tool(tools_, name); }

    std::string_view s_;
    const json& tools_;
    size_t pos_ = 0;
    bool ok_ = true;
    std::vector<ToolCall> calls_;
};

// A subschema of a tool's parameters with its local references followed ("#/$defs/x" inside
// `params`); nullptr when a reference leads nowhere or the chain is longer than 16.
const json* resolve_local(const json& params, const json* s);

// How Qwen3-Coder's and GLM's templates write a parameter's value between its tags: a string bare
// (as its text), anything else as JSON (Qwen3-Coder's as Python's str() for booleans and null:
// True, False, None). Decided once from the tool's schema, for the parser and the grammars alike.
enum class ValueForm {
    Bare,  // the schema says string: "type": "string" (or ["string"]), or no type and string const / enum values
    Json,  // the schema says another type (or its enum / const values are not all strings)
    Mixed,  // string or another type: JSON when the text is JSON, else the text
    Unknown,  // no schema for it: JSON when the text is JSON, else the text
};
ValueForm value_form(const json* params, const std::string& key);

// The value of parameter `key` at the start of `rest`, which runs to its closing tag `close` (Qwen3-Coder
// also writes a newline on each side of the value: `newlines`). A bare value ends at the first
// closing tag; a JSON value at the first one where the text before it is JSON (its strings may
// hold the tag). `len`: the bytes through that closing tag. nullopt when there is none (or the
// value the schema types is not JSON).
std::optional<json> tagged_value(std::string_view rest, std::string_view close, bool newlines, const json* params,
                                 const std::string& key, size_t& len);

// Argument `key`'s value at the cursor (tagged_value) into `args`, the cursor past its closing tag
// and the whitespace after it; false, the cursor failed, when there is none.
bool read_tagged_arg(Cursor& c, const std::string& key, std::string_view close, bool newlines, const json* params,
                     json& args);

}  // namespace vkllm::answer::detail
