// JSON Schema's `pattern` to GBNF: a regex subset (literals, escapes \d \w \s \D \W \S, classes,
// groups, alternation, * + ? {m,n}, ^ and $ at the ends) over the JSON text of a string's
// characters. Internal to model/grammar/: the schema compiler (json_schema.cpp) calls it.
#pragma once

#include <string>

namespace vkllm::grammar::detail {

// The GBNF of the string contents (between the quotes) that match `re`, unanchored ends free text
// as JSON Schema means them. Throws SchemaError naming `pattern` at `where`.
std::string pattern_gbnf(const std::string& re, const std::string& where);

}  // namespace vkllm::grammar::detail
