#include "serving/webui/asset_reply.h"

#include <cctype>
#include <charconv>
#include <optional>

namespace vkllm::webui {

namespace {

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

bool iequals(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
        if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i])))
            return false;
    return true;
}

// Calls fn(item) for each comma-separated item of a header value, trimmed, empty ones skipped.
template <class Fn>
void for_each_item(std::string_view list, Fn&& fn) {
    while (!list.empty()) {
        size_t comma = list.find(',');
        std::string_view item = trim(list.substr(0, comma));
        if (!item.empty()) fn(item);
        if (comma == std::string_view::npos) break;
        list.remove_prefix(comma + 1);
    }
}

// The q value of "coding;q=0.5" (1 without one; 0 where it cannot be read, as a refusal).
double quality(std::string_view params) {
    for (;;) {
        size_t semi = params.find(';');
        if (semi == std::string_view::npos) return 1.0;
        params.remove_prefix(semi + 1);
        std::string_view p = trim(params.substr(0, params.find(';')));
        if (p.size() >= 2 && (p[0] == 'q' || p[0] == 'Q') && p[1] == '=') {
            p.remove_prefix(2);
            double q = 0;
            auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), q);
            return ec == std::errc() && end == p.data() + p.size() ? q : 0.0;
        }
    }
}

}  // namespace

bool accepts_gzip(std::string_view accept_encoding) {
    std::optional<double> gzip, any;
    for_each_item(accept_encoding, [&](std::string_view item) {
        std::string_view coding = trim(item.substr(0, item.find(';')));
        if (iequals(coding, "gzip") || iequals(coding, "x-gzip"))
            gzip = quality(item);
        else if (coding == "*")
            any = quality(item);
    });
    if (gzip) return *gzip > 0;
    return any && *any > 0;
}

bool etag_matches(std::string_view if_none_match, std::string_view etag) {
    bool match = false;
    for_each_item(if_none_match, [&](std::string_view tag) {
        if (tag == "*") match = true;
        if (tag.starts_with("W/")) tag.remove_prefix(2);  // If-None-Match compares weakly
        if (tag == etag) match = true;
    });
    return match;
}

Reply reply_for(const Asset& asset, std::string_view accept_encoding, std::string_view if_none_match) {
    Reply r;
    r.gzip = !asset.gzip.empty() && accepts_gzip(accept_encoding);
    const std::string_view etag = r.gzip ? asset.gzip_etag : asset.etag;
    // Either representation's tag means the client holds the current file.
    const bool fresh = !if_none_match.empty() &&
                       (etag_matches(if_none_match, asset.etag) || etag_matches(if_none_match, asset.gzip_etag));
    r.headers = {
        {"Content-Type", std::string(asset.content_type)},
        {"ETag", std::string(etag)},
        // The file names carry no hash: the browser asks again each time and gets a 304 while the
        // binary is the same.
        {"Cache-Control", "no-cache"},
        {"Vary", "Accept-Encoding"},
        {"Content-Security-Policy", std::string(kContentSecurityPolicy)},
        {"X-Content-Type-Options", "nosniff"},
        {"Referrer-Policy", "no-referrer"},
    };
    if (fresh) {
        r.status = 304;
        return r;
    }
    if (r.gzip) r.headers.emplace_back("Content-Encoding", "gzip");
    r.body = r.gzip ? asset.gzip : asset.bytes;
    return r;
}

}  // namespace vkllm::webui
