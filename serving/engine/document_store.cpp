#include "serving/engine/document_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>

namespace vkllm::engine {

namespace fs = std::filesystem;

namespace {

// FNV-1a: stable across runs and builds, so that disk entries keep their names.
uint64_t fnv1a(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
    const auto* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}
// Two hashes from different starting points: a file name that collides needs both to.
uint64_t tokens_hash(std::span<const int32_t> t) { return fnv1a(t.data(), t.size_bytes()); }
uint64_t tokens_hash2(std::span<const int32_t> t) { return fnv1a(t.data(), t.size_bytes(), 0x9e3779b97f4a7c15ull); }

constexpr char kMagic[8] = {'V', 'K', 'L', 'L', 'M', 'K', 'V', '1'};
// Bounds a file's header must keep within before anything is allocated from it.
constexpr uint64_t kMaxRows = 1u << 24, kMaxRowBytes = 1u << 24, kMaxLayers = 4096;

template <class T>
void put_pod(std::ostream& o, const T& v) {
    o.write(reinterpret_cast<const char*>(&v), sizeof v);
}
template <class T>
bool get_pod(std::istream& in, T& v) {
    return bool(in.read(reinterpret_cast<char*>(&v), sizeof v));
}

// A disk entry: magic, fingerprint, tokens, then the rows' header and every layer's K and V.
// Written beside its place and renamed there: a reader never sees half of it.
void write_entry(const fs::path& path, const std::string& fingerprint, std::span<const int32_t> tokens,
                 const KvRows& rows) {
    const fs::path tmp = path.string() + ".tmp";
    {
        std::ofstream o(tmp, std::ios::binary | std::ios::trunc);
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
        if (!o.flush()) throw std::runtime_error(fmt::format("document store: cannot write {}", tmp.string()));
    }
    fs::rename(tmp, path);
}

// The bytes write_entry writes: a budget counts files, not rows.
uint64_t entry_file_bytes(const std::string& fingerprint, size_t n_tokens, const KvRows& rows) {
    return sizeof kMagic + 4 + fingerprint.size() + 4 + 4ull * n_tokens + 4 + 4 + 4 + 8 + 4 + 16ull * rows.k.size() +
           rows.bytes();
}

enum class Read { Ok, OtherTokens, Broken };

// The rows of a disk entry if it is this model's and these tokens'. Every size is checked against
// the header's bounds and the file's length before it is allocated.
Read read_entry(const fs::path& path, const std::string& fingerprint, std::span<const int32_t> tokens,
                std::shared_ptr<const KvRows>& out) {
    try {
        std::error_code ec;
        const uint64_t file_bytes = fs::file_size(path, ec);
        if (ec) return Read::Broken;
        std::ifstream in(path, std::ios::binary);
        char magic[sizeof kMagic];
        if (!in.read(magic, sizeof magic) || std::memcmp(magic, kMagic, sizeof kMagic) != 0) return Read::Broken;
        uint32_t len = 0;
        if (!get_pod(in, len) || len != fingerprint.size()) return Read::Broken;
        std::string fp(len, '\0');
        if (!in.read(fp.data(), len) || fp != fingerprint) return Read::Broken;
        uint32_t n_tokens = 0;
        if (!get_pod(in, n_tokens) || n_tokens > kMaxRows || uint64_t(n_tokens) * 4 > file_bytes) return Read::Broken;
        std::vector<int32_t> stored(n_tokens);
        if (!in.read(reinterpret_cast<char*>(stored.data()), std::streamsize(n_tokens * 4))) return Read::Broken;
        if (!std::equal(stored.begin(), stored.end(), tokens.begin(), tokens.end())) return Read::OtherTokens;
        auto rows = std::make_shared<KvRows>();
        uint32_t type = 0, layers = 0;
        if (!get_pod(in, rows->first) || !get_pod(in, rows->n) || !get_pod(in, type) || !get_pod(in, rows->row_bytes) ||
            !get_pod(in, layers) || rows->n != n_tokens || rows->first >= kMaxRows ||
            type > uint32_t(ops::KvType::Q8_0) || rows->row_bytes == 0 || rows->row_bytes > kMaxRowBytes ||
            layers == 0 || layers > kMaxLayers)
            return Read::Broken;
        rows->type = ops::KvType(type);
        const uint64_t part_bytes = uint64_t(rows->n) * rows->row_bytes;  // < 2^48: no overflow
        rows->k.resize(layers);
        rows->v.resize(layers);
        for (uint32_t l = 0; l < layers; ++l)
            for (auto* part : {&rows->k[l], &rows->v[l]}) {
                uint64_t size = 0;
                // K always has its rows; V has them, or none where it lives in K.
                if (!get_pod(in, size) || (size != part_bytes && !(size == 0 && part == &rows->v[l])) ||
                    uint64_t(in.tellg()) + size > file_bytes)
                    return Read::Broken;
                part->resize(size);
                if (!in.read(reinterpret_cast<char*>(part->data()), std::streamsize(size))) return Read::Broken;
            }
        out = std::move(rows);
        return Read::Ok;
    } catch (const std::exception&) {  // the allocation failed after all: the file is no use
        return Read::Broken;
    }
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

bool DocumentStore::Entry::matches(std::span<const int32_t> t, uint64_t h, uint64_t h2) const {
    if (hash != h || hash2 != h2 || n_tokens != t.size()) return false;
    return tokens.empty() || std::equal(tokens.begin(), tokens.end(), t.begin(), t.end());
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
    adopt_disk_files();
}

void DocumentStore::adopt_disk_files() {
    // FINGERPRINT-HASH-HASH2-N.kv, newest first; other models' files are left alone, this model's
    // that are half-written (.tmp, a crash) or named otherwise are deleted.
    const std::regex named(fingerprint_ + "-([0-9a-f]{16})-([0-9a-f]{16})-([0-9]{1,9})\\.kv");
    std::vector<std::pair<fs::file_time_type, Entry>> found;
    std::vector<fs::path> stale;
    std::error_code ec;
    for (const auto& f : fs::directory_iterator(opts_.disk_dir, ec)) {
        const std::string name = f.path().filename().string();
        if (name.rfind(fingerprint_ + "-", 0) != 0) continue;
        std::smatch m;
        if (!std::regex_match(name, m, named)) {
            stale.push_back(f.path());
            continue;
        }
        Entry e;
        e.hash = std::stoull(m[1].str(), nullptr, 16);
        e.hash2 = std::stoull(m[2].str(), nullptr, 16);
        e.n_tokens = std::stoul(m[3].str());
        e.path = f.path().string();
        e.bytes = fs::file_size(f.path(), ec);
        if (ec) continue;
        found.emplace_back(fs::last_write_time(f.path(), ec), std::move(e));
    }
    for (const fs::path& p : stale) fs::remove(p, ec);
    std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    for (auto& [time, e] : found) {
        if (disk_used_ + e.bytes > opts_.disk_bytes) {
            fs::remove(e.path, ec);
            continue;
        }
        disk_used_ += e.bytes;
        disk_.push_back(std::move(e));
    }
    publish();
}

std::string DocumentStore::disk_path(const Entry& e) const {
    return (fs::path(opts_.disk_dir) /
            fmt::format("{}-{:016x}-{:016x}-{}.kv", fingerprint_, e.hash, e.hash2, e.n_tokens))
        .string();
}

void DocumentStore::erase(std::span<const int32_t> tokens) {
    const uint64_t h = tokens_hash(tokens), h2 = tokens_hash2(tokens);
    auto match = [&](const Entry& e) { return e.matches(tokens, h, h2); };
    if (auto it = std::find_if(host_.begin(), host_.end(), match); it != host_.end()) {
        host_used_ -= it->bytes;
        host_.erase(it);
    }
    if (auto it = std::find_if(disk_.begin(), disk_.end(), match); it != disk_.end()) drop_disk(it);
    publish();
}

std::shared_ptr<const KvRows> DocumentStore::find(std::span<const int32_t> tokens) {
    const uint64_t h = tokens_hash(tokens), h2 = tokens_hash2(tokens);
    auto match = [&](const Entry& e) { return e.matches(tokens, h, h2); };
    if (auto it = std::find_if(host_.begin(), host_.end(), match); it != host_.end()) {
        host_.splice(host_.begin(), host_, it);
        ++hits_;
        return it->rows;
    }
    if (auto it = std::find_if(disk_.begin(), disk_.end(), match); it != disk_.end()) {
        std::shared_ptr<const KvRows> rows;
        const Read r = read_entry(it->path, fingerprint_, tokens, rows);
        if (r == Read::OtherTokens) {  // another document's file under the same name: a miss (a put
            ++misses_;  // of these tokens then takes the name over)
            return nullptr;
        }
        if (r == Read::Ok && rows->bytes() > opts_.host_bytes) {  // too large for memory: it stays on disk
            disk_.splice(disk_.begin(), disk_, it);
            ++hits_;
            ++disk_hits_;
            return rows;
        }
        drop_disk(it);  // back in the host tier below, or unreadable
        if (r == Read::Ok) {
            ++hits_;
            ++disk_hits_;
            insert(Entry{{tokens.begin(), tokens.end()}, tokens.size(), h, h2, rows->bytes(), rows, {}});
            publish();
            return rows;
        }
        publish();
    }
    ++misses_;
    return nullptr;
}

void DocumentStore::put(std::span<const int32_t> tokens, std::shared_ptr<const KvRows> rows) {
    if (!rows || rows->n != tokens.size() || tokens.empty())
        throw std::invalid_argument(
            fmt::format("document store: {} rows for a document of {} tokens", rows ? rows->n : 0, tokens.size()));
    erase(tokens);  // an entry of the same tokens is replaced
    ++stored_;
    const uint64_t bytes = rows->bytes();
    insert(Entry{{tokens.begin(), tokens.end()},
                 tokens.size(),
                 tokens_hash(tokens),
                 tokens_hash2(tokens),
                 bytes,
                 std::move(rows),
                 {}});
    publish();
}

void DocumentStore::insert(Entry e) {
    if (e.bytes > opts_.host_bytes) {
        to_disk(std::move(e));
        return;
    }
    while (!host_.empty() && host_used_ + e.bytes > opts_.host_bytes) {
        Entry old = std::move(host_.back());
        host_.pop_back();
        host_used_ -= old.bytes;
        to_disk(std::move(old));
    }
    host_used_ += e.bytes;
    host_.push_front(std::move(e));
}

void DocumentStore::to_disk(Entry e) {
    if (opts_.disk_dir.empty() || e.bytes > opts_.disk_bytes) {
        ++evicted_;
        return;
    }
    const uint64_t file_bytes = entry_file_bytes(fingerprint_, e.tokens.size(), *e.rows);
    if (file_bytes > opts_.disk_bytes) {
        ++evicted_;
        return;
    }
    while (!disk_.empty() && disk_used_ + file_bytes > opts_.disk_bytes) {
        drop_disk(std::prev(disk_.end()));
        ++evicted_;
    }
    e.path = disk_path(e);
    try {
        write_entry(e.path, fingerprint_, e.tokens, *e.rows);
    } catch (const std::exception&) {
        // A full or vanished disk loses the entry, not the request.
        std::error_code ec;
        fs::remove(e.path + ".tmp", ec);
        ++evicted_;
        return;
    }
    e.bytes = file_bytes;
    e.rows.reset();
    disk_used_ += e.bytes;
    disk_.push_front(std::move(e));
}

void DocumentStore::drop_disk(List::iterator it) {
    std::error_code ec;
    fs::remove(it->path, ec);
    disk_used_ -= it->bytes;
    disk_.erase(it);
}

void DocumentStore::publish() {
    host_bytes_ = host_used_;
    disk_bytes_ = disk_used_;
    host_entries_ = host_.size();
    disk_entries_ = disk_.size();
}

DocumentStoreStats DocumentStore::stats() const {
    DocumentStoreStats s;
    s.hits = hits_;
    s.disk_hits = disk_hits_;
    s.misses = misses_;
    s.stored = stored_;
    s.evicted = evicted_;
    s.host_bytes = host_bytes_;
    s.disk_bytes = disk_bytes_;
    s.host_entries = uint32_t(host_entries_);
    s.disk_entries = uint32_t(disk_entries_);
    return s;
}

}  // namespace vkllm::engine
