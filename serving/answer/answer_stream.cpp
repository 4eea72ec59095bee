#include "serving/answer/answer_stream.h"

namespace vkllm::answer {

AnswerStream::AnswerStream(const AnswerFormat& f) : inline_reasoning_(f.inline_reasoning) {
    const bool calls = f.plan && f.plan->parse_as;
    if (f.harmony) {
        // Every gpt-oss answer is Harmony messages; without tools (or with "none") a call is content.
        harmony_.emplace(calls ? f.tools : nlohmann::ordered_json::array(), f.plan ? f.plan->parallel : true,
                         f.plan ? f.plan->reply_prefix : std::string());
        family_ = ToolFamily::Harmony;
        return;
    }
    if (f.split_reasoning) reasoning_.emplace(f.inside, *f.split_reasoning);
    if (calls) {
        reply_.emplace(*f.plan->parse_as, f.tools, f.plan->reply_prefix, f.plan->parallel);
        family_ = f.plan->parse_as->family;
    }
}

AnswerStream::Piece AnswerStream::push(std::string_view text) {
    if (harmony_) {
        HarmonyStream::Piece h = harmony_->push(text);
        if (inline_reasoning_) return {{}, h.reasoning + h.content};
        return {std::move(h.reasoning), std::move(h.content)};
    }
    Piece p;
    if (reasoning_) {
        ReasoningStream::Piece r = reasoning_->push(text);
        p.reasoning = std::move(r.reasoning);
        p.content = std::move(r.content);
    } else {
        p.content = text;
    }
    if (reply_) p.content = reply_->push(p.content);
    return p;
}

AnswerStream::Rest AnswerStream::finish(bool cut) {
    Rest out;
    if (harmony_) {
        HarmonyStream::Rest h = harmony_->finish();
        if (inline_reasoning_)
            out.content = h.reasoning + h.content;
        else
            out.reasoning = std::move(h.reasoning), out.content = std::move(h.content);
        out.calls = std::move(h.calls);
        return out;
    }
    if (reasoning_) {
        ReasoningStream::Piece r = reasoning_->finish();
        out.reasoning = std::move(r.reasoning);
        out.content = std::move(r.content);
    }
    if (reply_) {
        // The content held back at the end, then the calls (a malformed call comes back as content).
        out.content = reply_->push(out.content);
        ReplyStream::Rest rest = reply_->finish(cut);
        out.content += rest.content;
        out.calls = std::move(rest.calls);
        out.deltas = std::move(rest.deltas);
    }
    return out;
}

void AnswerStream::stream_arguments() {
    if (reply_) reply_->stream_arguments();
}
bool AnswerStream::streams_arguments() const { return reply_ && reply_->streams_arguments(); }
std::vector<CallDelta> AnswerStream::take_deltas() { return reply_ ? reply_->take_deltas() : std::vector<CallDelta>{}; }

}  // namespace vkllm::answer
