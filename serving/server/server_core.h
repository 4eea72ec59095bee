// What every API the server speaks (OpenAI's, llama-server's native one, Ollama's, the chat page)
// is built on: routes registered with their error shape, bodies read under the size cap, the
// loaded model, engine requests submitted and collected, streams written by an encoder of the
// API's wire format, and embeddings run in groups on the one device. The route files
// (openai_routes.cpp, ...) see only this; http_server.cpp owns the sockets, CORS, the API key
// and the server's life.
#pragma once

#include "serving/server/http_server.h"
#include "serving/server/openai_requests.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace vkllm::server {

// How an API shapes its error bodies: OpenAI's {"error": {"message", "type", "param", "code"}}
// (llama-server's native routes use it too), or Ollama's {"error": "message"}.
enum class ErrorStyle { OpenAI, Ollama };

json error_body(const ApiError& e, ErrorStyle style);

// A stream's wire format: server-sent events or newline-delimited JSON, each API's own chunks.
// The core calls these in order: start, then text/finish per choice as events come, then end once
// every choice finished (or error once, when one failed or the server is shutting down).
class StreamEncoder {
public:
    virtual ~StreamEncoder() = default;
    virtual const char* content_type() const = 0;  // "text/event-stream", "application/x-ndjson"
    virtual std::string start() = 0;
    virtual std::string text(size_t choice, const engine::Event& ev) = 0;
    virtual std::string finish(size_t choice, const engine::Event& done) = 0;
    virtual std::string end(const std::vector<engine::Event>& dones) = 0;
    virtual std::string error(const ApiError& e) = 0;
    // Written after a silence of ServerOptions::ping_interval, so that a client gone away is found
    // while its request still waits; "" where the format has no comment (NDJSON).
    virtual std::string ping() const { return ": ping\n\n"; }
};

class ServerCore {
public:
    explicit ServerCore(ServerOptions opts);

    using Request = httplib::Request;
    using Response = httplib::Response;
    using BodyHandler = std::function<void(const Request&, Response&, const std::string& body)>;
    using Handler = std::function<void(const Request&, Response&)>;

    // A POST route: the body is read under max_body_bytes (a chunked one too), handler exceptions
    // become error bodies of `style` (ApiError as itself, anything else a 500). The path and
    // method are remembered so that another method on it is a 405 naming the right one.
    void post(const std::string& path, BodyHandler fn, ErrorStyle style = ErrorStyle::OpenAI);
    // A POST route whose path is a regular expression, and a DELETE route (Ollama's, with a body).
    void post_pattern(const std::string& pattern, BodyHandler fn, ErrorStyle style = ErrorStyle::OpenAI);
    void del(const std::string& path, BodyHandler fn, ErrorStyle style = ErrorStyle::OpenAI);
    // Whether a route reads a body for this method and path: any other request with a body is
    // refused before a byte of it is read (cpp-httplib would read it whole, without the cap).
    bool reads_body(const std::string& method, const std::string& path) const;
    void get(const std::string& path, Handler fn, ErrorStyle style = ErrorStyle::OpenAI);
    // A GET route whose path is a regular expression (req.matches); not listed for 405.
    void get_pattern(const std::string& pattern, Handler fn, ErrorStyle style = ErrorStyle::OpenAI);
    // Paths answered without the API key (the chat page's files, which hold no secret).
    void make_public(const std::string& path) { public_.insert(path); }
    bool is_public(const std::string& path) const { return public_.count(path) > 0; }
    // The methods each registered path answers ("GET", "POST", "GET, POST").
    const std::map<std::string, std::string>& known_routes() const { return methods_; }
    // The error style of the route at `path` (OpenAI for an unknown one).
    ErrorStyle style_of(const std::string& path) const;

    // The model, or a 503 "Loading model" while it loads.
    std::shared_ptr<const ServedModel> ready_model() const;
    // The model or null, without throwing (health, metrics, the chat page).
    std::shared_ptr<const ServedModel> model() const;
    void set_model(std::shared_ptr<const ServedModel> m);
    // 503 once shutdown began.
    void check_not_draining() const;
    bool draining() const { return draining_; }
    void begin_draining() { draining_ = true; }
    const ServerOptions& options() const { return opts_; }

    // A 400 unless the model generates text (an embedding model or reranker answers its own routes).
    static void require_generator(const ServedModel& m);
    // One engine request; a full queue is a 503 (queue_full), a stopped engine the shutdown 503,
    // the engine's invalid_argument a 400.
    static std::unique_ptr<Generation> submit(const ServedModel& m, engine::CompletionRequest req);
    // Waits for the request's end, handing each Text event to on_text; returns the Done event.
    // Cancellation (shutdown) is the shutdown 503, a generation error a 500.
    engine::Event collect(Generation& g, const std::function<void(const engine::Event&)>& on_text) const;
    // Streams the choices' events through `enc` as the response body; the requests are cancelled
    // when the client goes away. Counts as an open stream until the body ends.
    void stream(Response& res, std::vector<std::unique_ptr<Generation>> gens, std::unique_ptr<StreamEncoder> enc);
    // Vectors of embedding inputs (or scores of rerank pairs), kEmbedGroup per call of the model,
    // holding one of threads - 2 places for such requests (503 beyond them).
    std::vector<std::vector<float>> embed(const ServedModel& m, const std::vector<std::vector<int32_t>>& inputs);
    std::vector<float> rerank(const ServedModel& m, const std::vector<std::vector<int32_t>>& inputs);

    // The shutdown 503.
    static ApiError shutting_down();
    // 413 naming the limit.
    ApiError body_too_large() const;

    static void send_json(Response& res, const json& j, int status = 200);
    static void send_error(Response& res, const ApiError& e, ErrorStyle style = ErrorStyle::OpenAI);

    // Streams open now, and a wait for none to be (HttpServer::wait_streams).
    uint32_t open_streams() const;
    bool wait_streams(std::chrono::milliseconds timeout);

    httplib::Server& http() { return svr_; }

private:
    template <class Fn>
    void guarded(Response& res, ErrorStyle style, Fn&& fn);
    void remember(const std::string& path, const char* method, ErrorStyle style);
    void body_route(const std::string& method, const std::string& pattern, BodyHandler fn, ErrorStyle style);
    struct StreamState;
    bool stream_step(StreamState& st, httplib::DataSink& sink);
    void stream_opened();
    void stream_closed();

    ServerOptions opts_;
    httplib::Server svr_;
    std::map<std::string, std::string> methods_;
    std::map<std::string, ErrorStyle> styles_;
    std::set<std::string> public_;
    std::vector<std::pair<std::string, std::regex>> body_routes_;  // method, path pattern
    mutable std::mutex mu_;
    std::shared_ptr<const ServedModel> model_;  // null while loading
    uint32_t streams_ = 0;
    std::condition_variable streams_cv_;
    std::atomic<bool> draining_{false};
    std::atomic<uint32_t> embedding_requests_{0};
};

// The routes of each API, registered on the core (one file each).
void add_openai_routes(ServerCore& core);  // /v1/chat/completions, /v1/completions, /v1/models, embeddings, rerank
void add_native_routes(ServerCore& core);  // /health, /tokenize, /detokenize, /apply-template
void add_ollama_routes(ServerCore& core);  // /api/chat, /api/generate, /api/embed, /api/tags, /api/show, ...
void add_webui_routes(ServerCore& core);  // the chat page: GET / and /assets/* (unless ServerOptions::webui is off)

}  // namespace vkllm::server
