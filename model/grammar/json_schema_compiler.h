// The JSON Schema compiler's class, shared by its two files: json_schema.cpp (the public entry
// points, dispatch, references and combinators) and json_schema_values.cpp (objects, arrays,
// strings, formats, enums and consts). Numeric bounds and patterns have files of their own
// (json_schema_numbers, json_schema_pattern); the rule table they all write is json_schema_rules.
#pragma once

#include "model/grammar/json_schema.h"
#include "model/grammar/json_schema_rules.h"

#include <nlohmann/json.hpp>

#include <initializer_list>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace vkllm::grammar::detail {

// Rules every compiled schema may use. `space` is the whitespace allowed between tokens (none,
// one space, or a newline and indentation); `char` one character of a JSON string as written (a
// \u escape of a surrogate only as a high-low pair: strict parsers refuse a lone one).
inline constexpr std::string_view kCommonRules = R"(space ::= ("" | " " | "\n" [ \t]{0,20})
char ::= [^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" ([0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} | [dD] [89abAB] [0-9a-fA-F]{2} "\\u" [dD] [c-fC-F] [0-9a-fA-F]{2}))
char-cp ::= [^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" ([0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}))
string ::= "\"" char* "\""
integer ::= "-"? ("0" | [1-9] [0-9]{0,15})
number ::= integer ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?
boolean ::= "true" | "false"
null ::= "null"
value ::= object | array | string | number | boolean | null
object ::= "{" space (string space ":" space value (space "," space string space ":" space value)* space)? "}"
array ::= "[" space (value (space "," space value)* space)? "]"
)";

inline constexpr size_t kMaxSchemaDepth = 64;  // nested subschemas (a $ref is a rule: recursion does not nest)

// The JSON text of a string value, as a GBNF literal (quotes and escapes included).
inline std::string json_string_lit(const std::string& s) { return lit(Json(s).dump()); }

// JSON equality as JSON Schema means it: object members in any order (ordered_json compares them
// in order), numbers by value.
inline bool same_value(const Json& a, const Json& b) { return nlohmann::json(a) == nlohmann::json(b); }

inline const std::set<std::string, std::less<>> kAnnotations = {"title",      "description", "default",    "examples",
                                                                "$comment",   "$schema",     "readOnly",   "writeOnly",
                                                                "deprecated", "$defs",       "definitions"};

class Compiler {
public:
    explicit Compiler(const Json& root) : root_(root) {}

    // The grammar with the schema's value as rule `top`.
    std::string run(const std::string& top);

    // Rules named tops[i].rule for the subschemas at tops[i].pointer, without a root rule.
    std::string run(const std::vector<NamedSchema>& tops, const std::set<std::string>& taken);

private:
    // The GBNF expression of a schema (wrapped in parentheses when it has alternatives).
    std::string compile(const Json& s, const std::string& where, size_t depth);

    static bool known(std::string_view k);

    // Keywords that constrain a value beside `exclude` (annotations and the given ones aside).
    static std::vector<std::string> constraints(const Json& s, std::initializer_list<std::string_view> exclude);

    // --- references -------------------------------------------------------------------------------

    const Json& resolve(const std::string& ptr, const std::string& where);

    // The pointer of a schema that is a reference, checked: a string, nothing beside it.
    static const std::string& checked_ref(const Json& s, const std::string& where);

    std::string ref(const Json& s, const std::string& where, size_t depth);

    // --- combinators ------------------------------------------------------------------------------

    std::string any_of(const Json& s, const std::string& where, size_t depth);

    // Follows $ref chains (without compiling anything).
    const Json& deref(const Json& s, const std::string& where);

    // The JSON types a schema may match, as far as its type, const and enum say ("integer" counts as
    // "number"); all of them when it does not say.
    std::set<std::string> types_of(const Json& s0, const std::string& where);

    // Whether no value can match both schemas (a sufficient test: disjoint types, or two const/enum
    // lists with no common value).
    bool disjoint(const Json& a0, const Json& b0, const std::string& where);

    // allOf of object schemas: one object with the union of properties and required keys.
    std::string all_of(const Json& s, const std::string& where, size_t depth);

    // --- values -----------------------------------------------------------------------------------

    // A JSON value written out, with the whitespace the grammar allows between its tokens.
    static std::string literal(const Json& v);

    static bool has_type(const Json& v, const std::string& t);

    std::string enumeration(const Json& s, const std::string& where);

    // Keys that are not in `names`, however written: a trie over the names' code points; at each
    // node the key may end (unless a name ends there), go on with a child (in the form JSON
    // writes it), or leave the trie with any other character and then continue freely. Escapes
    // that could spell a child are not a way out: \u escapes are allowed for control characters
    // only (names with control characters are refused), and \" \\ \/ only where that character is
    // not a child.
    std::string key_not_in(const std::vector<std::string>& names, const std::string& where);

    std::string object(const Json& s, const std::string& where, size_t depth);

    static uint32_t count_of(const Json& s, const char* key, const std::string& where, uint32_t dflt);

    std::string array(const Json& s, const std::string& where, size_t depth);

    std::string string(const Json& s, const std::string& where);

    std::string format(const std::string& f, const std::string& where);

    const Json& root_;
    SchemaRules rules_;
    std::map<std::string, std::string> refs_;
};

}  // namespace vkllm::grammar::detail
