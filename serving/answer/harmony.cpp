#include "serving/answer/harmony.h"

#include "serving/answer/reasoning.h"

#include <algorithm>
#include <array>

namespace vkllm::answer {

using json = nlohmann::ordered_json;

namespace {

constexpr std::string_view kStart = "<|start|>";
constexpr std::string_view kEnd = "<|end|>";
constexpr std::string_view kMessage = "<|message|>";
constexpr std::string_view kChannel = "<|channel|>";
constexpr std::string_view kConstrain = "<|constrain|>";
constexpr std::string_view kCall = "<|call|>";
constexpr std::string_view kReturn = "<|return|>";
constexpr std::array<std::string_view, 7> kMarkers = {kStart, kEnd, kMessage, kChannel, kConstrain, kCall, kReturn};

// What follows "<|start|>assistant" when the recipient comes first.
constexpr std::string_view kRecipientFirst = " to=";
constexpr std::string_view kFunctions = "functions.";

// A header is a role, a channel, a recipient and a content type: far below this. Past it the text is
// no header (a model that wrote "<|channel|>" and then prose) and is read as content, so a stream
// never holds a whole reply back waiting for a "<|message|>" that does not come.
constexpr size_t kMaxHeader = 256;

struct Marker {
    size_t at = std::string_view::npos;
    std::string_view text;
};

// The first whole marker in `s` from `from` on.
Marker find_marker(std::string_view s, size_t from = 0) {
    for (size_t at = s.find("<|", from); at != std::string_view::npos; at = s.find("<|", at + 1))
        for (std::string_view m : kMarkers)
            if (s.substr(at).starts_with(m)) return {at, m};
    return {};
}

// The longest end of `s` that may begin a marker: held back until the next text decides it.
size_t marker_tail(std::string_view s) {
    size_t n = 0;
    for (std::string_view m : kMarkers) n = std::max(n, partial_tag(s, m));
    return n;
}

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

bool is_marker(std::string_view w) { return std::find(kMarkers.begin(), kMarkers.end(), w) != kMarkers.end(); }

// A header's words: runs of text between whitespace and markers, and the markers themselves.
std::vector<std::string_view> header_words(std::string_view h) {
    std::vector<std::string_view> out;
    size_t i = 0;
    while (i < h.size()) {
        if (is_space(h[i])) {
            ++i;
            continue;
        }
        const Marker m = find_marker(h, i);
        if (m.at == i) {
            out.push_back(m.text);
            i += m.text.size();
            continue;
        }
        size_t j = i;
        while (j < h.size() && !is_space(h[j]) && j != m.at) ++j;
        out.push_back(h.substr(i, j - i));
        i = j;
    }
    return out;
}

}  // namespace

bool template_is_harmony(std::string_view template_source) {
    return template_source.find(kChannel) != std::string_view::npos;
}

std::vector<std::string> harmony_markup() { return {kMarkers.begin(), kMarkers.end()}; }

HarmonyStream::HarmonyStream(json tools, bool parallel, std::string_view prefix)
    : tools_(std::move(tools)), parallel_(parallel) {
    // A header releases nothing: what the prefix would release is dropped with it.
    if (!prefix.empty()) push(prefix);
}

void HarmonyStream::loose_text(std::string_view text, Piece& out) {
    if (loose_text_) {
        out.content += text;
        return;
    }
    // Whitespace alone between two messages is no answer: it waits for text to join.
    const auto first = std::find_if(text.begin(), text.end(), [](char c) { return !is_space(c); });
    if (first == text.end()) {
        held_ws_ += text;
        return;
    }
    loose_text_ = true;
    out.content += held_ws_;
    out.content += text;
    held_ws_.clear();
}

void HarmonyStream::open_head(bool with_role) {
    state_ = State::Head;
    head_role_ = with_role;
    held_ws_.clear();
    loose_text_ = false;
}

void HarmonyStream::open_body(std::string_view header) {
    state_ = State::Body;
    headerless_ = false;
    call_body_.clear();
    body_json_ = {};
    std::string_view role = "assistant", channel, recipient;
    const std::vector<std::string_view> words = header_words(header);
    size_t i = 0;
    if (head_role_ && !words.empty() && !is_marker(words[0])) role = words[i++];
    for (; i < words.size(); ++i) {
        if (words[i] == kChannel && i + 1 < words.size() && !is_marker(words[i + 1]))
            channel = words[++i];
        else if (words[i].starts_with("to="))
            recipient = words[i].substr(3);
        // Anything else is the content type ("json", "<|constrain|>json"): arguments are JSON whatever it says.
    }
    if (role != "assistant") {
        // A message from someone else (a user turn, a tool's result) is the model imagining the
        // conversation going on: not its answer.
        route_ = Route::Drop;
    } else if (recipient.starts_with(kFunctions)) {
        route_ = Route::Call;
        call_name_ = std::string(recipient.substr(kFunctions.size()));
    } else {
        // No recipient, or one of the built-in tools (browser, python) that this runtime does not
        // run: the channel alone says who reads the body.
        route_ = channel == "analysis" ? Route::Reasoning : Route::Content;
    }
}

void HarmonyStream::JsonStrings::step(char ch) {
    if (!in_string)
        in_string = ch == '"';
    else if (escaped)
        escaped = false;
    else if (ch == '\\')
        escaped = true;
    else if (ch == '"')
        in_string = false;
}

void HarmonyStream::body_text(std::string_view text, Piece& out) {
    switch (route_) {
        case Route::Reasoning: out.reasoning += text; break;
        case Route::Content: out.content += text; break;
        case Route::Call:
            call_body_ += text;
            for (const char ch : text) body_json_.step(ch);
            break;
        case Route::Drop: break;
    }
}

void HarmonyStream::close_body(std::string& content) {
    state_ = State::Loose;
    headerless_ = false;
    if (route_ != Route::Call) return;
    const json args = parse_json_bounded(call_body_);
    if (call_name_.empty() || !offers_tool(tools_, call_name_) || args.is_discarded() || !args.is_object()) {
        content += call_body_;
    } else if (parallel_ || calls_.empty()) {
        calls_.push_back({"", call_name_, args.dump(-1, ' ', false, json::error_handler_t::replace)});
    }
    call_body_.clear();
}

void HarmonyStream::step(Piece& out) {
    for (;;) {
        switch (state_) {
            case State::Start: {
                if (pending_.starts_with(kRecipientFirst)) {
                    open_head(false);
                    continue;
                }
                if (kRecipientFirst.starts_with(pending_)) return;  // " t": undecided (or nothing yet)
                state_ = State::Loose;
                continue;
            }
            case State::Loose: {
                const Marker m = find_marker(pending_);
                const size_t end = m.at != std::string::npos ? m.at : pending_.size() - marker_tail(pending_);
                loose_text(std::string_view(pending_).substr(0, end), out);
                pending_.erase(0, end);
                if (m.at == std::string::npos) return;
                if (m.text == kChannel || m.text == kConstrain) {
                    // A header without its "<|start|>": the marker is the header's first word.
                    open_head(false);
                    continue;
                }
                pending_.erase(0, m.text.size());
                held_ws_.clear();
                loose_text_ = false;
                if (m.text == kStart) {
                    open_head(true);
                } else if (m.text == kMessage) {
                    head_role_ = false;
                    open_body({});
                }
                // An end marker outside a message ends nothing: dropped.
                continue;
            }
            case State::Head: {
                // The header stays in pending_ until its end is known: it is judged whole.
                size_t from = 0;
                Marker m;
                for (;;) {
                    m = find_marker(pending_, from);
                    if (m.at == std::string::npos || m.at > kMaxHeader) break;
                    if (m.text != kChannel && m.text != kConstrain) break;
                    from = m.at + m.text.size();
                }
                if (m.at == std::string::npos && pending_.size() - marker_tail(pending_) <= kMaxHeader) return;
                if (m.at == std::string::npos || m.at > kMaxHeader) {
                    // No header after all: its text is content, its markers dropped.
                    state_ = State::Body;
                    route_ = Route::Content;
                    headerless_ = true;
                    continue;
                }
                if (m.text == kMessage) {
                    const std::string header = pending_.substr(0, m.at);
                    pending_.erase(0, m.at + m.text.size());
                    open_body(header);
                    continue;
                }
                // "<|start|>" or an end marker before the body: a header with no message, dropped.
                pending_.erase(0, m.at);
                state_ = State::Loose;
                continue;
            }
            case State::Body: {
                Marker m;
                size_t end;
                if (route_ == Route::Call) {
                    // The arguments' JSON: markers inside its strings are text.
                    JsonStrings scan = body_json_;
                    end = pending_.size();
                    for (size_t i = 0; i < pending_.size(); scan.step(pending_[i++])) {
                        if (scan.in_string || pending_[i] != '<') continue;
                        if (const Marker here = find_marker(pending_, i); here.at == i) {
                            m = here;
                            end = i;
                            break;
                        }
                        if (marker_tail(std::string_view(pending_).substr(i)) == pending_.size() - i) {
                            end = i;  // may begin a marker: undecided
                            break;
                        }
                    }
                } else {
                    m = find_marker(pending_);
                    end = m.at != std::string::npos ? m.at : pending_.size() - marker_tail(pending_);
                }
                body_text(std::string_view(pending_).substr(0, end), out);
                pending_.erase(0, end);
                if (m.at == std::string::npos) return;
                if (m.text == kMessage || (headerless_ && (m.text == kChannel || m.text == kConstrain))) {
                    pending_.erase(0, m.text.size());
                    continue;
                }
                close_body(out.content);
                // A channel marker inside a body: the model began the next message without ending this
                // one; the marker opens its header.
                if (m.text == kChannel || m.text == kConstrain) {
                    open_head(false);
                    continue;
                }
                pending_.erase(0, m.text.size());
                if (m.text == kStart) open_head(true);
                continue;
            }
        }
    }
}

HarmonyStream::Piece HarmonyStream::push(std::string_view text) {
    Piece out;
    pending_ += text;
    step(out);
    return out;
}

HarmonyStream::Rest HarmonyStream::finish() {
    Piece out;
    // A marker is one token: a tail that begins one ("<|ret") is markup cut short, not text. A lone
    // "<" is more likely the text's own.
    if ((state_ == State::Loose || state_ == State::Body) && pending_.starts_with("<|")) pending_.clear();
    switch (state_) {
        case State::Start:
        case State::Loose: loose_text(pending_, out); break;
        case State::Head: break;  // a header with no body says nothing
        case State::Body:
            body_text(pending_, out);
            close_body(out.content);
            break;
    }
    pending_.clear();
    held_ws_.clear();
    state_ = State::Loose;
    loose_text_ = false;
    Rest r;
    r.reasoning = std::move(out.reasoning);
    r.content = std::move(out.content);
    r.calls = std::move(calls_);
    calls_.clear();
    return r;
}

}  // namespace vkllm::answer
