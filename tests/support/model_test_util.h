// Helpers shared by the model-layer tests: skipping cleanly when a shared test model is absent
// (test::model_path), a scratch directory, opening and writing models, and exception-message assertions.
#pragma once

#include "model/arch/model_config.h"
#include "model/gguf/gguf.h"
#include "model/testgen/random_model.h"
#include "support/test_context.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace vkllm::test {

inline std::string read_text_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A per-process scratch directory under the build tree.
inline std::filesystem::path scratch_dir() {
    std::filesystem::path p = ::vkllm::test::binary_dir() / "test_model_scratch";
    std::filesystem::create_directories(p);
    return p;
}

// A model file and its validated hyperparameters.
struct LoadedModel {
    GgufFile file;
    ModelConfig cfg;
};

inline LoadedModel open_model(const std::string& path) {
    GgufFile f = GgufFile::open(path);
    ModelConfig c = ModelConfig::from_gguf(f);
    return {std::move(f), c};
}

// The rows of the architecture table that are dense causal decoders: an LM head, no mixture of experts,
// no latent attention, no encoder (main rows; the variants differ in their tensors). The cases that go
// over every decoder architecture's layers take these; the others have cases of their own.
inline std::vector<const ArchDesc*> dense_decoder_archs() {
    std::vector<const ArchDesc*> out;
    for (const ArchDesc& a : all_archs())
        if (a.variant.empty() && a.stack.lm_head && a.stack.causal && a.stack.encoder_arch.empty() && !a.moe() &&
            !a.attn.mla)
            out.push_back(&a);
    return out;
}

// Writes a random-weight model of `shape` under the build tree and returns its path.
inline std::string write_model(const std::string& name, const ModelShape& shape) {
    std::filesystem::path dir = ::vkllm::test::binary_dir() / "test-tmp" / "models";
    std::filesystem::create_directories(dir);
    std::filesystem::path p = dir / (name + ".gguf");
    write_random_model(p.string(), shape);
    return p.string();
}

}  // namespace vkllm::test

// Declares `var` as the path of a shared test model, or skips the rest of the test case
// (test::model_path says which file was missing).
#define VKLLM_REQUIRE_MODEL(var, name)                      \
    const std::string var = ::vkllm::test::model_path(name); \
    if (var.empty()) return;

// Asserts that `expr` throws an exception of type `type` whose message contains `substr`.
#define VKLLM_CHECK_THROWS_WITH_SUBSTR(expr, type, substr)                                              \
    do {                                                                                              \
        bool vkllm_thrown_ = false;                                                                   \
        try {                                                                                         \
            (void)(expr);                                                                             \
        } catch (const type& vkllm_e_) {                                                              \
            vkllm_thrown_ = true;                                                                     \
            const std::string vkllm_msg_ = vkllm_e_.what();                                           \
            INFO("message: " << vkllm_msg_);                                                          \
            CHECK_MESSAGE(vkllm_msg_.find(substr) != std::string::npos, "expected substring: " << (substr)); \
        }                                                                                             \
        CHECK_MESSAGE(vkllm_thrown_, "expected " #type " from " #expr);                               \
    } while (0)
