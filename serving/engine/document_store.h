// CacheBlend's document store: the K/V rows of documents computed on their own (ModelGpu::
// export_kv), kept so that a later prompt holding the same document blends them in (model/forward/
// blend.h) instead of evaluating its tokens. Keyed by the document's tokens (hashed, then compared
// in full: a collision is a miss) and by the model: a store belongs to one model file and KV type
// (model_fingerprint), and a disk entry written for another is never read.
//
// Two tiers, each with a byte budget and evicted least-recently-used: host memory, and optionally a
// directory on disk where what leaves the host goes (and whence a hit comes back to the host). The
// rows live in host memory between uses: ModelGpu::import_kv uploads them into the sequence.
#pragma once

#include "model/forward/model_gpu.h"

#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace vkllm::engine {

struct DocumentStoreOptions {
    uint64_t host_bytes = 1ull << 30;
    std::string disk_dir;  // "": no disk tier
    uint64_t disk_bytes = 8ull << 30;
};

struct DocumentStoreStats {
    uint64_t hits = 0, disk_hits = 0, misses = 0, stored = 0, evicted = 0;
    uint64_t host_bytes = 0, disk_bytes = 0;
    uint32_t host_entries = 0, disk_entries = 0;
};

// A model file and KV type's identity: a hash of the file's size, its header (metadata and tensor
// list) and samples of its tensor data, with the KV type. Rows written by another model, or by the
// same model with another KV type, do not fit.
std::string model_fingerprint(const GgufFile& file, ops::KvType kv_type);

class DocumentStore {
public:
    // std::invalid_argument for a disk directory that cannot be created or written.
    DocumentStore(std::string fingerprint, DocumentStoreOptions opts);
    DocumentStore(const DocumentStore&) = delete;
    DocumentStore& operator=(const DocumentStore&) = delete;

    // The rows stored for exactly these tokens, or null. A disk hit (also a file an earlier process
    // with the same directory and model left) is read back into the host tier; an unreadable or
    // foreign file is a miss (and removed).
    std::shared_ptr<const KvRows> find(std::span<const int32_t> tokens);
    // Stores the rows of these tokens (rows.n == tokens.size(), else std::invalid_argument), making
    // room by eviction; rows larger than the host budget go straight to disk, or are not kept.
    void put(std::span<const int32_t> tokens, KvRows rows);
    DocumentStoreStats stats() const;
    const std::string& fingerprint() const { return fingerprint_; }

private:
    struct Entry {
        std::vector<int32_t> tokens;
        uint64_t hash = 0, bytes = 0;
        std::shared_ptr<const KvRows> rows;  // host tier; null on disk
        std::string path;  // disk tier
    };
    using List = std::list<Entry>;
    List::iterator lookup(List& tier, std::span<const int32_t> tokens, uint64_t hash);
    void insert(Entry e);  // into the host tier, or to disk where it is larger than the host budget
    std::string disk_path(uint64_t hash, size_t n_tokens) const;  // "" without a disk tier
    void fit_host(uint64_t incoming);
    void to_disk(Entry e);
    void drop_disk(List::iterator it);

    std::string fingerprint_;
    DocumentStoreOptions opts_;
    List host_, disk_;  // most recently used first
    DocumentStoreStats stats_;
};

}  // namespace vkllm::engine
