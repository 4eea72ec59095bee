// gpt-oss replies, written in OpenAI's Harmony format, split into reasoning, content and tool calls.
//
// Harmony has no single call marker to look for: every reply is a sequence of messages, and each
// message's header says where its body goes. The generation prompt ends with "<|start|>assistant",
// so a reply begins with the rest of a header:
//
//   [ to=RECIPIENT]<|channel|>CHANNEL[ to=RECIPIENT][ CONTENT-TYPE | <|constrain|>CONTENT-TYPE]<|message|>BODY END
//
// and END is "<|end|>" (the reply goes on: "<|start|>assistant" and the next header), "<|call|>" (a
// call waits for its result) or "<|return|>" (the answer is done). The last two end the generation,
// so the text usually stops just before them. The recipient stands before the channel where the
// template renders a call ("<|start|>assistant to=functions.NAME<|channel|>commentary json"), after
// it where the model often writes it ("<|channel|>commentary to=functions.NAME <|constrain|>json"):
// both are read.
//
// The channel decides what a body is: "analysis" is the model's chain of thought (reasoning),
// "final" is the answer (content), "commentary" addressed to "functions.NAME" is a call whose body is
// the arguments' JSON, and commentary with no recipient is a preamble the model writes for the user
// before its calls (content). A message to "functions.NAME" is a call on whatever channel it comes.
//
// The markers are control tokens in a gpt-oss vocabulary, which the engine shows as text only when
// asked (harmony_markup() lists them): every one begins with "<|", so a stream holds back any tail
// that may begin one, and headers and markers never reach reasoning or content. What does not
// follow the format is kept rather than lost: text outside any message (a model writing plain text)
// is content, and so is the body of a malformed call (an unknown tool, arguments that are not a JSON
// object), as written.
//
// One state machine over buffered text reads the reply whether it arrives whole or token by token:
// every decision waits until the text seen decides it, so any split gives the same result.
#pragma once

#include "serving/answer/tool_calls.h"

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace vkllm::answer {

// Whether a chat template speaks Harmony: its source writes the channel marker.
bool template_is_harmony(std::string_view template_source);

// Every marker text of the format. In a gpt-oss vocabulary these are control tokens, whose text
// generation hides unless asked to show it: the parser needs to see them.
std::vector<std::string> harmony_markup();

class HarmonyStream {
public:
    // `tools`: the request's tools (an array of OpenAI tools; a call to any other name is malformed)
    // or null (any name is taken). `parallel` false: only the first call is kept (parallel_tool_calls).
    // `prefix`: text the prompt put at the start of the reply (a forced call's header), read as if
    // the model had written it.
    explicit HarmonyStream(nlohmann::ordered_json tools, bool parallel = true, std::string_view prefix = {});

    struct Piece {
        std::string reasoning, content;
    };
    // The reasoning and content that can be released now. A call's body is held until its message
    // ends (its JSON is judged whole); a malformed call's body is content then.
    Piece push(std::string_view text);

    struct Rest {
        std::string reasoning, content;
        std::vector<ToolCall> calls;  // ids "": Harmony has none
    };
    // The held-back text and the calls. A reply cut inside a header gives nothing for it; one cut
    // inside a body gives the body so far (a call's is parsed as it stands: the generation stops right
    // before "<|call|>"). A tail that begins a marker ("<|ret") is dropped: it is markup cut short.
    Rest finish();

private:
    enum class State {
        Start,  // the reply's first bytes: the rest of a header, or plain text
        Loose,  // outside any message: text here is content
        Head,  // inside a header, up to "<|message|>"
        Body,  // inside a message's body
    };
    enum class Route { Reasoning, Content, Call, Drop };

    void loose_text(std::string_view text, Piece& out);
    void open_head(bool with_role);
    void open_body(std::string_view header);
    void body_text(std::string_view text, Piece& out);
    void close_body(std::string& content);
    void step(Piece& out);

    nlohmann::ordered_json tools_;
    bool parallel_;
    State state_ = State::Start;
    std::string pending_;  // text not yet decided
    std::string held_ws_;  // Loose: whitespace not yet released (dropped if only whitespace is between messages)
    bool loose_text_ = false;  // Loose: this stretch has had text other than whitespace
    bool head_role_ = false;  // Head: the header begins with the author's role ("<|start|>" came before it)
    bool headerless_ = false;  // Body: an overlong header taken as text, its markers dropped
    Route route_ = Route::Content;
    std::string call_name_;  // Route::Call: the tool named
    std::string call_body_;  // Route::Call: the body so far
    // Where JSON text is, as far as its strings go: inside one, and just after a backslash there.
    struct JsonStrings {
        bool in_string = false, escaped = false;
        void step(char ch);
    };
    // Route::Call: whether call_body_ ends inside a JSON string: a marker's text there is the
    // arguments' own, not markup.
    JsonStrings body_json_;
    std::vector<ToolCall> calls_;
};

}  // namespace vkllm::answer
