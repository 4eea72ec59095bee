// `vkllm tune` (apps/cmd_tune.cpp) end to end on stories260K: it writes this device's tuning file
// into --cache-dir, `vkllm run` then says it uses it (not with --no-tune), a corrupt file costs one
// warning line, and `vkllm bench --json` names the file used or "none".
#include "support/run_vkllm.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

namespace fs = std::filesystem;
using vkllm::test::run_vkllm;

namespace {

fs::path fresh_dir(const std::string& name) {
    fs::path dir = vkllm::test::binary_dir() / "test-tmp" / name;
    fs::remove_all(dir);
    fs::create_directories(dir);
    return dir;
}

size_t count(const std::string& s, const std::string& what) {
    size_t n = 0;
    for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
    return n;
}

}  // namespace

TEST_CASE("cli: vkllm tune writes the tuning file that run and bench then use") {
    const std::string model = vkllm::test::model_path("stories260K.gguf");
    if (model.empty()) return;
    const fs::path dir = fresh_dir("tune-cli");
    const std::string cache = " --cache-dir " + dir.string();

    auto tuned = run_vkllm("tune -m " + model + " --json -r 2 --ubatch 16" + cache, "tune");
    INFO(tuned.err);
    REQUIRE(tuned.status == 0);
    const nlohmann::json j = nlohmann::json::parse(tuned.out);
    const std::string file = j.at("file").get<std::string>();
    CHECK(fs::path(file).parent_path() == dir);
    CHECK(fs::path(file).filename().string().starts_with("tuning-"));
    REQUIRE(fs::exists(file));
    // stories260K's projections (five distinct shapes) at decode, batch and a 16-token chunk.
    CHECK(j.at("shapes").size() == 15);
    for (const auto& s : j.at("shapes")) {
        CHECK(s.at("default_ms").get<double>() > 0);
        CHECK(s.at("best_ms").get<double>() <= s.at("default_ms").get<double>());
    }

    const std::string run = "run -m " + model + " -p \"Once\" -n 4 --temp 0 --no-pipeline-cache" + cache;
    auto r = run_vkllm(run, "tune-run");
    INFO(r.err);
    CHECK(r.status == 0);
    CHECK(count(r.err, "kernel tuning from " + file) == 1);
    CHECK(r.err.find("warning") == std::string::npos);

    auto plain = run_vkllm(run + " --no-tune", "tune-run-no-tune");
    CHECK(plain.status == 0);
    CHECK(plain.err.find("kernel tuning") == std::string::npos);
    CHECK(plain.out == r.out);  // the tiles change, the greedy story does not

    auto bench = run_vkllm("bench -m " + model + " --json --no-probes -p 8 -n 4 -r 1" + cache, "tune-bench");
    REQUIRE(bench.status == 0);
    CHECK(nlohmann::json::parse(bench.out).at("results").at(0).at("tuning") == file);
    auto bench_none =
        run_vkllm("bench -m " + model + " --json --no-probes -p 8 -n 4 -r 1 --no-tune" + cache, "tune-bench-none");
    REQUIRE(bench_none.status == 0);
    CHECK(nlohmann::json::parse(bench_none.out).at("results").at(0).at("tuning") == "none");

    std::ofstream(file, std::ios::trunc) << "{ not a tuning file";
    auto corrupt = run_vkllm(run, "tune-run-corrupt");
    CHECK(corrupt.status == 0);
    CHECK(count(corrupt.err, "warning: ignoring the kernel tuning file") == 1);
    CHECK(corrupt.err.find("corrupt") != std::string::npos);
    CHECK(corrupt.err.find("kernel tuning from") == std::string::npos);
}
