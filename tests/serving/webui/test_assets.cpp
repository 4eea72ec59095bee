// The chat page's asset table and how its files are answered (serving/webui/): every file has a
// type, an ETag and a gzip form that is a gzip stream; every file the page refers to is in the
// table; Accept-Encoding and If-None-Match are read as HTTP says; every reply carries the CSP.
#include "serving/webui/asset_reply.h"
#include "serving/webui/assets.h"

#include <doctest/doctest.h>

#include <regex>
#include <set>
#include <string>

using namespace vkllm::webui;

namespace {

std::string header(const Reply& r, const std::string& name) {
    for (const auto& [n, v] : r.headers)
        if (n == name) return v;
    return "";
}

}  // namespace

TEST_CASE("webui: every asset has a path, a type, an ETag and a gzip form") {
    REQUIRE(assets().size() >= 8);
    CHECK(assets()[0].path == "/");
    std::set<std::string_view> paths;
    for (const Asset& a : assets()) {
        CAPTURE(a.path);
        CHECK(paths.insert(a.path).second);
        CHECK((a.path == "/" || a.path.starts_with("/assets/")));
        CHECK(!a.content_type.empty());
        CHECK(std::regex_match(std::string(a.etag), std::regex("\"[0-9a-f]{16}\"")));
        CHECK(a.gzip_etag == std::string(a.etag.substr(0, 17)) + "-gzip\"");
        CHECK(!a.bytes.empty());
        // A gzip member (RFC 1952: magic, deflate), and worth sending.
        REQUIRE(a.gzip.size() > 10);
        CHECK(static_cast<unsigned char>(a.gzip[0]) == 0x1f);
        CHECK(static_cast<unsigned char>(a.gzip[1]) == 0x8b);
        CHECK(a.gzip[2] == 8);
        if (a.bytes.size() > 1000) CHECK(a.gzip.size() < a.bytes.size() * 3 / 4);
        CHECK(find_asset(a.path) == &a);
    }
    CHECK(find_asset("/assets/app.js") != nullptr);
    CHECK(find_asset("/index.html") == nullptr);
    CHECK(find_asset("/assets/") == nullptr);
    CHECK(find_asset("/assets/nothing.js") == nullptr);
}

TEST_CASE("webui: types by extension; a file of another kind has none") {
    CHECK(content_type_for("index.html") == "text/html; charset=utf-8");
    CHECK(content_type_for("app.js") == "text/javascript; charset=utf-8");
    CHECK(content_type_for("style.css") == "text/css; charset=utf-8");
    CHECK(content_type_for("icon.svg") == "image/svg+xml");
    CHECK(content_type_for("photo.png").empty());
    CHECK(content_type_for(".js").empty());
    CHECK(content_type_for("js").empty());
}

TEST_CASE("webui: every file the page loads or imports is in the table, and none is inline") {
    const Asset* index = find_asset("/");
    REQUIRE(index);
    const std::string html(index->bytes);
    // index.html's src= and href= (relative: the page may be served under a proxy's prefix).
    std::regex ref(R"re((?:src|href)="([^"]*)")re");
    size_t refs = 0;
    for (auto it = std::sregex_iterator(html.begin(), html.end(), ref); it != std::sregex_iterator(); ++it) {
        const std::string target = (*it)[1];
        CAPTURE(target);
        REQUIRE(target.starts_with("assets/"));
        CHECK(find_asset("/" + target) != nullptr);
        ++refs;
    }
    CHECK(refs >= 5);
    // The content security policy forbids inline scripts and styles: there must be none.
    CHECK(!std::regex_search(html, std::regex(R"(<script(?![^>]*\bsrc=)[^>]*>)")));
    CHECK(html.find("<style") == std::string::npos);
    CHECK(html.find(" style=") == std::string::npos);
    CHECK(!std::regex_search(html, std::regex(R"(\bon[a-z]+=)")));
    // Each module's imports.
    std::regex import(R"re(from '\./([^']+)')re");
    size_t imports = 0;
    for (const Asset& a : assets()) {
        if (!a.path.ends_with(".js")) continue;
        const std::string js(a.bytes);
        for (auto it = std::sregex_iterator(js.begin(), js.end(), import); it != std::sregex_iterator(); ++it) {
            CAPTURE(a.path);
            CHECK(find_asset("/assets/" + (*it)[1].str()) != nullptr);
            ++imports;
        }
    }
    CHECK(imports >= 3);
}

TEST_CASE("webui: Accept-Encoding admits gzip as HTTP says") {
    CHECK(accepts_gzip("gzip"));
    CHECK(accepts_gzip("gzip, deflate, br"));
    CHECK(accepts_gzip("br;q=1.0, GZIP;q=0.5"));
    CHECK(accepts_gzip("x-gzip"));
    CHECK(accepts_gzip("*"));
    CHECK(accepts_gzip("deflate, *;q=0.1"));
    CHECK(!accepts_gzip(""));
    CHECK(!accepts_gzip("identity"));
    CHECK(!accepts_gzip("br, deflate"));
    CHECK(!accepts_gzip("gzip;q=0"));
    CHECK(!accepts_gzip("gzip;q=0.000"));
    CHECK(!accepts_gzip("*, gzip;q=0"));  // named refusal wins over the wildcard
    CHECK(!accepts_gzip("*;q=0"));
    CHECK(!accepts_gzip("gzip;q=x"));  // unreadable: not taken
    CHECK(!accepts_gzip("gzipped"));
}

TEST_CASE("webui: If-None-Match names an ETag, weakly or by *") {
    CHECK(etag_matches("\"abc\"", "\"abc\""));
    CHECK(etag_matches("W/\"abc\"", "\"abc\""));
    CHECK(etag_matches("\"x\", \"abc\"", "\"abc\""));
    CHECK(etag_matches("*", "\"abc\""));
    CHECK(!etag_matches("\"abd\"", "\"abc\""));
    CHECK(!etag_matches("abc", "\"abc\""));
    CHECK(!etag_matches("", "\"abc\""));
}

TEST_CASE("webui: replies: plain or gzip by Accept-Encoding, 304 on a current ETag, the CSP on each") {
    const Asset* a = find_asset("/assets/app.js");
    REQUIRE(a);
    const std::string csp(kContentSecurityPolicy);
    CHECK(csp.starts_with("default-src 'none';"));
    for (const char* directive : {"script-src 'self'", "style-src 'self'", "connect-src 'self'",
                                  "img-src 'self' data:", "base-uri 'none'", "form-action 'none'",
                                  "frame-ancestors 'none'"})
        CHECK(csp.find(directive) != std::string::npos);

    Reply plain = reply_for(*a, "", "");
    Reply gz = reply_for(*a, "gzip, deflate, br", "");
    Reply br = reply_for(*a, "br", "");
    Reply fresh = reply_for(*a, "gzip", std::string(a->gzip_etag));
    Reply fresh_plain = reply_for(*a, "", std::string(a->gzip_etag));  // the other representation's tag
    Reply stale = reply_for(*a, "gzip", "\"0000000000000000\"");
    CHECK(plain.status == 200);
    CHECK(plain.body == a->bytes);
    CHECK(!plain.gzip);
    CHECK(header(plain, "Content-Encoding").empty());
    CHECK(header(plain, "ETag") == a->etag);
    CHECK(gz.status == 200);
    CHECK(gz.body == a->gzip);
    CHECK(gz.gzip);
    CHECK(header(gz, "Content-Encoding") == "gzip");
    CHECK(header(gz, "ETag") == a->gzip_etag);
    CHECK(br.body == a->bytes);
    CHECK(fresh.status == 304);
    CHECK(fresh.body.empty());
    CHECK(header(fresh, "Content-Encoding").empty());
    CHECK(fresh_plain.status == 304);
    CHECK(header(fresh_plain, "ETag") == a->etag);
    CHECK(stale.status == 200);
    for (const Asset& each : assets()) {
        for (const Reply& r : {reply_for(each, "", ""), reply_for(each, "gzip", ""),
                               reply_for(each, "", std::string(each.etag))}) {
            CAPTURE(each.path);
            CHECK(header(r, "Content-Security-Policy") == csp);
            CHECK(header(r, "X-Content-Type-Options") == "nosniff");
            CHECK(header(r, "Content-Type") == each.content_type);
            CHECK(header(r, "Cache-Control") == "no-cache");
            CHECK(header(r, "Vary") == "Accept-Encoding");
            CHECK(!header(r, "ETag").empty());
        }
    }
}
