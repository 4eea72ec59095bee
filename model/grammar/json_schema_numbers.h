// JSON Schema's numeric bounds to GBNF: the integers or numbers within minimum, maximum,
// exclusiveMinimum and exclusiveMaximum, spelled out digit by digit (no exponents; numbers of at
// most 15 digits in all, bounds plain decimals of up to 15 digits). Internal to model/grammar/: the
// schema compiler (json_schema.cpp) calls it.
#pragma once

#include "model/grammar/json_schema_rules.h"

#include <string>

namespace vkllm::grammar::detail {

// The integers within the bounds of the schema `s` (at `where`), as rules added to `rules`, or
// the common rule "integer" when it has none. Throws SchemaError.
std::string integer_range_gbnf(const Json& s, const std::string& where, SchemaRules& rules);
// The numbers within the bounds of `s`, or the common rule "number" when it has none; the same
// bounds give the same rule. Throws SchemaError.
std::string number_range_gbnf(const Json& s, const std::string& where, SchemaRules& rules);

}  // namespace vkllm::grammar::detail
