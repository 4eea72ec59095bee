// The tuning file (runtime/kernel_tuning.h): its round trip, the header that keys it to one device,
// driver, vkllm version and shader table, and Context reading it beside the pipeline cache only
// when asked, with one warning for a corrupt, foreign or stale file.
#include "support/test_context.h"

#include "runtime/kernel_tuning.h"

#include <filesystem>
#include <fstream>

using namespace vkllm;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
    fs::path dir = test::binary_dir() / "test-tmp" / name;
    fs::remove_all(dir);
    fs::create_directories(dir);
    return dir;
}

KernelTuning sample(const DeviceCaps& caps) {
    KernelTuning t;
    t.header = KernelTuning::header_for(caps);
    t.entries[{"matvec-strided", 8, 4096, 4096, "1"}] = {.wg = 128, .rows = 2};
    t.entries[{"matvec-strided", 8, 4096, 4096, "2-8"}] = {.rows = 1};
    t.entries[{"matmul-coopmat", 12, 14336, 4096, "512"}] = {.bm = 128, .bn = 64, .bk = 32, .sgm = 4, .sgn = 2};
    return t;
}

void write(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary | std::ios::trunc) << text; }

// Context with the tuning read from `dir`, the warnings it gave.
std::pair<std::shared_ptr<const KernelTuning>, std::vector<std::string>> open(const fs::path& dir, bool read = true) {
    ContextOptions o;
    o.instance.validation = false;
    o.pipeline_cache = false;
    o.cache_dir = dir;
    o.kernel_tuning = read;
    std::vector<std::string> warnings;
    o.warn = [&](const std::string& w) { warnings.push_back(w); };
    Context ctx(o);
    return {ctx.caps().tuning, warnings};
}

}  // namespace

TEST_CASE("kernel tuning: buckets and the file's round trip") {
    CHECK(tuning_bucket(1) == "1");
    CHECK(tuning_bucket(2) == "2-8");
    CHECK(tuning_bucket(8) == "2-8");
    CHECK(tuning_bucket(9) == "9");
    CHECK(tuning_bucket(512) == "512");
    const KernelTuning t = sample(test::context().caps());
    const KernelTuning back = KernelTuning::parse(t.to_json());
    CHECK(back.header == t.header);
    CHECK(back.entries == t.entries);
    REQUIRE(back.find("matvec-strided", 8, 4096, 4096, 5) != nullptr);
    CHECK(back.find("matvec-strided", 8, 4096, 4096, 5)->rows == 1);
    CHECK(back.find("matvec-strided", 8, 4096, 4096, 1)->wg == 128);
    CHECK(back.find("matvec-strided", 8, 4096, 4096, 9) == nullptr);
    CHECK(back.find("matmul-coopmat", 12, 14336, 4096, 512)->sgm == 4);
    CHECK(back.find("matmul-coopmat", 12, 14336, 4096, 256) == nullptr);
    CHECK(describe(TunedConfig{.wg = 64, .rows = 4}) == "wg=64 rows=4");
    CHECK_THROWS_AS(KernelTuning::parse("{\"vkllm_version\": 1}"), std::runtime_error);
    CHECK_THROWS_AS(KernelTuning::parse("not json"), std::runtime_error);
}

TEST_CASE("kernel tuning: Context reads this device's file when asked, and only then") {
    const fs::path dir = fresh_dir("tuning-read");
    {
        auto [t, w] = open(dir);
        CHECK(t == nullptr);  // missing: nothing, silently
        CHECK(w.empty());
    }
    const DeviceCaps& caps = test::context().caps();
    const fs::path file = dir / kernel_tuning_file_name(caps);
    CHECK(file.filename().string().starts_with("tuning-"));
    sample(caps).save(file);
    {
        auto [t, w] = open(dir);
        REQUIRE(t != nullptr);
        CHECK(w.empty());
        CHECK(t->file == file);
        CHECK(t->entries.size() == 3);
    }
    {
        auto [t, w] = open(dir, false);
        CHECK(t == nullptr);
        CHECK(w.empty());
    }
}

TEST_CASE("kernel tuning: a corrupt, foreign or stale file is ignored with one warning naming why") {
    const fs::path dir = fresh_dir("tuning-bad");
    const DeviceCaps& caps = test::context().caps();
    const fs::path file = dir / kernel_tuning_file_name(caps);
    struct Case {
        const char* why;
        std::function<void()> damage;
    };
    const std::vector<Case> cases = {
        {"corrupt", [&] { write(file, "{\"vkllm_version\": \"0.2.0\", \"entries\": ["); }},
        {"corrupt",
         [&] {
             std::string text = sample(caps).to_json();
             text.replace(text.find("\"wg\""), 4, "\"wg\": \"x\", \"zz\"");
             write(file, text);
         }},
        {"foreign",
         [&] {
             KernelTuning t = sample(caps);
             t.header.device = "Another GPU";
             t.header.device_id ^= 1;
             t.save(file);
         }},
        {"stale",
         [&] {
             KernelTuning t = sample(caps);
             t.header.driver_version += 1;
             t.save(file);
         }},
        {"stale",
         [&] {
             KernelTuning t = sample(caps);
             t.header.vkllm_version = "0.0.1";
             t.save(file);
         }},
        {"stale",
         [&] {
             KernelTuning t = sample(caps);
             t.header.shader_hash ^= 1;
             t.save(file);
         }},
    };
    for (const Case& c : cases) {
        c.damage();
        auto [t, w] = open(dir);
        INFO(c.why);
        CHECK(t == nullptr);
        REQUIRE(w.size() == 1);
        CHECK(w[0].find(c.why) != std::string::npos);
        CHECK(w[0].find(file.string()) != std::string::npos);
        CHECK(w[0].find('\n') == std::string::npos);
    }
}
