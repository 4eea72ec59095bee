// End-to-end tests of the `vkllm` executable: the published story byte for byte, and a clear
// message with a non-zero exit for every kind of bad input.
#include "model/gguf/gguf_writer.h"
#include "model/testgen/random_model.h"
#include "support/run_vkllm.h"
#include "support/test_context.h"

#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

namespace fs = std::filesystem;

namespace {

using Result = vkllm::test::CliResult;
using vkllm::test::run_vkllm;

std::string read_file(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("cli: vkllm run prints the published stories260K greedy story byte for byte") {
    std::string model = vkllm::test::model_path("stories260K.gguf");
    std::string expected = vkllm::test::model_path("stories260K.greedy200.txt");
    if (model.empty() || expected.empty()) return;
    Result r = run_vkllm("run -m " + model + " -p \"\" -n 200 --temp 0 --no-pipeline-cache");
    INFO(r.err);
    CHECK(r.status == 0);
    CHECK(r.out == read_file(expected));
    CHECK(r.err.find("tokens/s") != std::string::npos);
}

TEST_CASE("cli: speculative decoding keeps the published story; bench --draft reports its figures; bad flags refused") {
    const std::string model = vkllm::test::model_path("stories260K.gguf");
    const std::string expected = vkllm::test::model_path("stories260K.greedy200.txt");
    const std::string other = vkllm::test::model_path("llama-2-tiny-random.gguf");
    if (model.empty() || expected.empty()) return;
    for (const std::string& spec : {"--draft " + model + " --draft-max 5", std::string("--lookup=2")}) {
        CAPTURE(spec);
        Result r = run_vkllm("run -m " + model + " -p \"\" -n 200 --temp 0 " + spec);
        INFO(r.err);
        CHECK(r.status == 0);
        CHECK(r.out == read_file(expected));
        CHECK(r.err.find("drafts:") != std::string::npos);
    }
    Result b = run_vkllm("bench -m " + model + " --draft " + model + " --draft-max 4 --no-probes -r 1 -p 16 -n 64 --json");
    INFO(b.err);
    REQUIRE(b.status == 0);
    const nlohmann::json s = nlohmann::json::parse(b.out)["results"][0]["speculation"];
    CHECK(s["same_text"] == true);
    CHECK(s["acceptance"].get<double>() == 1.0);  // the model drafting for itself
    CHECK(s["tokens_per_step"].get<double>() > 3.0);
    REQUIRE(s["verify"].size() == 3);  // k = 1, 2, 4
    CHECK(s["verify"][2]["drafts"] == 4);
    CHECK(s["verify"][2]["step_ms"].get<double>() > 0);
    // Refusals name the problem.
    const std::pair<std::string, std::string> bad[] = {
        {"--draft-max 4 --draft-min 5 --lookup", "--draft-min 5 is more than --draft-max 4"},
        {"--draft " + model + " --check", "--check does not take --draft or --lookup"},
        {"--draft /nonexistent.gguf", "/nonexistent.gguf"},
        {"--draft-max 40 --lookup", "--draft-max"},
    };
    for (const auto& [flags, message] : bad) {
        CAPTURE(flags);
        Result r = run_vkllm("run -m " + model + " -p hi -n 4 " + flags);
        INFO(r.err);
        CHECK(r.status != 0);
        CHECK(r.err.find(message) != std::string::npos);
    }
    if (!other.empty()) {
        Result r = run_vkllm("run -m " + model + " -p hi -n 4 --draft " + other);
        CHECK(r.status != 0);
        CHECK(r.err.find("vocabulary differs from the model's: it has 32000 tokens, the model 512") != std::string::npos);
    }
}

TEST_CASE("cli: bench-blend reports CacheBlend's figures; the recompute brings the blend closer; bad input refused") {
    const std::string model = vkllm::test::model_path("stories260K.gguf");
    if (model.empty()) return;
    const std::string text = std::string(VKLLM_SOURCE_DIR) + "/tests/fixtures/perplexity/stories.txt";
    Result r = run_vkllm("bench-blend -m " + model + " -f " + text + " --chunks 3 --chunk-tokens 40 -r 1 --json");
    INFO(r.err);
    REQUIRE(r.status == 0);
    const nlohmann::json j = nlohmann::json::parse(r.out);
    CHECK(j["ttft_full_ms"].get<double>() > 0);
    CHECK(j["ttft_blend_ms"].get<double>() > 0);
    CHECK(j["recompute_ratio"].get<double>() == doctest::Approx(18.0 / 120));  // ceil(0.15 x 40) = 6 per document
    CHECK(j["top1_agreement"].get<double>() >= 0.9);
    CHECK(j["kl_divergence"].get<double>() < j["kl_divergence_no_recompute"].get<double>());
    const std::pair<std::string, std::string> bad[] = {
        {"-f " + text + " --chunks 64 --chunk-tokens 4000", "fewer than --chunks 64 x --chunk-tokens 4000"},
        {"-f /nonexistent.txt", "/nonexistent.txt"},
        {"-f " + text + " --blend-ratio 1.5", "--blend-ratio"},
    };
    for (const auto& [flags, message] : bad) {
        CAPTURE(flags);
        Result b = run_vkllm("bench-blend -m " + model + " " + flags);
        INFO(b.err);
        CHECK(b.status != 0);
        CHECK(b.err.find(message) != std::string::npos);
    }
}

TEST_CASE("cli: vkllm run --check agrees with the host reference") {
    std::string model = vkllm::test::model_path("stories260K.gguf");
    if (model.empty()) return;
    Result r = run_vkllm("run -m " + model + " -p \"Once upon a time\" -n 8 --check --no-pipeline-cache");
    INFO(r.err);
    CHECK(r.status == 0);
    CHECK(r.err.find("check: OK") != std::string::npos);
}

TEST_CASE("cli: vkllm run --check on the integer-dot matvecs uses their threshold and says so") {
    // A quantized model: with --caps int-dot its projections quantize their input to 8 bits, which
    // the float path's 1e-4 would report as a divergence (the default on NVIDIA and other GPUs).
    fs::path dir = fs::path(VKLLM_BINARY_DIR) / "test-tmp";
    fs::create_directories(dir);
    const std::string path = (dir / "int-dot-q4_0.gguf").string();
    vkllm::ModelShape shape;
    shape.n_layers = 2;
    shape.weight_type = vkllm::TensorType::Q4_0;
    vkllm::make_random_model(shape).write_file(path);
    Result r = run_vkllm("run -m " + path + " -p \"\" -n 4 --check --caps int-dot --no-pipeline-cache");
    INFO(r.err);
    CHECK(r.status == 0);
    CHECK(r.err.find("integer-dot matvecs") != std::string::npos);
    CHECK(r.err.find("check: OK") != std::string::npos);
    Result f = run_vkllm("run -m " + path + " -p \"\" -n 4 --check --no-pipeline-cache");
    INFO(f.err);
    CHECK(f.status == 0);
    // The float path where the device does not default to int-dot (lavapipe: not accelerated).
    CHECK((f.err.find("integer-dot matvecs") != std::string::npos) == vkllm::test::context().caps().int_dot_kernels);
}

TEST_CASE("cli: --caps coopmat on a device without cooperative matrices says so and runs the other kernels") {
    const std::string model = vkllm::test::model_path("stories260K.gguf");
    if (model.empty()) return;
    Result r = run_vkllm("run -m " + model + " -p \"Once upon a time\" -n 4 --temp 0 --caps coopmat --no-pipeline-cache");
    INFO(r.err);
    CHECK(r.status == 0);
    CHECK(r.out.rfind("Once upon a time", 0) == 0);
    // The default device as the CLI sees it (no validation layer, no harness override).
    Result d = run_vkllm("devices --json");
    REQUIRE(d.status == 0);
    const nlohmann::json devices = nlohmann::json::parse(d.out);
    bool usable = false;
    for (const auto& dev : devices)
        if (dev.value("default", false)) usable = dev.at("coopmat_usable").get<bool>();
    CHECK((r.err.find("warning: --caps coopmat") != std::string::npos) == !usable);
}

TEST_CASE("cli: vkllm run --json-schema-file and --grammar shape the output; bad ones fail before loading") {
    std::string model = vkllm::test::model_path("stories260K.gguf");
    if (model.empty()) return;
    const std::filesystem::path schema = std::filesystem::path(VKLLM_BINARY_DIR) / "cli_schema.json";
    {
        std::ofstream f(schema);
        f << R"({"type":"object","properties":{"who":{"type":"string","maxLength":10},)"
             R"("n":{"type":"integer","minimum":1,"maximum":9}},"required":["who","n"],"additionalProperties":false})";
    }
    Result r = run_vkllm("run -m " + model + " -p \"Once upon a time\" -n 80 --temp 0.9 --seed 3 --no-echo --json-schema-file " +
                         schema.string() + " --no-pipeline-cache");
    INFO(r.err);
    CHECK(r.status == 0);
    const auto j = nlohmann::json::parse(r.out);
    CHECK(j.at("who").is_string());
    CHECK(j.at("n").get<int>() >= 1);
    CHECK(j.at("n").get<int>() <= 9);
    CHECK(j.size() == 2);
    r = run_vkllm("run -m " + model + " -p \"The cat\" -n 10 --temp 0 --no-echo --grammar 'root ::= \" is \" (\"big\" | \"small\")' --no-pipeline-cache");
    CHECK(r.status == 0);
    CHECK((r.out == " is big" || r.out == " is small"));
    // Refused before any loading, naming the option and the problem.
    r = run_vkllm("run -m " + model + " --json-schema '{\"type\":\"object\",\"not\":{}}'");
    CHECK(r.status == 1);
    CHECK(r.err.find("--json-schema: json schema: keyword 'not' is not supported") != std::string::npos);
    CHECK(r.err.find("uploading") == std::string::npos);
    r = run_vkllm("run -m " + model + " --grammar 'root ::= [a-'");
    CHECK(r.status == 1);
    CHECK(r.err.find("line 1, column") != std::string::npos);
}

TEST_CASE("cli: vkllm devices lists the device, as a table and as JSON") {
    Result t = run_vkllm("devices");
    CHECK(t.status == 0);
    CHECK(t.out.find("maxStorageBufferRange") != std::string::npos);
    Result j = run_vkllm("devices --json");
    CHECK(j.status == 0);
    CHECK(j.out.find("\"max_storage_buffer_range\"") != std::string::npos);
}

TEST_CASE("cli: vkllm devices -m shows how a model's layers would be split; its flags are checked") {
    const std::string model = vkllm::test::model_path("stories260K.gguf");
    if (model.empty()) return;
    Result r = run_vkllm("devices -m " + model + " --ctx 256");
    CHECK(r.status == 0);
    CHECK(r.out.find("5 layers over 1 device(s), split by device-local memory") != std::string::npos);
    CHECK(r.out.find("| 0-4 | embedding, output head |") != std::string::npos);
    r = run_vkllm("devices -m " + model + " --json --parallel 2 --kv-type q8_0 --ctx 128");
    CHECK(r.status == 0);
    CHECK(r.out.find("\"n_ctx\": 128") != std::string::npos);
    struct Bad {
        std::string args, says;
    };
    for (const Bad& b : {Bad{"devices --ctx 64", "--ctx is for a split plan: give -m MODEL"},
                         Bad{"devices --split layer:1,1", "--split is for a split plan"},
                         Bad{"devices -m " + model + " --split layer:1,1", "2 ratios for 1 devices"},
                         Bad{"devices -m " + model + " --split rows", "expected layer or layer:R0,R1"},
                         Bad{"devices -m " + model + " --split layer:1,x", "'x' is not a non-negative ratio"},
                         Bad{"devices -m " + model + " --devices 0,0", "named twice"},
                         Bad{"devices -m " + model + " --devices 7", "7"},
                         Bad{"devices -m /nonexistent.gguf", "/nonexistent.gguf"}}) {
        CAPTURE(b.args);
        r = run_vkllm(b.args);
        CHECK(r.status != 0);
        CHECK(r.err.find(b.says) != std::string::npos);
    }
    // Two devices at once where Mesa 25's lavapipe is unpacked beside the system's
    // (scripts/mesa25.sh install): the layers in the ratios asked, the embedding on the first part.
    const fs::path mesa25 = fs::path(VKLLM_SOURCE_DIR) / ".cache" / "mesa25";
    if (!fs::exists(mesa25 / "lvp_icd.json") || !fs::exists("/usr/share/vulkan/icd.d/lvp_icd.x86_64.json")) return;
    const std::string env = "VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json:" + (mesa25 / "lvp_icd.json").string() +
                            " LD_LIBRARY_PATH=" + (mesa25 / "lib").string();
    r = run_vkllm("devices -m " + model + " --split layer:3,2 --ctx 256", "split2", "/dev/null", env);
    CHECK(r.status == 0);
    CHECK(r.out.find("5 layers over 2 device(s), split by --split ratios (3,2)") != std::string::npos);
    CHECK(r.out.find("| 0-2 | embedding |") != std::string::npos);
    CHECK(r.out.find("| 3-4 | output head |") != std::string::npos);
    // Running it: the same greedy text as on one device; --check passes layer by layer over both.
    const std::string gen = "run -m " + model + " -p \"Once upon a time\" -n 48 --temp 0 --ctx 256 --no-echo";
    const Result one = run_vkllm(gen + " --device 0", "split_one", "/dev/null", env);
    const Result two = run_vkllm(gen + " --devices 0,1 --split layer:3,2", "split_two", "/dev/null", env);
    INFO(two.err);
    REQUIRE(one.status == 0);
    REQUIRE(two.status == 0);
    CHECK(!one.out.empty());
    CHECK(two.out == one.out);
    CHECK(two.err.find("vkllm: layers 0-2 on ") != std::string::npos);
    CHECK(two.err.find("vkllm: layers 3-4 on ") != std::string::npos);
    r = run_vkllm("run -m " + model + " -p \"Once upon a time\" -n 6 --check --ctx 256 --devices 1,0 --split layer:1,4",
                  "split_check", "/dev/null", env);
    INFO(r.err);
    CHECK(r.status == 0);
    CHECK(r.err.find("check: OK") != std::string::npos);
    // What a split is for: a model that one device (here made 1.5 MB small) cannot hold runs over two,
    // and one that two cannot hold is refused naming every part's sizes.
    const std::string small = "run -m " + model + " -p \"Once upon a time\" -n 48 --temp 0 --ctx 256 --no-echo";
    r = run_vkllm(small + " --device 0 --caps device-memory=1500k", "split_small_one", "/dev/null", env);
    CHECK(r.status != 0);
    CHECK(r.err.find("--ctx 256 needs") != std::string::npos);
    r = run_vkllm(small + " --devices 0,1 --caps device-memory=1500k", "split_small_two", "/dev/null", env);
    INFO(r.err);
    CHECK(r.status == 0);
    CHECK(r.out == one.out);
    r = run_vkllm(small + " --devices 0,1 --caps device-memory=700k", "split_too_small", "/dev/null", env);
    CHECK(r.status != 0);
    CHECK(r.err.find("the model does not fit this split of its 5 layers:") != std::string::npos);
    CHECK(r.err.find("layers 3-4: model does not fit on the device: weights 0.5 MiB") != std::string::npos);
    // A ratio of 0 leaves a device out, and says so.
    r = run_vkllm("run -m " + model + " -p hi -n 2 --ctx 256 --devices 0,1 --split layer:1,0", "split_zero", "/dev/null", env);
    CHECK(r.status == 0);
    CHECK(r.err.find("1 of the 2 devices got no layer (--split layer:1,0)") != std::string::npos);
    for (const Bad& b : {Bad{"run -m " + model + " -p hi -n 2 --devices 0,0", "device 0 ("},
                         Bad{"run -m " + model + " -p hi -n 2 --device 0 --devices 0,1", "--device picks one device"},
                         Bad{"run -m " + model + " -p hi -n 2 --devices 0,1 --split layer:1", "--split gives 1 ratios for 2 devices"},
                         Bad{"run -m " + model + " -p hi -n 2 --devices 0,", "an empty entry"}}) {
        CAPTURE(b.args);
        r = run_vkllm(b.args, "split_bad", "/dev/null", env);
        CHECK(r.status != 0);
        CHECK(r.err.find(b.says) != std::string::npos);
    }
}

TEST_CASE("cli: a missing or too old Vulkan loader is a clear error where a device is needed; other commands run") {
    // The loader is dlopen()ed at run time (volk), so LD_LIBRARY_PATH can put a broken one first:
    // text files named like the loader (libvulkan.so is volk's second try) make dlopen() fail.
    fs::path dir = fs::path(VKLLM_BINARY_DIR) / "test-tmp" / "broken-loader";
    fs::create_directories(dir);
    for (const char* name : {"libvulkan.so.1", "libvulkan.so"})
        std::ofstream(dir / name) << "not a shared library\n";
    const std::string env = "LD_LIBRARY_PATH=" + dir.string();
    std::vector<std::string> need_device = {"devices", "devices --json"};
    std::string model = vkllm::test::model_path("stories260K.gguf");
    if (!model.empty()) need_device.push_back("run -m " + model + " -p hi -n 4");
    for (const std::string& args : need_device) {
        CAPTURE(args);
        Result r = run_vkllm(args, "no_loader", "/dev/null", env);
        INFO(r.err);
        CHECK(r.status == 1);  // an error exit, not a signal or a failure to start
        CHECK(r.err.find("the Vulkan loader (libvulkan.so.1) could not be loaded") != std::string::npos);
        CHECK(r.err.find("libvulkan1") != std::string::npos);
        CHECK(r.out.empty());
    }
    // A loader that loads but is too old is named with both versions.
    {
        Result r = run_vkllm("devices", "old_loader", "/dev/null", "LD_LIBRARY_PATH=" VKLLM_FAKE_LOADER_DIR);
        INFO(r.err);
        CHECK(r.status == 1);
        CHECK(r.err.find("the Vulkan loader (libvulkan.so.1) supports Vulkan 1.0.0; vkllm needs 1.1.0 or newer") !=
              std::string::npos);
    }
    // Nothing links libvulkan: a command without a device runs as usual.
    if (!model.empty()) {
        Result r = run_vkllm("tokenize -m " + model + " -p hi --ids", "no_loader", "/dev/null", env);
        INFO(r.err);
        CHECK(r.status == 0);
        CHECK(r.out.find('[') != std::string::npos);
    }
}

TEST_CASE("cli: bad input gets a clear message and a non-zero exit, never a crash") {
    std::string model = vkllm::test::model_path("stories260K.gguf");
    if (model.empty()) return;
    fs::path dir = fs::path(VKLLM_BINARY_DIR) / "test-tmp";
    fs::create_directories(dir);
    std::ofstream(dir / "garbage.gguf") << "this is not a gguf file at all, just some text";
    std::ofstream(dir / "empty.gguf").flush();
    {
        const std::string whole = read_file(model);
        std::ofstream(dir / "truncated.gguf", std::ios::binary) << whole.substr(0, whole.size() / 2);
    }
    struct Case {
        std::string args, expect;
    };
    std::vector<Case> cases = {
        {"run -m /nonexistent/model.gguf", "does not exist"},
        {"run -m " + dir.string(), "is a directory"},
        {"run -m " + (dir / "garbage.gguf").string(), "garbage.gguf"},
        {"run -m " + model + " -n -5", "-n"},
        {"run -m " + model + " -n abc", "-n"},
        {"run -m " + model + " --ctx 0", "--ctx"},
        {"run -m " + model + " --temp -1", "--temp"},
        {"run -m " + model + " --top-p 2", "--top-p"},
        {"run -m " + model + " --device 99", "device index 99 does not exist"},
        {"run -m " + model + " --device no-such-gpu", "no device name contains"},
        {"run -m " + model + " --caps warp-speed", "unknown entry 'warp-speed'"},
        {"run -m " + model + " --no-such-flag", "no-such-flag"},
        {"run -m " + model + " --ctx 16 -p \"" + std::string(200, 'a') + "\"", "context"},
        {"run -m " + model + " --ctx 64 -n 100", "exceeds the context"},
        {"run -m " + model + " --ctx 100000000", "--ctx"},
        {"frobnicate", "frobnicate"},
        // zero, negative and non-numeric values
        {"run -m " + model + " --ctx -3", "--ctx: must be > 0, got -3"},
        {"run -m " + model + " --ctx abc", "--ctx: 'abc' is not a number"},
        {"run -m " + model + " --ubatch 0", "--ubatch"},
        {"run -m " + model + " --temp nan", "--temp: 'nan' is not a number"},
        {"run -m " + model + " --top-k -1", "--top-k: must be >= 0"},
        {"run -m " + model + " --seed -2", "--seed: must be >= 0, got -2"},
        {"run -m " + model + " --repeat-penalty 0", "--repeat-penalty: must be > 0"},
        {"run -m " + model + " --caps max-alloc=abc", "is not a number"},
        {"run -m " + model + " --caps device-memory=0", "must be > 0"},
        // files that are not whole GGUF models
        {"run -m " + (dir / "empty.gguf").string(), "truncated"},
        {"run -m " + (dir / "truncated.gguf").string(), "past end of file"},
        // device memory: the model, then the requested context, does not fit (refused before
        // allocating anything)
        {"run -m " + model + " --caps device-memory=1m", "model does not fit on the device"},
        {"run -m " + model + " --caps device-memory=64m --ctx 200000", "of KV cache"},
    };
    for (const Case& c : cases) {
        CAPTURE(c.args);
        Result r = run_vkllm(c.args);
        INFO(r.err);
        CHECK(r.status != 0);
        CHECK(r.status < 128);  // an error exit, not a signal
        CHECK(r.err.find(c.expect) != std::string::npos);
        CHECK(r.out.empty());   // no partial output
    }
}

TEST_CASE("cli: an allocation failing in the middle of loading is reported as an error, exit 1") {
    std::string model = vkllm::test::model_path("stories260K.gguf");
    if (model.empty()) return;
    // Every buffer of more than 64 KiB is refused by the allocator while the weights upload and the
    // pipelines compile on another thread: the library must unwind (no abort, no leak under ASan).
    Result r = run_vkllm("run -m " + model + " -p hello -n 4 --caps max-alloc=64k --no-pipeline-cache");
    INFO(r.err);
    CHECK(r.status == 1);
    CHECK(r.err.find("vkllm: error: buffer '") != std::string::npos);
    CHECK(r.err.find("per allocation") != std::string::npos);
    CHECK(r.out.empty());
}

TEST_CASE("cli: a model with NaN weights is reported as non-finite logits, not decoded as garbage") {
    fs::path dir = fs::path(VKLLM_BINARY_DIR) / "test-tmp";
    fs::create_directories(dir);
    const std::string path = (dir / "nan-weights.gguf").string();
    vkllm::ModelShape shape;
    shape.n_layers = 1;
    vkllm::GgufWriter w = vkllm::make_random_model(shape);
    w.remove_tensor("blk.0.ffn_down.weight");
    w.add_tensor("blk.0.ffn_down.weight", vkllm::TensorType::F32, {shape.ffn_dim, shape.dim}, [](std::span<uint8_t> dst) {
        const float nan = std::nanf("");
        for (size_t i = 0; i + 4 <= dst.size(); i += 4) std::memcpy(dst.data() + i, &nan, 4);
    });
    w.write_file(path);
    for (const char* sampling : {"--temp 0", "--temp 0.8 --seed 3", "--temp 0 --repeat-penalty 1.1", "--check"}) {
        CAPTURE(sampling);
        Result r = run_vkllm("run -m " + path + " -p \"\" -n 8 --no-pipeline-cache " + std::string(sampling));
        INFO(r.err);
        CHECK(r.status == 1);
        CHECK(r.err.find("non-finite") != std::string::npos);
        CHECK(r.out.empty());
    }
}

// --- vkllm perplexity -------------------------------------------------------------------------------

namespace {

// tests/fixtures/perplexity, beside this source file (CMake compiles it by its absolute path).
fs::path ppl_fixture(const std::string& name) {
    return vkllm::test::fixtures_dir() / "perplexity" / name;
}

// The number after `key` in `text`, or NaN.
double number_after(const std::string& text, const std::string& key) {
    size_t at = text.find(key);
    return at == std::string::npos ? std::nan("") : std::strtod(text.c_str() + at + key.size(), nullptr);
}

}  // namespace

TEST_CASE("cli: vkllm perplexity on stories260K matches llama-perplexity within 0.5%") {
    std::string model = vkllm::test::model_path("stories260K.gguf");
    if (model.empty()) return;
    const std::string text = ppl_fixture("stories.txt").string();
    // llama-perplexity -c 128 --chunks 2 -b 128: "Final estimate: PPL = 4.2989 +/- 0.74019"
    // (tests/fixtures/perplexity/README.md). --validate: any validation error is printed to stderr.
    Result r = run_vkllm("perplexity -m " + model + " -f " + text + " -c 128 --chunks 2 --validate --no-pipeline-cache",
                         "perplexity");
    INFO(r.err);
    CHECK(r.status == 0);
    CHECK(r.err.find("[validation error]") == std::string::npos);
    CHECK(r.err.find("[1/2] PPL") != std::string::npos);
    CHECK(r.err.find("[2/2] PPL") != std::string::npos);
    CHECK(r.out.rfind("Final estimate: PPL = ", 0) == 0);
    const double ppl = number_after(r.out, "PPL = "), unc = number_after(r.out, "+/- ");
    CHECK(std::abs(ppl / 4.2989 - 1) < 0.005);
    CHECK(std::abs(unc / 0.74019 - 1) < 0.005);
}

TEST_CASE("cli: vkllm perplexity --kl-divergence-base, then --kl-divergence") {
    std::string model = vkllm::test::model_path("stories260K.gguf");
    if (model.empty()) return;
    const std::string text = ppl_fixture("stories.txt").string();
    const fs::path base = fs::path(VKLLM_BINARY_DIR) / "test-tmp" / "cli_base.kld";
    fs::remove(base);
    Result w = run_vkllm("perplexity -m " + model + " -f " + text + " -c 64 --chunks 3 --kl-divergence-base " +
                         base.string(), "kl_base");
    INFO(w.err);
    CHECK(w.status == 0);
    CHECK(fs::exists(base));
    CHECK(w.err.find("saved the log-probabilities of 93 positions") != std::string::npos);
    // The same model against its own base (the text is optional; given, it must match).
    for (const std::string& extra : {std::string(), " -f " + text}) {
        Result k = run_vkllm("perplexity -m " + model + " --kl-divergence --kl-divergence-base " + base.string() + extra,
                             "kl");
        INFO(k.err);
        CHECK(k.status == 0);
        CHECK(k.out.find("Same top p: 100.000") != std::string::npos);
        CHECK(std::abs(number_after(k.out, "Mean    KLD:")) < 1e-4);
        CHECK(std::abs(number_after(k.out, "Mean PPL(Q)                   :") / number_after(w.out, "PPL = ") - 1) < 1e-4);
    }
    // A base written by llama.cpp's llama-perplexity is read too (same layout).
    Result l = run_vkllm("perplexity -m " + model + " --kl-divergence --kl-divergence-base " +
                         ppl_fixture("stories260K_c128_llamacpp.kld").string(), "kl_llamacpp");
    INFO(l.err);
    CHECK(l.status == 0);
    CHECK(l.out.find("Same top p: 100.000") != std::string::npos);
    CHECK(std::abs(number_after(l.out, "Mean PPL(base)                :") / 4.298940 - 1) < 0.005);
}

TEST_CASE("cli: vkllm perplexity refuses bad input with a clear message") {
    std::string model = vkllm::test::model_path("stories260K.gguf");
    if (model.empty()) return;
    fs::path dir = fs::path(VKLLM_BINARY_DIR) / "test-tmp";
    fs::create_directories(dir);
    std::ofstream(dir / "ppl_empty.txt").flush();
    std::ofstream(dir / "ppl_short.txt") << "Once upon a time, there was a cat.\n";
    std::ofstream(dir / "ppl_other.txt") << std::string(4000, 'x');
    const std::string text = ppl_fixture("stories.txt").string();
    const std::string base = ppl_fixture("stories260K_c128_llamacpp.kld").string();
    const std::string other_vocab = (dir / "ppl_vocab1024.gguf").string();
    vkllm::ModelShape shape;
    shape.n_vocab = 1024;
    vkllm::write_random_model(other_vocab, shape);
    const std::string ppl = "perplexity -m " + model + " ";
    struct Case {
        std::string args, expect;
    };
    const std::vector<Case> cases = {
        {ppl, "-f TEXT is required"},
        {ppl + "-f /nonexistent/text.txt", "text file '/nonexistent/text.txt' does not exist"},
        {ppl + "-f " + (dir / "ppl_empty.txt").string(), "is empty"},
        {ppl + "-f " + (dir / "ppl_short.txt").string() + " -c 64", "tokenizes to only"},
        {ppl + "-f " + text + " -c 8192", "needs at least 2 x 8192 = 16384 tokens"},
        {ppl + "-f " + text + " -c 0", "--ctx: must be > 0"},
        {ppl + "-f " + text + " -c 2", "at least 4"},
        {ppl + "-f " + text + " --chunks 0", "--chunks: must be > 0"},
        {ppl + "-f " + text + " --chunks abc", "--chunks: 'abc' is not a number"},
        {ppl + "-f " + text + " --ubatch 0", "--ubatch"},
        {ppl + "-f " + text + " -c 128 --ubatch 128 --caps max-storage-range=128k", "at most --ubatch 64"},
        {ppl + "-f " + text + " --kl-divergence-base /nonexistent/dir/base.kld", "cannot write"},
        {ppl + "--kl-divergence", "--kl-divergence needs --kl-divergence-base"},
        {ppl + "--kl-divergence --kl-divergence-base /nonexistent/base.kld", "does not exist"},
        {ppl + "--kl-divergence --kl-divergence-base " + text, "does not start with \"_logits_\""},
        {ppl + "--kl-divergence --kl-divergence-base " + base + " -c 256", "-c 256 does not match the context"},
        {ppl + "--kl-divergence --kl-divergence-base " + base + " -f " + (dir / "ppl_other.txt").string(),
         "is not the text the KL-divergence base"},
        {"perplexity -m " + other_vocab + " --kl-divergence --kl-divergence-base " + base,
         "vocab of 512 tokens, but " + other_vocab + " has 1024"},
    };
    for (const Case& c : cases) {
        CAPTURE(c.args);
        Result r = run_vkllm(c.args, "ppl_error");
        INFO(r.err);
        CHECK(r.status != 0);
        CHECK(r.status < 128);
        CHECK(r.err.find(c.expect) != std::string::npos);
        CHECK(r.out.empty());
    }
}

TEST_CASE("cli: vkllm perplexity of a model with NaN weights is an error, not NaN") {
    fs::path dir = fs::path(VKLLM_BINARY_DIR) / "test-tmp";
    fs::create_directories(dir);
    const std::string path = (dir / "ppl-nan-weights.gguf").string();
    vkllm::ModelShape shape;
    shape.n_layers = 1;
    vkllm::GgufWriter w = vkllm::make_random_model(shape);
    w.remove_tensor("output_norm.weight");
    w.add_tensor("output_norm.weight", vkllm::TensorType::F32, {shape.dim}, [](std::span<uint8_t> dst) {
        const float nan = std::nanf("");
        for (size_t i = 0; i + 4 <= dst.size(); i += 4) std::memcpy(dst.data() + i, &nan, 4);
    });
    w.write_file(path);
    Result r = run_vkllm("perplexity -m " + path + " -f " + ppl_fixture("stories.txt").string() + " -c 32 --chunks 2",
                         "ppl_nan");
    INFO(r.err);
    CHECK(r.status == 1);
    CHECK(r.err.find("non-finite logits in chunk 1") != std::string::npos);
    CHECK(r.out.empty());
}
