// CacheBlend's document store (serving/engine/document_store.h): exact-token keys, LRU within byte
// budgets, the disk tier (spill, read back, left by an earlier process, foreign or broken files).
#include "serving/engine/document_store.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <unistd.h>

using namespace vkllm;
using namespace vkllm::engine;
namespace fs = std::filesystem;

namespace {

// n rows of a 2-layer model, 16 bytes a row, filled from `seed`.
KvRows rows_of(uint32_t n, uint8_t seed) {
    KvRows r;
    r.first = 3;
    r.n = n;
    r.row_bytes = 16;
    for (int l = 0; l < 2; ++l) {
        r.k.emplace_back(n * 16);
        r.v.emplace_back(n * 16);
        for (size_t i = 0; i < r.k.back().size(); ++i) {
            r.k.back()[i] = uint8_t(seed + i + l);
            r.v.back()[i] = uint8_t(seed * 3 + i + l);
        }
    }
    return r;
}

std::shared_ptr<const KvRows> shared_rows(uint32_t n, uint8_t seed) {
    return std::make_shared<const KvRows>(rows_of(n, seed));
}

bool same(const KvRows& a, const KvRows& b) {
    return a.first == b.first && a.n == b.n && a.type == b.type && a.row_bytes == b.row_bytes && a.k == b.k &&
           a.v == b.v;
}

struct TempDir {
    fs::path path = fs::temp_directory_path() / ("vkllm-kv-store-" + std::to_string(getpid()));
    TempDir() { fs::remove_all(path); }
    ~TempDir() { fs::remove_all(path); }
};

}  // namespace

TEST_CASE("document store: exact tokens hit, other tokens miss, least recently used goes first") {
    const std::vector<int32_t> a{1, 2, 3, 4}, b{5, 6, 7, 8}, c{9, 10, 11, 12}, a_longer{1, 2, 3, 4, 5};
    const uint64_t one = rows_of(4, 0).bytes();  // 256
    DocumentStore s("fp", {.host_bytes = 2 * one});
    CHECK(s.find(a) == nullptr);
    s.put(a, shared_rows(4, 1));
    s.put(b, shared_rows(4, 2));
    REQUIRE(s.find(a) != nullptr);
    CHECK(same(*s.find(a), rows_of(4, 1)));
    CHECK(s.find(a_longer) == nullptr);
    s.put(c, shared_rows(4, 3));  // b is the least recently used: a was found since
    CHECK(s.find(b) == nullptr);
    CHECK(s.find(a) != nullptr);
    CHECK(s.find(c) != nullptr);
    const DocumentStoreStats st = s.stats();
    CHECK(st.host_entries == 2);
    CHECK(st.host_bytes == 2 * one);
    CHECK(st.evicted == 1);
    CHECK(st.stored == 3);
    CHECK(st.misses == 3);
    // Rows too large for the budget are not kept without a disk tier; a wrong row count is refused.
    s.put(std::vector<int32_t>(12, 7), shared_rows(12, 4));
    CHECK(s.find(std::vector<int32_t>(12, 7)) == nullptr);
    CHECK_THROWS_AS(s.put(a, shared_rows(3, 1)), std::invalid_argument);
}

TEST_CASE("document store: the disk tier takes what leaves the host and gives it back; foreign files miss") {
    TempDir dir;
    const std::vector<int32_t> a{1, 2, 3, 4}, b{5, 6, 7, 8}, c{9, 10, 11, 12};
    const uint64_t one = rows_of(4, 0).bytes();
    {
        DocumentStore s("fp", {.host_bytes = one, .disk_dir = dir.path.string(), .disk_bytes = 2 * one + 200});  // two files: rows and their headers
        s.put(a, shared_rows(4, 1));
        s.put(b, shared_rows(4, 2));  // a to disk
        CHECK(s.stats().disk_entries == 1);
        const auto got = s.find(a);  // back from disk; b goes there
        REQUIRE(got != nullptr);
        CHECK(same(*got, rows_of(4, 1)));
        CHECK(s.stats().disk_hits == 1);
        s.put(c, shared_rows(4, 3));  // a to disk: b and a there
        s.put(std::vector<int32_t>{13, 14, 15, 16}, shared_rows(4, 5));  // c to disk: b, the oldest there, goes
        CHECK(s.stats().disk_entries == 2);
        CHECK(s.find(b) == nullptr);
    }
    // A later store of the same model takes over what the first left on disk; another model's does not.
    {
        DocumentStore other("other", {.host_bytes = one, .disk_dir = dir.path.string()});
        CHECK(other.stats().disk_entries == 0);
        CHECK(other.find(a) == nullptr);
        DocumentStore again("fp", {.host_bytes = one, .disk_dir = dir.path.string()});
        CHECK(again.stats().disk_entries == 2);
        uint64_t files = 0;  // the budget counts the files as written
        for (const auto& f : fs::directory_iterator(dir.path))
            if (f.path().extension() == ".kv") files += fs::file_size(f.path());
        CHECK(again.stats().disk_bytes == files);
        const auto got = again.find(a);
        REQUIRE(got != nullptr);
        CHECK(same(*got, rows_of(4, 1)));
    }
    // Taken over within the budget, newest first: the rest is deleted.
    {
        DocumentStore small("fp", {.host_bytes = one, .disk_dir = dir.path.string(), .disk_bytes = one + one / 2});
        CHECK(small.stats().disk_entries == 1);
    }
    // A file under this model's name whose contents are another model's is a miss, and removed.
    {
        const std::vector<int32_t> e{31, 32, 33, 34};
        std::set<fs::path> before;
        for (const auto& f : fs::directory_iterator(dir.path)) before.insert(f.path());
        DocumentStore ours("fp", {.host_bytes = 0, .disk_dir = dir.path.string()});  // straight to disk
        ours.put(e, shared_rows(4, 7));
        fs::path file;
        for (const auto& f : fs::directory_iterator(dir.path))
            if (!before.count(f.path())) file = f.path();
        REQUIRE(!file.empty());
        const std::string renamed = "ffff" + file.filename().string().substr(2);  // "fp-..." as "ffff-...": same hashes
        fs::rename(file, dir.path / renamed);
        DocumentStore foreign("ffff", {.host_bytes = one, .disk_dir = dir.path.string()});
        REQUIRE(foreign.stats().disk_entries == 1);
        CHECK(foreign.find(e) == nullptr);
        CHECK(foreign.stats().disk_entries == 0);
        CHECK(!fs::exists(dir.path / renamed));
    }
    // An entry larger than the memory budget is served from disk and stays there; erase forgets it.
    {
        const std::vector<int32_t> f{41, 42, 43, 44};
        DocumentStore s("fp", {.host_bytes = 0, .disk_dir = dir.path.string()});
        const uint32_t before = s.stats().disk_entries;
        s.put(f, shared_rows(4, 8));
        REQUIRE(s.stats().disk_entries == before + 1);
        const auto got = s.find(f);
        REQUIRE(got != nullptr);
        CHECK(same(*got, rows_of(4, 8)));
        CHECK(s.stats().disk_entries == before + 1);
        CHECK(s.stats().host_entries == 0);
        s.erase(f);
        CHECK(s.stats().disk_entries == before);
        CHECK(s.find(f) == nullptr);
    }
    // Half-written and oddly named files of this model are deleted when a store starts; others' stay.
    {
        std::ofstream(dir.path / "fp-0123456789abcdef-0123456789abcdef-4.kv.tmp").put('x');
        std::ofstream(dir.path / "fp-0123-4.kv").put('x');
        std::ofstream(dir.path / "notes.txt").put('x');
        DocumentStore s("fp", {.host_bytes = one, .disk_dir = dir.path.string()});
        CHECK(!fs::exists(dir.path / "fp-0123456789abcdef-0123456789abcdef-4.kv.tmp"));
        CHECK(!fs::exists(dir.path / "fp-0123-4.kv"));
        CHECK(fs::exists(dir.path / "notes.txt"));
    }
    // A broken file is a miss, and removed.
    {
        const std::vector<int32_t> d{21, 22, 23, 24};
        auto files = [&] {
            std::set<fs::path> out;
            for (const auto& e : fs::directory_iterator(dir.path)) out.insert(e.path());
            return out;
        };
        DocumentStore s("fp", {.host_bytes = one, .disk_dir = dir.path.string()});
        const std::set<fs::path> before = files();
        s.put(d, shared_rows(4, 6));
        s.put(b, shared_rows(4, 2));  // d to disk
        std::vector<fs::path> added;
        for (const fs::path& f : files())
            if (!before.count(f)) added.push_back(f);
        REQUIRE(added.size() == 1);
        fs::resize_file(added[0], 60);
        CHECK(s.find(d) == nullptr);
        CHECK(!fs::exists(added[0]));
    }
    // A directory that cannot be made is refused by name.
    const fs::path not_dir = dir.path / "file";
    std::ofstream(not_dir).put('x');
    CHECK_THROWS_WITH_AS(DocumentStore("fp", {.disk_dir = (not_dir / "sub").string()}),
                         doctest::Contains("cannot create"), std::invalid_argument);
}
