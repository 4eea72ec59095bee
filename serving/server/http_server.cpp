#include "serving/server/http_server.h"

#include "serving/server/openai_responses.h"
#include "serving/server/server_core.h"

#include <fmt/format.h>
#include <httplib.h>

#include <atomic>
#include <csignal>
#include <map>
#include <mutex>
#include <thread>

namespace vkllm::server {

bool constant_time_equal(std::string_view a, std::string_view b) {
    // Every byte of the longer string is looked at, whatever matches, so the time tells an
    // attacker nothing about how much of a guess was right.
    size_t diff = a.size() ^ b.size();
    const size_t n = std::max(a.size(), b.size());
    for (size_t i = 0; i < n; ++i) {
        unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
        unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
        diff |= size_t(x ^ y);
    }
    return diff == 0;
}

namespace {

using httplib::Request;
using httplib::Response;
using HandlerResponse = httplib::Server::HandlerResponse;

}  // namespace

struct HttpServer::Impl {
    ServerCore core;
    httplib::Server& svr;
    std::thread thread;
    std::atomic<bool> listening_done{false};
    int port = 0;

    mutable std::mutex mu;
    std::map<int, uint64_t> by_status;

    explicit Impl(ServerOptions o) : core(std::move(o)), svr(core.http()) {}
    const ServerOptions& opts() const { return core.options(); }

    void server_routes();
    HandlerResponse pre_routing(const Request& req, Response& res);
    HandlerResponse on_error(const Request& req, Response& res);
    // 405 with Allow for a known path asked with another method, else 404.
    void send_no_route(const Request& req, Response& res, ErrorStyle style) const;
    ServerCounters counters() const {
        ServerCounters c;
        c.ready = core.model() != nullptr;
        c.streams_open = core.open_streams();
        std::lock_guard lk(mu);
        c.http_by_status = by_status;
        return c;
    }
};

void HttpServer::Impl::send_no_route(const Request& req, Response& res, ErrorStyle style) const {
    auto it = core.known_routes().find(req.path);
    if (it != core.known_routes().end()) {
        res.set_header("Allow", it->second);
        ServerCore::send_error(
            res,
            ApiError(405, fmt::format("Method {} is not allowed for {}; use {}.", req.method, req.path, it->second),
                     "invalid_request_error"),
            style);
    } else {
        ServerCore::send_error(res,
                               ApiError(404, fmt::format("Invalid URL ({} {})", req.method, req.path),
                                        "invalid_request_error", "", "unknown_url"),
                               style);
    }
}

HandlerResponse HttpServer::Impl::pre_routing(const Request& req, Response& res) {
    // A request answered here leaves its body unread: the connection cannot carry another request
    // (the body's bytes would be read as one), so it is closed.
    const bool has_body = req.has_header("Transfer-Encoding") ||
                          (req.has_header("Content-Length") && req.get_header_value("Content-Length") != "0");
    auto handled = [&] {
        if (has_body) res.set_header("Connection", "close");
        return HandlerResponse::Handled;
    };
    const ErrorStyle style = core.style_of(req.path);
    if (req.headers.size() > opts().max_headers) {
        res.set_header("Connection", "close");
        ServerCore::send_error(
            res,
            ApiError(431, fmt::format("The request has {} header lines; this server takes at most {}.",
                                      req.headers.size(), opts().max_headers)),
            style);
        return HandlerResponse::Handled;
    }
    // Every response to an allowed origin carries the allow headers, errors and streams included.
    const std::string origin = req.get_header_value("Origin");
    const bool preflight = req.method == "OPTIONS";
    for (auto& [k, v] :
         cors_headers(opts().cors, origin, preflight, req.get_header_value("Access-Control-Request-Headers")))
        res.set_header(k, v);
    // A body only where a route reads it, under the cap: cpp-httplib would read any other whole,
    // before routing and without a limit, whoever sent it.
    if (has_body && !core.reads_body(req.method, req.path)) {
        send_no_route(req, res, style);
        return handled();
    }
    // A preflight comes without the API key (browsers never send it there) and is answered here,
    // for every path: what the actual request gets is decided when it comes.
    if (preflight) {
        if (!origin.empty() && !cors_allows(opts().cors, origin)) {
            ServerCore::send_error(
                res,
                ApiError(403, fmt::format("Cross-origin requests from {} are not allowed by this server "
                                          "(--cors-origins).",
                                          origin)),
                style);
            return handled();
        }
        auto it = core.known_routes().find(req.path);
        res.set_header("Allow", it != core.known_routes().end() ? it->second + ", OPTIONS" : opts().cors.methods);
        res.status = 204;
        return handled();
    }
    // Public paths (the health check, the chat page's files) are read, never written.
    const bool reads = req.method == "GET" || req.method == "HEAD";
    if (opts().api_key.empty() || (reads && core.is_public(req.path))) return HandlerResponse::Unhandled;
    const std::string auth = req.get_header_value("Authorization");
    constexpr std::string_view kBearer = "bearer ";
    bool bearer = auth.size() >= kBearer.size() &&
                  std::equal(kBearer.begin(), kBearer.end(), auth.begin(),
                             [](char a, char b) { return a == char(std::tolower(static_cast<unsigned char>(b))); });
    if (bearer) {
        std::string_view key = std::string_view(auth).substr(kBearer.size());
        while (!key.empty() && key.front() == ' ') key.remove_prefix(1);
        if (constant_time_equal(key, opts().api_key)) return HandlerResponse::Unhandled;
    }
    res.set_header("WWW-Authenticate", "Bearer");
    ServerCore::send_error(
        res,
        ApiError(401,
                 auth.empty() ? "You didn't provide an API key. You need to provide your API key in an "
                                "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
                              : "Incorrect API key provided.",
                 "invalid_request_error", "", "invalid_api_key"),
        style);
    return handled();
}

HandlerResponse HttpServer::Impl::on_error(const Request& req, Response& res) {
    if (!res.body.empty()) return HandlerResponse::Unhandled;  // our own error, already in the API's shape
    const ErrorStyle style = core.style_of(req.path);
    switch (res.status) {
        case 404: send_no_route(req, res, style); break;
        case 413: ServerCore::send_error(res, core.body_too_large(), style); break;
        case 414: ServerCore::send_error(res, ApiError(414, "The request URI is too long."), style); break;
        case 500: ServerCore::send_error(res, ApiError(500, "Internal server error.", "server_error"), style); break;
        default:
            ServerCore::send_error(
                res,
                ApiError(res.status, fmt::format("The request could not be served (HTTP {}).", res.status),
                         res.status >= 500 ? "server_error" : "invalid_request_error"),
                style);
    }
    return HandlerResponse::Handled;
}

// The server's own routes: its health and its metrics.
void HttpServer::Impl::server_routes() {
    core.make_public("/health");  // load balancers and orchestrators probe it without the key
    core.get("/health", [this](const Request&, Response& res) {
        if (core.model()) {
            ServerCore::send_json(res, json{{"status", "ok"}});
        } else {
            res.set_header("Retry-After", "1");
            ServerCore::send_json(res, json{{"status", "loading"}}, 503);
        }
    });
    core.get("/metrics", [this](const Request&, Response& res) {
        std::shared_ptr<const ServedModel> m = core.model();
        std::optional<engine::EngineMetrics> em;
        if (m && m->metrics) em = m->metrics();
        ServerCounters c = counters();
        c.ready = m != nullptr;
        res.set_content(prometheus_text(em, c), "text/plain; version=0.0.4; charset=utf-8");
    });
}

HttpServer::HttpServer(ServerOptions opts) : impl_(std::make_unique<Impl>(std::move(opts))) {
    Impl& s = *impl_;
    const ServerOptions& o = s.opts();
    const size_t threads = std::max<uint32_t>(o.threads, 2);
    s.svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    s.svr.set_payload_max_length(o.max_body_bytes);
    s.svr.set_read_timeout(o.read_timeout);
    s.svr.set_write_timeout(o.write_timeout);
    s.svr.set_keep_alive_timeout(o.keep_alive_timeout.count());
    s.svr.set_keep_alive_max_count(100);
    s.svr.set_tcp_nodelay(true);  // tokens are small writes that must leave at once
    // cpp-httplib's default sets SO_REUSEPORT, with which a second server on the same port starts
    // without an error and takes a share of the connections. SO_REUSEADDR alone still lets a
    // restarted server bind while old connections linger in TIME_WAIT.
    s.svr.set_socket_options([](socket_t sock) {
        int yes = 1;
        setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    });
    s.svr.set_pre_routing_handler([&s](const Request& req, Response& res) { return s.pre_routing(req, res); });
    s.svr.set_error_handler(
        httplib::Server::HandlerWithResponse([&s](const Request& req, Response& res) { return s.on_error(req, res); }));
    s.svr.set_exception_handler([&s](const Request& req, Response& res, std::exception_ptr ep) {
        std::string what = "unknown error";
        try {
            std::rethrow_exception(ep);
        } catch (const std::exception& e) {
            what = e.what();
        } catch (...) {}
        ServerCore::send_error(res, ApiError(500, what, "server_error"), s.core.style_of(req.path));
    });
    s.svr.set_logger([&s](const Request& req, const Response& res) {
        {
            std::lock_guard lk(s.mu);
            ++s.by_status[res.status];
        }
        if (s.opts().log_requests) fmt::print(stderr, "vkllm serve: {} {} {}\n", req.method, req.path, res.status);
    });
    s.server_routes();
    add_openai_routes(s.core);
    add_native_routes(s.core);
    add_ollama_routes(s.core);
    add_webui_routes(s.core);
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::start() {
    Impl& s = *impl_;
    std::signal(SIGPIPE, SIG_IGN);
    bool ok;
    if (s.opts().port == 0) {
        s.port = s.svr.bind_to_any_port(s.opts().host);
        ok = s.port > 0;
    } else {
        s.port = s.opts().port;
        ok = s.svr.bind_to_port(s.opts().host, s.opts().port);
    }
    if (!ok)
        throw std::runtime_error(
            fmt::format("cannot listen on {}:{} (address in use, or not an address of this machine?)", s.opts().host,
                        s.opts().port));
    s.thread = std::thread([&s] {
        s.svr.listen_after_bind();
        s.listening_done = true;
    });
    return s.port;
}

void HttpServer::set_model(ServedModel m) {
    if (!m.tokenizer || (!m.submit && !m.embed && !m.rerank))
        throw std::invalid_argument("HttpServer::set_model: a tokenizer and submit, embed or rerank are required");
    if (bool(m.rerank) != bool(m.rerank_tokens))
        throw std::invalid_argument("HttpServer::set_model: rerank and rerank_tokens go together");
    impl_->core.set_model(std::make_shared<const ServedModel>(std::move(m)));
}

void HttpServer::begin_shutdown() { impl_->core.begin_draining(); }

bool HttpServer::wait_streams(std::chrono::milliseconds timeout) { return impl_->core.wait_streams(timeout); }

void HttpServer::stop() {
    Impl& s = *impl_;
    if (!s.thread.joinable()) return;
    s.core.begin_draining();
    // listen_after_bind() may not have begun yet, and stop() does nothing to a server not running.
    while (!s.svr.is_running() && !s.listening_done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    s.svr.stop();
    s.thread.join();
}

ServerCounters HttpServer::counters() const { return impl_->counters(); }

std::string HttpServer::url() const {
    const std::string& h = impl_->opts().host;
    return fmt::format("http://{}:{}", h.find(':') != std::string::npos ? "[" + h + "]" : h, impl_->port);
}

}  // namespace vkllm::server
