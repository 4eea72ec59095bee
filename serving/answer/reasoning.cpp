#include "serving/answer/reasoning.h"

#include <algorithm>

namespace vkllm::answer {

namespace {

constexpr ReasoningTags kThink{"<think>", "</think>"};
// Command R7B's (control tokens in its vocabulary, which a request with tools shows).
constexpr ReasoningTags kCommandR7b{"<|START_THINKING|>", "<|END_THINKING|>"};

}  // namespace

size_t partial_tag(std::string_view s, std::string_view tag) {
    for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
        if (tag.starts_with(s.substr(s.size() - n))) return n;
    return 0;
}

const ReasoningTags& think_tags() { return kThink; }

const ReasoningTags* reasoning_tags(std::string_view src) {
    for (const ReasoningTags* t : {&kThink, &kCommandR7b})
        if (src.find(t->open) != std::string_view::npos) return t;
    return nullptr;
}

bool prompt_opens_reasoning(std::string_view prompt, const ReasoningTags& tags) {
    // Only the template's own opening at the very end counts: a "<think>" inside a message (a user
    // asking about the tag) leaves the answer outside any block.
    while (!prompt.empty() &&
           (prompt.back() == ' ' || prompt.back() == '\n' || prompt.back() == '\t' || prompt.back() == '\r'))
        prompt.remove_suffix(1);
    return prompt.ends_with(tags.open);
}

void skip_reasoning(grammar::LazyStart& start, bool inside, const ReasoningTags& tags) {
    start.skip_open = tags.open;
    start.skip_close = tags.close;
    start.skip_inside = inside;
}

ReasoningStream::ReasoningStream(bool inside, const ReasoningTags& tags)
    : state_(inside ? State::Inside : State::Start), tags_(tags) {}

ReasoningStream::Piece ReasoningStream::push(std::string_view text) {
    Piece out;
    pending_ += text;
    for (;;) {
        switch (state_) {
            case State::Start: {
                const size_t first = pending_.find_first_not_of(" \n\t\r");
                if (first == std::string::npos) return out;  // only whitespace yet
                const std::string_view rest = std::string_view(pending_).substr(first);
                if (rest.starts_with(tags_.open)) {
                    pending_.erase(0, first + tags_.open.size());
                    state_ = State::Inside;
                    continue;
                }
                if (tags_.open.starts_with(rest)) return out;  // "<thi": undecided
                state_ = State::Plain;
                continue;
            }
            case State::Inside: {
                const size_t close = pending_.find(tags_.close);
                if (close != std::string::npos) {
                    out.reasoning += pending_.substr(0, close);
                    pending_.erase(0, close + tags_.close.size());
                    state_ = State::After;
                    continue;
                }
                const size_t keep = partial_tag(pending_, tags_.close);
                out.reasoning += pending_.substr(0, pending_.size() - keep);
                pending_.erase(0, pending_.size() - keep);
                return out;
            }
            case State::After: {
                // The whitespace between the block and the answer belongs to neither.
                const size_t first = pending_.find_first_not_of(" \n\t\r");
                if (first == std::string::npos) {
                    pending_.clear();
                    return out;
                }
                pending_.erase(0, first);
                state_ = State::Plain;
                continue;
            }
            case State::Plain:
                out.content += pending_;
                pending_.clear();
                return out;
        }
    }
}

ReasoningStream::Piece ReasoningStream::finish() {
    Piece out;
    if (state_ == State::Inside)
        out.reasoning = std::move(pending_);
    else if (state_ != State::After)
        out.content = std::move(pending_);
    pending_.clear();
    return out;
}

}  // namespace vkllm::answer
