// Splits a template into text and tag tokens the way jinja2's lexer does with Hugging Face's
// settings: trim_blocks (a newline right after a block or comment tag is dropped), lstrip_blocks
// (spaces and tabs before a block or comment tag at the start of a line are dropped), `-` / `+`
// whitespace control on each delimiter, {% raw %} blocks, comments removed, line endings
// normalised to \n and one final newline of the source dropped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vkllm::chat_template::jinja {

enum class Tok {
    Data,  // literal text
    VarBegin,  // {{
    VarEnd,  // }}
    BlockBegin,  // {%
    BlockEnd,  // %}
    Name,
    String,  // text: the decoded value
    Int,
    Float,
    Op,  // text: the operator ("+", "//", "==", "(", ...)
    Eof,
};

struct Token {
    Tok type;
    std::string text;
    int line;
    int64_t int_value = 0;
    double float_value = 0;
};

// Throws jinja::Error (with the line) for an unterminated tag, comment, string or raw block.
std::vector<Token> tokenize(const std::string& source);

}  // namespace vkllm::chat_template::jinja
