#include "serving/server/image_input.h"

#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <optional>
#include <stdexcept>

namespace vkllm::server {

namespace {

bool starts_with_nocase(std::string_view s, std::string_view prefix) {
    if (s.size() < prefix.size()) return false;
    for (size_t i = 0; i < prefix.size(); ++i)
        if (std::tolower(static_cast<unsigned char>(s[i])) != std::tolower(static_cast<unsigned char>(prefix[i])))
            return false;
    return true;
}

bool ends_with_nocase(std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && starts_with_nocase(s.substr(s.size() - suffix.size()), suffix);
}

// A URL as it appears in an error: long data URLs cut short.
std::string shown(std::string_view url) {
    return url.size() > 64 ? std::string(url.substr(0, 64)) + "..." : std::string(url);
}

ApiError bad_image(const std::string& param, const std::string& reason) {
    return invalid_field(param, fmt::format("Invalid '{}': {}", param, reason));
}

constexpr std::array<int8_t, 256> base64_values() {
    std::array<int8_t, 256> v{};
    v.fill(-1);
    constexpr std::string_view alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < alphabet.size(); ++i) v[static_cast<unsigned char>(alphabet[i])] = int8_t(i);
    return v;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v'; }

// An http(s) URL split for cpp-httplib's client: "scheme://authority" and the path with its query.
struct HttpUrl {
    std::string origin;  // "https://example.com:8443"
    std::string target;  // "/a/b.png?x=1" (the fragment dropped)
};

std::optional<HttpUrl> split_http_url(std::string_view url) {
    std::string_view scheme;
    if (starts_with_nocase(url, "http://"))
        scheme = "http";
    else if (starts_with_nocase(url, "https://"))
        scheme = "https";
    else
        return std::nullopt;
    std::string_view rest = url.substr(scheme.size() + 3);
    const size_t end = std::min(rest.find_first_of("/?#"), rest.size());
    const std::string_view authority = rest.substr(0, end);
    // Credentials in a URL are refused: they would be sent to whatever host the rest names.
    if (authority.empty() || authority.find('@') != std::string_view::npos) return std::nullopt;
    for (char c : authority)
        if (static_cast<unsigned char>(c) <= ' ' || c == '\\') return std::nullopt;
    std::string_view target = rest.substr(end);
    target = target.substr(0, std::min(target.find('#'), target.size()));
    HttpUrl u;
    u.origin = fmt::format("{}://{}", scheme, authority);
    // A query straight after the authority ("http://host?x") still asks for the root.
    u.target = fmt::format("{}{}", target.empty() || target[0] != '/' ? "/" : "", target);
    return u;
}

// Where a redirect's Location points: an absolute http(s) URL, or a path on the same origin.
std::string redirect_target(const HttpUrl& from, const std::string& location, const std::string& param) {
    if (!location.empty() && location[0] == '/' && (location.size() < 2 || location[1] != '/'))
        return from.origin + location;
    if (split_http_url(location)) return location;
    throw bad_image(
        param, fmt::format("the image URL redirects to '{}'; only http and https URLs are followed.", shown(location)));
}

}  // namespace

std::vector<uint8_t> decode_base64(std::string_view text) {
    static constexpr std::array<int8_t, 256> values = base64_values();
    std::vector<uint8_t> out;
    out.reserve(text.size() / 4 * 3);
    uint32_t group = 0;
    int in_group = 0, padding = 0;
    size_t digits = 0;
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (is_space(c)) continue;
        if (c == '=') {
            // Padding fills the last group: after two or three digits, and nothing but more padding follows.
            if (in_group < 2)
                throw std::invalid_argument(fmt::format("'=' at offset {} is not at the end of a group", i));
            ++padding;
            ++in_group;
            if (in_group == 4) {
                if (padding == 1) {
                    out.push_back(uint8_t(group >> 10));
                    out.push_back(uint8_t(group >> 2));
                } else {
                    out.push_back(uint8_t(group >> 4));
                }
                in_group = 0;
            }
            continue;
        }
        if (padding > 0)
            throw std::invalid_argument(fmt::format("a character follows the '=' padding at offset {}", i));
        const int8_t v = values[static_cast<unsigned char>(c)];
        if (v < 0)
            throw std::invalid_argument(
                fmt::format("byte 0x{:02x} at offset {} is not a base64 character", static_cast<unsigned char>(c), i));
        group = (group << 6) | uint32_t(v);
        ++digits;
        if (++in_group == 4) {
            out.push_back(uint8_t(group >> 16));
            out.push_back(uint8_t(group >> 8));
            out.push_back(uint8_t(group));
            group = 0;
            in_group = 0;
        }
    }
    if (in_group != 0)
        throw std::invalid_argument(
            fmt::format("the data ends inside a group of four ({} of them left over); "
                        "base64 must be padded with '=' to whole groups",
                        in_group));
    if (digits == 0) throw std::invalid_argument("there is no data");
    return out;
}

std::vector<uint8_t> data_url_bytes(std::string_view url, const std::string& param) {
    if (!starts_with_nocase(url, "data:")) throw bad_image(param, fmt::format("'{}' is not a data URL.", shown(url)));
    const size_t comma = url.find(',');
    if (comma == std::string_view::npos) throw bad_image(param, "the data URL has no ',' before its data.");
    const std::string_view header = url.substr(5, comma - 5);
    if (!starts_with_nocase(header, "image/") || !ends_with_nocase(header, ";base64"))
        throw bad_image(param, fmt::format("expected a data URL of the form data:image/<type>;base64,<data>, but it "
                                           "starts 'data:{}'.",
                                           shown(header)));
    try {
        return decode_base64(url.substr(comma + 1));
    } catch (const std::invalid_argument& e) {
        throw bad_image(param, fmt::format("the data URL's base64 is malformed: {}.", e.what()));
    }
}

std::vector<uint8_t> fetch_image_url(const std::string& url, const ImageInputOptions& opts, const std::string& param) {
    using clock = std::chrono::steady_clock;
    const clock::time_point deadline = clock::now() + opts.url_timeout;
    auto left = [&] {
        return std::max(std::chrono::milliseconds(1),
                        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()));
    };
    std::string current = url;
    for (int hop = 0; hop <= kMaxImageRedirects; ++hop) {
        const std::optional<HttpUrl> u = split_http_url(current);
        if (!u)
            throw bad_image(param, fmt::format("'{}' is not an http or https URL vkllm can fetch.", shown(current)));
        httplib::Client client(u->origin);
        if (!client.is_valid()) throw bad_image(param, fmt::format("cannot fetch from '{}'.", shown(u->origin)));
        client.set_follow_location(false);  // followed here, where each target's scheme is checked
        client.set_connection_timeout(left());
        client.set_read_timeout(left());
        client.set_write_timeout(left());
        std::vector<uint8_t> body;
        bool too_big = false, too_slow = false;
        int status = 0;
        std::string location;
        httplib::Result res = client.Get(
            u->target,
            [&](const httplib::Response& r) {
                status = r.status;
                location = r.get_header_value("Location");
                // A declared length over the limit is refused before a byte of it is read.
                if (status == 200 && r.has_header("Content-Length")) {
                    const std::string len = r.get_header_value("Content-Length");
                    if (len.size() > 18 || std::stoull("0" + len) > opts.max_url_bytes) too_big = true;
                }
                return !too_big;
            },
            [&](const char* data, size_t n) {
                if (clock::now() > deadline) {
                    too_slow = true;
                    return false;
                }
                if (n > opts.max_url_bytes - body.size()) {
                    too_big = true;
                    return false;
                }
                body.insert(body.end(), data, data + n);
                return true;
            });
        if (too_big)
            throw bad_image(param, fmt::format("the image at '{}' is larger than the server's limit of {} bytes "
                                               "(--image-url-max-bytes).",
                                               shown(current), opts.max_url_bytes));
        if (too_slow || (!res && clock::now() >= deadline))
            throw bad_image(param, fmt::format("fetching '{}' took longer than the server's limit of {} ms "
                                               "(--image-url-timeout).",
                                               shown(current), opts.url_timeout.count()));
        if (!res)
            throw bad_image(param,
                            fmt::format("cannot fetch '{}': {}.", shown(current), httplib::to_string(res.error())));
        if (status >= 300 && status < 400 && status != 304) {
            if (location.empty())
                throw bad_image(param,
                                fmt::format("'{}' answered HTTP {} without a Location.", shown(current), status));
            current = redirect_target(*u, location, param);
            continue;
        }
        if (status != 200)
            throw bad_image(param, fmt::format("fetching '{}' answered HTTP {}.", shown(current), status));
        return body;
    }
    throw bad_image(param, fmt::format("'{}' redirects more than {} times.", shown(url), kMaxImageRedirects));
}

std::vector<uint8_t> image_bytes(const chat_template::ImageRef& ref, const ImageInputOptions& opts) {
    if (starts_with_nocase(ref.url, "data:")) return data_url_bytes(ref.url, ref.param);
    if (starts_with_nocase(ref.url, "http://") || starts_with_nocase(ref.url, "https://")) {
        if (!opts.allow_urls)
            throw bad_image(ref.param,
                            "remote image URLs are off: start the server with --allow-image-urls, or send "
                            "the image as a data URL (data:image/png;base64,...).");
        return fetch_image_url(ref.url, opts, ref.param);
    }
    throw bad_image(ref.param, fmt::format("'{}' is neither a data URL (data:image/png;base64,...) nor an http(s) "
                                           "URL; file:// and other schemes are never read.",
                                           shown(ref.url)));
}

RgbImage load_image(const chat_template::ImageRef& ref, const ImageInputOptions& opts) {
    const std::vector<uint8_t> bytes = image_bytes(ref, opts);
    try {
        return decode_image(bytes, opts.limits);
    } catch (const ImageError& e) {
        throw bad_image(ref.param, fmt::format("the image cannot be read: {}", e.what()));
    }
}

}  // namespace vkllm::server
