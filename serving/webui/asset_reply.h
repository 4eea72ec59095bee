// How the chat page's files are answered, as data: the status, headers and body of a GET for an
// asset given the request's Accept-Encoding and If-None-Match. The gzip bytes go to a client that
// takes gzip, the plain ones to any other; an ETag that still matches is a 304. Every reply carries
// the page's Content-Security-Policy (this origin's scripts, styles and connections only, nothing
// inline, no framing) and nosniff. serving/server/webui_routes.cpp copies the reply onto cpp-httplib's
// response; tests/serving/webui/test_asset_reply.cpp checks it without a server.
#pragma once

#include "serving/webui/assets.h"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vkllm::webui {

inline constexpr std::string_view kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

struct Reply {
    int status = 200;  // 200 or 304
    std::vector<std::pair<std::string, std::string>> headers;  // Content-Type included
    std::string_view body;  // empty for a 304
    bool gzip = false;  // body is the gzip representation (Content-Encoding: gzip is among the headers)
};

Reply reply_for(const Asset& asset, std::string_view accept_encoding, std::string_view if_none_match);

// Whether an Accept-Encoding header admits gzip: named (or "*") without q=0, and not refused by
// "gzip;q=0" where "*" admits it.
bool accepts_gzip(std::string_view accept_encoding);
// Whether an If-None-Match header ("*", or a list of entity tags, weak or strong) names `etag`.
bool etag_matches(std::string_view if_none_match, std::string_view etag);

}  // namespace vkllm::webui
