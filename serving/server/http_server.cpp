#include "serving/server/http_server.h"

#include "serving/server/openai_embeddings.h"
#include "serving/server/openai_responses.h"

#include <fmt/format.h>
#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <map>
#include <mutex>
#include <random>
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

using httplib::DataSink;
using httplib::Request;
using httplib::Response;
using HandlerResponse = httplib::Server::HandlerResponse;

constexpr const char* kJson = "application/json; charset=utf-8";

void send_error(Response& res, const ApiError& e) {
    res.status = e.status();
    res.set_content(dump_json(error_json(e)), kJson);
}

void send_json(Response& res, const json& j, int status = 200) {
    res.status = status;
    res.set_content(dump_json(j), kJson);
}

int64_t unix_now() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

ApiError shutting_down() { return ApiError(503, "The server is shutting down.", "server_error"); }

// The routes and the methods they answer, for 405 instead of 404 on a known path.
const std::map<std::string, std::string>& known_routes() {
    static const std::map<std::string, std::string> routes = {
        {"/v1/chat/completions", "POST"},
        {"/chat/completions", "POST"},
        {"/v1/completions", "POST"},
        {"/completions", "POST"},
        {"/v1/models", "GET"},
        {"/models", "GET"},
        {"/health", "GET"},
        {"/metrics", "GET"},
        {"/tokenize", "POST"},
        {"/detokenize", "POST"},
        {"/apply-template", "POST"},
        {"/v1/embeddings", "POST"},
        {"/embeddings", "POST"},
        {"/v1/rerank", "POST"},
        {"/rerank", "POST"},
        {"/v1/reranking", "POST"},
        {"/reranking", "POST"},
    };
    return routes;
}

// What a streaming response keeps between calls of its content provider.
struct StreamState {
    std::vector<std::unique_ptr<Generation>> gens;  // one per choice
    std::vector<ResponseBuilder> rbs;
    std::vector<std::optional<engine::Event>> done;  // each choice's Done event, once it came
    bool started = false, finished = false;
    std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();
};

}  // namespace

struct HttpServer::Impl {
    ServerOptions opts;
    httplib::Server svr;
    std::thread thread;
    std::atomic<bool> listening_done{false};
    int port = 0;

    mutable std::mutex mu;
    std::shared_ptr<const ServedModel> model;  // null while loading
    std::map<int, uint64_t> by_status;
    uint32_t streams = 0;
    std::condition_variable streams_cv;
    std::atomic<bool> draining{false};
    // Embedding requests in progress: each holds a connection thread while it waits for the device.
    std::atomic<uint32_t> embedding_requests{0};

    explicit Impl(ServerOptions o) : opts(std::move(o)) {}

    std::shared_ptr<const ServedModel> ready_model() const {
        std::lock_guard lk(mu);
        if (!model) throw ApiError(503, "Loading model", "unavailable_error");
        return model;
    }

    void stream_opened() {
        std::lock_guard lk(mu);
        ++streams;
    }
    void stream_closed() {
        {
            std::lock_guard lk(mu);
            --streams;
        }
        streams_cv.notify_all();
    }

    // Runs a handler, turning its exceptions into OpenAI error bodies.
    template <class Fn>
    void guarded(Response& res, Fn&& fn) {
        try {
            fn();
        } catch (const ApiError& e) {
            send_error(res, e);
            if (e.status() == 503) res.set_header("Retry-After", "1");
        } catch (const std::exception& e) {
            send_error(res, ApiError(500, e.what(), "server_error"));
        }
    }

    // POST routes read the body themselves, so that a chunked body is capped like one with a
    // Content-Length (cpp-httplib checks only the latter against payload_max_length).
    using BodyHandler = std::function<void(const Request&, Response&, const std::string& body)>;
    void post(const std::string& path, BodyHandler fn) {
        svr.Post(path, [this, fn](const Request& req, Response& res, const httplib::ContentReader& reader) {
            std::string body;
            bool too_large = false;
            bool ok = reader([&](const char* data, size_t n) {
                if (body.size() + n > opts.max_body_bytes) {
                    too_large = true;
                    return false;
                }
                body.append(data, n);
                return true;
            });
            if (!ok || too_large) {
                too_large = too_large || res.status == 413;
                res.set_header("Connection", "close");  // the rest of the body is not read
                send_error(res, too_large ? body_too_large() : ApiError(400, "The request body could not be read."));
                return;
            }
            guarded(res, [&] { fn(req, res, body); });
        });
        // A POST without a body never reaches the content-reader route.
        svr.Post(path,
                 [this, fn](const Request& req, Response& res) { guarded(res, [&] { fn(req, res, req.body); }); });
    }

    ApiError body_too_large() const {
        return ApiError(
            413, fmt::format("The request body is larger than this server's limit of {} bytes.", opts.max_body_bytes),
            "invalid_request_error", "", "request_too_large");
    }

    void routes();
    void completion(Endpoint ep, Response& res, const std::string& body);
    void embeddings(Response& res, const std::string& body);
    void rerank(Response& res, const std::string& body);
    // One of the threads - 2 places for embedding and rerank requests (each waits for the one
    // device), held while it lives; beyond them a 503, rather than connections left hanging.
    class EmbeddingTicket {
    public:
        EmbeddingTicket(std::atomic<uint32_t>& n, uint32_t limit) : n_(n) {
            if (++n_ > limit) {
                --n_;
                throw ApiError(503,
                               fmt::format("The server is busy: {} embedding and rerank requests are running or "
                                           "waiting.",
                                           limit),
                               "server_error");
            }
        }
        ~EmbeddingTicket() { --n_; }
        EmbeddingTicket(const EmbeddingTicket&) = delete;
        EmbeddingTicket& operator=(const EmbeddingTicket&) = delete;

    private:
        std::atomic<uint32_t>& n_;
    };
    EmbeddingTicket embedding_ticket() {
        return EmbeddingTicket(embedding_requests, std::max<uint32_t>(1, opts.threads > 2 ? opts.threads - 2 : 1));
    }
    void stream(Response& res, std::vector<std::unique_ptr<Generation>> gens, std::vector<ResponseBuilder> rbs);
    // One call of a stream's content provider: writes what the choices have; false when the client is gone.
    bool stream_step(StreamState& st, size_t offset, DataSink& sink);
    HandlerResponse pre_routing(const Request& req, Response& res);
    HandlerResponse on_error(const Request& req, Response& res);
};

HandlerResponse HttpServer::Impl::pre_routing(const Request& req, Response& res) {
    if (req.headers.size() > opts.max_headers) {
        res.set_header("Connection", "close");
        send_error(res, ApiError(431, fmt::format("The request has {} header lines; this server takes at most {}.",
                                                  req.headers.size(), opts.max_headers)));
        return HandlerResponse::Handled;
    }
    if (opts.api_key.empty() || req.path == "/health") return HandlerResponse::Unhandled;
    const std::string auth = req.get_header_value("Authorization");
    constexpr std::string_view kBearer = "bearer ";
    bool bearer = auth.size() >= kBearer.size() &&
                  std::equal(kBearer.begin(), kBearer.end(), auth.begin(),
                             [](char a, char b) { return a == char(std::tolower(static_cast<unsigned char>(b))); });
    if (bearer) {
        std::string_view key = std::string_view(auth).substr(kBearer.size());
        while (!key.empty() && key.front() == ' ') key.remove_prefix(1);
        if (constant_time_equal(key, opts.api_key)) return HandlerResponse::Unhandled;
    }
    res.set_header("WWW-Authenticate", "Bearer");
    send_error(res,
               ApiError(401,
                        auth.empty() ? "You didn't provide an API key. You need to provide your API key in an "
                                       "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
                                     : "Incorrect API key provided.",
                        "invalid_request_error", "", "invalid_api_key"));
    return HandlerResponse::Handled;
}

HandlerResponse HttpServer::Impl::on_error(const Request& req, Response& res) {
    if (!res.body.empty()) return HandlerResponse::Unhandled;  // our own error, already in OpenAI's shape
    switch (res.status) {
        case 404: {
            auto it = known_routes().find(req.path);
            if (it != known_routes().end()) {
                res.set_header("Allow", it->second);
                send_error(res, ApiError(405,
                                         fmt::format("Method {} is not allowed for {}; use {}.", req.method, req.path,
                                                     it->second),
                                         "invalid_request_error"));
            } else {
                send_error(res, ApiError(404, fmt::format("Invalid URL ({} {})", req.method, req.path),
                                         "invalid_request_error", "", "unknown_url"));
            }
            break;
        }
        case 413: send_error(res, body_too_large()); break;
        case 414: send_error(res, ApiError(414, "The request URI is too long.")); break;
        case 500: send_error(res, ApiError(500, "Internal server error.", "server_error")); break;
        default:
            send_error(res, ApiError(res.status, fmt::format("The request could not be served (HTTP {}).", res.status),
                                     res.status >= 500 ? "server_error" : "invalid_request_error"));
    }
    return HandlerResponse::Handled;
}

void HttpServer::Impl::embeddings(Response& res, const std::string& body) {
    if (draining) throw shutting_down();
    std::shared_ptr<const ServedModel> m = ready_model();
    if (m->rerank)
        throw ApiError(400,
                       fmt::format("The model '{}' is a reranker (pooling rank): it answers /v1/rerank only.", m->id),
                       "invalid_request_error", "model", "model_not_supported");
    if (!m->embed)
        throw ApiError(
            400,
            fmt::format("The model '{}' does not make embeddings: vkllm serves /v1/embeddings from "
                        "embedding models (encoders such as bert; decoders whose file names a pooling type, or served "
                        "with --embeddings --pooling P).",
                        m->id),
            "invalid_request_error", "model", "model_not_supported");
    EmbeddingsRequest req = parse_embeddings_request(parse_body(body), m->tokenizer->n_vocab(), m->embedding_dim);
    std::vector<std::vector<int32_t>> inputs = std::move(req.token_ids);
    for (const std::string& t : req.texts) inputs.push_back(m->tokenizer->encode(t, true));
    uint64_t tokens = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
        if (inputs[i].size() > m->embed_limit) throw embedding_length_error(i, inputs[i].size(), m->embed_limit);
        tokens += inputs[i].size();
    }
    // One device runs the inputs in groups (each packed into as few passes as it can).
    const auto ticket = embedding_ticket();
    std::vector<std::vector<float>> vectors;
    for (size_t first = 0; first < inputs.size(); first += kEmbedGroup) {
        if (draining) throw shutting_down();
        const std::vector<std::vector<int32_t>> group(
            inputs.begin() + std::ptrdiff_t(first),
            inputs.begin() + std::ptrdiff_t(std::min(inputs.size(), first + kEmbedGroup)));
        for (std::vector<float>& v : m->embed(group)) vectors.push_back(std::move(v));
    }
    send_json(res, embeddings_response(vectors, req.base64, req.model.empty() ? m->id : req.model, tokens));
}

void HttpServer::Impl::rerank(Response& res, const std::string& body) {
    if (draining) throw shutting_down();
    std::shared_ptr<const ServedModel> m = ready_model();
    if (!m->rerank)
        throw ApiError(400,
                       fmt::format("The model '{}' is not a reranker (pooling rank, a classification head): it "
                                   "answers {} only.",
                                   m->id, m->embed ? "/v1/embeddings" : "chat and completions"),
                       "invalid_request_error", "model", "model_not_supported");
    RerankRequest req = parse_rerank_request(parse_body(body));
    std::vector<std::vector<int32_t>> inputs;
    uint64_t tokens = 0;
    for (size_t i = 0; i < req.documents.size(); ++i) {
        inputs.push_back(m->rerank_tokens(req.query, req.documents[i]));
        if (inputs[i].empty())
            throw ApiError(400, fmt::format("The query and document {} give no tokens.", i), "invalid_request_error",
                           fmt::format("documents[{}]", i));
        if (inputs[i].size() > m->embed_limit) throw rerank_length_error(i, inputs[i].size(), m->embed_limit);
        tokens += inputs[i].size();
    }
    const auto ticket = embedding_ticket();
    std::vector<float> scores;
    for (size_t first = 0; first < inputs.size(); first += kEmbedGroup) {
        if (draining) throw shutting_down();
        const std::vector<std::vector<int32_t>> group(
            inputs.begin() + std::ptrdiff_t(first),
            inputs.begin() + std::ptrdiff_t(std::min(inputs.size(), first + kEmbedGroup)));
        for (float x : m->rerank(group)) scores.push_back(x);
    }
    send_json(res, rerank_response(req, scores, req.model.empty() ? m->id : req.model, tokens));
}

void HttpServer::Impl::completion(Endpoint ep, Response& res, const std::string& body) {
    if (draining) throw shutting_down();
    std::shared_ptr<const ServedModel> m = ready_model();
    if (!m->submit)
        throw ApiError(
            400,
            fmt::format("The model '{}' is {} (it has no language-model head): it answers {} only.", m->id,
                        m->rerank ? "a reranker" : "an embedding model", m->rerank ? "/v1/rerank" : "/v1/embeddings"),
            "invalid_request_error", "model", "model_not_supported");
    json j = parse_body(body);
    thread_local std::mt19937_64 seeds{std::random_device{}()};
    ParsedRequest req = ep == Endpoint::Chat ? parse_chat_request(j, seeds()) : parse_completion_request(j, seeds());
    check_logit_bias(req, m->tokenizer->n_vocab());
    apply_tool_format(req, *m->tool_format, m->template_renders_tools);
    req.harmony = ep == Endpoint::Chat && m->harmony;
    // Harmony's markers are the structure of every answer, not only of calls: always shown to its parser.
    if (req.tool_plan.parse_as || req.harmony) req.engine.shown_control_tokens = m->tool_control_tokens;
    std::string rendered;
    req.engine.prompt = prompt_tokens(*m->tokenizer, m->render_chat, req, m->n_ctx, &rendered);
    // A forced call is the whole reply: no reasoning block (forced_prompt closes one the template opened).
    const bool split =
        ep == Endpoint::Chat && m->reasoning && req.reasoning_format != "none" && !req.tool_plan.forced && !req.harmony;
    req.split_reasoning = split ? m->reasoning : nullptr;
    req.reply_in_reasoning = split && answer::prompt_opens_reasoning(rendered, *m->reasoning);
    if (req.engine.grammar_start.lazy() && m->reasoning)
        answer::skip_reasoning(req.engine.grammar_start, answer::prompt_opens_reasoning(rendered, *m->reasoning),
                               *m->reasoning);

    // One engine request per choice, seeds apart (greedy choices are equal).
    std::vector<std::unique_ptr<Generation>> gens;
    std::vector<ResponseBuilder> rbs;
    const std::string id = new_response_id(ep);
    const int64_t created = unix_now();
    for (uint32_t i = 0; i < req.n; ++i) {
        engine::CompletionRequest one = req.engine;
        one.sampler.seed += i;
        try {
            gens.push_back(m->submit(std::move(one)));
        } catch (const engine::QueueFullError& e) {
            throw ApiError(
                503,
                fmt::format("The server is busy: every slot is taken and the queue is full ({}). Please retry.",
                            e.what()),
                "server_error", "", "queue_full");
        } catch (const engine::EngineStoppedError&) {
            throw shutting_down();
        } catch (const std::invalid_argument& e) {
            throw ApiError(400, e.what());
        }
        rbs.emplace_back(req, id, req.model.empty() ? m->id : req.model, created, i);
    }
    if (req.stream) {
        stream(res, std::move(gens), std::move(rbs));
        return;
    }
    std::vector<json> responses;
    std::vector<engine::Event> dones;
    for (size_t i = 0; i < gens.size(); ++i) {
        for (;;) {
            std::optional<engine::Event> ev = gens[i]->next(opts.poll);
            if (!ev) continue;
            if (ev->kind == engine::Event::Kind::Text) {
                rbs[i].add(*ev);
                continue;
            }
            if (ev->finish == engine::FinishReason::Cancelled) throw shutting_down();
            if (ev->finish == engine::FinishReason::Error)
                throw ApiError(500, fmt::format("Generation failed: {}", ev->error), "server_error");
            responses.push_back(rbs[i].response(*ev));
            dones.push_back(std::move(*ev));
            break;
        }
    }
    send_json(res, responses.size() == 1 ? std::move(responses[0]) : merge_choices(std::move(responses), dones));
}

void HttpServer::Impl::stream(Response& res, std::vector<std::unique_ptr<Generation>> gens,
                              std::vector<ResponseBuilder> rbs) {
    auto st = std::make_shared<StreamState>();
    st->gens = std::move(gens);
    st->rbs = std::move(rbs);
    st->done.resize(st->gens.size());
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");  // proxies must not hold the events back
    stream_opened();
    auto provider = [this, st](size_t offset, DataSink& sink) {
        // An exception must not leave the provider (cpp-httplib calls it outside any handler's
        // try): the stream ends with a server error event instead.
        try {
            return stream_step(*st, offset, sink);
        } catch (const std::exception& e) {
            st->finished = true;
            for (auto& g : st->gens) g->cancel();
            const std::string tail = ResponseBuilder::stream_error(ApiError(500, e.what(), "server_error"));
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
    res.set_chunked_content_provider("text/event-stream", provider, release);
}

bool HttpServer::Impl::stream_step(StreamState& st, size_t, DataSink& sink) {
    auto write = [&](const std::string& s) {
        if (s.empty()) return true;
        st.last_write = std::chrono::steady_clock::now();
        return sink.write(s.data(), s.size());
    };
    if (!st.started) {
        st.started = true;
        std::string start;
        for (const ResponseBuilder& rb : st.rbs) start += rb.stream_start();
        if (!write(start)) return false;
    }
    // The choices take turns; each waits its share of the poll interval.
    const auto wait = std::max(std::chrono::milliseconds(1), opts.poll / int(st.gens.size()));
    bool any = false;
    for (size_t i = 0; i < st.gens.size(); ++i) {
        if (st.done[i]) continue;
        std::optional<engine::Event> ev = st.gens[i]->next(wait);
        if (!ev) continue;
        any = true;
        if (ev->kind == engine::Event::Kind::Text) {
            if (!write(st.rbs[i].stream_text(*ev))) return false;
            continue;
        }
        std::string tail;
        if (ev->finish == engine::FinishReason::Cancelled || ev->finish == engine::FinishReason::Error) {
            tail = ev->finish == engine::FinishReason::Cancelled
                       ? ResponseBuilder::stream_error(shutting_down())
                       : ResponseBuilder::stream_error(
                             ApiError(500, fmt::format("Generation failed: {}", ev->error), "server_error"));
            st.finished = true;
            bool ok = write(tail);
            sink.done();
            return ok;
        }
        tail = st.rbs[i].stream_finish(*ev);
        st.done[i] = std::move(*ev);
        if (std::all_of(st.done.begin(), st.done.end(), [](const auto& d) { return d.has_value(); })) {
            std::vector<engine::Event> all;
            for (auto& d : st.done) all.push_back(*d);
            tail += st.rbs[0].stream_end(combined_usage(all));
            st.finished = true;
            bool ok = write(tail);
            sink.done();
            return ok;
        }
        if (!write(tail)) return false;
    }
    // Nothing to send (queued, or a long prompt): a comment line that SSE clients skip; a
    // client that is gone makes the write fail, which cancels the request.
    if (!any && std::chrono::steady_clock::now() - st.last_write >= opts.ping_interval) return write(": ping\n\n");
    return true;
}

void HttpServer::Impl::routes() {
    svr.Get("/health", [this](const Request&, Response& res) {
        std::lock_guard lk(mu);
        if (model) {
            send_json(res, json{{"status", "ok"}});
        } else {
            res.set_header("Retry-After", "1");
            send_json(res, json{{"status", "loading"}}, 503);
        }
    });
    svr.Get("/metrics", [this](const Request&, Response& res) {
        guarded(res, [&] {
            std::shared_ptr<const ServedModel> m;
            {
                std::lock_guard lk(mu);
                m = model;
            }
            std::optional<engine::EngineMetrics> em;
            if (m && m->metrics) em = m->metrics();
            ServerCounters c;
            {
                std::lock_guard lk(mu);
                c.ready = m != nullptr;
                c.http_by_status = by_status;
                c.streams_open = streams;
            }
            res.set_content(prometheus_text(em, c), "text/plain; version=0.0.4; charset=utf-8");
        });
    });
    auto models = [this](const Request&, Response& res) {
        guarded(res, [&] {
            auto m = ready_model();
            json card = {{"id", m->id}, {"object", "model"}, {"created", m->created}, {"owned_by", "vkllm"}};
            send_json(res, json{{"object", "list"}, {"data", json::array({card})}});
        });
    };
    svr.Get("/v1/models", models);
    svr.Get("/models", models);
    svr.Get(R"(/v1/models/(.+))", [this](const Request& req, Response& res) {
        guarded(res, [&] {
            auto m = ready_model();
            if (req.matches[1] != m->id)
                throw ApiError(404, fmt::format("The model '{}' does not exist", req.matches[1].str()),
                               "invalid_request_error", "model", "model_not_found");
            send_json(res, json{{"id", m->id}, {"object", "model"}, {"created", m->created}, {"owned_by", "vkllm"}});
        });
    });
    for (const char* path : {"/v1/chat/completions", "/chat/completions"})
        post(path,
             [this](const Request&, Response& res, const std::string& body) { completion(Endpoint::Chat, res, body); });
    for (const char* path : {"/v1/embeddings", "/embeddings"})
        post(path, [this](const Request&, Response& res, const std::string& body) { embeddings(res, body); });
    for (const char* path : {"/v1/rerank", "/rerank", "/v1/reranking", "/reranking"})
        post(path, [this](const Request&, Response& res, const std::string& body) { rerank(res, body); });
    for (const char* path : {"/v1/completions", "/completions"})
        post(path, [this](const Request&, Response& res, const std::string& body) {
            completion(Endpoint::Completion, res, body);
        });
    post("/tokenize", [this](const Request&, Response& res, const std::string& body) {
        auto m = ready_model();
        TokenizeRequest t = parse_tokenize_request(parse_body(body));
        send_json(res, json{{"tokens", m->tokenizer->encode(t.content, t.add_special, t.parse_special)}});
    });
    post("/detokenize", [this](const Request&, Response& res, const std::string& body) {
        auto m = ready_model();
        std::vector<int32_t> ids = parse_detokenize_request(parse_body(body), m->tokenizer->n_vocab());
        send_json(res, json{{"content", m->tokenizer->decode(ids)}});
    });
    post("/apply-template", [this](const Request&, Response& res, const std::string& body) {
        auto m = ready_model();
        if (!m->render_chat)
            throw ApiError(
                400, fmt::format("The model '{}' is an embedding or rerank model: it has no chat template.", m->id));
        TemplateRequest t = parse_apply_template_request(parse_body(body));
        // What a chat request with these tools renders (tool_choice auto): a template that cannot
        // show them gets them in the system message. A format this server cannot parse still renders.
        try {
            answer::add_system_text(t.messages, answer::plan_tool_use(*m->tool_format, m->template_renders_tools,
                                                                      t.tools, answer::ToolChoice::Auto, {}, true)
                                                    .system_text);
        } catch (const answer::ToolError&) {}
        std::string prompt = render_chat(
            m->render_chat, chat_template::chat_inputs(*m->tokenizer, t.messages, t.tools, t.template_kwargs));
        send_json(res, json{{"prompt", prompt}});
    });
}

HttpServer::HttpServer(ServerOptions opts) : impl_(std::make_unique<Impl>(std::move(opts))) {
    Impl& s = *impl_;
    const ServerOptions& o = s.opts;
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
    s.svr.set_exception_handler([](const Request&, Response& res, std::exception_ptr ep) {
        std::string what = "unknown error";
        try {
            std::rethrow_exception(ep);
        } catch (const std::exception& e) {
            what = e.what();
        } catch (...) {}
        send_error(res, ApiError(500, what, "server_error"));
    });
    s.svr.set_logger([&s](const Request& req, const Response& res) {
        {
            std::lock_guard lk(s.mu);
            ++s.by_status[res.status];
        }
        if (s.opts.log_requests) fmt::print(stderr, "vkllm serve: {} {} {}\n", req.method, req.path, res.status);
    });
    s.routes();
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::start() {
    Impl& s = *impl_;
    std::signal(SIGPIPE, SIG_IGN);
    bool ok;
    if (s.opts.port == 0) {
        s.port = s.svr.bind_to_any_port(s.opts.host);
        ok = s.port > 0;
    } else {
        s.port = s.opts.port;
        ok = s.svr.bind_to_port(s.opts.host, s.opts.port);
    }
    if (!ok)
        throw std::runtime_error(fmt::format(
            "cannot listen on {}:{} (address in use, or not an address of this machine?)", s.opts.host, s.opts.port));
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
    std::lock_guard lk(impl_->mu);
    impl_->model = std::make_shared<const ServedModel>(std::move(m));
}

void HttpServer::begin_shutdown() { impl_->draining = true; }

bool HttpServer::wait_streams(std::chrono::milliseconds timeout) {
    std::unique_lock lk(impl_->mu);
    return impl_->streams_cv.wait_for(lk, timeout, [&] { return impl_->streams == 0; });
}

void HttpServer::stop() {
    Impl& s = *impl_;
    if (!s.thread.joinable()) return;
    s.draining = true;
    // listen_after_bind() may not have begun yet, and stop() does nothing to a server not running.
    while (!s.svr.is_running() && !s.listening_done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    s.svr.stop();
    s.thread.join();
}

ServerCounters HttpServer::counters() const {
    std::lock_guard lk(impl_->mu);
    ServerCounters c;
    c.ready = impl_->model != nullptr;
    c.http_by_status = impl_->by_status;
    c.streams_open = impl_->streams;
    return c;
}

std::string HttpServer::url() const {
    const std::string& h = impl_->opts.host;
    return fmt::format("http://{}:{}", h.find(':') != std::string::npos ? "[" + h + "]" : h, impl_->port);
}

}  // namespace vkllm::server
