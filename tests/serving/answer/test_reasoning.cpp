// The reasoning splitter: "<think> ... </think>" before an answer goes to reasoning_content, whole
// and streamed in any pieces, with the tags never leaking into either side.
#include "serving/answer/reasoning.h"

#include <doctest/doctest.h>

#include <random>
#include <string>

using vkllm::answer::prompt_opens_reasoning;
using vkllm::answer::ReasoningStream;
using vkllm::answer::ReasoningTags;
using vkllm::answer::reasoning_tags;
using vkllm::answer::think_tags;
using vkllm::answer::template_thinks;

namespace {

struct Split {
    std::string reasoning, content;
};

// Pushes `text` in pieces of 1..max_piece bytes (a fixed seed), joining what comes out.
Split run(std::string_view text, bool inside, size_t max_piece, uint32_t seed, bool tags_are_text,
          const ReasoningTags& tags) {
    ReasoningStream s(inside, tags);
    const std::string open(tags.open.substr(0, tags.open.size() - 1)), close(tags.close.substr(0, tags.close.size() - 1));
    Split out;
    std::mt19937 rng(seed);
    for (size_t i = 0; i < text.size();) {
        const size_t n = std::min(text.size() - i, size_t(1 + rng() % max_piece));
        ReasoningStream::Piece p = s.push(text.substr(i, n));
        // Nothing released may hold part of a tag (unless the tags are the answer's own text).
        CHECK(p.reasoning.find(close) == std::string::npos);
        if (!tags_are_text) CHECK(p.content.find(open) == std::string::npos);
        out.reasoning += p.reasoning;
        out.content += p.content;
        i += n;
    }
    ReasoningStream::Piece p = s.finish();
    out.reasoning += p.reasoning;
    out.content += p.content;
    return out;
}

void check_all_splits(std::string_view text, bool inside, const std::string& reasoning, const std::string& content,
                      const ReasoningTags& tags = think_tags()) {
    for (size_t max_piece : {size_t(1), size_t(3), size_t(7), text.size() + 1}) {
        CAPTURE(max_piece);
        const Split s = run(text, inside, max_piece, uint32_t(max_piece),
                            content.find(tags.open.substr(0, 4)) != std::string::npos, tags);
        CHECK(s.reasoning == reasoning);
        CHECK(s.content == content);
    }
}

}  // namespace

TEST_CASE("reasoning: a block before the answer is split off, whatever the pieces") {
    check_all_splits("<think>Let me see.\n2+2 is 4.</think>\n\nIt is 4.", false, "Let me see.\n2+2 is 4.", "It is 4.");
    check_all_splits("  \n<think>x</think>y", false, "x", "y");
    // An answer with no block is all content, tags later in it included.
    check_all_splits("It is <think>4</think>.", false, "", "It is <think>4</think>.");
    check_all_splits("<thinking is fun", false, "", "<thinking is fun");
    check_all_splits("<thi", false, "", "<thi");
    check_all_splits("", false, "", "");
}

TEST_CASE("reasoning: a prompt that opened the block makes the reply start inside it") {
    check_all_splits("Hmm.</think>Yes.", true, "Hmm.", "Yes.");
    // Cut off before the block closed (max_tokens): everything is reasoning.
    check_all_splits("Still thinking </thi", true, "Still thinking </thi", "");
    check_all_splits("</think>", true, "", "");
}

TEST_CASE("reasoning: Command R7B's plan between its control tokens is the reasoning") {
    const ReasoningTags* r7b = reasoning_tags("{{ '<|START_THINKING|>' }}{{ plan }}{{ '<|END_THINKING|>' }}");
    REQUIRE(r7b != nullptr);
    CHECK(r7b->open == "<|START_THINKING|>");
    CHECK(r7b->close == "<|END_THINKING|>");
    check_all_splits("<|START_THINKING|>I will call the tool.<|END_THINKING|><|START_ACTION|>[]<|END_ACTION|>", false,
                     "I will call the tool.", "<|START_ACTION|>[]<|END_ACTION|>", *r7b);
    check_all_splits("<|START_RESPONSE|>Hi<|END_RESPONSE|>", false, "", "<|START_RESPONSE|>Hi<|END_RESPONSE|>", *r7b);
    // A "<think>" in such an answer is its text.
    check_all_splits("<think>x</think>", false, "", "<think>x</think>", *r7b);
}

TEST_CASE("reasoning: which templates and prompts think") {
    CHECK(template_thinks("{% if x %}<think>{% endif %}"));
    CHECK(reasoning_tags("{% if x %}<think>{% endif %}") == &think_tags());
    CHECK_FALSE(template_thinks("{{ messages }}"));
    const ReasoningTags& think = think_tags();
    CHECK(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n", think));
    CHECK_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n", think));
    CHECK_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n", think));
    // An earlier turn's closed block does not count, nor the tag inside a message.
    CHECK_FALSE(prompt_opens_reasoning("<think>a</think>b<|im_start|>assistant\n", think));
    CHECK_FALSE(prompt_opens_reasoning("<|im_start|>user\nWhat does <think> do?<|im_end|>\n<|im_start|>assistant\n", think));
}
