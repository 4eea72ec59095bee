// Reasoning blocks: the "<think> ... </think>" that DeepSeek R1, Qwen3, QwQ, SmolLM3 and others
// write before their answer (Command R7B's "<|START_THINKING|> ... <|END_THINKING|>"), split from
// the content so that a client gets it as `reasoning_content`, whole or streamed. The closing tag
// may be split across tokens: text that may begin it is held back until the next text decides it.
#pragma once

#include "model/grammar/grammar.h"

#include <string>
#include <string_view>

namespace vkllm::answer {

// The longest end of `s` that is a proper start of `tag`: text a stream holds back until the next
// piece decides whether it begins the tag.
size_t partial_tag(std::string_view s, std::string_view tag);

// The tags around a reasoning block.
struct ReasoningTags {
    std::string_view open, close;
};
// "<think>" and "</think>".
const ReasoningTags& think_tags();
// The block a chat template writes, from its source (the opening tag in it); null when it writes none.
const ReasoningTags* reasoning_tags(std::string_view template_source);
// Whether a template writes reasoning blocks.
inline bool template_thinks(std::string_view template_source) { return reasoning_tags(template_source) != nullptr; }
// Whether a rendered prompt leaves the reply inside a reasoning block: it ends with the opening tag
// (and whitespace), as QwQ's and DeepSeek R1's templates open the block for the model.
bool prompt_opens_reasoning(std::string_view prompt, const ReasoningTags& tags);

// A lazy grammar (a tool call's) does not start inside the reasoning block: the model may think
// about a call before it makes one. `inside`: the prompt opened the block.
void skip_reasoning(grammar::LazyStart& start, bool inside, const ReasoningTags& tags);

class ReasoningStream {
public:
    // `inside`: the reply starts inside the block (prompt_opens_reasoning).
    explicit ReasoningStream(bool inside, const ReasoningTags& tags);

    struct Piece {
        std::string reasoning, content;
    };
    // The reasoning and content that can be released now. A reply that opens with the opening tag
    // (after whitespace) is reasoning up to the closing one; any other reply is content from its
    // first byte.
    Piece push(std::string_view text);
    // The rest: held-back text, and an unclosed block's reasoning.
    Piece finish();

private:
    enum class State { Start, Inside, After, Plain } state_;
    ReasoningTags tags_;
    std::string pending_;
};

}  // namespace vkllm::answer
