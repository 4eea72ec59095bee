// Recursive-descent parser for jinja2's grammar (the statements and expressions chat templates
// use; see docs/chat.md "Chat templates"). Nesting is bounded: a block or expression deeper
// than the limits is a syntax error rather than a stack overflow.
#pragma once

#include "serving/chat_template/jinja/ast.h"

#include <string>

namespace vkllm::chat_template::jinja {

struct ParseLimits {
    uint32_t max_block_depth = 200;  // nested {% if %}/{% for %}/{% macro %}...
    uint32_t max_expr_depth = 256;  // height of one expression's tree
};

// Throws jinja::Error with the line on a syntax error.
Body parse_template(const std::string& source, const ParseLimits& limits = {});

}  // namespace vkllm::chat_template::jinja
