// libFuzzer target: arbitrary bytes as a GGUF file.
//
// Whatever the reader accepts must also survive every layer that trusts it: the metadata getters,
// tensor data views and dequantization, the LLaMA hyperparameter checks, the tokenizer and an
// encode/decode. The only exceptions allowed out are the documented ones -- GgufError (and its
// ModelConfigError) for a bad file, std::out_of_range for a token id outside the vocab -- so any
// other exception escapes to libFuzzer and is reported as a crash, like a sanitizer finding.
//
// Inputs that start with "GGUF" are parsed as they are. Any other input is a list of edits to a
// valid random model (keys set to hostile values and types, keys and tensors removed or reshaped,
// vocab entries rewritten), written with the project's writer: structurally valid files with
// hostile contents reach the config checks and the tokenizer far more often than flipped bytes.
#include "model/gguf/gguf.h"
#include "model/gguf/gguf_writer.h"
#include "model/testgen/random_model.h"
#include "model/testgen/random_vocab.h"
#include "model/arch/model_config.h"
#include "model/tokenizer/tokenizer.h"
#include "runtime/quant/tensor_types.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
        } catch (const GgufError&) {}
        try {
            require(f.get_i32_array(kv.key).size() == v.array_size, "i32 array size");
        } catch (const GgufError&) {}
        try {
            require(f.get_string_array(kv.key).size() == v.array_size, "string array size");
        } catch (const GgufError&) {}
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

// Consumes the input front to back; reads past the end give zeros.
class Input {
public:
    Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
    bool empty() const { return pos_ >= size_; }
    template <class T>
    T take() {
        T v{};
        const size_t n = std::min(sizeof(T), size_ - std::min(pos_, size_));
        if (n) std::memcpy(&v, data_ + pos_, n);
        pos_ += sizeof(T);
        return v;
    }
    std::string bytes(size_t n) {
        const size_t avail = size_ - std::min(pos_, size_), k = std::min(n, avail);
        std::string out(reinterpret_cast<const char*>(data_) + std::min(pos_, size_), k);
        pos_ += n;
        return out;
    }

private:
    const uint8_t* data_;
    size_t size_;
    size_t pos_ = 0;
};

constexpr const char* kKeys[] = {"general.architecture",
                                 "general.alignment",
                                 "llama.context_length",
                                 "llama.embedding_length",
                                 "llama.block_count",
                                 "llama.feed_forward_length",
                                 "llama.rope.dimension_count",
                                 "llama.attention.head_count",
                                 "llama.attention.head_count_kv",
                                 "llama.attention.layer_norm_rms_epsilon",
                                 "llama.rope.freq_base",
                                 "llama.vocab_size",
                                 "llama.attention.key_length",
                                 "llama.attention.value_length",
                                 "tokenizer.ggml.model",
                                 "tokenizer.ggml.tokens",
                                 "tokenizer.ggml.scores",
                                 "tokenizer.ggml.token_type",
                                 "tokenizer.ggml.bos_token_id",
                                 "tokenizer.ggml.eos_token_id",
                                 "tokenizer.ggml.unknown_token_id",
                                 "tokenizer.ggml.add_bos_token"};

// A valid random model with the edits the input describes, written to bytes (empty when the
// writer refuses an edit that no file could hold).
std::vector<uint8_t> edited_model(Input& in) {
    ModelShape s;
    s.dim = 32;
    s.n_layers = 1 + in.take<uint8_t>() % 2;
    s.n_heads = 4;
    s.n_kv_heads = 2;
    s.ffn_dim = 64;
    s.n_vocab = 262;
    s.n_ctx = 64;
    s.weight_type =
        std::array{TensorType::F32, TensorType::F16, TensorType::Q8_0, TensorType::Q4_0}[in.take<uint8_t>() % 4];
    GgufWriter w = make_random_model(s);
    RandomVocab v = make_random_vocab(s.n_vocab);
    bool vocab_edited = false;
    for (int op = 0; op < 16 && !in.empty(); ++op) {
        const uint8_t code = in.take<uint8_t>();
        const std::string key = kKeys[in.take<uint8_t>() % std::size(kKeys)];
        switch (code % 10) {
            case 0: w.set_u32(key, in.take<uint32_t>()); break;
            case 1: w.set_i32(key, in.take<int32_t>()); break;
            case 2: w.set_f32(key, in.take<float>()); break;
            case 3: w.set_string(key, in.bytes(in.take<uint8_t>() % 16)); break;
            case 4: w.remove(key); break;
            case 5: {  // one vocab entry: text, type and score
                if (v.tokens.empty() || v.scores.size() < v.tokens.size() || v.types.size() < v.tokens.size()) break;
                const size_t i = in.take<uint16_t>() % v.tokens.size();
                v.tokens[i] = in.bytes(in.take<uint8_t>() % 12);
                v.types[i] = int32_t(in.take<int8_t>());
                v.scores[i] = in.take<float>();
                vocab_edited = true;
                break;
            }
            case 6: {  // vocab arrays of different lengths
                const size_t n = in.take<uint16_t>() % 300;
                v.tokens.resize(n, "x");
                v.scores.resize(n + in.take<uint8_t>() % 2, 0.0f);
                v.types.resize(n + in.take<uint8_t>() % 2, 1);
                vocab_edited = true;
                break;
            }
            case 7: {
                if (w.tensors().empty()) break;
                w.remove_tensor(w.tensors()[in.take<uint8_t>() % w.tensors().size()].name);
                break;
            }
            case 8: {  // a tensor of another type and shape, under an existing or a stray name
                std::string name = w.tensors().empty() || in.take<uint8_t>() % 4 == 0
                                       ? "blk." + std::to_string(in.take<uint8_t>() % 4) + ".attn_norm.weight"
                                       : w.tensors()[in.take<uint8_t>() % w.tensors().size()].name;
                const TensorType t = std::array{TensorType::F32, TensorType::F16, TensorType::Q8_0,
                                                TensorType::Q4_0}[in.take<uint8_t>() % 4];
                const uint64_t ne0 = 1 + in.take<uint8_t>() % 96, ne1 = 1 + in.take<uint8_t>() % 300;
                w.remove_tensor(name);
                try {
                    w.add_tensor(name, t, {ne0, ne1}, {});
                } catch (const GgufError&) {  // a shape no file can hold (row not whole blocks)
                }
                break;
            }
            default: w.set_bool(key, in.take<uint8_t>() & 1); break;
        }
    }
    if (vocab_edited) {
        w.set_string_array("tokenizer.ggml.tokens", v.tokens);
        w.set_f32_array("tokenizer.ggml.scores", v.scores);
        w.set_i32_array("tokenizer.ggml.token_type", v.types);
    }
    try {
        return w.write_memory();
    } catch (const GgufError&) {
        return {};
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::vector<uint8_t> bytes;
    if (size >= 4 && std::memcmp(data, "GGUF", 4) == 0) {
        bytes.assign(data, data + size);
    } else {
        Input in(data, size);
        bytes = edited_model(in);
        if (bytes.empty()) return 0;
    }
    std::optional<GgufFile> file;
    try {
        file.emplace(GgufFile::from_memory(std::move(bytes), "fuzz.gguf"));
    } catch (const GgufError&) {
        return 0;
    }
    exercise_metadata(*file);
    exercise_tensors(*file);
    try {
        ModelConfig cfg = ModelConfig::from_gguf(*file);
        require(cfg.dim % cfg.n_heads == 0 && cfg.n_heads % cfg.n_kv_heads == 0, "validated head counts");
    } catch (const ModelConfigError&) {}
    std::unique_ptr<Tokenizer> tok;
    try {
        tok = make_tokenizer(*file);
    } catch (const GgufError&) {
        return 0;
    }
    exercise_tokenizer(*tok, data, size);
    return 0;
}
