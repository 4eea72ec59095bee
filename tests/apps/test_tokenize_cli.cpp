// End-to-end tests of `vkllm tokenize`: ids and pieces of vocab-only files as llama-tokenize prints
// them (the expected ids are llama-tokenize's), and a clear message with exit 1 for bad input.
#include "support/run_vkllm.h"
#include "model/gguf/gguf_writer.h"
#include "support/test_context.h"

#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;
using vkllm::test::run_vkllm;

namespace {

fs::path tmp_dir() {
    fs::path dir = fs::path(VKLLM_BINARY_DIR) / "test-tmp";
    fs::create_directories(dir);
    return dir;
}

}  // namespace

TEST_CASE("cli: vkllm tokenize prints ids and pieces of a vocab-only file") {
    const std::string vocab = vkllm::test::model_path("ggml-vocab-llama-bpe.gguf");
    if (vocab.empty()) return;
    auto r = run_vkllm("tokenize -m " + vocab + " -p 'Hello world' --ids", "tokenize");
    CHECK(r.status == 0);
    CHECK(r.out == "[128000, 9906, 1917]\n");
    r = run_vkllm("tokenize -m " + vocab + " -p 'Hello world' --ids --no-bos --show-count", "tokenize");
    CHECK(r.out == "[9906, 1917]\nTotal number of tokens: 2\n");
    r = run_vkllm("tokenize -m " + vocab + " -p 'Hello world'", "tokenize");
    CHECK(r.out == "128000 -> '<|begin_of_text|>'\n  9906 -> 'Hello'\n  1917 -> ' world'\n");

    // A chat prompt from a file (bytes as they are, the final newline included), with and without
    // --parse-special.
    const fs::path chat = tmp_dir() / "chat.txt";
    std::ofstream(chat, std::ios::binary) << "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>\n";
    r = run_vkllm("tokenize -m " + vocab + " -f " + chat.string() + " --ids --parse-special", "tokenize");
    CHECK(r.out == "[128000, 128006, 882, 128007, 271, 13347, 128009, 198]\n");
    r = run_vkllm("tokenize -m " + vocab + " -f " + chat.string() + " --ids --no-bos", "tokenize");
    CHECK(r.status == 0);
    CHECK(r.out.find("128006") == std::string::npos);
    CHECK(r.out.find("[27, 91, 2527, 8932, 851, 91, 29") == 0);
}

TEST_CASE("cli: vkllm tokenize refuses bad input with a clear message and exit 1") {
    const std::string vocab = vkllm::test::model_path("stories260K.gguf");
    if (vocab.empty()) return;
    const fs::path no_vocab = tmp_dir() / "no-vocab.gguf";
    {
        vkllm::GgufWriter w;
        w.set_string("general.architecture", "llama");
        w.write_file(no_vocab.string());
    }
    struct Case {
        std::string args, expect;
    };
    const std::vector<Case> cases = {
        {"tokenize -m /nonexistent/vocab.gguf -p x", "does not exist"},
        {"tokenize -m " + no_vocab.string() + " -p x", "tokenizer.ggml.model"},
        {"tokenize -m " + vocab + " -p x -f " + no_vocab.string(), "not both"},
        {"tokenize -m " + vocab, "no text"},
        {"tokenize -m " + vocab + " -f /nonexistent/text.txt", "cannot read"},
    };
    for (const Case& c : cases) {
        CAPTURE(c.args);
        auto r = run_vkllm(c.args, "tokenize_bad");
        CHECK(r.status == 1);
        CHECK(r.out.empty());
        CHECK_MESSAGE(r.err.find(c.expect) != std::string::npos, r.err);
    }
}
