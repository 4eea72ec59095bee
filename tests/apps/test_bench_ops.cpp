// End-to-end tests of `vkllm bench-ops`: every op is checked against its reference and timed at the
// small shape set, as JSON and as Markdown, with and without timestamps; bad flag values exit
// non-zero with a message naming the flag.
#include "support/run_vkllm.h"
#include "support/test_context.h"

#include "runtime/ops/kernel_table.h"

#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

namespace fs = std::filesystem;

namespace {

using BenchResult = vkllm::test::CliResult;

BenchResult run_bench_ops(const std::string& args) {
    // A private pipeline cache: quick on a re-run, and never shared with the user's.
    fs::path cache = fs::path(VKLLM_BINARY_DIR) / "test-tmp" / "bench-ops-cache";
    return vkllm::test::run_vkllm("bench-ops --cache-dir " + cache.string() + " " + args, "bench_ops");
}

const std::vector<std::string> kOps = {"matvec", "matmul",           "get_rows",          "rms_norm",
                                       "rope",   "kv_store",         "attention_decode",  "attention_prefill",
                                       "swiglu", "add",              "argmax",            "softmax"};

}  // namespace

TEST_CASE("bench-ops: --shapes small --json checks and times every op") {
    BenchResult r = run_bench_ops("--shapes small -r 1 --json");
    INFO(r.err);
    REQUIRE(r.status == 0);
    const nlohmann::json j = nlohmann::json::parse(r.out);
    CHECK(j["failed"] == 0);
    CHECK(j["probes"]["bandwidth_gbs"].get<double>() > 0);
    CHECK(j["probes"]["fma_gflops"].get<double>() > 0);
    CHECK(j["shapes"]["name"] == "small");
    std::set<std::string> seen, types;
    for (const auto& row : j["results"]) {
        CAPTURE(row.dump());
        seen.insert(row["op"].get<std::string>());
        types.insert(row["type"].get<std::string>());
        CHECK(row["status"] == "ok");
        CHECK(row["check"]["passed"] == true);
        CHECK(row["check"]["nmse"].get<double>() <= row["check"]["limit"].get<double>());
        CHECK(row["reps"].get<int>() >= 1);
        CHECK(row["best_us"].get<double>() > 0);
        CHECK(row["mean_us"].get<double>() >= row["best_us"].get<double>());
        CHECK(row["gbs"].get<double>() > 0);
        CHECK(row["bytes"].get<uint64_t>() > 0);
        if (row["flops"].get<double>() > 0) CHECK(row["gflops"].get<double>() > 0);
    }
    for (const std::string& op : kOps) {
        CAPTURE(op);
        CHECK(seen.count(op) == 1);
    }
    CHECK(seen.size() == kOps.size());
    // The default types, and the f16 KV cache for kv_store / attention.
    CHECK(types == std::set<std::string>{"q4_0", "q8_0", "f16", "f32"});
}

TEST_CASE("bench-ops: Markdown by default; --ops and --types filter; host timing without timestamps") {
    BenchResult r = run_bench_ops("--shapes small -r 2 --ops matvec,attention_decode,add --types f32 --caps no-timestamps");
    INFO(r.err);
    REQUIRE(r.status == 0);
    CHECK(r.out.find("| op ") != std::string::npos);
    CHECK(r.out.find("GB/s") != std::string::npos);
    CHECK(r.out.find("%peak") != std::string::npos);
    CHECK(r.out.find("| matvec ") != std::string::npos);
    CHECK(r.out.find("| attention_decode ") != std::string::npos);
    CHECK(r.out.find("| add ") != std::string::npos);
    CHECK(r.out.find("| matmul ") == std::string::npos);
    CHECK(r.out.find("q4_0") == std::string::npos);
    CHECK(r.out.find("FAILED") == std::string::npos);
    CHECK(r.out.find("host time around the submission") != std::string::npos);
    CHECK(r.err.find("bench-ops: measured") != std::string::npos);  // progress goes to stderr
}

TEST_CASE("bench-ops: bad flag values exit non-zero with a message") {
    struct Case {
        std::string args, expect;
    };
    const std::vector<Case> cases = {
        {"--shapes gpt5", "--shapes"},
        {"--types q4_0,iq2_xs", "--types"},
        {"--ops matvec,conv2d", "--ops"},
        {"-r 0", "--reps"},
        {"--reps many", "--reps"},
        {"--prompt 0", "--prompt"},
        {"--ctx -1", "--ctx"},
        {"--caps warp-speed", "unknown entry 'warp-speed'"},
        {"--no-such-flag", "no-such-flag"},
    };
    for (const Case& c : cases) {
        CAPTURE(c.args);
        const bool has_shapes = c.args.find("--shapes") != std::string::npos;
        BenchResult r = run_bench_ops((has_shapes ? "" : "--shapes small ") + c.args);
        INFO(r.err);
        CHECK(r.status != 0);
        CHECK(r.status < 128);  // an error exit, not a signal
        CHECK(r.err.find(c.expect) != std::string::npos);
        CHECK(r.out.empty());
    }
}

// Which arithmetic peak a rate is measured against follows the kernel the plan chose: f32 FMA for
// the float kernels, the int8 packed dot for the integer-dot ones (forced here: lavapipe has the
// extension without accelerating it, so its default is the float path).
TEST_CASE("bench-ops and bench: rates against the f32 FMA or the int8 packed dot peak, as the plan chose") {
    if (!vkllm::test::context().caps().int_dot_product) {
        MESSAGE("skipped: the device has no integer dot product");
        return;
    }
    for (const bool dot : {false, true}) {
        CAPTURE(dot);
        BenchResult r = run_bench_ops(std::string("--shapes small -r 1 --json --ops matvec,matmul --types q8_0 --caps ") +
                                      (dot ? "int-dot" : "no-int-dot"));
        INFO(r.err);
        REQUIRE(r.status == 0);
        const nlohmann::json j = nlohmann::json::parse(r.out);
        const double fma = j["probes"]["fma_gflops"].get<double>();
        // (--caps no-int-dot hides the extension, and with it the probe)
        REQUIRE(j["probes"].contains("int_dot_gops") == dot);
        const double int_dot = dot ? j["probes"]["int_dot_gops"].get<double>() : 0.0;
        REQUIRE(j["results"].size() >= 2);
        for (const auto& row : j["results"]) {
            CAPTURE(row.dump());
            CHECK(row["peak"] == (dot ? "int8 dot" : "f32 FMA"));
            const double gflops = row["gflops"].get<double>();
            CHECK(row["peak_pct"].get<double>() == doctest::Approx(100.0 * gflops / (dot ? int_dot : fma)));
        }
    }

    // vkllm bench: a Q8_0 model's prompt chunks (--ubatch 16: matmuls) on either path.
    const fs::path dir = fs::path(VKLLM_BINARY_DIR) / "test-tmp" / "bench-roofline";
    fs::create_directories(dir);
    const std::string model = (dir / "q8.gguf").string();
    vkllm::test::CliResult g = vkllm::test::run_vkllm(
        "gen-model -o " + model + " --dim 128 --layers 2 --heads 4 --ffn 256 --vocab 512 --type q8_0", "bench_ops");
    INFO(g.err);
    REQUIRE(g.status == 0);
    for (const bool dot : {false, true}) {
        CAPTURE(dot);
        vkllm::test::CliResult r = vkllm::test::run_vkllm(
            "bench -m " + model + " -p 32 -n 2 -r 1 --ubatch 16 --json --caps " + (dot ? "int-dot" : "no-int-dot"),
            "bench_ops");
        INFO(r.err);
        REQUIRE(r.status == 0);
        const nlohmann::json j = nlohmann::json::parse(r.out);
        const nlohmann::json& row = j["results"][0];
        CAPTURE(row.dump());
        CHECK(row["prefill_roofline"] == (dot ? "int8 dot" : "f32 FMA"));
        const double rate = dot ? j["device"]["int_dot_gop_s"].get<double>() : j["device"]["fma_gflop_s"].get<double>();
        CHECK(row["prefill_roofline_pct"].get<double>() ==
              doctest::Approx(100.0 * row["pp_tps_mean"].get<double>() * row["prefill_flops_per_token"].get<double>() /
                              (rate * 1e9)));
    }
}

TEST_CASE("bench-ops: --kernels all checks and times every linear-kernel row the device runs") {
    BenchResult r = run_bench_ops("--shapes small -r 1 --json --ops matvec,matmul --types q4_0,f16 --kernels all");
    INFO(r.err);
    REQUIRE(r.status == 0);
    const nlohmann::json j = nlohmann::json::parse(r.out);
    CHECK(j["failed"] == 0);
    std::set<std::string> seen;
    for (const auto& row : j["results"]) {
        CAPTURE(row.dump());
        CHECK(row["status"] == "ok");
        const std::string type = row["type"].get<std::string>();
        const auto open = type.find('['), close = type.find(']');
        REQUIRE(open != std::string::npos);
        seen.insert(type.substr(open + 1, close - open - 1));
    }
    // Every dense row this device can run serves Q4_0 at these shapes (the integer-dot ones where
    // the device has the extension, accelerated or not).
    const vkllm::DeviceCaps& caps = vkllm::test::context().caps();
    for (const vkllm::ops::KernelRow& row : vkllm::ops::kernel_table()) {
        if (row.problem != vkllm::ops::LinearProblem::DenseMatvec && row.problem != vkllm::ops::LinearProblem::DenseMatmul)
            continue;
        CAPTURE(row.name);
        CHECK(seen.count(std::string(row.name)) == (row.runs_on(caps) ? 1u : 0u));
    }
    CHECK(seen.size() >= 4);
    CHECK(run_bench_ops("--shapes small --kernels some").status != 0);
}
