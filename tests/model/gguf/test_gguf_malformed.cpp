// Malformed GGUF files: a valid small model is written in memory, then corrupted in one place at
// a time. Every corruption must raise GgufError (or ModelConfigError) with a message naming the
// problem -- never crash, never read out of bounds.
#include <algorithm>
#include <cstring>
#include <functional>
#include <random>

#include "model/gguf/gguf.h"
#include "model/gguf/gguf_writer.h"
#include "model/testgen/random_model.h"
#include "model/testgen/random_vocab.h"
#include "model/arch/model_config.h"
#include "model/tokenizer/tokenizer.h"
#include "support/model_test_util.h"

using namespace vkllm;

namespace {

using Bytes = std::vector<uint8_t>;

// Where each field of a (valid) GGUF file lives, found by an independent walk of the bytes.
struct Layout {
    struct Kv {
        std::string key;
        size_t begin, type_at, value_at, end;
    };
    struct Tensor {
        std::string name;
        size_t begin, name_at, n_dims_at, dims_at, type_at, offset_at, end;
    };
    std::vector<Kv> kv;
    std::vector<Tensor> tensors;
    size_t header_end = 0, data_at = 0;

    const Kv& key(std::string_view k) const {
        for (const Kv& e : kv)
            if (e.key == k) return e;
        FAIL("no key " << k);
        throw 0;
    }
    const Tensor& tensor(std::string_view n) const {
        for (const Tensor& t : tensors)
            if (t.name == n) return t;
        FAIL("no tensor " << n);
        throw 0;
    }
};

template <class T>
T get(const Bytes& b, size_t at) {
    T v;
    std::memcpy(&v, b.data() + at, sizeof(T));
    return v;
}
template <class T>
void set(Bytes& b, size_t at, T v) {
    std::memcpy(b.data() + at, &v, sizeof(T));
}

size_t skip_value(const Bytes& b, size_t at, uint32_t type) {
    static const size_t sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (type == 8) return at + 8 + get<uint64_t>(b, at);
    if (type != 9) return at + sizes[type];
    uint32_t et = get<uint32_t>(b, at);
    uint64_t n = get<uint64_t>(b, at + 4);
    at += 12;
    for (uint64_t i = 0; i < n; ++i) at = skip_value(b, at, et);
    return at;
}

Layout layout_of(const Bytes& b) {
    Layout l;
    const uint64_t n_tensors = get<uint64_t>(b, 8), n_kv = get<uint64_t>(b, 16);
    size_t at = 24;
    for (uint64_t i = 0; i < n_kv; ++i) {
        Layout::Kv e;
        e.begin = at;
        const uint64_t len = get<uint64_t>(b, at);
        e.key.assign(reinterpret_cast<const char*>(b.data() + at + 8), len);
        e.type_at = at + 8 + len;
        e.value_at = e.type_at + 4;
        e.end = skip_value(b, e.value_at, get<uint32_t>(b, e.type_at));
        at = e.end;
        l.kv.push_back(e);
    }
    for (uint64_t i = 0; i < n_tensors; ++i) {
        Layout::Tensor t;
        t.begin = at;
        const uint64_t len = get<uint64_t>(b, at);
        t.name_at = at + 8;
        t.name.assign(reinterpret_cast<const char*>(b.data() + t.name_at), len);
        t.n_dims_at = t.name_at + len;
        t.dims_at = t.n_dims_at + 4;
        t.type_at = t.dims_at + 8 * get<uint32_t>(b, t.n_dims_at);
        t.offset_at = t.type_at + 4;
        t.end = t.offset_at + 8;
        at = t.end;
        l.tensors.push_back(t);
    }
    l.header_end = at;
    l.data_at = (at + 31) / 32 * 32;
    return l;
}

ModelShape small_shape() {
    ModelShape s;
    s.dim = 32;
    s.n_layers = 1;
    s.n_heads = 4;
    s.n_kv_heads = 2;
    s.ffn_dim = 64;
    s.n_vocab = 262;
    s.n_ctx = 64;
    s.weight_type = TensorType::Q8_0;
    s.seed = 7;
    return s;
}

const Bytes& valid_file() {
    static const Bytes bytes = make_random_model(small_shape()).write_memory();
    return bytes;
}

// Parses and, when the file parses, also builds the config and tokenizer and encodes a string:
// the layers above the reader must cope with whatever the reader accepts.
void load_everything(const Bytes& b) {
    GgufFile f = GgufFile::from_memory(b, "bad.gguf");
    (void)ModelConfig::from_gguf(f);
    auto tok = make_tokenizer(f);
    auto ids = tok->encode("hello world \xff", true);
    (void)tok->decode(ids);
}

struct Case {
    std::string name;
    std::function<void(Bytes&, const Layout&)> corrupt;
    std::string expect;
};

}  // namespace

TEST_CASE("gguf malformed: the base file is valid") {
    const Bytes& b = valid_file();
    GgufFile f = GgufFile::from_memory(b, "base.gguf");
    ModelConfig c = ModelConfig::from_gguf(f);
    CHECK(c.n_kv_heads == 2);
    Layout l = layout_of(b);
    CHECK(l.kv.size() == f.metadata().size());
    CHECK(l.tensors.size() == f.tensors().size());
    CHECK(l.data_at == f.data_offset());
    CHECK_NOTHROW(load_everything(b));
}

TEST_CASE("gguf malformed: truncation at every section boundary and inside each section") {
    const Bytes& full = valid_file();
    const Layout l = layout_of(full);
    std::vector<size_t> cuts = {0, 2, 4, 6, 8, 12, 16, 20, 24};
    for (const auto& e : l.kv) {
        cuts.insert(cuts.end(), {e.begin, e.begin + 4, e.begin + 9, e.type_at, e.type_at + 2, e.value_at,
                                 e.value_at + 1, (e.value_at + e.end) / 2, e.end - 1});
    }
    for (const auto& t : l.tensors) {
        cuts.insert(cuts.end(), {t.begin, t.begin + 7, t.name_at + 1, t.n_dims_at, t.n_dims_at + 3, t.dims_at,
                                 t.dims_at + 5, t.type_at, t.type_at + 1, t.offset_at, t.offset_at + 7});
    }
    // The file may end in padding after the last tensor; cut inside the data instead.
    const GgufFile parsed = GgufFile::from_memory(full);
    uint64_t data_end = 0;
    for (const GgufTensorInfo& t : parsed.tensors()) data_end = std::max(data_end, parsed.data_offset() + t.offset + t.n_bytes);
    cuts.insert(cuts.end(), {l.header_end, l.header_end + 1, l.data_at, l.data_at + 1, size_t(data_end / 2),
                             size_t(data_end - 40), size_t(data_end - 1)});
    for (size_t cut : cuts) {
        REQUIRE(cut < full.size());
        CAPTURE(cut);
        Bytes b(full.begin(), full.begin() + ptrdiff_t(cut));
        bool thrown = false;
        try {
            GgufFile::from_memory(std::move(b), "cut.gguf");
        } catch (const GgufError& e) {
            thrown = true;
            std::string m = e.what();
            INFO(m);
            CHECK(m.rfind("cut.gguf: ", 0) == 0);
            CHECK((m.find("truncated") != std::string::npos || m.find("past end of file") != std::string::npos ||
                   m.find("impossible for a file") != std::string::npos ||
                   m.find("more than the file") != std::string::npos));
        }
        CHECK(thrown);
    }
}

TEST_CASE("gguf malformed: table of single corruptions") {
    const Layout l = layout_of(valid_file());
    const std::vector<Case> cases = {
        {"bad magic", [](Bytes& b, const Layout&) { b[0] = 'X'; }, "header: bad magic 'XGUF' (expected 'GGUF')"},
        {"version 1", [](Bytes& b, const Layout&) { set<uint32_t>(b, 4, 1); }, "unsupported GGUF version 1"},
        {"version 4", [](Bytes& b, const Layout&) { set<uint32_t>(b, 4, 4); }, "unsupported GGUF version 4; supported: 2, 3"},
        {"big-endian", [](Bytes& b, const Layout&) { set<uint32_t>(b, 4, 0x03000000u); }, "big-endian"},
        {"huge n_tensors", [](Bytes& b, const Layout&) { set<uint64_t>(b, 8, 1ull << 40); },
         "tensor count 1099511627776 is impossible for a file of"},
        {"huge n_kv", [](Bytes& b, const Layout&) { set<uint64_t>(b, 16, ~0ull); },
         "metadata count 18446744073709551615 is impossible"},
        {"key length past EOF", [](Bytes& b, const Layout& l) { set<uint64_t>(b, l.kv[0].begin, 1ull << 60); },
         "metadata entry 0: key: string length 1152921504606846976"},
        {"string value past EOF",
         [](Bytes& b, const Layout& l) { set<uint64_t>(b, l.key("general.architecture").value_at, b.size()); },
         "key 'general.architecture': string value: string length"},
        {"string array element past EOF",
         [](Bytes& b, const Layout& l) { set<uint64_t>(b, l.key("tokenizer.ggml.tokens").value_at + 12, ~0ull - 3); },
         "key 'tokenizer.ggml.tokens': array element 0: string length"},
        {"huge array length",
         [](Bytes& b, const Layout& l) { set<uint64_t>(b, l.key("tokenizer.ggml.scores").value_at + 4, 1ull << 61); },
         "key 'tokenizer.ggml.scores': array of 2305843009213693952 FLOAT32 elements"},
        {"array element type invalid",
         [](Bytes& b, const Layout& l) { set<uint32_t>(b, l.key("tokenizer.ggml.scores").value_at, 13); },
         "array element type 13 is not a GGUF value type"},
        {"value type invalid",
         [](Bytes& b, const Layout& l) { set<uint32_t>(b, l.key("general.name").type_at, 99); },
         "key 'general.name': value type 99 is not a GGUF value type"},
        {"duplicate key",
         [](Bytes& b, const Layout& l) {
             // eos -> bos: same length, so the rest of the file is unchanged
             std::memcpy(b.data() + l.key("tokenizer.ggml.eos_token_id").begin + 8 + 15, "bos", 3);
         },
         "key 'tokenizer.ggml.bos_token_id': duplicate key"},
        {"duplicate tensor name",
         [](Bytes& b, const Layout& l) { b[l.tensor("blk.0.attn_k.weight").name_at + 11] = 'q'; },
         "tensor 'blk.0.attn_q.weight': duplicate tensor name"},
        {"n_dims 5", [](Bytes& b, const Layout& l) { set<uint32_t>(b, l.tensors[0].n_dims_at, 5); },
         "tensor 'token_embd.weight': n_dims 5 is not in 1..4"},
        {"n_dims 0", [](Bytes& b, const Layout& l) { set<uint32_t>(b, l.tensors[0].n_dims_at, 0); }, "n_dims 0 is not in 1..4"},
        {"zero dim", [](Bytes& b, const Layout& l) { set<uint64_t>(b, l.tensors[0].dims_at + 8, 0); },
         "tensor 'token_embd.weight': dimension 1 of [32, 0] is zero"},
        {"dims overflow uint64",
         [](Bytes& b, const Layout& l) {
             set<uint64_t>(b, l.tensors[0].dims_at, 1ull << 35);
             set<uint64_t>(b, l.tensors[0].dims_at + 8, 1ull << 35);
         },
         "element count of [34359738368, 34359738368] overflows 64 bits"},
        {"dims too large for file",
         [](Bytes& b, const Layout& l) { set<uint64_t>(b, l.tensors[0].dims_at + 8, 1ull << 40); },
         "needs 37383395344384 bytes, more than the file's"},
        {"unsupported type IQ2_XS",
         [](Bytes& b, const Layout& l) { set<uint32_t>(b, l.tensor("blk.0.attn_q.weight").type_at, 17); },
         "tensor 'blk.0.attn_q.weight': type IQ2_XS (17) is not supported; supported: F32, F16, BF16, Q8_0, Q4_0, "
         "Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, MXFP4"},
        {"K-quant row not a whole super-block",
         [](Bytes& b, const Layout& l) { set<uint32_t>(b, l.tensor("blk.0.attn_q.weight").type_at, 12); },
         "tensor 'blk.0.attn_q.weight': row length 32 of [32, 32] is not a multiple of the Q4_K block size 256"},
        {"unknown type id",
         [](Bytes& b, const Layout& l) { set<uint32_t>(b, l.tensors[1].type_at, 1000); }, "type unknown (1000) is not supported"},
        {"row not a multiple of the block",
         [](Bytes& b, const Layout& l) { set<uint64_t>(b, l.tensor("blk.0.attn_q.weight").dims_at, 16); },
         "row length 16 of [16, 32] is not a multiple of the Q8_0 block size 32"},
        {"offset out of range",
         [](Bytes& b, const Layout& l) { set<uint64_t>(b, l.tensors.back().offset_at, 1ull << 40); },
         "data [offset 1099511627776, "},
        {"offset near 2^64",
         [](Bytes& b, const Layout& l) { set<uint64_t>(b, l.tensors.back().offset_at, ~0ull - 31); },
         "extends past end of file"},
        {"misaligned offset",
         [](Bytes& b, const Layout& l) {
             set<uint64_t>(b, l.tensors[2].offset_at, get<uint64_t>(b, l.tensors[2].offset_at) + 4);
         },
         "not a multiple of the alignment 32"},
        {"overlapping tensors",
         [](Bytes& b, const Layout& l) {
             set<uint64_t>(b, l.tensors[2].offset_at, get<uint64_t>(b, l.tensors[1].offset_at));
         },
         "overlaps tensor"},
        {"partially overlapping tensors",
         [](Bytes& b, const Layout& l) {
             set<uint64_t>(b, l.tensors[1].offset_at, get<uint64_t>(b, l.tensors[0].offset_at) + 64);
         },
         "overlaps tensor 'token_embd.weight'"},
        {"one tensor more than declared",
         [](Bytes& b, const Layout&) { set<uint64_t>(b, 8, get<uint64_t>(b, 8) + 1); }, "bad.gguf: tensor"},
    };
    for (const Case& c : cases) {
        CAPTURE(c.name);
        Bytes b = valid_file();
        c.corrupt(b, l);
        VKLLM_CHECK_THROWS_WITH_SUBSTR(GgufFile::from_memory(std::move(b), "bad.gguf"), GgufError, c.expect);
    }
}

TEST_CASE("gguf malformed: general.alignment") {
    GgufWriter w = make_random_model(small_shape());
    w.set_alignment(64);
    const Bytes good = w.write_memory();
    GgufFile f = GgufFile::from_memory(good);
    CHECK(f.alignment() == 64);
    CHECK(f.data_offset() % 64 == 0);
    for (const GgufTensorInfo& t : f.tensors()) CHECK(t.offset % 64 == 0);
    CHECK_NOTHROW(ModelConfig::from_gguf(f));

    const Layout l = layout_of(good);
    for (uint32_t bad : {0u, 48u, 100u}) {
        CAPTURE(bad);
        Bytes b = good;
        set<uint32_t>(b, l.key("general.alignment").value_at, bad);
        VKLLM_CHECK_THROWS_WITH_SUBSTR(GgufFile::from_memory(std::move(b)), GgufError,
                                       "key 'general.alignment': alignment " + std::to_string(bad) +
                                           " is not a power of two");
    }
    GgufWriter ws = make_random_model(small_shape());
    ws.set_string("general.alignment", "32");
    VKLLM_CHECK_THROWS_WITH_SUBSTR(GgufFile::from_memory(ws.write_memory()), GgufError,
                                   "key 'general.alignment': has type STRING, expected UINT32");
}

TEST_CASE("gguf malformed: model-level errors (ModelConfig)") {
    struct ConfigCase {
        std::string name;
        std::function<void(GgufWriter&)> edit;
        std::string expect;
    };
    const ModelShape s = small_shape();
    const std::vector<ConfigCase> cases = {
        {"missing key", [](GgufWriter& w) { w.remove("llama.embedding_length"); },
         "key 'llama.embedding_length': required key is missing"},
        {"missing block_count", [](GgufWriter& w) { w.remove("llama.block_count"); }, "'llama.block_count'"},
        {"mistyped key", [](GgufWriter& w) { w.set_string("llama.block_count", "one"); },
         "key 'llama.block_count': has type STRING, expected UINT32"},
        {"other architecture", [](GgufWriter& w) { w.set_string("general.architecture", "mamba"); },
         "architecture 'mamba' is not supported; supported: llama, qwen2, qwen2vl, qwen3, qwen2moe, qwen3moe, olmoe, gpt-oss, deepseek2, phi3"},
        {"another architecture's keys missing", [](GgufWriter& w) { w.set_string("general.architecture", "gpt2"); },
         "key 'gpt2.embedding_length': required key is missing"},
        {"missing tensor", [](GgufWriter& w) { w.remove_tensor("blk.0.ffn_down.weight"); },
         "tensor 'blk.0.ffn_down.weight': required tensor is missing (expected shape [64, 32])"},
        {"missing norm", [](GgufWriter& w) { w.remove_tensor("output_norm.weight"); }, "tensor 'output_norm.weight'"},
        {"wrong shape",
         [](GgufWriter& w) {
             w.remove_tensor("blk.0.attn_k.weight");
             w.add_tensor("blk.0.attn_k.weight", TensorType::F32, {32, 32}, {});
         },
         "tensor 'blk.0.attn_k.weight': expected shape [32, 16], got [32, 32]"},
        {"wrong output shape",
         [](GgufWriter& w) {
             w.remove_tensor("output.weight");
             w.add_tensor("output.weight", TensorType::F32, {32, 100}, {});
         },
         "tensor 'output.weight': expected shape [32, 262], got [32, 100]"},
        {"embedding not [dim, vocab]",
         [](GgufWriter& w) {
             w.remove_tensor("token_embd.weight");
             w.add_tensor("token_embd.weight", TensorType::F32, {64, 262}, {});
         },
         "tensor 'token_embd.weight': expected shape [32, n_vocab], got [64, 262]"},
        {"kv heads do not divide heads", [](GgufWriter& w) { w.set_u32("llama.attention.head_count_kv", 3); },
         "key 'llama.attention.head_count_kv': 3 KV heads do not divide 4 query heads"},
        {"zero heads", [](GgufWriter& w) { w.set_u32("llama.attention.head_count", 0); },
         "key 'llama.attention.head_count': must be > 0"},
        {"zero kv heads", [](GgufWriter& w) { w.set_u32("llama.attention.head_count_kv", 0); },
         "key 'llama.attention.head_count_kv': must be > 0"},
        {"heads do not divide dim", [](GgufWriter& w) {
             w.set_u32("llama.attention.head_count", 3);
             w.set_u32("llama.attention.head_count_kv", 3);
         },
         "3 heads do not divide embedding length 32"},
        {"rope dim > head dim", [](GgufWriter& w) { w.set_u32("llama.rope.dimension_count", 10); },
         "key 'llama.rope.dimension_count': rope dimension 10 must be even, positive and at most the head dim 8"},
        {"odd rope dim", [](GgufWriter& w) { w.set_u32("llama.rope.dimension_count", 5); }, "rope dimension 5"},
        {"zero eps", [](GgufWriter& w) { w.set_f32("llama.attention.layer_norm_rms_epsilon", 0.0f); },
         "layer_norm_rms_epsilon': must be positive"},
        {"vocab size mismatch (tokens)",
         [](GgufWriter& w) {
             RandomVocab v = make_random_vocab(261);
             w.set_string_array("tokenizer.ggml.tokens", v.tokens);
         },
         "key 'tokenizer.ggml.tokens': vocab has 261 tokens but token_embd.weight has 262 rows"},
        {"vocab size mismatch (key)", [](GgufWriter& w) { w.set_u32("llama.vocab_size", 32000); },
         "key 'llama.vocab_size': vocab_size 32000 but token_embd.weight has 262 rows"},
        {"head size key disagrees with the tensors", [](GgufWriter& w) { w.set_u32("llama.attention.key_length", 16); },
         "tensor 'blk.0.attn_q.weight': expected shape [32, 64], got [32, 32]"},
        {"value head size differs", [](GgufWriter& w) { w.set_u32("llama.attention.value_length", 4); },
         "key 'llama.attention.value_length': value head size 4 differs from key head size 8"},
        {"head size not a multiple of 4", [](GgufWriter& w) { w.set_u32("llama.attention.key_length", 6); },
         "head size 6 is not supported: it must be a multiple of 4, at most 256"},
        {"tensor of a layer past block_count",
         [](GgufWriter& w) { w.add_tensor("blk.1.attn_norm.weight", TensorType::F32, {32}, {}); },
         "tensor 'blk.1.attn_norm.weight': belongs to layer 1 but block_count is 1"},
        {"block_count larger than the tensors", [](GgufWriter& w) { w.set_u32("llama.block_count", 2); },
         "tensor 'blk.1.attn_norm.weight': required tensor is missing"},
    };
    for (const ConfigCase& c : cases) {
        CAPTURE(c.name);
        GgufWriter w = make_random_model(s);
        c.edit(w);
        GgufFile f = GgufFile::from_memory(w.write_memory(), "model.gguf");
        VKLLM_CHECK_THROWS_WITH_SUBSTR(ModelConfig::from_gguf(f), ModelConfigError, "model.gguf: ");
        VKLLM_CHECK_THROWS_WITH_SUBSTR(ModelConfig::from_gguf(f), ModelConfigError, c.expect);
    }

    // Optional pieces: no output.weight means tied embeddings, no head_count_kv means multi-head
    // attention, rope defaults to the whole head at base 10000.
    GgufWriter w = make_random_model(s);
    w.remove_tensor("output.weight");
    w.remove("llama.attention.head_count_kv");
    w.remove("llama.rope.dimension_count");
    w.remove("llama.rope.freq_base");
    w.remove("llama.vocab_size");
    for (const char* name : {"blk.0.attn_k.weight", "blk.0.attn_v.weight"}) {
        w.remove_tensor(name);
        w.add_tensor(name, TensorType::F32, {32, 32}, {});
    }
    ModelConfig c = ModelConfig::from_gguf(GgufFile::from_memory(w.write_memory()));
    CHECK(c.tied_embeddings);
    CHECK(c.n_kv_heads == 4);
    CHECK(c.rope_dim == 8);
    CHECK(c.rope.base == 10000.0f);
}

TEST_CASE("gguf malformed: tokenizer-level errors") {
    auto load = [](const GgufWriter& w) { return make_tokenizer(GgufFile::from_memory(w.write_memory(), "tok.gguf")); };
    {
        GgufWriter w = make_random_model(small_shape());
        w.set_string("tokenizer.ggml.model", "gpt2");  // a byte-level BPE vocab needs its merges
        VKLLM_CHECK_THROWS_WITH_SUBSTR(load(w), GgufError, "tok.gguf: key 'tokenizer.ggml.merges': required key is missing");
    }
    {
        GgufWriter w = make_random_model(small_shape());
        w.set_string("tokenizer.ggml.model", "rwkv");
        VKLLM_CHECK_THROWS_WITH_SUBSTR(load(w), GgufError,
                                       "tokenizer model 'rwkv' is not supported; supported: llama (SentencePiece), gpt2 "
                                       "(byte-level BPE), bert (WordPiece), t5 (Unigram)");
    }
    {
        GgufWriter w = make_random_model(small_shape());
        w.remove("tokenizer.ggml.model");
        VKLLM_CHECK_THROWS_WITH_SUBSTR(load(w), GgufError, "the file has no tokenizer");
    }
    {
        GgufWriter w = make_random_model(small_shape());
        w.set_f32_array("tokenizer.ggml.scores", std::vector<float>(5, 0.0f));
        VKLLM_CHECK_THROWS_WITH_SUBSTR(load(w), GgufError, "key 'tokenizer.ggml.scores': has 5 entries for 262 tokens");
    }
    {
        GgufWriter w = make_random_model(small_shape());
        std::vector<int32_t> types(262, 1);
        types[7] = 9;
        w.set_i32_array("tokenizer.ggml.token_type", types);
        VKLLM_CHECK_THROWS_WITH_SUBSTR(load(w), GgufError, "token 7 has type 9");
    }
    {
        GgufWriter w = make_random_model(small_shape());
        w.set_u32("tokenizer.ggml.bos_token_id", 5000);
        VKLLM_CHECK_THROWS_WITH_SUBSTR(load(w), GgufError,
                                       "key 'tokenizer.ggml.bos_token_id': token id 5000 is outside the vocab of 262");
    }
    {
        GgufWriter w = make_random_model(small_shape());
        w.set_string_array("tokenizer.ggml.tokens", {});
        w.remove("tokenizer.ggml.scores");
        w.remove("tokenizer.ggml.token_type");
        VKLLM_CHECK_THROWS_WITH_SUBSTR(load(w), GgufError, "vocab is empty");
    }
}

TEST_CASE("gguf malformed: every header prefix and random byte corruption never crash") {
    const Bytes& full = valid_file();
    const Layout l = layout_of(full);
    // Every prefix of the header (and a little beyond).
    for (size_t cut = 0; cut < l.data_at + 8; ++cut) {
        CHECK_THROWS_AS(GgufFile::from_memory(Bytes(full.begin(), full.begin() + ptrdiff_t(cut))), GgufError);
    }
    // Random corruptions concentrated on the header, where the structure lives; whatever parses must
    // also survive the config, tokenizer and an encode/decode.
    std::mt19937_64 rng(12345);
    size_t parsed = 0;
    for (int iter = 0; iter < 3000; ++iter) {
        Bytes b = full;
        const int n = 1 + int(rng() % 4);
        for (int k = 0; k < n; ++k) {
            const size_t at = rng() % 8 == 0 ? rng() % b.size() : rng() % l.data_at;
            switch (rng() % 4) {
            case 0: b[at] = uint8_t(rng()); break;
            case 1: b[at] ^= uint8_t(1u << (rng() % 8)); break;
            case 2: b[at] = 0xff; break;
            default: b[at] = 0; break;
            }
        }
        try {
            load_everything(b);
            ++parsed;
        } catch (const GgufError&) {
        }
    }
    MESSAGE(parsed << " of 3000 corrupted files still loaded");
}
