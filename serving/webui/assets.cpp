#include "serving/webui/assets.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace vkllm::webui {

namespace {

// The types of the files the page is made of; text is UTF-8.
constexpr std::pair<std::string_view, std::string_view> kTypes[] = {
    {".html", "text/html; charset=utf-8"},
    {".js", "text/javascript; charset=utf-8"},
    {".css", "text/css; charset=utf-8"},
    {".svg", "image/svg+xml"},
};

struct Table {
    std::vector<std::string> paths, etags, gzip_etags;
    std::vector<Asset> assets;
};

Table build() {
    Table t;
    const size_t n = detail::kEmbeddedFileCount;
    t.paths.reserve(n);  // the views below point into these strings: no reallocation
    t.etags.reserve(n);
    t.gzip_etags.reserve(n);
    for (size_t i = 0; i < n; ++i) {
        const detail::EmbeddedFile& f = detail::kEmbeddedFiles[i];
        const std::string name = f.name;
        const std::string hash = std::string(f.sha256).substr(0, 16);
        t.paths.push_back(name == "index.html" ? "/" : "/assets/" + name);
        t.etags.push_back("\"" + hash + "\"");
        t.gzip_etags.push_back("\"" + hash + "-gzip\"");
        t.assets.push_back(Asset{t.paths.back(), content_type_for(name), t.etags.back(), t.gzip_etags.back(),
                                 std::string_view(reinterpret_cast<const char*>(f.bytes), f.size),
                                 std::string_view(reinterpret_cast<const char*>(f.gzip), f.gzip_size)});
    }
    std::stable_partition(t.assets.begin(), t.assets.end(), [](const Asset& a) { return a.path == "/"; });
    return t;
}

const Table& table() {
    static const Table t = build();
    return t;
}

}  // namespace

std::span<const Asset> assets() { return table().assets; }

const Asset* find_asset(std::string_view path) {
    for (const Asset& a : table().assets)
        if (a.path == path) return &a;
    return nullptr;
}

std::string_view content_type_for(std::string_view name) {
    for (const auto& [ext, type] : kTypes)
        if (name.size() > ext.size() && name.ends_with(ext)) return type;
    return {};
}

}  // namespace vkllm::webui
