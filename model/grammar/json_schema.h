// JSON Schema to GBNF: the grammar whose sentences are the JSON texts valid against a schema, for
// structured output (`response_format`, `--json-schema`).
//
// Fail closed: a schema is compiled exactly or refused with SchemaError naming the keyword and
// where it is (a JSON pointer); never a grammar that lets through what the schema forbids. The
// subset (docs/structured-output.md has the full table):
//   type (every JSON type, and lists of them); properties, required, additionalProperties
//   (false, true or a schema; keys beyond `properties` may not repeat a named one); enum, const;
//   items (a schema, or draft 7's list with additionalItems), prefixItems; minItems, maxItems;
//   anyOf, oneOf (only where its branches are shown disjoint: a grammar cannot say "exactly
//   one"); allOf of object
//   schemas; local $ref (JSON pointers into the document: $defs, definitions, "#", recursion);
//   minLength, maxLength; pattern (a regex subset: literals, escapes \d \w \s \D \W \S, classes,
//   groups, alternation, * + ? {m,n}, ^ and $ at the ends); format date, time, date-time, uuid,
//   email; minimum, maximum, exclusiveMinimum, exclusiveMaximum (on numbers: at most 15 digits in
//   all, written without an exponent, bounds plain decimals of up to 15 digits); the annotations
//   (title, description, default, examples, $comment, $schema, $id at the root, readOnly,
//   writeOnly, deprecated) are ignored.
// Whitespace: compact output is allowed and so is pretty-printing (a space after ':' and ',', a
// newline with up to 20 spaces or tabs of indentation between tokens); properties come in the
// order of `properties` (required and optional alike), then any additional ones. Numbers are
// bounded in length (16 integer digits, 16 fraction digits, 3 exponent digits) so that
// generation cannot run on forever inside one.
#pragma once

#include "model/grammar/grammar.h"

#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace vkllm::grammar {

class SchemaError : public std::invalid_argument {
public:
    // keyword: the schema keyword refused ("" when the problem is not one keyword: bad JSON, ...);
    // where: its JSON pointer ("" at the root).
    SchemaError(const std::string& what, std::string keyword = {}, std::string where = {});
    const std::string& keyword() const { return keyword_; }
    const std::string& where() const { return where_; }

private:
    std::string keyword_, where_;
};

// GBNF text for the JSON schema `schema_json` (a JSON document). Throws SchemaError.
std::string json_schema_to_gbnf(std::string_view schema_json);
// The same grammar, parsed (once: the compiler has to parse it anyway to check the grammar's own
// limits). Throws SchemaError.
Grammar json_schema_grammar(std::string_view schema_json);

// GBNF for any JSON object (`response_format: {"type": "json_object"}`).
std::string json_object_gbnf();

// The schema's rules with its value as rule `rule` (lowercase letters, digits and '-', starting with
// a letter, not "root", not a common JSON rule such as "value") and no root rule: for a grammar that
// puts the JSON value inside other text (a tool call's markup). The compiler's own rules avoid `rule`.
std::string json_schema_rules(std::string_view schema_json, const std::string& rule);

// Several subschemas of one document as rules, no root rule: `rule` (named as above, each once)
// for the subschema at JSON pointer `pointer` ("#/$defs/tool-0"). For a grammar that puts several
// JSON values inside other text (each parameter of a call whose markup names them). A subschema
// that two of them reach (a shared $ref) is one rule. `taken`: the names of the caller's own rules,
// which the compiler's avoid.
struct NamedSchema {
    std::string rule;
    std::string pointer;
};
std::string json_schema_rules(std::string_view schema_json, const std::vector<NamedSchema>& tops,
                              const std::set<std::string>& taken = {});

// `text` as a GBNF string literal (quotes, escapes).
std::string gbnf_literal(std::string_view text);

}  // namespace vkllm::grammar
