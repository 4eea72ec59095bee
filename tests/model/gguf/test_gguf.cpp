// GGUF reader on the real shared test files, and on a hand-assembled file holding every value type.
#include <cmath>
#include <cstring>

#include "model/gguf/gguf.h"
#include "model/arch/model_config.h"
#include "support/model_test_util.h"

using namespace vkllm;

namespace {

// Minimal independent GGUF encoder, so the reader is not only ever tested against our writer.
struct RawGguf {
    std::vector<uint8_t> b;
    template <class T>
    void put(T v) {
        const size_t at = b.size();
        b.resize(at + sizeof(T));
        std::memcpy(b.data() + at, &v, sizeof(T));
    }
    void str(std::string_view s) {
        put<uint64_t>(s.size());
        b.insert(b.end(), s.begin(), s.end());
    }
    void key(std::string_view k, GgufType t) {
        str(k);
        put<uint32_t>(uint32_t(t));
    }
};

}  // namespace

TEST_CASE("gguf: stories260K header, metadata and hyperparameters") {
    VKLLM_REQUIRE_MODEL(path, "stories260K.gguf");
    GgufFile f = GgufFile::open(path);
    CHECK(f.version() == 3);
    CHECK(f.alignment() == 32);
    CHECK(f.tensors().size() == 48);
    CHECK(f.metadata().size() == 19);
    CHECK(f.get_string("general.architecture") == "llama");
    CHECK(f.get_string("tokenizer.ggml.model") == "llama");
    CHECK(f.get_string_array("tokenizer.ggml.tokens").size() == 512);
    CHECK(f.get_string_array("tokenizer.ggml.tokens")[1] == "<s>");
    CHECK(f.get_f32_array("tokenizer.ggml.scores").size() == 512);
    CHECK(f.get_i32_array("tokenizer.ggml.token_type")[3] == 6);  // <0x00> is a byte token
    CHECK(f.get_u32("tokenizer.ggml.padding_token_id") == 0xffffffffu);

    ModelConfig c = ModelConfig::from_gguf(f);
    CHECK(c.n_vocab == 512);
    CHECK(c.dim == 64);
    CHECK(c.n_layers == 5);
    CHECK(c.n_heads == 8);
    CHECK(c.n_kv_heads == 4);
    CHECK(c.head_dim == 8);
    CHECK(c.kv_dim() == 32);
    CHECK(c.ffn_dim == 172);
    CHECK(c.n_ctx_train == 2048);
    CHECK(c.norm_eps == doctest::Approx(1e-5f).epsilon(1e-6));
    CHECK(c.rope.base == 10000.0f);
    CHECK(c.rope_dim == 8);
    CHECK_FALSE(c.tied_embeddings);

    const GgufTensorInfo& embd = f.tensor("token_embd.weight");
    CHECK(embd.type == TensorType::F32);
    CHECK(embd.n_dims == 2);
    CHECK(embd.ne[0] == 64);
    CHECK(embd.ne[1] == 512);
    CHECK(embd.n_rows() == 512);
    CHECK(embd.shape_string() == "[64, 512]");
    CHECK(embd.offset == 0);
    CHECK(f.data_offset() % 32 == 0);
    const GgufTensorInfo& down = f.tensor("blk.4.ffn_down.weight");
    CHECK(down.ne[0] == 172);
    CHECK(down.ne[1] == 64);
    CHECK(down.n_bytes == 172 * 64 * 4);

    // Real trained weights: finite, not all zero, and a plausible scale.
    auto data = f.tensor_data(embd);
    REQUIRE(data.size() == 64 * 512 * 4);
    double sum2 = 0;
    for (size_t i = 0; i < 64 * 512; ++i) {
        float v;
        std::memcpy(&v, data.data() + 4 * i, 4);
        REQUIRE(std::isfinite(v));
        sum2 += double(v) * v;
    }
    CHECK(sum2 > 0);
    CHECK(std::sqrt(sum2 / (64 * 512)) < 10);
    // The last tensor's data ends inside the file.
    for (const GgufTensorInfo& t : f.tensors()) CHECK(f.data_offset() + t.offset + t.n_bytes <= f.bytes().size());
}

TEST_CASE("gguf: llama-2-tiny-random (F16 matrices, F32 norms)") {
    VKLLM_REQUIRE_MODEL(path, "llama-2-tiny-random.gguf");
    GgufFile f = GgufFile::open(path);
    CHECK(f.version() == 3);
    CHECK(f.tensors().size() == 12);
    CHECK_FALSE(f.has("tokenizer.ggml.add_bos_token"));
    ModelConfig c = ModelConfig::from_gguf(f);
    CHECK(c.n_vocab == 32000);
    CHECK(c.dim == 8);
    CHECK(c.n_layers == 1);
    CHECK(c.ffn_dim == 32);
    CHECK(c.n_heads == 2);
    CHECK(c.n_kv_heads == 2);
    CHECK(c.head_dim == 4);
    CHECK(c.rope_dim == 4);
    CHECK(c.n_ctx_train == 4096);
    CHECK_FALSE(c.tied_embeddings);
    for (const GgufTensorInfo& t : f.tensors()) {
        INFO(t.name);
        CHECK(t.type == (t.n_dims == 1 ? TensorType::F32 : TensorType::F16));
        CHECK(t.offset % f.alignment() == 0);
    }
    const GgufTensorInfo& q = f.tensor("blk.0.attn_q.weight");
    auto data = f.tensor_data(q);
    REQUIRE(data.size() == 8 * 8 * 2);
    std::vector<float> v(64);
    dequantize_row(TensorType::F16, data.data(), v.data(), v.size());
    for (float x : v) CHECK(std::isfinite(x));
}

TEST_CASE("gguf: vocab-only file has no tensors and is not a runnable model") {
    VKLLM_REQUIRE_MODEL(path, "ggml-vocab-llama-spm.gguf");
    GgufFile f = GgufFile::open(path);
    CHECK(f.tensors().empty());
    CHECK(f.metadata().size() == 22);
    CHECK(f.get_u32("llama.vocab_size") == 32000);
    CHECK(f.get_bool("tokenizer.ggml.add_bos_token"));
    CHECK_FALSE(f.get_bool("tokenizer.ggml.add_eos_token"));
    CHECK(f.get_string("tokenizer.ggml.pre") == "default");
    CHECK(f.get_string_array("tokenizer.ggml.tokens").size() == 32000);
    VKLLM_CHECK_THROWS_WITH_SUBSTR(ModelConfig::from_gguf(f), ModelConfigError,
                                   "tensor 'token_embd.weight': required tensor is missing");
}

TEST_CASE("gguf: typed getters name the key on missing keys and wrong types") {
    VKLLM_REQUIRE_MODEL(path, "stories260K.gguf");
    GgufFile f = GgufFile::open(path);
    VKLLM_CHECK_THROWS_WITH_SUBSTR(f.get_u32("llama.nope"), GgufError, "key 'llama.nope': required key is missing");
    VKLLM_CHECK_THROWS_WITH_SUBSTR(f.get_u32("general.name"), GgufError,
                                   "key 'general.name': has type STRING, expected UINT32");
    VKLLM_CHECK_THROWS_WITH_SUBSTR(f.get_string("llama.block_count"), GgufError, "has type UINT32, expected STRING");
    VKLLM_CHECK_THROWS_WITH_SUBSTR(f.get_f32("llama.block_count"), GgufError, "expected FLOAT32");
    VKLLM_CHECK_THROWS_WITH_SUBSTR(f.get_bool("llama.block_count"), GgufError, "expected BOOL");
    VKLLM_CHECK_THROWS_WITH_SUBSTR(f.get_string_array("tokenizer.ggml.scores"), GgufError,
                                   "has type ARRAY[FLOAT32], expected ARRAY[STRING]");
    VKLLM_CHECK_THROWS_WITH_SUBSTR(f.get_f32_array("tokenizer.ggml.tokens"), GgufError, "expected ARRAY[FLOAT32]");
    VKLLM_CHECK_THROWS_WITH_SUBSTR(f.get_i32_array("tokenizer.ggml.scores"), GgufError, "expected ARRAY[INT32]");
    VKLLM_CHECK_THROWS_WITH_SUBSTR(f.get_i32("tokenizer.ggml.padding_token_id"), GgufError,
                                   "value 4294967295 does not fit in INT32");
    VKLLM_CHECK_THROWS_WITH_SUBSTR(f.tensor("nope.weight"), GgufError, "tensor 'nope.weight': required tensor is missing");
    CHECK_FALSE(f.find_u32("llama.nope").has_value());
    CHECK_FALSE(f.find_string("llama.nope").has_value());
    CHECK(f.find_u32("llama.block_count") == 5u);
    CHECK_THROWS_AS(f.find_u32("general.name"), GgufError);  // present but mistyped is still an error
    CHECK(f.find_tensor("nope") == nullptr);
    CHECK(f.get_u64("llama.block_count") == 5);
    CHECK(f.get_i32("llama.block_count") == 5);
}

TEST_CASE("gguf: open errors name the path") {
    VKLLM_CHECK_THROWS_WITH_SUBSTR(GgufFile::open("/nonexistent/dir/model.gguf"), GgufError,
                                   "/nonexistent/dir/model.gguf: cannot open");
    VKLLM_CHECK_THROWS_WITH_SUBSTR(GgufFile::open(vkllm::test::scratch_dir().string()), GgufError,
                                   "not a regular file");
    auto empty = vkllm::test::scratch_dir() / "empty.gguf";
    { std::ofstream(empty.string(), std::ios::binary); }
    VKLLM_CHECK_THROWS_WITH_SUBSTR(GgufFile::open(empty.string()), GgufError, "empty.gguf: header: truncated");
}

TEST_CASE("gguf: every metadata value type, v2 and v3") {
    for (uint32_t version : {2u, 3u}) {
        CAPTURE(version);
        RawGguf g;
        g.b = {'G', 'G', 'U', 'F'};
        g.put<uint32_t>(version);
        g.put<uint64_t>(1);   // tensors
        g.put<uint64_t>(17);  // kv
        g.key("u8", GgufType::UINT8), g.put<uint8_t>(200);
        g.key("i8", GgufType::INT8), g.put<int8_t>(-100);
        g.key("u16", GgufType::UINT16), g.put<uint16_t>(60000);
        g.key("i16", GgufType::INT16), g.put<int16_t>(-30000);
        g.key("u32", GgufType::UINT32), g.put<uint32_t>(4000000000u);
        g.key("i32", GgufType::INT32), g.put<int32_t>(-2000000000);
        g.key("f32", GgufType::FLOAT32), g.put<float>(1.5f);
        g.key("bool", GgufType::BOOL), g.put<uint8_t>(1);
        g.key("str", GgufType::STRING), g.str("h\xc3\xa9llo");
        g.key("u64", GgufType::UINT64), g.put<uint64_t>(1ull << 40);
        g.key("i64", GgufType::INT64), g.put<int64_t>(-(1ll << 40));
        g.key("f64", GgufType::FLOAT64), g.put<double>(-2.25);
        g.key("arr_str", GgufType::ARRAY), g.put<uint32_t>(uint32_t(GgufType::STRING)), g.put<uint64_t>(3);
        g.str("a"), g.str(""), g.str("\xe2\x96\x81" "b");
        g.key("arr_i16", GgufType::ARRAY), g.put<uint32_t>(uint32_t(GgufType::INT16)), g.put<uint64_t>(2);
        g.put<int16_t>(-5), g.put<int16_t>(7);
        g.key("arr_f64", GgufType::ARRAY), g.put<uint32_t>(uint32_t(GgufType::FLOAT64)), g.put<uint64_t>(2);
        g.put<double>(0.5), g.put<double>(-1.0);
        g.key("arr_arr", GgufType::ARRAY), g.put<uint32_t>(uint32_t(GgufType::ARRAY)), g.put<uint64_t>(2);
        g.put<uint32_t>(uint32_t(GgufType::UINT8)), g.put<uint64_t>(1), g.put<uint8_t>(9);
        g.put<uint32_t>(uint32_t(GgufType::STRING)), g.put<uint64_t>(1), g.str("x");
        g.key("arr_empty", GgufType::ARRAY), g.put<uint32_t>(uint32_t(GgufType::UINT32)), g.put<uint64_t>(0);
        // one Q8_0 tensor [32, 2]
        g.str("t"), g.put<uint32_t>(2), g.put<uint64_t>(32), g.put<uint64_t>(2);
        g.put<uint32_t>(uint32_t(TensorType::Q8_0)), g.put<uint64_t>(0);
        while (g.b.size() % 32) g.b.push_back(0);
        const size_t data_at = g.b.size();
        for (int i = 0; i < 68; ++i) g.b.push_back(uint8_t(i));

        GgufFile f = GgufFile::from_memory(g.b, "types.gguf");
        CHECK(f.version() == version);
        CHECK(f.name() == "types.gguf");
        CHECK(f.find("u8")->as_u64() == 200u);
        CHECK(f.find("i8")->as_i64() == -100);
        CHECK_FALSE(f.find("i8")->as_u64().has_value());
        CHECK(f.get_u32("u16") == 60000);
        CHECK(f.find("i16")->as_i64() == -30000);
        CHECK(f.get_u32("u32") == 4000000000u);
        CHECK(f.get_i32("i32") == -2000000000);
        CHECK(f.get_f32("f32") == 1.5f);
        CHECK(f.get_bool("bool"));
        CHECK(f.get_string("str") == "h\xc3\xa9llo");
        CHECK(f.get_u64("u64") == (1ull << 40));
        CHECK(f.find("i64")->as_i64() == -(1ll << 40));
        CHECK(f.get_f32("f64") == -2.25f);
        CHECK(f.find("f64")->as_f64() == -2.25);
        VKLLM_CHECK_THROWS_WITH_SUBSTR(f.get_u32("u64"), GgufError, "key 'u64': value 1099511627776 does not fit in UINT32");
        VKLLM_CHECK_THROWS_WITH_SUBSTR(f.get_u32("i8"), GgufError, "value -100 does not fit");
        const auto& s = f.get_string_array("arr_str");
        REQUIRE(s.size() == 3);
        CHECK(s[0] == "a");
        CHECK(s[1].empty());
        CHECK(s[2] == "\xe2\x96\x81" "b");
        CHECK(f.get_i32_array("arr_i16") == std::vector<int32_t>{-5, 7});
        CHECK(f.get_f32_array("arr_f64") == std::vector<float>{0.5f, -1.0f});
        const GgufValue* aa = f.find("arr_arr");
        REQUIRE(aa);
        CHECK(aa->describe_type() == "ARRAY[ARRAY]");
        CHECK(aa->array_size == 2);
        CHECK(aa->raw.size() == (4 + 8 + 1) + (4 + 8 + 8 + 1));
        CHECK(f.get_array_size("arr_empty") == 0);
        CHECK(f.get_i32_array("arr_empty").empty());
        CHECK(f.metadata()[0].key == "u8");
        CHECK(f.metadata()[16].key == "arr_empty");

        REQUIRE(f.tensors().size() == 1);
        const GgufTensorInfo& t = f.tensors()[0];
        CHECK(t.type == TensorType::Q8_0);
        CHECK(t.n_elements == 64);
        CHECK(t.n_bytes == 68);
        CHECK(f.data_offset() == data_at);
        auto d = f.tensor_data(t);
        REQUIRE(d.size() == 68);
        CHECK(d[0] == 0);
        CHECK(d[67] == 67);

        // Moving keeps every view valid.
        GgufFile moved = std::move(f);
        CHECK(moved.get_string("str") == "h\xc3\xa9llo");
        CHECK(moved.tensor_data(*moved.find_tensor("t"))[5] == 5);
    }
}
