#include "serving/server/server_core.h"

#include "serving/server/openai_responses.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <regex>
#include <string_view>

namespace vkllm::server {

namespace {
constexpr const char* kJson = "application/json; charset=utf-8";
}  // namespace

json error_body(const ApiError& e, ErrorStyle style) {
    if (style == ErrorStyle::Ollama) return json{{"error", e.what()}};
    return error_json(e);
}

ServerCore::ServerCore(ServerOptions opts) : opts_(std::move(opts)) {}

void ServerCore::send_json(Response& res, const json& j, int status) {
    res.status = status;
    res.set_content(dump_json(j), kJson);
}

void ServerCore::send_error(Response& res, const ApiError& e, ErrorStyle style) {
    res.status = e.status();
    res.set_content(dump_json(error_body(e, style)), kJson);
    if (e.status() == 503) res.set_header("Retry-After", "1");
}

ApiError ServerCore::shutting_down() { return ApiError(503, "The server is shutting down.", "server_error"); }

ApiError ServerCore::body_too_large() const {
    return ApiError(
        413, fmt::format("The request body is larger than this server's limit of {} bytes.", opts_.max_body_bytes),
        "invalid_request_error", "", "request_too_large");
}

template <class Fn>
void ServerCore::guarded(Response& res, ErrorStyle style, Fn&& fn) {
    try {
        fn();
    } catch (const ApiError& e) {
        send_error(res, e, style);
    } catch (const std::exception& e) {
        send_error(res, ApiError(500, e.what(), "server_error"), style);
    }
}

void ServerCore::remember(const std::string& path, const char* method, ErrorStyle style) {
    std::string& m = methods_[path];
    if (m.find(method) == std::string::npos) m = m.empty() ? method : m + ", " + method;
    styles_[path] = style;
}

ErrorStyle ServerCore::style_of(const std::string& path) const {
    auto it = styles_.find(path);
    return it == styles_.end() ? ErrorStyle::OpenAI : it->second;
}

namespace {

// cpp-httplib matches routes as regular expressions: a path's own dots ("/assets/app.js") must
// match only themselves.
std::string literal_pattern(const std::string& path) {
    std::string pattern;
    for (char c : path) {
        if (std::string_view(".[]{}()\\*+?^$|").find(c) != std::string_view::npos) pattern += '\\';
        pattern += c;
    }
    return pattern;
}

}  // namespace

void ServerCore::body_route(const std::string& method, const std::string& pattern, BodyHandler fn, ErrorStyle style) {
    body_routes_.emplace_back(method, std::regex(pattern));
    // The body is read here, so that a chunked body is capped like one with a Content-Length
    // (cpp-httplib checks only the latter against payload_max_length).
    auto with_body = [this, fn, style](const Request& req, Response& res, const httplib::ContentReader& reader) {
        std::string body;
        bool too_large = false;
        bool ok = reader([&](const char* data, size_t n) {
            if (body.size() + n > opts_.max_body_bytes) {
                too_large = true;
                return false;
            }
            body.append(data, n);
            return true;
        });
        if (!ok || too_large) {
            too_large = too_large || res.status == 413;
            res.set_header("Connection", "close");  // the rest of the body is not read
            send_error(res, too_large ? body_too_large() : ApiError(400, "The request body could not be read."), style);
            return;
        }
        guarded(res, style, [&] { fn(req, res, body); });
    };
    // A request without a body never reaches the content-reader route.
    auto without_body = [this, fn, style](const Request& req, Response& res) {
        guarded(res, style, [&] { fn(req, res, req.body); });
    };
    if (method == "POST") {
        svr_.Post(pattern, with_body);
        svr_.Post(pattern, without_body);
    } else {
        svr_.Delete(pattern, with_body);
        svr_.Delete(pattern, without_body);
    }
}

bool ServerCore::reads_body(const std::string& method, const std::string& path) const {
    for (const auto& [m, re] : body_routes_)
        if (m == method && std::regex_match(path, re)) return true;
    return false;
}

void ServerCore::post(const std::string& path, BodyHandler fn, ErrorStyle style) {
    remember(path, "POST", style);
    body_route("POST", literal_pattern(path), std::move(fn), style);
}

void ServerCore::post_pattern(const std::string& pattern, BodyHandler fn, ErrorStyle style) {
    body_route("POST", pattern, std::move(fn), style);
}

void ServerCore::del(const std::string& path, BodyHandler fn, ErrorStyle style) {
    remember(path, "DELETE", style);
    body_route("DELETE", literal_pattern(path), std::move(fn), style);
}

void ServerCore::get(const std::string& path, Handler fn, ErrorStyle style) {
    remember(path, "GET", style);
    get_pattern(literal_pattern(path), std::move(fn), style);
}

void ServerCore::get_pattern(const std::string& pattern, Handler fn, ErrorStyle style) {
    svr_.Get(pattern,
             [this, fn, style](const Request& req, Response& res) { guarded(res, style, [&] { fn(req, res); }); });
}

std::shared_ptr<const ServedModel> ServerCore::ready_model() const {
    std::lock_guard lk(mu_);
    if (!model_) throw ApiError(503, "Loading model", "unavailable_error");
    return model_;
}

std::shared_ptr<const ServedModel> ServerCore::model() const {
    std::lock_guard lk(mu_);
    return model_;
}

void ServerCore::set_model(std::shared_ptr<const ServedModel> m) {
    std::lock_guard lk(mu_);
    model_ = std::move(m);
}

void ServerCore::check_not_draining() const {
    if (draining_) throw shutting_down();
}

void ServerCore::require_generator(const ServedModel& m) {
    if (!m.submit)
        throw ApiError(
            400,
            fmt::format("The model '{}' is {} (it has no language-model head): it answers {} only.", m.id,
                        m.rerank ? "a reranker" : "an embedding model", m.rerank ? "/v1/rerank" : "/v1/embeddings"),
            "invalid_request_error", "model", "model_not_supported");
}

std::unique_ptr<Generation> ServerCore::submit(const ServedModel& m, engine::CompletionRequest req) {
    try {
        return m.submit(std::move(req));
    } catch (const engine::QueueFullError& e) {
        throw ApiError(
            503,
            fmt::format("The server is busy: every slot is taken and the queue is full ({}). Please retry.", e.what()),
            "server_error", "", "queue_full");
    } catch (const engine::EngineStoppedError&) {
        throw shutting_down();
    } catch (const std::invalid_argument& e) {
        throw ApiError(400, e.what());
    }
}

engine::Event ServerCore::collect(Generation& g, const std::function<void(const engine::Event&)>& on_text) const {
    for (;;) {
        std::optional<engine::Event> ev = g.next(opts_.poll);
        if (!ev) continue;
        if (ev->kind == engine::Event::Kind::Text) {
            on_text(*ev);
            continue;
        }
        if (ev->finish == engine::FinishReason::Cancelled) throw shutting_down();
        if (ev->finish == engine::FinishReason::Error)
            throw ApiError(500, fmt::format("Generation failed: {}", ev->error), "server_error");
        return std::move(*ev);
    }
}

// One of the threads - 2 places for embedding and rerank requests (each waits for the one device),
// held while it lives; beyond them a 503, rather than connections left hanging.
class EmbeddingTicket {
public:
    EmbeddingTicket(std::atomic<uint32_t>& n, uint32_t limit) : n_(n) {
        if (++n_ > limit) {
            --n_;
            throw ApiError(
                503, fmt::format("The server is busy: {} embedding and rerank requests are running or waiting.", limit),
                "server_error");
        }
    }
    ~EmbeddingTicket() { --n_; }
    EmbeddingTicket(const EmbeddingTicket&) = delete;
    EmbeddingTicket& operator=(const EmbeddingTicket&) = delete;

private:
    std::atomic<uint32_t>& n_;
};

namespace {

// Runs `call` on the inputs kEmbedGroup at a time, checking for shutdown between calls.
template <class Out, class Call>
std::vector<Out> in_groups(const ServerCore& core, const std::vector<std::vector<int32_t>>& inputs, Call&& call) {
    std::vector<Out> out;
    for (size_t first = 0; first < inputs.size(); first += kEmbedGroup) {
        core.check_not_draining();
        const std::vector<std::vector<int32_t>> group(
            inputs.begin() + std::ptrdiff_t(first),
            inputs.begin() + std::ptrdiff_t(std::min(inputs.size(), first + kEmbedGroup)));
        for (auto& v : call(group)) out.push_back(std::move(v));
    }
    return out;
}

}  // namespace

std::vector<std::vector<float>> ServerCore::embed(const ServedModel& m,
                                                  const std::vector<std::vector<int32_t>>& inputs) {
    const EmbeddingTicket ticket(embedding_requests_, std::max<uint32_t>(1, opts_.threads > 2 ? opts_.threads - 2 : 1));
    return in_groups<std::vector<float>>(*this, inputs, m.embed);
}

std::vector<float> ServerCore::rerank(const ServedModel& m, const std::vector<std::vector<int32_t>>& inputs) {
    const EmbeddingTicket ticket(embedding_requests_, std::max<uint32_t>(1, opts_.threads > 2 ? opts_.threads - 2 : 1));
    return in_groups<float>(*this, inputs, m.rerank);
}

// What a streaming response keeps between calls of its content provider.
struct ServerCore::StreamState {
    std::vector<std::unique_ptr<Generation>> gens;  // one per choice
    std::unique_ptr<StreamEncoder> enc;
    std::vector<std::optional<engine::Event>> done;  // each choice's Done event, once it came
    bool started = false, finished = false;
    std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();
};

void ServerCore::stream_opened() {
    std::lock_guard lk(mu_);
    ++streams_;
}

void ServerCore::stream_closed() {
    {
        std::lock_guard lk(mu_);
        --streams_;
    }
    streams_cv_.notify_all();
}

uint32_t ServerCore::open_streams() const {
    std::lock_guard lk(mu_);
    return streams_;
}

bool ServerCore::wait_streams(std::chrono::milliseconds timeout) {
    std::unique_lock lk(mu_);
    return streams_cv_.wait_for(lk, timeout, [&] { return streams_ == 0; });
}

void ServerCore::stream(Response& res, std::vector<std::unique_ptr<Generation>> gens,
                        std::unique_ptr<StreamEncoder> enc) {
    auto st = std::make_shared<StreamState>();
    st->gens = std::move(gens);
    st->enc = std::move(enc);
    st->done.resize(st->gens.size());
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");  // proxies must not hold the events back
    stream_opened();
    auto provider = [this, st](size_t, httplib::DataSink& sink) {
        // An exception must not leave the provider (cpp-httplib calls it outside any handler's
        // try): the stream ends with a server error event instead.
        try {
            return stream_step(*st, sink);
        } catch (const std::exception& e) {
            st->finished = true;
            for (auto& g : st->gens) g->cancel();
            const std::string tail = st->enc->error(ApiError(500, e.what(), "server_error"));
            const bool ok = sink.write(tail.data(), tail.size());
            sink.done();
            return ok;
        }
    };
    // Runs when the response is gone: written completely, or its client hung up, or the server
    // stopped. Cancelling frees the slots within one engine step.
    auto release = [this, st](bool) {
        if (!st->finished)
            for (auto& g : st->gens) g->cancel();
        st->gens.clear();
        stream_closed();
    };
    res.set_chunked_content_provider(st->enc->content_type(), provider, release);
}

bool ServerCore::stream_step(StreamState& st, httplib::DataSink& sink) {
    auto write = [&](const std::string& s) {
        if (s.empty()) return true;
        st.last_write = std::chrono::steady_clock::now();
        return sink.write(s.data(), s.size());
    };
    auto end_with = [&](const std::string& tail) {
        st.finished = true;
        bool ok = write(tail);
        sink.done();
        return ok;
    };
    if (!st.started) {
        st.started = true;
        if (!write(st.enc->start())) return false;
    }
    // The choices take turns; each waits its share of the poll interval.
    const auto wait = std::max(std::chrono::milliseconds(1), opts_.poll / int(st.gens.size()));
    bool any = false;
    for (size_t i = 0; i < st.gens.size(); ++i) {
        if (st.done[i]) continue;
        std::optional<engine::Event> ev = st.gens[i]->next(wait);
        if (!ev) continue;
        any = true;
        if (ev->kind == engine::Event::Kind::Text) {
            if (!write(st.enc->text(i, *ev))) return false;
            continue;
        }
        if (ev->finish == engine::FinishReason::Cancelled) return end_with(st.enc->error(shutting_down()));
        if (ev->finish == engine::FinishReason::Error)
            return end_with(
                st.enc->error(ApiError(500, fmt::format("Generation failed: {}", ev->error), "server_error")));
        std::string tail = st.enc->finish(i, *ev);
        st.done[i] = std::move(*ev);
        if (std::all_of(st.done.begin(), st.done.end(), [](const auto& d) { return d.has_value(); })) {
            std::vector<engine::Event> all;
            for (auto& d : st.done) all.push_back(*d);
            return end_with(tail + st.enc->end(all));
        }
        if (!write(tail)) return false;
    }
    // Nothing to send (queued, or a long prompt): a comment the clients skip; a client that is
    // gone makes the write fail, which cancels the request.
    if (!any && std::chrono::steady_clock::now() - st.last_write >= opts_.ping_interval) return write(st.enc->ping());
    return true;
}

}  // namespace vkllm::server
