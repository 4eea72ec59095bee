// The chat page's files (serving/webui/assets/, and the Markdown libraries Debian ships), built into
// the binary at build time by serving/webui/embed_assets.cmake: each one's bytes, its gzip-compressed
// bytes, its type and its ETag, found by the URL path it is served at ("/" is index.html, every other
// file is under /assets/). Plain data, no HTTP: serving/server/webui_routes.cpp serves it through
// asset_reply.h.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

namespace vkllm::webui {

struct Asset {
    std::string_view path;  // "/", "/assets/app.js"
    std::string_view content_type;  // "" where the file's extension has none (a test fails then)
    std::string_view etag;  // "\"<16 hex digits of the bytes' SHA-256>\"", quotes included
    std::string_view gzip_etag;  // the gzip representation's: "\"<same>-gzip\""
    std::string_view bytes;
    std::string_view gzip;
};

// Every asset, index.html first.
std::span<const Asset> assets();
// The asset served at `path`, or null.
const Asset* find_asset(std::string_view path);
// The Content-Type of a file name by its extension, or "".
std::string_view content_type_for(std::string_view name);

namespace detail {
// One file as embed_assets.cmake writes it into the generated source.
struct EmbeddedFile {
    const char* name;  // "app.js"
    const unsigned char* bytes;
    size_t size;
    const unsigned char* gzip;
    size_t gzip_size;
    const char* sha256;  // 64 hex digits of the bytes
};
extern const EmbeddedFile kEmbeddedFiles[];
extern const size_t kEmbeddedFileCount;
}  // namespace detail

}  // namespace vkllm::webui
