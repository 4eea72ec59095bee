#include "serving/engine/document_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace vkllm::engine {

namespace fs = std::filesystem;

namespace {

// FNV-1a: stable across runs and builds, so that disk entries keep their names.
uint64_t fnv1a(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
    const auto* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

uint64_t tokens_hash(std::span<const int32_t> tokens) { return fnv1a(tokens.data(), tokens.size_bytes()); }

constexpr char kMagic[8] = {'V', 'K', 'L', 'L', 'M', 'K', 'V', '1'};

template <class T>
void put_pod(std::ostream& o, const T& v) {
    o.write(reinterpret_cast<const char*>(&v), sizeof v);
}
template <class T>
bool get_pod(std::istream& in, T& v) {
    return bool(in.read(reinterpret_cast<char*>(&v), sizeof v));
}

// A disk entry: magic, fingerprint, tokens, then the rows' header and every layer's K and V.
void write_entry(const fs::path& path, const std::string& fingerprint, std::span<const int32_t> tokens,
                 const KvRows& rows) {
    std::ofstream o(path, std::ios::binary | std::ios::trunc);
    o.write(kMagic, sizeof kMagic);
    put_pod(o, uint32_t(fingerprint.size()));
    o.write(fingerprint.data(), std::streamsize(fingerprint.size()));
    put_pod(o, uint32_t(tokens.size()));
    o.write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size_bytes()));
    put_pod(o, rows.first);
    put_pod(o, rows.n);
    put_pod(o, uint32_t(rows.type));
    put_pod(o, rows.row_bytes);
    put_pod(o, uint32_t(rows.k.size()));
    for (size_t l = 0; l < rows.k.size(); ++l)
        for (const auto* part : {&rows.k[l], &rows.v[l]}) {
            put_pod(o, uint64_t(part->size()));
            o.write(reinterpret_cast<const char*>(part->data()), std::streamsize(part->size()));
        }
    if (!o.flush()) throw std::runtime_error(fmt::format("document store: cannot write {}", path.string()));
}

// The rows of a disk entry if it is this model's and these tokens', else null.
std::shared_ptr<const KvRows> read_entry(const fs::path& path, const std::string& fingerprint,
                                         std::span<const int32_t> tokens) {
    std::ifstream in(path, std::ios::binary);
    char magic[sizeof kMagic];
    if (!in.read(magic, sizeof magic) || std::memcmp(magic, kMagic, sizeof kMagic) != 0) return nullptr;
    uint32_t len = 0;
    if (!get_pod(in, len) || len != fingerprint.size()) return nullptr;
    std::string fp(len, '\0');
    if (!in.read(fp.data(), len) || fp != fingerprint) return nullptr;
    uint32_t n_tokens = 0;
    if (!get_pod(in, n_tokens) || n_tokens != tokens.size()) return nullptr;
    std::vector<int32_t> stored(n_tokens);
    if (!in.read(reinterpret_cast<char*>(stored.data()), std::streamsize(n_tokens * 4)) ||
        !std::equal(stored.begin(), stored.end(), tokens.begin()))
        return nullptr;
    auto rows = std::make_shared<KvRows>();
    uint32_t type = 0, layers = 0;
    if (!get_pod(in, rows->first) || !get_pod(in, rows->n) || !get_pod(in, type) || !get_pod(in, rows->row_bytes) ||
        !get_pod(in, layers) || rows->n != n_tokens || type > uint32_t(ops::KvType::Q8_0) || layers > 4096)
        return nullptr;
    rows->type = ops::KvType(type);
    const uint64_t most = uint64_t(rows->n) * rows->row_bytes;
    rows->k.resize(layers);
    rows->v.resize(layers);
    for (uint32_t l = 0; l < layers; ++l)
        for (auto* part : {&rows->k[l], &rows->v[l]}) {
            uint64_t size = 0;
            if (!get_pod(in, size) || size > most) return nullptr;
            part->resize(size);
            if (!in.read(reinterpret_cast<char*>(part->data()), std::streamsize(size))) return nullptr;
        }
    return rows;
}

}  // namespace

std::string model_fingerprint(const GgufFile& file, ops::KvType kv_type) {
    const std::span<const uint8_t> b = file.bytes();
    const uint64_t size = b.size();
    uint64_t h = fnv1a(&size, sizeof size);
    h = fnv1a(b.data(), std::min<size_t>(b.size(), file.data_offset()), h);  // metadata and tensor list
    // 64 KiB at 16 places in the tensor data: two files with the same header differ in their weights.
    const uint64_t data = b.size() - std::min<uint64_t>(b.size(), file.data_offset());
    for (uint64_t i = 0; i < 16 && data > 0; ++i) {
        const uint64_t at = file.data_offset() + data * i / 16;
        h = fnv1a(b.data() + at, std::min<uint64_t>(65536, b.size() - at), h);
    }
    const uint32_t t = uint32_t(kv_type);
    h = fnv1a(&t, sizeof t, h);
    return fmt::format("{:016x}", h);
}

DocumentStore::DocumentStore(std::string fingerprint, DocumentStoreOptions opts)
    : fingerprint_(std::move(fingerprint)), opts_(std::move(opts)) {
    if (opts_.disk_dir.empty()) return;
    std::error_code ec;
    fs::create_directories(opts_.disk_dir, ec);
    if (ec || !fs::is_directory(opts_.disk_dir))
        throw std::invalid_argument(
            fmt::format("--kv-store {}: cannot create the directory ({})", opts_.disk_dir, ec.message()));
    const fs::path probe = fs::path(opts_.disk_dir) / ".vkllm-write-test";
    if (!std::ofstream(probe).put('x'))
        throw std::invalid_argument(fmt::format("--kv-store {}: the directory is not writable", opts_.disk_dir));
    fs::remove(probe, ec);
}

DocumentStore::List::iterator DocumentStore::lookup(List& tier, std::span<const int32_t> tokens, uint64_t hash) {
    return std::find_if(tier.begin(), tier.end(), [&](const Entry& e) {
        return e.hash == hash && std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin(), tokens.end());
    });
}

std::shared_ptr<const KvRows> DocumentStore::find(std::span<const int32_t> tokens) {
    const uint64_t hash = tokens_hash(tokens);
    if (auto it = lookup(host_, tokens, hash); it != host_.end()) {
        host_.splice(host_.begin(), host_, it);
        ++stats_.hits;
        return it->rows;
    }
    // A disk entry of this store, or one an earlier process left under the same name.
    std::string path = disk_path(hash, tokens.size());
    if (auto it = lookup(disk_, tokens, hash); it != disk_.end()) {
        path = it->path;
        disk_.erase(it);
    }
    if (!path.empty()) {
        std::shared_ptr<const KvRows> rows = read_entry(path, fingerprint_, tokens);
        std::error_code ec;
        fs::remove(path, ec);  // back in the host tier, or unreadable
        if (rows) {
            ++stats_.hits;
            ++stats_.disk_hits;
            insert(Entry{{tokens.begin(), tokens.end()}, hash, rows->bytes(), rows, {}});
            return rows;
        }
    }
    ++stats_.misses;
    return nullptr;
}

std::string DocumentStore::disk_path(uint64_t hash, size_t n_tokens) const {
    if (opts_.disk_dir.empty()) return {};
    return (fs::path(opts_.disk_dir) / fmt::format("{}-{:016x}-{}.kv", fingerprint_, hash, n_tokens)).string();
}

void DocumentStore::put(std::span<const int32_t> tokens, KvRows rows) {
    if (rows.n != tokens.size() || tokens.empty())
        throw std::invalid_argument(
            fmt::format("document store: {} rows for a document of {} tokens", rows.n, tokens.size()));
    const uint64_t hash = tokens_hash(tokens);
    if (auto it = lookup(host_, tokens, hash); it != host_.end()) host_.erase(it);
    if (auto it = lookup(disk_, tokens, hash); it != disk_.end()) drop_disk(it);
    const uint64_t bytes = rows.bytes();
    ++stats_.stored;
    insert(Entry{{tokens.begin(), tokens.end()}, hash, bytes, std::make_shared<const KvRows>(std::move(rows)), {}});
}

void DocumentStore::insert(Entry e) {
    if (e.bytes > opts_.host_bytes) {
        to_disk(std::move(e));
        return;
    }
    fit_host(e.bytes);
    host_.push_front(std::move(e));
}

void DocumentStore::fit_host(uint64_t incoming) {
    uint64_t used = 0;
    for (const Entry& e : host_) used += e.bytes;
    while (!host_.empty() && used + incoming > opts_.host_bytes) {
        used -= host_.back().bytes;
        Entry e = std::move(host_.back());
        host_.pop_back();
        to_disk(std::move(e));
    }
}

void DocumentStore::to_disk(Entry e) {
    if (opts_.disk_dir.empty() || e.bytes > opts_.disk_bytes) {
        ++stats_.evicted;
        return;
    }
    uint64_t used = 0;
    for (const Entry& d : disk_) used += d.bytes;
    while (!disk_.empty() && used + e.bytes > opts_.disk_bytes) {
        used -= disk_.back().bytes;
        drop_disk(std::prev(disk_.end()));
        ++stats_.evicted;
    }
    e.path = disk_path(e.hash, e.tokens.size());
    try {
        write_entry(e.path, fingerprint_, e.tokens, *e.rows);
    } catch (const std::exception&) {
        // A full or vanished disk loses the entry, not the request.
        std::error_code ec;
        fs::remove(e.path, ec);
        ++stats_.evicted;
        return;
    }
    e.rows.reset();
    disk_.push_front(std::move(e));
}

void DocumentStore::drop_disk(List::iterator it) {
    std::error_code ec;
    fs::remove(it->path, ec);
    disk_.erase(it);
}

DocumentStoreStats DocumentStore::stats() const {
    DocumentStoreStats s = stats_;
    for (const Entry& e : host_) s.host_bytes += e.bytes;
    for (const Entry& e : disk_) s.disk_bytes += e.bytes;
    s.host_entries = uint32_t(host_.size());
    s.disk_entries = uint32_t(disk_.size());
    return s;
}

}  // namespace vkllm::engine
