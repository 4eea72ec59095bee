// The chat page's routes on the real HTTP server (no model needed): each file over HTTP with its
// headers, gzip sent as it is (not compressed twice by cpp-httplib), public under --api-key, and
// absent with --no-webui (ServerOptions::webui), where / is the API's JSON 404.
#include "serving/server/http_server.h"
#include "serving/webui/asset_reply.h"
#include "serving/webui/assets.h"

#include <doctest/doctest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

using namespace vkllm;
using namespace vkllm::server;

namespace {

struct Served {
    HttpServer server;
    int port;
    explicit Served(ServerOptions o) : server(with_defaults(std::move(o))), port(server.start()) {}
    static ServerOptions with_defaults(ServerOptions o) {
        o.port = 0;
        o.log_requests = false;
        return o;
    }
    httplib::Client client(bool decompress = true) const {
        httplib::Client c("127.0.0.1", port);
        c.set_read_timeout(10, 0);
        c.set_decompress(decompress);
        return c;
    }
};

}  // namespace

TEST_CASE("webui routes: every file with its type, ETag, CSP and nosniff; gzip as stored; 304") {
    Served s(ServerOptions{});
    auto c = s.client(false);
    for (const webui::Asset& a : webui::assets()) {
        CAPTURE(a.path);
        auto plain = c.Get(std::string(a.path), {{"Accept-Encoding", "identity"}});
        REQUIRE(plain);
        CHECK(plain->status == 200);
        CHECK(plain->body == a.bytes);
        CHECK(plain->get_header_value("Content-Type") == a.content_type);
        CHECK(plain->get_header_value("Content-Security-Policy") == webui::kContentSecurityPolicy);
        CHECK(plain->get_header_value("X-Content-Type-Options") == "nosniff");
        CHECK(plain->get_header_value("ETag") == a.etag);
        CHECK(!plain->has_header("Content-Encoding"));
        // The stored gzip bytes exactly: cpp-httplib must not compress them again, nor answer
        // brotli in their place.
        auto gz = c.Get(std::string(a.path), {{"Accept-Encoding", "gzip, deflate, br"}});
        REQUIRE(gz);
        CHECK(gz->status == 200);
        CHECK(gz->body == a.gzip);
        CHECK(gz->get_header_value_count("Content-Encoding") == 1);
        CHECK(gz->get_header_value("Content-Encoding") == "gzip");
        CHECK(gz->get_header_value("Content-Security-Policy") == webui::kContentSecurityPolicy);
        // A client that takes brotli only gets the plain bytes.
        auto br = c.Get(std::string(a.path), {{"Accept-Encoding", "br"}});
        REQUIRE(br);
        CHECK(br->body == a.bytes);
        CHECK(!br->has_header("Content-Encoding"));
        auto again = c.Get(std::string(a.path), {{"If-None-Match", gz->get_header_value("ETag")}});
        REQUIRE(again);
        CHECK(again->status == 304);
        CHECK(again->body.empty());
        CHECK(again->get_header_value("Content-Security-Policy") == webui::kContentSecurityPolicy);
    }
    // A client that decodes gzip reads the plain text.
    auto decoded = s.client(true).Get("/", {{"Accept-Encoding", "gzip"}});
    REQUIRE(decoded);
    CHECK(decoded->body == webui::find_asset("/")->bytes);
}

TEST_CASE("webui routes: a file's path is matched literally; other methods are a 405") {
    Served s(ServerOptions{});
    auto c = s.client();
    auto near = c.Get("/assets/appXjs");
    REQUIRE(near);
    CHECK(near->status == 404);
    auto post = c.Post("/", "{}", "application/json");
    REQUIRE(post);
    CHECK(post->status == 405);
    CHECK(post->get_header_value("Allow") == "GET");
}

TEST_CASE("webui routes: the page is public under --api-key; the API is not") {
    ServerOptions o;
    o.api_key = "sk-page";
    Served s(o);
    auto c = s.client();
    for (const webui::Asset& a : webui::assets()) {
        auto r = c.Get(std::string(a.path));
        REQUIRE(r);
        CHECK(r->status == 200);
    }
    auto models = c.Get("/v1/models");
    REQUIRE(models);
    CHECK(models->status == 401);
    auto metrics = c.Get("/metrics");
    REQUIRE(metrics);
    CHECK(metrics->status == 401);
}

TEST_CASE("webui routes: --no-webui leaves / and the files a JSON 404") {
    ServerOptions o;
    o.webui = false;
    Served s(o);
    auto c = s.client();
    for (const char* path : {"/", "/assets/app.js", "/assets/marked.min.js"}) {
        CAPTURE(path);
        auto r = c.Get(path);
        REQUIRE(r);
        CHECK(r->status == 404);
        CHECK(!r->has_header("Content-Security-Policy"));
        auto body = nlohmann::json::parse(r->body);
        CHECK(body["error"]["code"] == "unknown_url");
        CHECK(body["error"]["message"] == std::string("Invalid URL (GET ") + path + ")");
    }
    auto health = c.Get("/health");
    REQUIRE(health);
    CHECK(health->status == 503);  // no model in this test: the server is up, loading
}
