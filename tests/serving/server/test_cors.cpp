// The cross-origin policy on plain strings: which origins --cors-origins admits, and the headers
// of an actual request and of a preflight.
#include "serving/server/cors.h"

#include <doctest/doctest.h>

#include <map>
#include <stdexcept>

using namespace vkllm::server;

namespace {

std::map<std::string, std::string> as_map(const Headers& h) {
    std::map<std::string, std::string> m;
    for (const auto& [k, v] : h) {
        CHECK_MESSAGE(!m.count(k), "header repeated: ", k);
        m[k] = v;
    }
    return m;
}

}  // namespace

TEST_CASE("cors: --cors-origins lists") {
    CHECK(parse_cors_origins("*") == std::vector<std::string>{"*"});
    CHECK(parse_cors_origins(" localhost ") == std::vector<std::string>{"localhost"});
    CHECK(parse_cors_origins("none").empty());
    CHECK(parse_cors_origins("https://a.example, http://localhost:3000") ==
          std::vector<std::string>{"https://a.example", "http://localhost:3000"});
    for (const char* bad :
         {"", ",", "example.com", "https://a.example/", "https://a.example/app", "*,https://a.b", "https://", "://x"}) {
        CAPTURE(bad);
        CHECK_THROWS_AS(parse_cors_origins(bad), std::invalid_argument);
    }
}

TEST_CASE("cors: which origins a policy admits") {
    CorsPolicy any;
    CHECK(cors_allows(any, "https://anything.example"));
    CHECK_FALSE(cors_allows(any, ""));  // no Origin: not a cross-origin browser request

    CorsPolicy local;
    local.origins = {"localhost"};
    for (const char* o : {"http://localhost", "http://localhost:3000", "https://127.0.0.1:8443", "http://[::1]:5173"})
        CHECK_MESSAGE(cors_allows(local, o), o);
    for (const char* o : {"http://localhost.evil.example", "http://localhost:", "http://localhost:80x",
                          "http://127.0.0.10", "file://localhost", "https://example.com"})
        CHECK_MESSAGE(!cors_allows(local, o), o);

    CorsPolicy listed;
    listed.origins = {"https://app.example"};
    CHECK(cors_allows(listed, "https://app.example"));
    CHECK_FALSE(cors_allows(listed, "https://app.example:444"));
    CHECK_FALSE(cors_allows(listed, "http://app.example"));

    CorsPolicy none;
    none.origins = {};
    CHECK_FALSE(cors_allows(none, "http://localhost"));
    CHECK(cors_headers(none, "http://localhost", true, "authorization").empty());
}

TEST_CASE("cors: headers of requests and preflights") {
    CorsPolicy p;
    auto h = as_map(cors_headers(p, "https://web.example"));
    CHECK(h["Access-Control-Allow-Origin"] == "https://web.example");  // echoed, so credentials work
    CHECK(h["Access-Control-Allow-Credentials"] == "true");
    CHECK(h["Vary"] == "Origin");
    CHECK_FALSE(h.count("Access-Control-Allow-Methods"));
    CHECK(cors_headers(p, "").empty());

    // A wildcard does not cover Authorization: the preflight's own list is allowed instead.
    h = as_map(cors_headers(p, "https://web.example", true, "authorization, content-type"));
    CHECK(h["Access-Control-Allow-Headers"] == "authorization, content-type");
    CHECK(h["Access-Control-Allow-Methods"] == "GET, POST, DELETE, OPTIONS");
    CHECK(h["Access-Control-Max-Age"] == "600");
    h = as_map(cors_headers(p, "https://web.example", true));
    CHECK(h["Access-Control-Allow-Headers"] == "*");

    p.credentials = false;
    h = as_map(cors_headers(p, "https://web.example"));
    CHECK(h["Access-Control-Allow-Origin"] == "*");
    CHECK_FALSE(h.count("Access-Control-Allow-Credentials"));
    CHECK_FALSE(h.count("Vary"));

    p.headers = "content-type";
    h = as_map(cors_headers(p, "https://web.example", true, "authorization"));
    CHECK(h["Access-Control-Allow-Headers"] == "content-type");
}
