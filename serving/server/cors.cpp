#include "serving/server/cors.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace vkllm::server {

namespace {

std::string_view trim(std::string_view s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
    return s;
}

// "http://localhost:3000", "https://127.0.0.1", "http://[::1]:8080".
bool is_local_origin(std::string_view origin) {
    for (std::string_view scheme : {"http://", "https://"}) {
        if (origin.substr(0, scheme.size()) != scheme) continue;
        std::string_view host = origin.substr(scheme.size());
        for (std::string_view local : {"localhost", "127.0.0.1", "[::1]"}) {
            if (host.substr(0, local.size()) != local) continue;
            std::string_view rest = host.substr(local.size());
            if (rest.empty()) return true;
            if (rest.front() != ':' || rest.size() == 1) return false;
            return std::all_of(rest.begin() + 1, rest.end(),
                               [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
        }
    }
    return false;
}

}  // namespace

std::vector<std::string> parse_cors_origins(std::string_view list) {
    list = trim(list);
    if (list == "none") return {};
    if (list == "*" || list == "localhost") return {std::string(list)};
    std::vector<std::string> out;
    while (!list.empty()) {
        const size_t comma = list.find(',');
        std::string_view item = trim(list.substr(0, comma));
        list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
        if (item.empty()) continue;
        const size_t scheme = item.find("://");
        if (item == "*" || item == "localhost")
            throw std::invalid_argument("--cors-origins: '" + std::string(item) +
                                        "' stands alone; it cannot be combined with other origins");
        if (scheme == std::string_view::npos || scheme == 0 || item.size() == scheme + 3 || item.back() == '/' ||
            item.find('/', scheme + 3) != std::string_view::npos)
            throw std::invalid_argument("--cors-origins: '" + std::string(item) +
                                        "' is not an origin (scheme://host[:port], without a path), nor *, "
                                        "localhost or none");
        out.emplace_back(item);
    }
    if (out.empty()) throw std::invalid_argument("--cors-origins: no origin given (use 'none' to refuse them all)");
    return out;
}

bool cors_allows(const CorsPolicy& p, std::string_view origin) {
    if (origin.empty()) return false;
    for (const std::string& o : p.origins) {
        if (o == "*") return true;
        if (o == "localhost" && is_local_origin(origin)) return true;
        if (o == origin) return true;
    }
    return false;
}

Headers cors_headers(const CorsPolicy& p, std::string_view origin, bool preflight, std::string_view request_headers) {
    Headers h;
    if (!cors_allows(p, origin)) return h;
    // The origin is echoed rather than "*": a wildcard forbids credentials, and a cache must keep
    // one answer per origin (Vary).
    const bool wildcard = !p.credentials && p.origins.size() == 1 && p.origins[0] == "*";
    h.emplace_back("Access-Control-Allow-Origin", wildcard ? "*" : std::string(origin));
    if (!wildcard) h.emplace_back("Vary", "Origin");
    if (p.credentials) h.emplace_back("Access-Control-Allow-Credentials", "true");
    if (preflight) {
        h.emplace_back("Access-Control-Allow-Methods", p.methods);
        std::string allowed = p.headers;
        if (allowed == "*" && !trim(request_headers).empty()) allowed = std::string(trim(request_headers));
        h.emplace_back("Access-Control-Allow-Headers", allowed);
        h.emplace_back("Access-Control-Max-Age", std::to_string(p.max_age_seconds));
    }
    return h;
}

}  // namespace vkllm::server
