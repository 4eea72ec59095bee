// An answer split as its chat format writes it: a reasoning block off (ReasoningStream), then tool
// calls (ReplyStream), or gpt-oss's Harmony messages (HarmonyStream) in place of both. One for
// every front end: the server's responses, the C API's vkllm_chat_json and `vkllm chat`, so they
// read the same answer the same way whole or streamed.
#pragma once

#include "serving/answer/harmony.h"
#include "serving/answer/reasoning.h"
#include "serving/answer/tool_calls.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vkllm::answer {

struct AnswerFormat {
    bool harmony = false;  // the template speaks Harmony (template_is_harmony)
    bool inline_reasoning = false;  // Harmony with reasoning_format "none": the analysis stays in the content
    // The tags of a reasoning block split off (the template thinks and the client wants it apart;
    // null: none is); `inside`: the prompt opened it (prompt_opens_reasoning).
    const ReasoningTags* split_reasoning = nullptr;
    bool inside = false;
    // The request's plan for tools (parse_as null: the answer is not read for calls) and its tools.
    const ToolPlan* plan = nullptr;
    nlohmann::ordered_json tools;
};

class AnswerStream {
public:
    explicit AnswerStream(const AnswerFormat& format);

    struct Piece {
        std::string reasoning, content;
    };
    // What can be released now.
    Piece push(std::string_view text);
    struct Rest {
        std::string reasoning, content;
        std::vector<ToolCall> calls;
        std::vector<CallDelta> deltas;  // with stream_arguments(): what completes the calls
    };
    // The held-back text and the calls; `cut`: the generation was cut short (ReplyStream::finish).
    Rest finish(bool cut = false);

    // The calls' argument fragments as they are written (ReplyStream::stream_arguments); a no-op
    // outside the JSON-object families.
    void stream_arguments();
    bool streams_arguments() const;
    std::vector<CallDelta> take_deltas();
    // The family whose ids tool_calls_json() makes (Generic when the answer is not read for calls).
    ToolFamily family() const { return family_; }

private:
    std::optional<ReasoningStream> reasoning_;
    std::optional<ReplyStream> reply_;
    std::optional<HarmonyStream> harmony_;
    bool inline_reasoning_ = false;
    ToolFamily family_ = ToolFamily::Generic;
};

}  // namespace vkllm::answer
