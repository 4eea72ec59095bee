// End-to-end tests of the `vkllm` executable: the published story byte for byte, and a clear
// message with a non-zero exit for every kind of bad input.
#include "model/gguf_writer.h"
#include "apps/run_vkllm.h"
#include "support/test_context.h"

#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

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

TEST_CASE("cli: vkllm run --check agrees with the host reference") {
    std::string model = vkllm::test::model_path("stories260K.gguf");
    if (model.empty()) return;
    Result r = run_vkllm("run -m " + model + " -p \"Once upon a time\" -n 8 --check --no-pipeline-cache");
    INFO(r.err);
    CHECK(r.status == 0);
    CHECK(r.err.find("check: OK") != std::string::npos);
}

TEST_CASE("cli: vkllm devices lists the device, as a table and as JSON") {
    Result t = run_vkllm("devices");
    CHECK(t.status == 0);
    CHECK(t.out.find("maxStorageBufferRange") != std::string::npos);
    Result j = run_vkllm("devices --json");
    CHECK(j.status == 0);
    CHECK(j.out.find("\"max_storage_buffer_range\"") != std::string::npos);
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
    vkllm::LlamaShape shape;
    shape.n_layers = 1;
    vkllm::GgufWriter w = vkllm::make_random_llama(shape);
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
