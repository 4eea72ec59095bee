#include "serving/server/ollama_responses.h"

#include "serving/server/openai_responses.h"

#include <fmt/format.h>

#include <ctime>

namespace vkllm::server::ollama {

std::string timestamp(std::chrono::system_clock::time_point t) {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
    const std::time_t secs = std::time_t(ns / 1000000000);
    std::tm tm{};
    gmtime_r(&secs, &tm);
    return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:09}Z", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                       tm.tm_hour, tm.tm_min, tm.tm_sec, ns % 1000000000);
}

std::string ndjson(const json& j) { return dump_json(j) + "\n"; }

json error_json(const std::string& message) { return json{{"error", message}}; }

const char* done_reason(engine::FinishReason r) {
    return r == engine::FinishReason::Length || r == engine::FinishReason::Timeout ? "length" : "stop";
}

namespace {

int64_t ms_to_ns(double ms) { return int64_t(ms * 1e6); }

json base(const std::string& model) {
    json j = json::object();
    j["model"] = model;
    j["created_at"] = timestamp(std::chrono::system_clock::now());
    return j;
}

}  // namespace

json load_response(const Request& req) {
    json j = base(req.model);
    if (req.route == Route::Chat)
        j["message"] = json{{"role", "assistant"}, {"content", ""}};
    else
        j["response"] = "";
    j["done_reason"] = "load";
    j["done"] = true;
    return j;
}

json tool_calls_json(const std::vector<answer::ToolCall>& calls) {
    json out = json::array();
    for (size_t i = 0; i < calls.size(); ++i) {
        json args = json::parse(calls[i].arguments, nullptr, false);
        if (args.is_discarded()) args = json::object();  // the parser only hands out calls with object arguments
        json fn = json::object();
        fn["index"] = i;
        fn["name"] = calls[i].name;
        fn["arguments"] = std::move(args);
        out.push_back(json{{"id", calls[i].id.empty() ? "call_" + answer::random_id_chars(8) : calls[i].id},
                           {"function", std::move(fn)}});
    }
    return out;
}

json logprobs_json(const std::vector<engine::TokenLogprob>& lps) {
    auto bytes = [](const std::string& s) {
        json b = json::array();
        for (unsigned char c : s) b.push_back(int(c));
        return b;
    };
    json out = json::array();
    for (const engine::TokenLogprob& lp : lps) {
        json top = json::array();
        for (const auto& [text, logprob] : lp.top)
            top.push_back(json{{"token", text}, {"logprob", logprob}, {"bytes", bytes(text)}});
        out.push_back(
            json{{"token", lp.text}, {"logprob", lp.logprob}, {"bytes", bytes(lp.text)}, {"top_logprobs", top}});
    }
    return out;
}

Responder::Responder(const Request& req, std::vector<int32_t> prompt, std::chrono::steady_clock::time_point start)
    : route_(req.route),
      model_(req.model),
      logprobs_(req.parsed.logprobs),
      with_context_(req.route == Route::Generate && !req.raw),
      context_(std::move(prompt)),
      start_(start),
      answer_(answer_format(req.parsed)) {}

json Responder::object() const { return base(model_); }

json Responder::piece(const std::string& content, const std::string& thinking,
                      const std::vector<answer::ToolCall>& calls, const std::vector<engine::TokenLogprob>& lps) const {
    json j = object();
    if (route_ == Route::Chat) {
        json msg = json{{"role", "assistant"}, {"content", content}};
        if (!thinking.empty()) msg["thinking"] = thinking;
        if (!calls.empty()) msg["tool_calls"] = tool_calls_json(calls);
        j["message"] = std::move(msg);
    } else {
        j["response"] = content;
        if (!thinking.empty()) j["thinking"] = thinking;
    }
    j["done"] = false;
    if (logprobs_ && !lps.empty()) j["logprobs"] = logprobs_json(lps);
    return j;
}

void Responder::finish_object(json& j, const engine::Event& done) const {
    // Ollama's key order: a chat's done_reason before done, a generate's after it.
    if (route_ == Route::Chat) {
        j.erase("done");
        j["done_reason"] = done_reason(done.finish);
        j["done"] = true;
    } else {
        j["done"] = true;
        j["done_reason"] = done_reason(done.finish);
        if (with_context_) j["context"] = context_;
    }
    const auto total = std::chrono::steady_clock::now() - start_;
    j["total_duration"] = std::chrono::duration_cast<std::chrono::nanoseconds>(total).count();
    j["load_duration"] = 0;  // the model is loaded for the server's whole life
    j["prompt_eval_count"] = done.prompt_tokens;
    j["prompt_eval_duration"] = ms_to_ns(done.prompt_ms);
    j["eval_count"] = done.completion_tokens;
    j["eval_duration"] = ms_to_ns(done.generate_ms);
}

std::string Responder::stream_text(const engine::Event& ev) {
    context_.insert(context_.end(), ev.tokens.begin(), ev.tokens.end());
    const answer::AnswerStream::Piece p = answer_.push(ev.text);
    if (p.content.empty() && p.reasoning.empty() && (!logprobs_ || ev.logprobs.empty())) return {};
    return ndjson(piece(p.content, p.reasoning, {}, ev.logprobs));
}

std::string Responder::stream_done(const engine::Event& done) {
    context_.insert(context_.end(), done.tokens.begin(), done.tokens.end());
    const answer::AnswerStream::Rest rest = answer_.finish(engine::cut_short(done.finish));
    std::string out;
    // What the answer held back (a possible call marker that was not one, a reasoning tag's start)
    // and the calls, in an object of their own as Ollama sends a call once it is parsed.
    if (!rest.content.empty() || !rest.reasoning.empty() || !rest.calls.empty())
        out += ndjson(piece(rest.content, rest.reasoning, rest.calls, {}));
    json last = piece("", "", {}, {});
    finish_object(last, done);
    return out + ndjson(last);
}

void Responder::add(const engine::Event& ev) {
    context_.insert(context_.end(), ev.tokens.begin(), ev.tokens.end());
    const answer::AnswerStream::Piece p = answer_.push(ev.text);
    content_ += p.content;
    thinking_ += p.reasoning;
    if (logprobs_) lps_.insert(lps_.end(), ev.logprobs.begin(), ev.logprobs.end());
}

json Responder::response(const engine::Event& done) {
    context_.insert(context_.end(), done.tokens.begin(), done.tokens.end());
    const answer::AnswerStream::Rest rest = answer_.finish(engine::cut_short(done.finish));
    json j = piece(content_ + rest.content, thinking_ + rest.reasoning, rest.calls, {});
    finish_object(j, done);
    if (logprobs_) j["logprobs"] = logprobs_json(lps_);
    return j;
}

json embed_response(const std::string& model, const std::vector<std::vector<float>>& vectors, uint64_t tokens,
                    int64_t total_ns) {
    json embeddings = json::array();
    for (const std::vector<float>& v : vectors) embeddings.push_back(v);
    return json{{"model", model},
                {"embeddings", std::move(embeddings)},
                {"total_duration", total_ns},
                {"load_duration", 0},
                {"prompt_eval_count", tokens}};
}

json embeddings_response(const std::vector<float>& vector) {
    json e = json::array();
    for (float x : vector) e.push_back(double(x));
    return json{{"embedding", std::move(e)}};
}

}  // namespace vkllm::server::ollama
