#include "support/test_context.h"

#include "runtime/shader_registry.h"

#include <filesystem>
#include <fstream>

using namespace vkllm;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
    fs::path dir = ::vkllm::test::binary_dir() / "test-tmp" / name;
    fs::remove_all(dir);
    fs::create_directories(dir);
    return dir;
}

const std::vector<PipelineDesc> kDescs = {{"vec_add", {32}}, {"vec_add", {64}}, {"vec_add", {128}}};

struct Run {
    CacheLoad load;
    PipelineStats stats;
    fs::path file;
};

Run open_and_compile(const fs::path& dir) {
    auto ctx = test::make_context({}, dir);
    Run r{ctx->pipeline_cache().load_status(), {}, *ctx->pipeline_cache().file()};
    ctx->prepare_pipelines(kDescs);
    r.stats = ctx->pipeline_stats();
    return r;  // the context's destructor writes the cache file
}

std::vector<char> read_all(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_all(const fs::path& p, const std::vector<char>& bytes) {
    std::ofstream(p, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
}

}  // namespace

TEST_CASE("pipeline cache: written on the first run, loaded and hit on the second") {
    test::ValidationGuard guard;
    fs::path dir = fresh_dir("cache-hit");
    Run first = open_and_compile(dir);
    CHECK(first.load == CacheLoad::Missing);
    CHECK(first.stats.created == 3);
    REQUIRE(fs::exists(first.file));
    CHECK(fs::file_size(first.file) > 64);

    Run second = open_and_compile(dir);
    CHECK(second.load == CacheLoad::Loaded);
    CHECK(second.stats.created == 3);
    MESSAGE("pipeline create ms: cold " << first.stats.create_ms << ", warm " << second.stats.create_ms
                                        << "; driver-reported cache hits " << second.stats.cache_hits << "/3");
    // Drivers that report creation feedback must report hits now; the first run had none.
    CHECK(first.stats.cache_hits == 0);
}

TEST_CASE("pipeline cache: corrupt, truncated and foreign files are ignored and rewritten") {
    test::ValidationGuard guard;
    fs::path dir = fresh_dir("cache-bad");
    Run first = open_and_compile(dir);
    const std::vector<char> good = read_all(first.file);
    REQUIRE(good.size() > 64);

    auto expect_ignored_then_fixed = [&](const std::vector<char>& bad, CacheLoad expected) {
        write_all(first.file, bad);
        Run r = open_and_compile(dir);
        CHECK(r.load == expected);
        CHECK(r.stats.created == 3);  // pipelines still build
        Run again = open_and_compile(dir);
        CHECK(again.load == CacheLoad::Loaded);  // and the file was rewritten
    };

    SUBCASE("garbage") { expect_ignored_then_fixed(std::vector<char>(good.size(), 'x'), CacheLoad::Corrupt); }
    SUBCASE("truncated header") { expect_ignored_then_fixed(std::vector<char>(good.begin(), good.begin() + 20), CacheLoad::Corrupt); }
    SUBCASE("truncated data") { expect_ignored_then_fixed(std::vector<char>(good.begin(), good.end() - 5), CacheLoad::Corrupt); }
    SUBCASE("flipped data byte") {
        auto bad = good;
        bad.back() ^= 0x5a;
        expect_ignored_then_fixed(bad, CacheLoad::Corrupt);
    }
    SUBCASE("other device") {
        auto bad = good;
        bad[8] ^= 0x01;  // vendor id, first field after the magic
        expect_ignored_then_fixed(bad, CacheLoad::Foreign);
    }
    SUBCASE("empty file") { expect_ignored_then_fixed({}, CacheLoad::Corrupt); }
}

TEST_CASE("pipeline cache: an unwritable directory does not stop the runtime") {
    test::ValidationGuard guard;
    fs::path dir = fresh_dir("cache-ro") / "file-not-dir";
    std::ofstream(dir) << "x";  // a file where the directory should be
    auto ctx = test::make_context({}, dir);
    ctx->prepare_pipelines(kDescs);
    CHECK(!ctx->pipeline_cache().save().empty());  // reports the problem instead of throwing
}

TEST_CASE("shader table: reflected bindings, uniform X variants") {
    // The descriptor types come from each module's SPIR-V (tools/shader_embed.cpp): the uniform X
    // variants bind X (1) and G (5) as uniform buffers, their storage twins none.
    for (const char* t : {"f32", "q8_0", "q4_k"}) {
        for (std::string base : {"matvec_", "matvec_rows_"}) {
            const ShaderInfo& u = find_shader(base + "u_" + t);
            const ShaderInfo& s = find_shader(base + t);
            CHECK(u.binding_count == 6);
            CHECK(u.uniform_mask == ((1u << 1) | (1u << 5)));
            CHECK(u.written_mask == (1u << 3));
            CHECK(s.uniform_mask == 0);
            CHECK(s.written_mask == u.written_mask);
        }
    }
}
