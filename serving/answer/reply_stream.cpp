// ReplyStream and parse_reply (tool_calls.h): a reply split into content and calls, whole or
// streamed, by its family's row (where its calls begin, how they are parsed, and how JSON-object
// calls are followed while they are written).
#include "serving/answer/tool_calls.h"

#include "serving/answer/reasoning.h"
#include "serving/answer/tool_cursor.h"
#include "serving/answer/tool_family.h"

#include <algorithm>
#include <optional>

namespace vkllm::answer {

namespace detail {

size_t find_marker(const FamilyRow& row, Pending& p, const json&, size_t&) {
    size_t best = std::string_view::npos;
    if (row.call_marker) best = p.text.find(row.call_marker);
    if (row.call_is_reply && !p.seen_text) {
        const size_t first = p.text.find_first_not_of(" \n\t\r");
        if (first != std::string::npos && p.text[first] == '{') best = std::min(best, first);
    }
    return best;
}

}  // namespace detail

using namespace detail;

namespace {

// The calls at the start of `markup` (which begins at the family's call marker, or with the JSON
// object of a call_is_reply format); nullopt when they are malformed. `tail`: text after them.
std::optional<std::vector<ToolCall>> parse_calls(const FamilyRow& row, std::string_view markup, const json& tools,
                                                 std::string& tail) {
    Cursor c(markup, tools);
    row.parse(c);
    if (!c.ok()) return std::nullopt;
    c.skip_ws();
    tail = std::string(trim(c.rest()));
    return c.take_calls();
}

// JSON text less the whitespace between its tokens (strings untouched): the arguments as the model
// wrote them, in the form whole and streamed replies both give.
std::string compact_json_text(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    bool in_string = false, escaped = false;
    for (const char c : s) {
        if (in_string) {
            if (escaped)
                escaped = false;
            else if (c == '\\')
                escaped = true;
            else if (c == '"')
                in_string = false;
        } else if (is_ws(c)) {
            continue;
        } else if (c == '"') {
            in_string = true;
        }
        out += c;
    }
    return out;
}

// The calls of a JSON-object family as far as `markup` goes, in order: the family's list markup
// (Hermes' <tool_call> tags, the JSON list of Mistral Nemo, Granite and the generic format, Llama 3's
// optional <|python_tag|> and ';') around objects whose first key is "name" and second "arguments"
// (Llama 3: "parameters"), the arguments compacted (compact_json_text). The last may be unfinished
// (complete false: the arguments so far, or a name and no arguments yet). Scanning stops at anything
// else: text after the calls, a call written another way (the grammars that hold calls write this
// shape), so only what the parser will also read as calls is ever streamed. A call's arguments are
// skipped whole, so objects inside them never count.
struct ScannedCall {
    std::string name;
    std::string arguments;
    bool complete = false;
};
std::vector<ScannedCall> scan_calls(const ObjectScan& scan, std::string_view s) {
    std::vector<ScannedCall> out;
    enum class Match { Yes, Partial, No };
    auto skip_ws = [&](size_t p) {
        while (p < s.size() && is_ws(s[p])) ++p;
        return p;
    };
    // Tokens in order, whitespace allowed between them (not inside); `p` moves past them on Yes.
    auto tokens = [&](size_t& p, const auto& toks) {
        size_t q = p;
        for (std::string_view t : toks) {
            if (t.empty()) break;
            q = skip_ws(q);
            const std::string_view have = s.substr(q, t.size());
            if (!t.starts_with(have)) return Match::No;
            if (have.size() < t.size()) return Match::Partial;
            q += t.size();
        }
        p = q;
        return Match::Yes;
    };
    using Tokens = std::initializer_list<std::string_view>;
    // The markup before the first call object.
    size_t pos = 0;
    Match m = tokens(pos, scan.open);
    if (m == Match::No && scan.open_optional) m = Match::Yes;  // the call may be the whole reply
    while (m == Match::Yes) {
        // {"name": "N", "arguments": {...
        size_t p = pos;
        if (tokens(p, Tokens{"{", "\"name\"", ":"}) != Match::Yes) break;
        p = skip_ws(p);
        if (p >= s.size() || s[p] != '"') break;
        size_t q = p + 1;
        while (q < s.size() && s[q] != '"') q += s[q] == '\\' ? 2 : 1;
        if (q >= s.size()) break;
        const json name = parse_json_bounded(s.substr(p, q + 1 - p));
        if (!name.is_string()) break;
        p = q + 1;
        if (tokens(p, Tokens{",", scan.args_key, ":"}) != Match::Yes) break;
        p = skip_ws(p);
        ScannedCall call{name.get<std::string>(), {}, false};
        if (p >= s.size()) {
            out.push_back(std::move(call));
            break;
        }
        if (s[p] != '{') break;
        const size_t end = json_end(s, p);
        call.arguments =
            compact_json_text(s.substr(p, end == std::string_view::npos ? std::string_view::npos : end - p));
        call.complete = end != std::string_view::npos;
        out.push_back(std::move(call));
        if (end == std::string_view::npos) break;
        // The markup to the next call object.
        pos = end;
        if (scan.id_after_args) {
            // Its template writes the call's id after the arguments.
            size_t id = pos;
            if (tokens(id, Tokens{",", "\"id\"", ":"}) == Match::Yes) {
                id = skip_ws(id);
                const size_t close = id < s.size() && s[id] == '"' ? s.find('"', id + 1) : std::string_view::npos;
                if (close == std::string_view::npos) return out;
                pos = close + 1;
            }
        }
        m = tokens(pos, scan.between);
    }
    return out;
}

size_t trailing_ws(std::string_view s) {
    size_t n = 0;
    while (n < s.size() && is_ws(s[s.size() - 1 - n])) ++n;
    return n;
}

}  // namespace

// --- ReplyStream ---------------------------------------------------------------------------------

struct ReplyStream::Impl {
    Impl(const FamilyRow* row, json tools, bool parallel, bool seen_text, bool head_at_start)
        : row(row), tools(std::move(tools)), parallel(parallel) {
        pending.seen_text = seen_text;
        pending.head_at_start = head_at_start;
    }

    const FamilyRow* row;
    json tools;
    bool parallel;
    Pending pending;  // not released, no call found yet
    std::string held_ws;  // whitespace between the content and a call: dropped when the call is good
    std::string markup;  // from the call marker on
    bool started = false;
    // stream_arguments(): calls go out as deltas while they are written; per call streamed, its
    // arguments sent so far and its id.
    bool fragments = false;
    std::vector<std::string> sent, ids;

    std::vector<CallDelta> take_deltas() {
        std::vector<CallDelta> out;
        if (!fragments || !started) return out;
        std::vector<ScannedCall> calls = scan_calls(*row->scan, markup);
        if (!parallel && calls.size() > 1) calls.resize(1);
        for (size_t i = 0; i < calls.size(); ++i) {
            if (!offers_tool(tools, calls[i].name)) break;
            if (i == sent.size()) {
                ids.push_back(new_tool_call_id(row->format.family));
                sent.push_back(calls[i].arguments);
                out.push_back({i, ids.back(), calls[i].name, calls[i].arguments});
            } else if (calls[i].arguments.size() > sent[i].size() && calls[i].arguments.starts_with(sent[i])) {
                out.push_back({i, {}, {}, calls[i].arguments.substr(sent[i].size())});
                sent[i] = calls[i].arguments;
            }
        }
        return out;
    }

    // What completes the streamed calls: the rest of each one's arguments, and the calls not begun.
    void complete_deltas(Rest& r) {
        if (r.calls.empty() && !sent.empty()) {
            // Cut inside a call (max_tokens, a stop string): its markup already went out as the
            // call's deltas, so it is not content as well. A call that was written whole and is
            // still refused (JSON nested deeper than the parser takes) is content, as in a whole reply.
            const std::vector<ScannedCall> scanned = scan_calls(*row->scan, markup);
            if (scanned.empty() || !scanned.back().complete) r.content.clear();
            return;
        }
        for (size_t i = 0; i < r.calls.size(); ++i) {
            const ToolCall& c = r.calls[i];
            if (i >= sent.size()) {
                r.deltas.push_back(
                    {i, c.id.empty() ? new_tool_call_id(row->format.family) : c.id, c.name, c.arguments});
            } else if (c.arguments.size() > sent[i].size() && c.arguments.starts_with(sent[i])) {
                r.deltas.push_back({i, {}, {}, c.arguments.substr(sent[i].size())});
            }
        }
    }

    std::string push(std::string_view text) {
        if (started) {
            markup += text;
            return {};
        }
        std::string& pend = pending.text;
        pend += text;
        size_t hold = std::string::npos;
        const size_t start = row->find_call(*row, pending, tools, hold);
        if (start != std::string_view::npos) {
            started = true;
            markup = pend.substr(start);
            std::string before = pend.substr(0, start);
            const size_t ws = trailing_ws(before);
            held_ws = before.substr(before.size() - ws);
            before.resize(before.size() - ws);
            pend.clear();
            return before;
        }
        if (row->call_is_reply && !pending.seen_text && trim(pend).empty())
            return {};  // a call may still open the reply
        if (!trim(pend).empty()) pending.seen_text = true;
        size_t keep = row->call_marker ? partial_tag(pend, row->call_marker) : 0;
        if (hold != std::string::npos) keep = std::max(keep, pend.size() - hold);
        keep = std::max(keep, trailing_ws(std::string_view(pend).substr(0, pend.size() - keep)) + keep);
        std::string out = pend.substr(0, pend.size() - keep);
        pend.erase(0, pend.size() - keep);
        return out;
    }

    // `text` (content) less the row's dropped markers. A tail that may begin one is held back until
    // the next text decides it, and released as it is at the `last`.
    std::string dropped_tail;
    std::string drop_markers(std::string text, bool last) {
        if (!row->dropped[0]) return text;
        dropped_tail += text;
        std::string out;
        for (;;) {
            size_t at = std::string::npos, len = 0;  // the first marker
            for (const char* m : row->dropped) {
                if (!m) continue;
                const size_t found = dropped_tail.find(m);
                if (found < at) at = found, len = std::string_view(m).size();
            }
            if (at == std::string::npos) break;
            out += dropped_tail.substr(0, at);
            dropped_tail.erase(0, at + len);
        }
        size_t keep = 0;
        if (!last)
            for (const char* m : row->dropped)
                if (m) keep = std::max(keep, partial_tag(dropped_tail, m));
        out += dropped_tail.substr(0, dropped_tail.size() - keep);
        dropped_tail.erase(0, dropped_tail.size() - keep);
        return out;
    }

    // A reply cut inside a call (max_tokens): the calls written whole before it, the unfinished one
    // dropped. Where each call has its marker (Hermes' <tool_call>, ...), the markup before the
    // last marker that parses; in the JSON-object families, the complete objects scanned.
    std::optional<std::vector<ToolCall>> calls_before_cut() const {
        if (row->call_marker) {
            const std::string_view m = markup, marker = row->call_marker;
            for (size_t at = m.rfind(marker); at != std::string_view::npos && at > 0; at = m.rfind(marker, at - 1)) {
                std::string rest;
                auto calls = parse_calls(*row, m.substr(0, at), tools, rest);
                if (calls && !calls->empty() && rest.empty()) return calls;
            }
        }
        if (row->scan) {
            std::vector<ToolCall> out;
            for (const ScannedCall& c : scan_calls(*row->scan, markup)) {
                if (!c.complete || !offers_tool(tools, c.name)) break;
                out.push_back(ToolCall{{}, c.name, c.arguments});
            }
            if (!out.empty()) return out;
        }
        return std::nullopt;
    }

    Rest finish(bool cut) {
        Rest r;
        if (!started) {
            r.content = std::move(pending.text);
            pending.text.clear();
            return r;
        }
        std::string tail;
        std::optional<std::vector<ToolCall>> whole = parse_calls(*row, markup, tools, tail);
        if (cut && !(whole && !whole->empty())) {
            if (auto before = calls_before_cut()) {
                r.calls = std::move(*before);
                if (!parallel) r.calls.resize(1);
                if (fragments) complete_deltas(r);
                markup.clear();
                started = false;
                return r;
            }
        }
        if (auto& calls = whole; calls && !calls->empty()) {
            r.calls = std::move(*calls);
            // Text after the calls is content, and may hold more calls ("Also:" between two): it is
            // read the same way. The whitespace that led to the calls is not content.
            Impl more(row, tools, true, true, false);
            r.content = more.push(tail);
            Rest later = more.finish(cut);
            r.content += later.content;
            for (ToolCall& c : later.calls) r.calls.push_back(std::move(c));
            // parallel_tool_calls false: the first call only.
            if (!parallel) r.calls.resize(1);
            // Cut where the next call's marker began: that start is not content.
            if (cut && row->call_marker && !r.content.empty() &&
                partial_tag(r.content, row->call_marker) == r.content.size())
                r.content.clear();
            // The arguments as written (compacted) where calls are JSON objects: what streamed
            // fragments add up to, so that whole and streamed replies agree.
            if (row->scan) {
                const std::vector<ScannedCall> scanned = scan_calls(*row->scan, markup);
                for (size_t i = 0; i < r.calls.size() && i < scanned.size(); ++i)
                    if (scanned[i].complete && scanned[i].name == r.calls[i].name)
                        r.calls[i].arguments = scanned[i].arguments;
            }
        } else {
            r.content = held_ws + markup;
        }
        if (fragments) complete_deltas(r);
        markup.clear();
        started = false;
        return r;
    }
};

ReplyStream::ReplyStream(const ToolFormat& format, json tools, std::string prefix, bool parallel)
    : impl_(std::make_unique<Impl>(&row_of(format), std::move(tools), parallel, false, true)) {
    if (!prefix.empty()) impl_->push(prefix);
}
ReplyStream::~ReplyStream() = default;
ReplyStream::ReplyStream(ReplyStream&&) noexcept = default;
ReplyStream& ReplyStream::operator=(ReplyStream&&) noexcept = default;

std::string ReplyStream::push(std::string_view text) { return impl_->drop_markers(impl_->push(text), false); }
ReplyStream::Rest ReplyStream::finish(bool cut) {
    Rest r = impl_->finish(cut);
    r.content = impl_->drop_markers(std::move(r.content), true);
    return r;
}
void ReplyStream::stream_arguments() { impl_->fragments = impl_->row->scan != nullptr; }
bool ReplyStream::streams_arguments() const { return impl_->fragments; }
std::vector<CallDelta> ReplyStream::take_deltas() { return impl_->take_deltas(); }

ReplyStream::Rest parse_reply(const ToolFormat& format, const json& tools, std::string_view text) {
    ReplyStream s(format, tools);
    std::string content = s.push(text);
    ReplyStream::Rest r = s.finish(false);
    r.content = content + r.content;
    return r;
}

}  // namespace vkllm::answer
