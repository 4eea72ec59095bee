// libFuzzer target: arbitrary bytes as a GGUF file.
//
// Whatever the reader accepts must also survive every layer that trusts it: the metadata getters,
// tensor data views and dequantization, the LLaMA hyperparameter checks, the tokenizer and an
// encode/decode. The only exceptions allowed out are the documented ones -- GgufError (and its
// LlamaConfigError) for a bad file, std::out_of_range for a token id outside the vocab -- so any
// other exception escapes to libFuzzer and is reported as a crash, like a sanitizer finding.
#include "model/gguf.h"
#include "model/llama_config.h"
#include "model/tokenizer.h"
#include "runtime/tensor_types.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

using namespace vkllm;

namespace {

// A broken invariant: abort so that libFuzzer saves the input.
void require(bool ok, const char* what) {
    if (!ok) {
        std::fprintf(stderr, "fuzz_gguf: invariant broken: %s\n", what);
        std::abort();
    }
}

void exercise_metadata(const GgufFile& f) {
    for (const GgufKeyValue& kv : f.metadata()) {
        const GgufValue& v = kv.value;
        (void)v.describe_type();
        (void)v.as_u64();
        (void)v.as_i64();
        (void)v.as_f64();
        (void)v.as_bool();
        (void)v.as_string();
        (void)quote_name(kv.key);
        require(f.find(kv.key) == &v, "find() returns the entry of its own key");
        if (v.type != GgufType::ARRAY) continue;
        require(f.get_array_size(kv.key) == v.array_size, "array size");
        // The typed getters throw GgufError on a type mismatch; on a match they must stay in bounds.
        try {
            require(f.get_f32_array(kv.key).size() == v.array_size, "f32 array size");
        } catch (const GgufError&) {
        }
        try {
            require(f.get_i32_array(kv.key).size() == v.array_size, "i32 array size");
        } catch (const GgufError&) {
        }
        try {
            require(f.get_string_array(kv.key).size() == v.array_size, "string array size");
        } catch (const GgufError&) {
        }
    }
}

void exercise_tensors(const GgufFile& f) {
    std::vector<float> row;
    for (const GgufTensorInfo& t : f.tensors()) {
        require(f.find_tensor(t.name) == &t, "find_tensor() returns the tensor of its own name");
        auto data = f.tensor_data(t);
        require(data.size() == t.n_bytes, "tensor data size");
        require(t.n_bytes == uint64_t(t.n_elements / type_traits(t.type).block_elems * type_traits(t.type).block_bytes),
                "tensor byte size");
        (void)t.shape_string();
        // Dequantize the start of the first row: row lengths are whole blocks, and 4096 is too.
        const size_t n = size_t(std::min<uint64_t>(t.ne[0], 4096));
        row.resize(n);
        require(row_bytes(t.type, n) <= data.size(), "first row inside the tensor");
        dequantize_row(t.type, data.data(), row.data(), n);
    }
}

void exercise_tokenizer(const Tokenizer& tok, const uint8_t* data, size_t size) {
    // The file's own bytes make an arbitrary, hostile text for its own vocab.
    const std::string text = std::string("Hello world \xe2\x96\x81 <s> \xff\xfe ") +
                             std::string(reinterpret_cast<const char*>(data), std::min<size_t>(size, 256));
    std::vector<int32_t> ids = tok.encode(text, true);
    for (int32_t id : ids) require(id >= 0 && size_t(id) < tok.n_vocab(), "encode yields ids inside the vocab");
    (void)tok.decode(ids);
    for (int32_t bad : {-1, int32_t(tok.n_vocab())}) {
        bool thrown = false;
        try {
            (void)tok.decode_piece(bad, -1);
        } catch (const std::out_of_range&) {
            thrown = true;
        }
        require(thrown, "decode_piece of an id outside the vocab throws std::out_of_range");
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::optional<GgufFile> file;
    try {
        file.emplace(GgufFile::from_memory(std::vector<uint8_t>(data, data + size), "fuzz.gguf"));
    } catch (const GgufError&) {
        return 0;
    }
    exercise_metadata(*file);
    exercise_tensors(*file);
    try {
        LlamaConfig cfg = LlamaConfig::from_gguf(*file);
        require(cfg.dim % cfg.n_heads == 0 && cfg.n_heads % cfg.n_kv_heads == 0, "validated head counts");
    } catch (const LlamaConfigError&) {
    }
    std::unique_ptr<Tokenizer> tok;
    try {
        tok = make_tokenizer(*file);
    } catch (const GgufError&) {
        return 0;
    }
    exercise_tokenizer(*tok, data, size);
    return 0;
}
