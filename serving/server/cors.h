// Cross-origin requests: which web pages may call the server from a browser, and the
// Access-Control-* headers that say so. A browser sends a preflight OPTIONS (without the API key)
// before a POST with JSON or an Authorization header, and reads the allow headers on every
// response, errors and streams included; without them a web app cannot call the server at all.
// Pure functions of the policy and the request's headers (tests/serving/server/test_cors.cpp).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vkllm::server {

struct CorsPolicy {
    // "*": every origin (echoed, so that credentials work, as llama-server does); "localhost":
    // pages served from this machine (localhost, 127.0.0.1, [::1], any port); otherwise the exact
    // origins listed. Empty: no origin (cross-origin calls refused).
    std::vector<std::string> origins = {"*"};
    bool credentials = true;  // Access-Control-Allow-Credentials: cookies and Authorization
    std::string methods = "GET, POST, DELETE, OPTIONS";
    std::string headers =
        "*";  // "*": the headers the preflight asks for (Authorization is never covered by a wildcard)
    int max_age_seconds = 600;
};

// --cors-origins: "*", "localhost", "none", or a comma-separated list of origins
// ("https://app.example.com,http://localhost:3000"); std::invalid_argument naming a malformed entry.
std::vector<std::string> parse_cors_origins(std::string_view list);

bool cors_allows(const CorsPolicy& p, std::string_view origin);

using Headers = std::vector<std::pair<std::string, std::string>>;

// The headers of a response to a request from `origin` (empty: no Origin header, a same-origin or
// non-browser client: none). A preflight adds the allowed methods and headers (`request_headers`:
// its Access-Control-Request-Headers).
Headers cors_headers(const CorsPolicy& p, std::string_view origin, bool preflight = false,
                     std::string_view request_headers = {});

}  // namespace vkllm::server
