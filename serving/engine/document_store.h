// CacheBlend's document store: the K/V rows of documents computed on their own (ModelGpu::
// export_kv), kept so that a later prompt holding the same document blends them in (model/forward/
// blend.h) instead of evaluating its tokens. Keyed by the document's tokens (hashed, then compared
// in full: a collision is a miss) and by the model: a store belongs to one model file and KV type
// (model_fingerprint), and a disk entry written for another is never read.
//
// Two tiers, each with a byte budget and evicted least-recently-used: host memory, and optionally a
// directory on disk where what leaves the host goes (and whence a hit comes back to the host). The
// directory's files of this model that an earlier process left are taken over at construction
// (most recently written first, within the budget; the rest, and half-written or unnamed ones of
// this model, are deleted). An entry larger than the host budget is served from disk and stays
// there. The rows live in host
// memory between uses: ModelGpu::import_kv uploads them into the sequence.
//
// find, put and erase are for one thread at a time (the engine's); stats from any thread.
#pragma once

#include "model/forward/model_gpu.h"

#include <atomic>
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

    // The rows stored for exactly these tokens, or null. A disk hit is read back into the host tier;
    // a file that cannot be read as this model's entry is a miss (and removed).
    std::shared_ptr<const KvRows> find(std::span<const int32_t> tokens);
    // Forgets these tokens' rows in both tiers (their file too); nothing when there are none.
    void erase(std::span<const int32_t> tokens);
    // Stores the rows of these tokens (rows->n == tokens.size(), else std::invalid_argument),
    // making room by eviction; rows larger than the host budget go straight to disk, or are not kept.
    void put(std::span<const int32_t> tokens, std::shared_ptr<const KvRows> rows);
    DocumentStoreStats stats() const;
    const std::string& fingerprint() const { return fingerprint_; }

private:
    struct Entry {
        std::vector<int32_t> tokens;  // empty for a disk file taken over at start: read to compare
        size_t n_tokens = 0;
        uint64_t hash = 0, hash2 = 0, bytes = 0;  // two independent hashes of the tokens name the file
        std::shared_ptr<const KvRows> rows;  // host tier; null on disk
        std::string path;  // disk tier
        bool matches(std::span<const int32_t> t, uint64_t h, uint64_t h2) const;
    };
    using List = std::list<Entry>;
    void adopt_disk_files();
    void insert(Entry e);  // into the host tier, or to disk where it is larger than the host budget
    std::string disk_path(const Entry& e) const;
    void to_disk(Entry e);
    void drop_disk(List::iterator it);
    void publish();  // the tiers' sizes into the counters stats() reads

    std::string fingerprint_;
    DocumentStoreOptions opts_;
    List host_, disk_;  // most recently used first
    uint64_t host_used_ = 0, disk_used_ = 0;
    std::atomic<uint64_t> hits_{0}, disk_hits_{0}, misses_{0}, stored_{0}, evicted_{0};
    std::atomic<uint64_t> host_bytes_{0}, disk_bytes_{0}, host_entries_{0}, disk_entries_{0};
};

}  // namespace vkllm::engine
