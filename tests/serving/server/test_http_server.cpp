// The HTTP server with a scripted stand-in for the engine (no model, no device): routes, auth,
// limits, streaming, a client that hangs up mid-stream, and shutdown. The real engine behind the
// same server is tested end to end by tests/e2e/ with the OpenAI Node client.
#include "model/gguf/gguf.h"
#include "serving/server/http_server.h"
#include "support/test_context.h"

#include <doctest/doctest.h>
#include <httplib.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <thread>

using namespace vkllm;
using namespace vkllm::server;
using namespace std::chrono_literals;

namespace {

const Tokenizer* stories_tokenizer() {
    static std::unique_ptr<GgufFile> file;
    static std::unique_ptr<Tokenizer> tok;
    if (!tok) {
        std::string path = test::model_path("stories260K.gguf");
        if (path.empty()) return nullptr;
        file = std::make_unique<GgufFile>(GgufFile::open(path));
        tok = make_tokenizer(*file);
    }
    return tok.get();
}

// What the stand-in engine does with every request.
struct FakeEngine {
    std::vector<std::string> pieces = {"Hello", ",", " world"};
    std::chrono::milliseconds gap{0};
    engine::FinishReason finish = engine::FinishReason::Stop;
    bool queue_full = false;
    std::atomic<bool> stopped{false};  // Engine::shutdown(): every request ends Cancelled
    std::atomic<int> submits{0}, cancels{0}, live{0};
    std::mutex mu;
    std::vector<engine::CompletionRequest> requests;
};

class FakeGeneration : public Generation {
public:
    FakeGeneration(FakeEngine& e, engine::CompletionRequest req) : e_(e), req_(std::move(req)) {
        ++e_.live;
        next_at_ = std::chrono::steady_clock::now() + e_.gap;
    }
    ~FakeGeneration() override { --e_.live; }

    std::optional<engine::Event> next(std::chrono::milliseconds wait) override {
        if (done_) {
            std::this_thread::sleep_for(wait);
            return std::nullopt;
        }
        engine::Event ev;
        if (cancelled_ || e_.stopped) return finish(engine::FinishReason::Cancelled);
        if (i_ == e_.pieces.size()) return finish(e_.finish);
        auto now = std::chrono::steady_clock::now();
        if (now < next_at_) {
            std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(wait, next_at_ - now));
            if (std::chrono::steady_clock::now() < next_at_) return std::nullopt;
        }
        next_at_ += e_.gap;
        ev.kind = engine::Event::Kind::Text;
        ev.text = e_.pieces[i_++];
        return ev;
    }
    void cancel() override {
        if (!cancelled_.exchange(true)) ++e_.cancels;
    }

private:
    engine::Event finish(engine::FinishReason r) {
        done_ = true;
        engine::Event ev;
        ev.kind = engine::Event::Kind::Done;
        ev.finish = r;
        ev.prompt_tokens = uint32_t(req_.prompt.size());
        ev.completion_tokens = uint32_t(i_);
        ev.error = r == engine::FinishReason::Error ? "device lost" : "";
        return ev;
    }

    FakeEngine& e_;
    engine::CompletionRequest req_;
    size_t i_ = 0;
    std::chrono::steady_clock::time_point next_at_;
    std::atomic<bool> cancelled_{false};
    bool done_ = false;
};

std::string render(const chat_template::ChatInputs& in) {
    std::string s = in.bos_token;
    for (const auto& m : in.messages) s += m["role"].get<std::string>() + ": " + m["content"].get<std::string>() + "\n";
    return s + "assistant:";
}

ServedModel fake_model(const Tokenizer& tok, FakeEngine& e) {
    ServedModel m;
    m.id = "stories260K.gguf";
    m.created = 1700000000;
    m.tokenizer = &tok;
    m.n_ctx = 64;
    m.render_chat = render;
    m.submit = [&e](engine::CompletionRequest req) -> std::unique_ptr<Generation> {
        if (e.queue_full) throw engine::QueueFullError("64 requests wait");
        if (req.sampler.top_k == 12345) throw std::invalid_argument("top_k = 12345 is silly");
        ++e.submits;
        {
            std::lock_guard lk(e.mu);
            e.requests.push_back(req);
        }
        return std::make_unique<FakeGeneration>(e, std::move(req));
    };
    m.metrics = [&e] {
        engine::EngineMetrics mt;
        mt.slots = 4;
        mt.slots_busy = uint32_t(e.live.load());
        return mt;
    };
    return m;
}

ServerOptions test_options() {
    ServerOptions o;
    o.port = 0;
    o.log_requests = false;
    o.max_body_bytes = 64 * 1024;
    o.poll = 20ms;
    o.ping_interval = 200ms;
    o.keep_alive_timeout = 1s;
    return o;
}

// A server on a free port with the stand-in engine.
struct Fixture {
    FakeEngine engine;
    HttpServer server;
    int port = 0;
    explicit Fixture(ServerOptions o = test_options(), bool ready = true) : server(std::move(o)) {
        port = server.start();
        if (ready) server.set_model(fake_model(*stories_tokenizer(), engine));
    }
    httplib::Client client() const {
        httplib::Client c("127.0.0.1", port);
        c.set_read_timeout(10, 0);
        return c;
    }
};

const std::string kChat = R"({"model":"x","messages":[{"role":"user","content":"Hi"}]})";

json body_json(const httplib::Result& r) {
    REQUIRE(r);
    return json::parse(r->body);
}

std::vector<json> sse_objects(const std::string& s, bool* done) {
    std::vector<json> out;
    *done = false;
    size_t pos = 0;
    while ((pos = s.find("data: ", pos)) != std::string::npos) {
        size_t end = s.find("\n\n", pos);
        REQUIRE(end != std::string::npos);
        std::string payload = s.substr(pos + 6, end - pos - 6);
        if (payload == "[DONE]")
            *done = true;
        else
            out.push_back(json::parse(payload));
        pos = end + 2;
    }
    return out;
}

// A plain TCP connection for what an HTTP client library would not do: hang up mid-stream, send a
// chunked body, or lie about lengths.
struct RawConn {
    int fd = -1;
    explicit RawConn(int port) {
        fd = ::socket(AF_INET, SOCK_STREAM, 0);
        REQUIRE(fd >= 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(uint16_t(port));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    }
    ~RawConn() { close(); }
    void close() {
        if (fd >= 0) ::close(fd);
        fd = -1;
    }
    bool send(const std::string& s) {
        size_t off = 0;
        while (off < s.size()) {
            ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
            if (n <= 0) return false;
            off += size_t(n);
        }
        return true;
    }
    // Reads until `until` appears in what was read, the peer closes, or the time is up.
    std::string read_until(const std::string& until, std::chrono::milliseconds timeout) {
        std::string got;
        auto end = std::chrono::steady_clock::now() + timeout;
        while (got.find(until) == std::string::npos && std::chrono::steady_clock::now() < end) {
            pollfd p{fd, POLLIN, 0};
            if (::poll(&p, 1, 50) <= 0) continue;
            char buf[4096];
            ssize_t n = ::recv(fd, buf, sizeof buf, 0);
            if (n <= 0) break;
            got.append(buf, size_t(n));
        }
        return got;
    }
};

std::string post_request(const std::string& path, const std::string& body) {
    return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
}

template <class Pred>
bool eventually(Pred p, std::chrono::milliseconds timeout = 3000ms) {
    auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
        if (p()) return true;
        std::this_thread::sleep_for(10ms);
    }
    return p();
}

}  // namespace

TEST_CASE("http: /health says loading (503) until the model is set, and the API waits for it") {
    if (!stories_tokenizer()) return;
    Fixture f(test_options(), false);
    auto cli = f.client();
    auto r = cli.Get("/health");
    REQUIRE(r);
    CHECK(r->status == 503);
    CHECK(body_json(r) == json{{"status", "loading"}});
    r = cli.Post("/v1/chat/completions", kChat, "application/json");
    REQUIRE(r);
    CHECK(r->status == 503);
    CHECK(body_json(r)["error"]["message"] == "Loading model");
    CHECK(r->get_header_value("Retry-After") == "1");
    f.server.set_model(fake_model(*stories_tokenizer(), f.engine));
    r = cli.Get("/health");
    CHECK(r->status == 200);
    CHECK(body_json(r) == json{{"status", "ok"}});
}

TEST_CASE("http: a chat completion, whole") {
    if (!stories_tokenizer()) return;
    Fixture f;
    auto cli = f.client();
    auto r = cli.Post(
        "/v1/chat/completions",
        R"({"model":"x","messages":[{"role":"user","content":"Hi"}],"temperature":0,"max_tokens":5,"stop":"END"})",
        "application/json");
    REQUIRE(r);
    CHECK(r->status == 200);
    CHECK(r->get_header_value("Content-Type") == "application/json; charset=utf-8");
    json j = body_json(r);
    CHECK(j["object"] == "chat.completion");
    CHECK(j["model"] == "x");
    CHECK(j["id"].get<std::string>().rfind("chatcmpl-", 0) == 0);
    CHECK(j["choices"][0]["message"]["content"] == "Hello, world");
    CHECK(j["choices"][0]["finish_reason"] == "stop");
    const Tokenizer& tok = *stories_tokenizer();
    std::vector<int32_t> prompt = tok.encode("user: Hi\nassistant:", true, true);
    CHECK(j["usage"]["prompt_tokens"] == prompt.size());
    CHECK(j["usage"]["completion_tokens"] == 3);
    std::lock_guard lk(f.engine.mu);
    REQUIRE(f.engine.requests.size() == 1);
    const engine::CompletionRequest& req = f.engine.requests[0];
    CHECK(req.prompt == prompt);
    CHECK(req.max_tokens == 5);
    CHECK(req.sampler.greedy());
    CHECK(req.stop == std::vector<std::string>{"END"});
}

TEST_CASE("http: a chat stream and a completions stream") {
    if (!stories_tokenizer()) return;
    Fixture f;
    auto cli = f.client();
    auto r = cli.Post(
        "/v1/chat/completions",
        R"({"messages":[{"role":"user","content":"Hi"}],"stream":true,"stream_options":{"include_usage":true}})",
        "application/json");
    REQUIRE(r);
    CHECK(r->status == 200);
    CHECK(r->get_header_value("Content-Type") == "text/event-stream");
    bool done = false;
    std::vector<json> ev = sse_objects(r->body, &done);
    CHECK(done);
    REQUIRE(ev.size() == 6);
    CHECK(ev[0]["choices"][0]["delta"]["role"] == "assistant");
    CHECK(ev[0]["model"] == "stories260K.gguf");  // no model in the request: the server's
    std::string text;
    for (size_t i = 1; i < 4; ++i) text += ev[i]["choices"][0]["delta"]["content"].get<std::string>();
    CHECK(text == "Hello, world");
    CHECK(ev[4]["choices"][0]["finish_reason"] == "stop");
    CHECK(ev[5]["usage"]["completion_tokens"] == 3);

    r = cli.Post("/v1/completions", R"({"prompt":"Once upon a time","stream":true})", "application/json");
    REQUIRE(r);
    ev = sse_objects(r->body, &done);
    CHECK(done);
    REQUIRE(ev.size() == 4);
    CHECK(ev[0]["object"] == "text_completion");
    CHECK(ev[0]["choices"][0]["text"] == "Hello");
    CHECK(ev[3]["choices"][0]["finish_reason"] == "stop");
    CHECK(f.engine.requests.back().max_tokens == 16);
    CHECK(f.engine.requests.back().prompt == stories_tokenizer()->encode("Once upon a time", true, true));
}

TEST_CASE("http: a batch of prompts answers n choices per prompt, whole and streamed") {
    if (!stories_tokenizer()) return;
    Fixture f;
    auto cli = f.client();
    auto r = cli.Post("/v1/completions", R"({"prompt":["Once upon a time",[1,2]],"n":2})", "application/json");
    REQUIRE(r);
    CHECK(r->status == 200);
    json j = json::parse(r->body);
    REQUIRE(j["choices"].size() == 4);
    for (int i = 0; i < 4; ++i) {
        CHECK(j["choices"][i]["index"] == i);
        CHECK(j["choices"][i]["text"] == "Hello, world");
    }
    const size_t once = stories_tokenizer()->encode("Once upon a time", true, true).size();
    CHECK(j["usage"]["prompt_tokens"] == once + 2);  // each prompt once, not once per choice
    CHECK(j["usage"]["completion_tokens"] == 12);
    {
        std::lock_guard lk(f.engine.mu);
        REQUIRE(f.engine.requests.size() == 4);
        CHECK(f.engine.requests[2].prompt == std::vector<int32_t>{1, 2});
        CHECK(f.engine.requests[3].prompt == std::vector<int32_t>{1, 2});
        CHECK(f.engine.requests[3].sampler.seed == f.engine.requests[2].sampler.seed + 1);
    }

    r = cli.Post("/v1/completions", R"({"prompt":["a","b","c"],"stream":true,"stream_options":{"include_usage":true}})",
                 "application/json");
    REQUIRE(r);
    bool done = false;
    std::map<int, std::string> text;
    json usage;
    for (const json& e : sse_objects(r->body, &done)) {
        if (!e["usage"].is_null()) usage = e["usage"];
        for (const json& c : e["choices"]) text[c["index"].get<int>()] += c["text"].get<std::string>();
    }
    CHECK(done);
    REQUIRE(text.size() == 3);
    for (int i = 0; i < 3; ++i) CHECK(text[i] == "Hello, world");
    CHECK(usage["completion_tokens"] == 9);

    // One prompt too long: nothing is submitted.
    const int before = f.engine.submits;
    r = cli.Post("/v1/completions", R"({"prompt":["a",")" + std::string(400, 'x') + R"("]})", "application/json");
    REQUIRE(r);
    CHECK(r->status == 400);
    CHECK(json::parse(r->body)["error"]["param"] == "prompt[1]");
    CHECK(f.engine.submits == before);
}

TEST_CASE("http: reasoning_effort and --reasoning reach the template's switch; the request's own variables win") {
    if (!stories_tokenizer()) return;
    FakeEngine engine;
    HttpServer server(test_options());
    const int port = server.start();
    auto seen = std::make_shared<json>();
    ServedModel m = fake_model(*stories_tokenizer(), engine);
    m.render_chat = [seen](const chat_template::ChatInputs& in) {
        *seen = in.extra;
        return render(in);
    };
    m.reasoning_switch.thinks = m.reasoning_switch.enable_thinking = true;  // as Qwen3's template
    m.reasoning_default = chat_template::Reasoning::Off;  // --reasoning off
    m.template_kwargs = json{{"custom", 1}, {"enable_thinking", true}};  // --chat-template-kwargs
    server.set_model(m);
    httplib::Client cli("127.0.0.1", port);
    auto post = [&](const std::string& extra) {
        return cli.Post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"Hi"}])" + extra + "}",
                        "application/json");
    };
    REQUIRE(post("")->status == 200);
    CHECK(*seen == json{{"custom", 1}, {"enable_thinking", true}});  // the server's kwargs come before --reasoning
    REQUIRE(post(R"(,"reasoning_effort":"none")")->status == 200);
    CHECK((*seen)["enable_thinking"] == false);
    REQUIRE(post(R"(,"reasoning_effort":"high","chat_template_kwargs":{"enable_thinking":false})")->status == 200);
    CHECK((*seen)["enable_thinking"] == false);
    CHECK((*seen)["custom"] == 1);
    auto r = post(R"(,"reasoning_effort":"huge")");
    CHECK(r->status == 400);
    CHECK(json::parse(r->body)["error"]["param"] == "reasoning_effort");

    // A model that never reasons cannot be asked to.
    m.reasoning_switch = {};
    m.reasoning_default = chat_template::Reasoning::Auto;
    m.template_kwargs = nullptr;
    server.set_model(m);
    r = post(R"(,"reasoning_effort":"high")");
    CHECK(r->status == 400);
    CHECK(json::parse(r->body)["error"]["param"] == "reasoning_effort");
    CHECK(post(R"(,"reasoning_effort":"none")")->status == 200);
    server.stop();
}

TEST_CASE("http: bad requests get OpenAI errors and the server keeps serving") {
    if (!stories_tokenizer()) return;
    Fixture f;
    auto cli = f.client();
    struct Case {
        std::string path, body;
        int status;
        std::string param;
    };
    const std::vector<Case> cases = {
        {"/v1/chat/completions", "{bad json", 400, ""},
        {"/v1/chat/completions", "", 400, ""},
        {"/v1/chat/completions", R"({"messages":"Hi"})", 400, "messages"},
        {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"Hi"}],"temperature":"hot"})", 400,
         "temperature"},
        {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"Hi"}],"n":9})", 400, "n"},
        {"/v1/completions", R"({"prompt":["a",[1,99999]]})", 400, "prompt[1]"},
        {"/v1/completions", R"({"prompt":[1,99999]})", 400, "prompt"},
        {"/tokenize", R"({"content":5})", 400, "content"},
        {"/detokenize", R"({"tokens":[100000]})", 400, "tokens[0]"},
    };
    for (const Case& c : cases) {
        CAPTURE(c.body);
        auto r = cli.Post(c.path, c.body, "application/json");
        REQUIRE(r);
        CHECK(r->status == c.status);
        json e = body_json(r)["error"];
        CHECK(e["type"] == "invalid_request_error");
        CHECK(e["param"] == (c.param.empty() ? json(nullptr) : json(c.param)));
        CHECK(e.contains("code"));
        CHECK(cli.Post("/v1/chat/completions", kChat, "application/json")->status == 200);
    }

    // A prompt longer than a slot's context (64 here).
    std::string big = R"({"prompt":")";
    for (int i = 0; i < 50; ++i) big += "Once upon a time ";
    big += R"("})";
    auto r = cli.Post("/v1/completions", big, "application/json");
    CHECK(r->status == 400);
    CHECK(body_json(r)["error"]["code"] == "context_length_exceeded");

    // The engine's own refusal of a request is the client's 400.
    r = cli.Post("/v1/completions", R"({"prompt":"x","top_k":12345})", "application/json");
    CHECK(r->status == 400);
    CHECK(body_json(r)["error"]["message"] == "top_k = 12345 is silly");

    r = cli.Get("/v1/nothing");
    CHECK(r->status == 404);
    CHECK(body_json(r)["error"]["message"] == "Invalid URL (GET /v1/nothing)");
    r = cli.Get("/v1/chat/completions");
    CHECK(r->status == 405);
    CHECK(r->get_header_value("Allow") == "POST");
    CHECK(body_json(r)["error"]["type"] == "invalid_request_error");
    r = cli.Get("/v1/models/other");
    CHECK(r->status == 404);
    CHECK(body_json(r)["error"]["code"] == "model_not_found");
}

TEST_CASE("http: a full queue is 503 with Retry-After") {
    if (!stories_tokenizer()) return;
    Fixture f;
    f.engine.queue_full = true;
    auto r = f.client().Post("/v1/chat/completions", kChat, "application/json");
    REQUIRE(r);
    CHECK(r->status == 503);
    CHECK(r->get_header_value("Retry-After") == "1");
    CHECK(body_json(r)["error"]["code"] == "queue_full");
}

TEST_CASE("http: generation errors are 500 server_error") {
    if (!stories_tokenizer()) return;
    Fixture f;
    f.engine.finish = engine::FinishReason::Error;
    auto r = f.client().Post("/v1/chat/completions", kChat, "application/json");
    CHECK(r->status == 500);
    json e = body_json(r)["error"];
    CHECK(e["type"] == "server_error");
    CHECK(e["message"] == "Generation failed: device lost");
    r = f.client().Post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"Hi"}],"stream":true})",
                        "application/json");
    CHECK(r->status == 200);
    CHECK(r->body.find(R"(data: {"error":{"message":"Generation failed: device lost","type":"server_error")") !=
          std::string::npos);
}

TEST_CASE("http: bodies over the limit are 413, with a length or chunked") {
    if (!stories_tokenizer()) return;
    Fixture f;
    std::string huge(200 * 1024, ' ');
    huge = R"({"prompt":")" + std::string(200 * 1024, 'a') + R"("})";
    auto r = f.client().Post("/v1/completions", huge, "application/json");
    REQUIRE(r);
    CHECK(r->status == 413);
    CHECK(body_json(r)["error"]["code"] == "request_too_large");

    RawConn c(f.port);
    std::string req =
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: "
        "chunked\r\n\r\n";
    c.send(req);
    std::string chunk(16 * 1024, 'a');
    char size_line[32];
    std::snprintf(size_line, sizeof size_line, "%zx\r\n", chunk.size());
    for (int i = 0; i < 8 && c.send(std::string(size_line) + chunk + "\r\n"); ++i) {}
    std::string resp = c.read_until("request_too_large", 5000ms);
    CHECK(resp.rfind("HTTP/1.1 413", 0) == 0);
    CHECK(f.client().Get("/health")->status == 200);
}

TEST_CASE("http: too many header lines are 431") {
    if (!stories_tokenizer()) return;
    Fixture f;
    httplib::Headers h;
    for (int i = 0; i < 100; ++i) h.emplace("X-Filler-" + std::to_string(i), "x");
    auto r = f.client().Get("/health", h);
    REQUIRE(r);
    CHECK(r->status == 431);
}

TEST_CASE("http: the API key, in constant time, and /health open without it") {
    if (!stories_tokenizer()) return;
    ServerOptions o = test_options();
    o.api_key = "sk-test-123";
    Fixture f(o);
    auto cli = f.client();
    CHECK(cli.Get("/health")->status == 200);
    for (const httplib::Headers& h : {httplib::Headers{}, httplib::Headers{{"Authorization", "Bearer sk-test-12"}},
                                      httplib::Headers{{"Authorization", "Bearer sk-test-1234"}},
                                      httplib::Headers{{"Authorization", "sk-test-123"}}}) {
        auto r = cli.Post("/v1/chat/completions", h, kChat, "application/json");
        REQUIRE(r);
        CHECK(r->status == 401);
        CHECK(r->get_header_value("WWW-Authenticate") == "Bearer");
        json e = body_json(r)["error"];
        CHECK(e["type"] == "invalid_request_error");
        CHECK(e["code"] == "invalid_api_key");
        CHECK(e["param"].is_null());
    }
    CHECK(cli.Get("/metrics")->status == 401);
    CHECK(cli.Get("/v1/models")->status == 401);
    httplib::Headers ok = {{"Authorization", "Bearer sk-test-123"}};
    CHECK(cli.Post("/v1/chat/completions", ok, kChat, "application/json")->status == 200);
    CHECK(cli.Get("/v1/models", ok)->status == 200);
    CHECK(f.engine.submits == 1);
}

TEST_CASE("http: CORS: preflights without the key, allow headers on every response, streams and errors included") {
    if (!stories_tokenizer()) return;
    ServerOptions o = test_options();
    o.api_key = "sk-test-123";
    Fixture f(o);
    auto cli = f.client();
    const std::string origin = "http://localhost:5173";
    // The preflight a browser sends before a keyed JSON POST: no key, answered 204 with what the POST may carry.
    auto r = cli.Options("/v1/chat/completions",
                         httplib::Headers{{"Origin", origin},
                                          {"Access-Control-Request-Method", "POST"},
                                          {"Access-Control-Request-Headers", "authorization,content-type"}});
    REQUIRE(r);
    CHECK(r->status == 204);
    CHECK(r->get_header_value("Access-Control-Allow-Origin") == origin);
    CHECK(r->get_header_value("Access-Control-Allow-Credentials") == "true");
    CHECK(r->get_header_value("Access-Control-Allow-Headers") == "authorization,content-type");
    CHECK(r->get_header_value("Access-Control-Allow-Methods").find("POST") != std::string::npos);
    CHECK(r->get_header_value("Allow") == "POST, OPTIONS");
    CHECK(f.engine.submits == 0);

    const httplib::Headers keyed = {{"Origin", origin}, {"Authorization", "Bearer sk-test-123"}};
    r = cli.Post("/v1/chat/completions", keyed, kChat, "application/json");
    REQUIRE(r);
    CHECK(r->status == 200);
    CHECK(r->get_header_value("Access-Control-Allow-Origin") == origin);
    CHECK(r->get_header_value_count("Access-Control-Allow-Origin") == 1);
    CHECK(r->get_header_value("Vary") == "Origin");
    // The key is still required for the request itself, and its 401 carries the headers (a page can read it).
    r = cli.Post("/v1/chat/completions", httplib::Headers{{"Origin", origin}}, kChat, "application/json");
    REQUIRE(r);
    CHECK(r->status == 401);
    CHECK(r->get_header_value("Access-Control-Allow-Origin") == origin);
    // A stream, a 400 and a 404.
    r = cli.Post("/v1/chat/completions", keyed, R"({"messages":[{"role":"user","content":"Hi"}],"stream":true})",
                 "application/json");
    REQUIRE(r);
    CHECK(r->get_header_value("Content-Type") == "text/event-stream");
    CHECK(r->get_header_value("Access-Control-Allow-Origin") == origin);
    r = cli.Post("/v1/chat/completions", keyed, "{bad", "application/json");
    REQUIRE(r);
    CHECK(r->status == 400);
    CHECK(r->get_header_value("Access-Control-Allow-Origin") == origin);
    r = cli.Get("/nowhere", keyed);
    REQUIRE(r);
    CHECK(r->status == 404);
    CHECK(r->get_header_value("Access-Control-Allow-Origin") == origin);
    // Without an Origin (curl, SDKs): no CORS headers.
    r = cli.Get("/health");
    REQUIRE(r);
    CHECK_FALSE(r->has_header("Access-Control-Allow-Origin"));
}

TEST_CASE("http: CORS: --cors-origins refuses other pages") {
    if (!stories_tokenizer()) return;
    ServerOptions o = test_options();
    o.cors.origins = {"https://app.example"};
    Fixture f(o);
    auto cli = f.client();
    auto r = cli.Options("/v1/chat/completions", httplib::Headers{{"Origin", "https://evil.example"},
                                                                  {"Access-Control-Request-Method", "POST"}});
    REQUIRE(r);
    CHECK(r->status == 403);
    CHECK_FALSE(r->has_header("Access-Control-Allow-Origin"));
    CHECK(body_json(r)["error"]["message"].get<std::string>().find("https://evil.example") != std::string::npos);
    r = cli.Post("/v1/chat/completions", httplib::Headers{{"Origin", "https://evil.example"}}, kChat,
                 "application/json");
    REQUIRE(r);
    CHECK_FALSE(r->has_header("Access-Control-Allow-Origin"));  // the browser withholds the answer from the page
    r = cli.Options("/v1/models",
                    httplib::Headers{{"Origin", "https://app.example"}, {"Access-Control-Request-Method", "GET"}});
    REQUIRE(r);
    CHECK(r->status == 204);
    CHECK(r->get_header_value("Access-Control-Allow-Origin") == "https://app.example");
    // A preflight without an Origin is a plain OPTIONS: the methods of the path.
    r = cli.Options("/v1/models");
    REQUIRE(r);
    CHECK(r->status == 204);
    CHECK(r->get_header_value("Allow") == "GET, OPTIONS");
}

TEST_CASE("http: a body is read only by a route that reads it: others are refused before a byte, key or not") {
    ServerOptions o = test_options();
    o.api_key = "sk-test-123";
    HttpServer server(o);  // no model needed: the refusals come first
    const int port = server.start();
    // A chunked body that never ends, without the key, to a public path, a GET route and an unknown
    // one: answered at once (a server reading the body first would wait for its end).
    for (const std::string path : {"/", "/health", "/v1/models", "/nowhere"}) {
        CAPTURE(path);
        RawConn c(port);
        REQUIRE(c.send("POST " + path + " HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10000\r\n" +
                       std::string(0x10000, 'a') + "\r\n"));
        const std::string got = c.read_until("\r\n\r\n", 3000ms);
        CHECK((got.starts_with("HTTP/1.1 405") || got.starts_with("HTTP/1.1 404")));
        CHECK(got.find("Connection: close") != std::string::npos);
    }
    {
        RawConn c(port);
        REQUIRE(c.send("PUT /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\nabc"));
        const std::string got = c.read_until("\r\n\r\n", 3000ms);
        CHECK(got.starts_with("HTTP/1.1 405"));
        CHECK(got.find("Allow: POST") != std::string::npos);
    }
    // A 401 leaves the body unread: the connection is closed rather than reused.
    {
        RawConn c(port);
        REQUIRE(c.send(post_request("/v1/chat/completions", kChat)));
        const std::string got = c.read_until("\r\n\r\n", 3000ms);
        CHECK(got.starts_with("HTTP/1.1 401"));
        CHECK(got.find("Connection: close") != std::string::npos);
    }
    // Bodies on routes that take them still work (a DELETE included): the key is checked, then the body read.
    httplib::Client cli("127.0.0.1", port);
    const httplib::Headers key = {{"Authorization", "Bearer sk-test-123"}};
    auto r = cli.Delete("/api/delete", key, R"({"model":"x"})", "application/json");
    REQUIRE(r);
    CHECK(r->status == 501);  // the route ran: this server deletes no model
    r = cli.Post("/slots/0?action=save", key, "{}", "application/json");
    REQUIRE(r);
    CHECK(r->status == 501);
    r = cli.Get("/health");
    REQUIRE(r);
    CHECK(r->status == 503);  // loading, and public
    server.stop();
}

TEST_CASE("http: a client that hangs up mid-stream cancels its request") {
    if (!stories_tokenizer()) return;
    Fixture f;
    f.engine.pieces.assign(500, " tick");
    f.engine.gap = 10ms;
    RawConn c(f.port);
    c.send(post_request("/v1/chat/completions", R"({"messages":[{"role":"user","content":"Hi"}],"stream":true})"));
    std::string got = c.read_until(" tick", 3000ms);
    CHECK(got.find("HTTP/1.1 200") == 0);
    CHECK(f.engine.live == 1);
    c.close();
    CHECK(eventually([&] { return f.engine.cancels == 1 && f.engine.live == 0; }));
    CHECK(eventually([&] { return f.server.counters().streams_open == 0; }));
}

TEST_CASE("http: a client that hangs up while its request waits is found by the ping") {
    if (!stories_tokenizer()) return;
    Fixture f;
    f.engine.pieces = {"late"};
    f.engine.gap = 60000ms;  // "queued" for a minute
    RawConn c(f.port);
    c.send(post_request("/v1/chat/completions", R"({"messages":[{"role":"user","content":"Hi"}],"stream":true})"));
    CHECK(c.read_until("\"role\":\"assistant\"", 3000ms).find("HTTP/1.1 200") == 0);
    c.close();
    CHECK(eventually([&] { return f.engine.cancels == 1 && f.engine.live == 0; }));
}

TEST_CASE("http: shutdown refuses new requests and ends open streams cleanly") {
    if (!stories_tokenizer()) return;
    Fixture f;
    f.engine.pieces.assign(1000, " tick");
    f.engine.gap = 10ms;
    RawConn c(f.port);
    c.send(post_request("/v1/chat/completions", R"({"messages":[{"role":"user","content":"Hi"}],"stream":true})"));
    CHECK(c.read_until(" tick", 3000ms).find("HTTP/1.1 200") == 0);

    f.server.begin_shutdown();
    auto r = f.client().Post("/v1/chat/completions", kChat, "application/json");
    CHECK(r->status == 503);
    CHECK(body_json(r)["error"]["message"] == "The server is shutting down.");

    auto t0 = std::chrono::steady_clock::now();
    f.engine.stopped = true;  // what Engine::shutdown() does to every request
    CHECK(f.server.wait_streams(3000ms));
    // The stream's last bytes: an error event and the chunked terminator.
    std::string tail = c.read_until("0\r\n\r\n", 3000ms);
    CHECK(tail.find("The server is shutting down.") != std::string::npos);
    CHECK(tail.find("0\r\n\r\n") != std::string::npos);
    f.server.stop();
    CHECK(std::chrono::steady_clock::now() - t0 < 4000ms);
}

TEST_CASE("http: /metrics, /v1/models, /tokenize, /detokenize, /apply-template") {
    if (!stories_tokenizer()) return;
    Fixture f;
    auto cli = f.client();
    CHECK(cli.Post("/v1/chat/completions", kChat, "application/json")->status == 200);
    auto r = cli.Get("/metrics");
    REQUIRE(r);
    CHECK(r->status == 200);
    CHECK(r->get_header_value("Content-Type").rfind("text/plain; version=0.0.4", 0) == 0);
    CHECK(r->body.find("vkllm_slots 4\n") != std::string::npos);
    // Counted by the logger, which runs once the response has been written: soon, not at once.
    CHECK(eventually([&] {
        return cli.Get("/metrics")->body.find("vkllm_http_requests_total{status=\"200\"}") != std::string::npos;
    }));

    json models = body_json(cli.Get("/v1/models"));
    CHECK(
        models ==
        json{{"object", "list"},
             {"data",
              json::array({json{
                  {"id", "stories260K.gguf"}, {"object", "model"}, {"created", 1700000000}, {"owned_by", "vkllm"}}})}});
    CHECK(body_json(cli.Get("/v1/models/stories260K.gguf"))["id"] == "stories260K.gguf");

    const Tokenizer& tok = *stories_tokenizer();
    json t = body_json(cli.Post("/tokenize", R"({"content":"Once upon a time"})", "application/json"));
    CHECK(t["tokens"].get<std::vector<int32_t>>() == tok.encode("Once upon a time", false, true));
    t = body_json(cli.Post("/tokenize", R"({"content":"Once upon a time","add_special":true})", "application/json"));
    CHECK(t["tokens"][0] == 1);
    json d = body_json(cli.Post("/detokenize", json{{"tokens", t["tokens"]}}.dump(), "application/json"));
    CHECK(d["content"] == "<s> Once upon a time");  // llama-server's pieces: BOS as its text, the leading space kept
    json p =
        body_json(cli.Post("/apply-template", R"({"messages":[{"role":"user","content":"Hi"}]})", "application/json"));
    CHECK(p["prompt"] == "<s>user: Hi\nassistant:");
}

TEST_CASE("http: a port already in use is an error, not a shared port") {
    if (!stories_tokenizer()) return;
    Fixture f;
    ServerOptions o = test_options();
    o.port = f.port;
    HttpServer second(o);
    CHECK_THROWS_WITH_AS(second.start(), doctest::Contains("cannot listen on 127.0.0.1:"), std::runtime_error);
    CHECK(f.client().Get("/health")->status == 200);
}

TEST_CASE("http: a reranker answers /v1/rerank (one pair per call, too-long pairs refused, busy beyond threads - 2)") {
    const Tokenizer* tok = stories_tokenizer();
    if (!tok) return;
    // Declared before the server: its handler threads use them until it stops.
    std::atomic<int> calls{0}, waiting{0};
    std::atomic<bool> hold{false};
    ServerOptions o = test_options();
    o.threads = 4;  // two places for embedding and rerank requests
    HttpServer server(o);
    const int port = server.start();
    ServedModel m;
    m.id = "rr.gguf";
    m.tokenizer = tok;
    m.n_ctx = 16;
    m.embed_limit = 16;
    // A pair is one token per character of each; the score is the document's length.
    m.rerank_tokens = [](std::string_view q, std::string_view d) {
        return std::vector<int32_t>(q.size() + d.size(), 5);
    };
    m.rerank = [&](const std::vector<std::vector<int32_t>>& pairs) {
        ++calls;
        ++waiting;
        while (hold) std::this_thread::sleep_for(5ms);
        --waiting;
        std::vector<float> out;
        for (const auto& ids : pairs) out.push_back(float(ids.size()));
        return out;
    };
    server.set_model(std::move(m));
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(10, 0);
    auto r = c.Post("/v1/rerank", R"({"query":"q","documents":["aaa","a","aaaaa"],"top_n":2})", "application/json");
    const json j = body_json(r);
    CHECK(r->status == 200);
    CHECK(calls == 1);  // the documents in one group
    REQUIRE(j["results"].size() == 2);
    CHECK(j["results"][0]["index"] == 2);
    CHECK(j["results"][0]["relevance_score"] == 6.0);
    CHECK(j["results"][1]["index"] == 0);
    CHECK(j["usage"]["prompt_tokens"] == 12);
    CHECK(j["model"] == "rr.gguf");
    for (const char* path : {"/rerank", "/v1/reranking", "/reranking"})
        CHECK(c.Post(path, R"({"query":"q","documents":["a"]})", "application/json")->status == 200);
    // 17 tokens: refused before anything runs, naming the document
    calls = 0;
    r = c.Post("/v1/rerank", R"({"query":"q","documents":["a","aaaaaaaaaaaaaaaa"]})", "application/json");
    CHECK(r->status == 400);
    CHECK(body_json(r)["error"]["code"] == "context_length_exceeded");
    CHECK(body_json(r)["error"]["message"].get<std::string>().find("document 1 are 17 tokens") != std::string::npos);
    CHECK(calls == 0);
    CHECK(c.Post("/v1/embeddings", R"({"input":"x"})", "application/json")->status == 400);
    CHECK(c.Post("/v1/chat/completions", kChat, "application/json")->status == 400);
    // Two requests wait for the device; a third is turned away with a 503 while they do.
    hold = true;
    std::vector<std::thread> ts;
    struct Release {  // whatever happens below, the held requests finish and their threads are joined
        std::atomic<bool>& hold;
        std::vector<std::thread>& ts;
        ~Release() {
            hold = false;
            for (auto& t : ts)
                if (t.joinable()) t.join();
        }
    } release{hold, ts};
    for (int i = 0; i < 2; ++i)
        ts.emplace_back([&] {
            httplib::Client ci("127.0.0.1", port);
            ci.set_read_timeout(10, 0);
            CHECK(ci.Post("/v1/rerank", R"({"query":"q","documents":["a"]})", "application/json")->status == 200);
        });
    for (int i = 0; i < 1000 && waiting < 2; ++i) std::this_thread::sleep_for(5ms);  // (the stand-in has no lock)
    CHECK(waiting == 2);
    r = c.Post("/v1/rerank", R"({"query":"q","documents":["a"]})", "application/json");
    REQUIRE(r);
    CHECK(r->status == 503);
    hold = false;
    for (auto& t : ts) t.join();
    CHECK(c.Post("/v1/rerank", R"({"query":"q","documents":["a"]})", "application/json")->status == 200);
}

TEST_CASE("metrics: Prometheus text with HELP and TYPE for every family") {
    engine::EngineMetrics m;
    m.slots = 4;
    m.slots_busy = 1;
    m.requests_total = 10;
    m.generated_tokens_total = 1234;
    m.prompt_seconds_total = 0.5;
    ServerCounters c;
    c.ready = true;
    c.http_by_status = {{200, 9}, {400, 2}};
    c.streams_open = 1;
    std::string t = prometheus_text(m, c);
    CHECK(t.find("# TYPE vkllm_slots_busy gauge\nvkllm_slots_busy 1\n") != std::string::npos);
    CHECK(t.find("# TYPE vkllm_generated_tokens_total counter\nvkllm_generated_tokens_total 1234\n") !=
          std::string::npos);
    CHECK(t.find("vkllm_prompt_seconds_total 0.5\n") != std::string::npos);
    CHECK(t.find("vkllm_http_requests_total{status=\"400\"} 2\n") != std::string::npos);
    CHECK(t.find("vkllm_ready 1\n") != std::string::npos);
    // While loading: the server's families only.
    std::string loading = prometheus_text(std::nullopt, ServerCounters{});
    CHECK(loading.find("vkllm_ready 0\n") != std::string::npos);
    CHECK(loading.find("vkllm_slots") == std::string::npos);
    // Every sample line belongs to a family declared just before it.
    for (size_t pos = 0; pos < t.size();) {
        size_t end = t.find('\n', pos);
        std::string line = t.substr(pos, end - pos);
        if (line.rfind("# TYPE ", 0) == 0) {
            std::string name = line.substr(7, line.find(' ', 7) - 7);
            CHECK(t.find("# HELP " + name + " ") != std::string::npos);
        }
        pos = end + 1;
    }
}

TEST_CASE("auth: the key comparison (written to take the same time for every mismatch position)") {
    CHECK(constant_time_equal("secret", "secret"));
    CHECK_FALSE(constant_time_equal("secret", "secreT"));
    CHECK_FALSE(constant_time_equal("secret", "secret2"));
    CHECK_FALSE(constant_time_equal("", "x"));
    CHECK(constant_time_equal("", ""));
}
