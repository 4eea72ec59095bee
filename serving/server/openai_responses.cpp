#include "serving/server/openai_responses.h"

namespace vkllm::server {

// --- errors and serialization ---------------------------------------------------------------------

json error_json(const ApiError& e) {
    json err = json::object();
    err["message"] = e.what();
    err["type"] = e.type();
    err["param"] = e.param().empty() ? json(nullptr) : json(e.param());
    err["code"] = e.code().empty() ? json(nullptr) : json(e.code());
    return json{{"error", err}};
}

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string sse_data(const json& j) { return "data: " + dump_json(j) + "\n\n"; }

const char* openai_finish_reason(engine::FinishReason r) {
    switch (r) {
        case engine::FinishReason::Length:
        case engine::FinishReason::Timeout: return "length";
        default: return "stop";
    }
}

// --- responses --------------------------------------------------------------------------------

answer::AnswerFormat answer_format(const ParsedRequest& req) {
    answer::AnswerFormat f;
    f.harmony = req.harmony;
    f.inline_reasoning = req.reasoning_format == "none";
    f.split_reasoning = req.split_reasoning;
    f.inside = req.reply_in_reasoning;
    f.plan = &req.tool_plan;
    f.tools = req.tools;
    return f;
}

ResponseBuilder::ResponseBuilder(const ParsedRequest& req, std::string id, std::string model, int64_t created,
                                 uint32_t index)
    : endpoint_(req.endpoint),
      logprobs_(req.logprobs),
      include_usage_(req.stream && req.include_usage),
      id_(std::move(id)),
      model_(std::move(model)),
      created_(created),
      index_(index),
      answer_(answer_format(req)) {
    // Where the tools' grammar holds the calls, a call once begun ends well formed: its arguments
    // can go out as they are written. Not where the grammar skips a reasoning block that stays in
    // the content (reasoning_format none): the parser would read a call the model only thought about.
    const bool grammar_holds = req.tool_plan.grammar && req.engine.grammar == req.tool_plan.grammar;
    const bool sees_what_grammar_sees = req.engine.grammar_start.skip_close.empty() || req.split_reasoning;
    if (!req.harmony && req.stream && grammar_holds && sees_what_grammar_sees) answer_.stream_arguments();
}

json ResponseBuilder::chunk_base() const {
    json j = json::object();
    j["id"] = id_;
    j["object"] = endpoint_ == Endpoint::Chat ? "chat.completion.chunk" : "text_completion";
    j["created"] = created_;
    j["model"] = model_;
    j["system_fingerprint"] = "vkllm";
    return j;
}

json ResponseBuilder::usage(const engine::Event& done) const {
    json u{{"prompt_tokens", done.prompt_tokens},
           {"completion_tokens", done.completion_tokens},
           {"total_tokens", done.prompt_tokens + done.completion_tokens},
           {"prompt_tokens_details", {{"cached_tokens", done.cached_tokens}}}};
    // Speculative decoding (--draft, --lookup): OpenAI's fields for predicted tokens, where drafts ran.
    if (done.draft_tokens > 0)
        u["completion_tokens_details"] = {{"accepted_prediction_tokens", done.accepted_tokens},
                                          {"rejected_prediction_tokens", done.draft_tokens - done.accepted_tokens}};
    return u;
}

namespace {

json token_bytes(const std::string& s) {
    json b = json::array();
    for (unsigned char c : s) b.push_back(int(c));
    return b;
}

}  // namespace

json ResponseBuilder::chat_logprobs(const std::vector<engine::TokenLogprob>& lps) const {
    json content = json::array();
    for (const engine::TokenLogprob& lp : lps) {
        json top = json::array();
        for (const auto& [text, logprob] : lp.top)
            top.push_back(json{{"token", text}, {"logprob", logprob}, {"bytes", token_bytes(text)}});
        content.push_back(
            json{{"token", lp.text}, {"logprob", lp.logprob}, {"bytes", token_bytes(lp.text)}, {"top_logprobs", top}});
    }
    return json{{"content", content}, {"refusal", nullptr}};
}

json ResponseBuilder::completion_logprobs(const std::vector<engine::TokenLogprob>& lps, size_t text_offset) const {
    json tokens = json::array(), token_logprobs = json::array(), top = json::array(), offsets = json::array();
    for (const engine::TokenLogprob& lp : lps) {
        tokens.push_back(lp.text);
        token_logprobs.push_back(lp.logprob);
        json alts = json::object();
        for (const auto& [text, logprob] : lp.top) alts[text] = logprob;
        top.push_back(alts);
        offsets.push_back(text_offset);
        text_offset += lp.text.size();
    }
    return json{
        {"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}, {"text_offset", offsets}};
}

std::string ResponseBuilder::stream_start() const {
    if (endpoint_ != Endpoint::Chat) return {};
    json j = chunk_base();
    j["choices"] = json::array({json{{"index", index_},
                                     {"delta", {{"role", "assistant"}, {"content", ""}}},
                                     {"logprobs", nullptr},
                                     {"finish_reason", nullptr}}});
    if (include_usage_) j["usage"] = nullptr;
    return sse_data(j);
}

std::string ResponseBuilder::calls_chunk(const std::vector<answer::CallDelta>& deltas) const {
    if (deltas.empty()) return {};
    json c = chunk_base();
    c["choices"] = json::array({json{{"index", index_},
                                     {"delta", {{"tool_calls", answer::tool_call_deltas_json(deltas)}}},
                                     {"logprobs", nullptr},
                                     {"finish_reason", nullptr}}});
    if (include_usage_) c["usage"] = nullptr;
    return sse_data(c);
}

std::string ResponseBuilder::stream_text(const engine::Event& ev) {
    const answer::AnswerStream::Piece piece = answer_.push(ev.text);
    const std::string& text = piece.content;
    const std::string calls = calls_chunk(answer_.take_deltas());
    if (text.empty() && piece.reasoning.empty() && (!logprobs_ || ev.logprobs.empty())) return calls;
    json j = chunk_base();
    json choice = json::object();
    choice["index"] = index_;
    json lp = nullptr;
    if (endpoint_ == Endpoint::Chat) {
        choice["delta"] = json::object();
        if (!piece.reasoning.empty()) choice["delta"]["reasoning_content"] = piece.reasoning;
        if (!text.empty() || piece.reasoning.empty()) choice["delta"]["content"] = text;
        if (logprobs_) lp = chat_logprobs(ev.logprobs);
        choice["logprobs"] = lp;
    } else {
        choice["text"] = text;
        if (logprobs_) lp = completion_logprobs(ev.logprobs, streamed_bytes_);
        for (const auto& t : ev.logprobs) streamed_bytes_ += t.text.size();
        choice["logprobs"] = lp;
    }
    choice["finish_reason"] = nullptr;
    j["choices"] = json::array({choice});
    if (include_usage_) j["usage"] = nullptr;
    return sse_data(j) + calls;
}

std::string ResponseBuilder::stream_finish(const engine::Event& done) {
    std::string out;
    const char* finish = openai_finish_reason(done.finish);
    auto delta_chunk = [&](json delta) {
        json c = chunk_base();
        c["choices"] = json::array(
            {json{{"index", index_}, {"delta", std::move(delta)}, {"logprobs", nullptr}, {"finish_reason", nullptr}}});
        if (include_usage_) c["usage"] = nullptr;
        out += sse_data(c);
    };
    // The text held back at the end, then the calls: whole (a call is sent once it is known to be
    // well formed: a malformed one comes back as content instead), or where arguments stream, what
    // completes them.
    const answer::AnswerStream::Rest rest = answer_.finish(engine::cut_short(done.finish));
    if (!rest.reasoning.empty()) delta_chunk(json{{"reasoning_content", rest.reasoning}});
    if (!rest.content.empty()) delta_chunk(json{{"content", rest.content}});
    if (answer_.streams_arguments())
        out += calls_chunk(rest.deltas);
    else if (!rest.calls.empty())
        delta_chunk(json{{"tool_calls", answer::tool_calls_json(rest.calls, answer_.family(), true)}});
    // Calls cut short by max_tokens still end "length": the client learns the answer is incomplete.
    if (!rest.calls.empty() && !engine::cut_short(done.finish)) finish = "tool_calls";
    json j = chunk_base();
    json choice = json::object();
    choice["index"] = index_;
    if (endpoint_ == Endpoint::Chat)
        choice["delta"] = json::object();
    else
        choice["text"] = "";
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = finish;
    j["choices"] = json::array({choice});
    if (include_usage_) j["usage"] = nullptr;
    out += sse_data(j);
    return out;
}

std::string ResponseBuilder::stream_end(const engine::Event& usage_of) const {
    std::string out;
    if (include_usage_) {
        json u = chunk_base();
        u["choices"] = json::array();
        u["usage"] = usage(usage_of);
        out += sse_data(u);
    }
    return out + kSseDone;
}

std::string ResponseBuilder::stream_done(const engine::Event& done) { return stream_finish(done) + stream_end(done); }

std::string ResponseBuilder::stream_error(const ApiError& e) { return sse_data(error_json(e)); }

void ResponseBuilder::add(const engine::Event& ev) {
    const answer::AnswerStream::Piece piece = answer_.push(ev.text);
    reasoning_text_ += piece.reasoning;
    text_ += piece.content;
    if (logprobs_) lps_.insert(lps_.end(), ev.logprobs.begin(), ev.logprobs.end());
}

json ResponseBuilder::response(const engine::Event& done) {
    json j = json::object();
    j["id"] = id_;
    j["object"] = endpoint_ == Endpoint::Chat ? "chat.completion" : "text_completion";
    j["created"] = created_;
    j["model"] = model_;
    j["system_fingerprint"] = "vkllm";
    json choice = json::object();
    choice["index"] = index_;
    const char* finish = openai_finish_reason(done.finish);
    if (endpoint_ == Endpoint::Chat) {
        const answer::AnswerStream::Rest rest = answer_.finish(engine::cut_short(done.finish));
        const std::string content = text_ + rest.content;
        json message = json{{"role", "assistant"}, {"content", content}};
        const std::string reasoning = reasoning_text_ + rest.reasoning;
        if (!reasoning.empty()) message["reasoning_content"] = reasoning;
        message["refusal"] = nullptr;
        if (!rest.calls.empty()) {
            // OpenAI: a reply that is only calls has null content.
            if (content.empty()) message["content"] = nullptr;
            message["tool_calls"] = answer::tool_calls_json(rest.calls, answer_.family(), false);
            if (!engine::cut_short(done.finish)) finish = "tool_calls";
        }
        choice["message"] = std::move(message);
        choice["logprobs"] = logprobs_ ? chat_logprobs(lps_) : json(nullptr);
    } else {
        choice["text"] = text_;
        choice["logprobs"] = logprobs_ ? completion_logprobs(lps_, 0) : json(nullptr);
    }
    choice["finish_reason"] = finish;
    j["choices"] = json::array({choice});
    j["usage"] = usage(done);
    return j;
}

engine::Event combined_usage(const std::vector<engine::Event>& done, uint32_t n) {
    engine::Event sum = done.at(0);
    for (size_t i = 1; i < done.size(); ++i) {
        sum.completion_tokens += done[i].completion_tokens;
        sum.draft_tokens += done[i].draft_tokens;
        sum.accepted_tokens += done[i].accepted_tokens;
        if (i % std::max<uint32_t>(n, 1) == 0) sum.prompt_tokens += done[i].prompt_tokens;
    }
    return sum;
}

json merge_choices(std::vector<json> responses, const std::vector<engine::Event>& done, uint32_t n) {
    json out = std::move(responses.at(0));
    for (size_t i = 1; i < responses.size(); ++i) out["choices"].push_back(std::move(responses[i]["choices"][0]));
    const engine::Event sum = combined_usage(done, n);
    out["usage"]["prompt_tokens"] = sum.prompt_tokens;
    out["usage"]["completion_tokens"] = sum.completion_tokens;
    out["usage"]["total_tokens"] = sum.prompt_tokens + sum.completion_tokens;
    return out;
}

std::string new_response_id(Endpoint ep) {
    return (ep == Endpoint::Chat ? "chatcmpl-" : "cmpl-") + answer::random_id_chars(24);
}

}  // namespace vkllm::server
