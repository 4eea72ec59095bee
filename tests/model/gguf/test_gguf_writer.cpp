// GGUF writer: metadata and tensor round trips through real files, random LLaMA models of every
// weight type and of llama.cpp's quantization mixes (the per-tensor types llama-quantize picks),
// determinism, and argument validation.
#include <cmath>
#include <cstring>
#include <numeric>
#include <set>

#include <fmt/format.h>

#include "model/gguf/gguf.h"
#include "model/gguf/gguf_writer.h"
#include "model/testgen/random_model.h"
#include "model/testgen/random_vocab.h"
#include "model/arch/model_config.h"
#include "model/tokenizer/tokenizer.h"
#include "support/model_test_util.h"

using namespace vkllm;

namespace {

ModelShape test_shape(TensorType type) {
    ModelShape s;
    s.dim = 64;
    s.n_layers = 2;
    s.n_heads = 4;
    s.n_kv_heads = 2;
    s.ffn_dim = 96;
    s.n_vocab = 300;
    s.n_ctx = 128;
    s.weight_type = type;
    s.seed = 42;
    s.rms_eps = 1e-6f;
    s.rope_base = 500000.0f;
    return s;
}

std::vector<float> dequantize(const GgufFile& f, const GgufTensorInfo& t) {
    std::vector<float> out(size_t(t.n_elements));
    const size_t rb = row_bytes(t.type, size_t(t.ne[0]));
    auto data = f.tensor_data(t);
    for (uint64_t r = 0; r < t.n_rows(); ++r)
        dequantize_row(t.type, data.data() + r * rb, out.data() + r * t.ne[0], size_t(t.ne[0]));
    return out;
}

}  // namespace

TEST_CASE("gguf writer: metadata of every writable type round trips through a file") {
    GgufWriter w;
    w.set_u8("a.u8", 250);
    w.set_u32("a.u32", 0xdeadbeef);
    w.set_i32("a.i32", -12345);
    w.set_u64("a.u64", 1ull << 50);
    w.set_f32("a.f32", 3.25f);
    w.set_f64("a.f64", 1e300);
    w.set_bool("a.bool", true);
    w.set_bool("a.false", false);
    w.set_string("a.str", "h\xc3\xa9llo \xe2\x96\x81 world");
    w.set_string("a.empty", "");
    w.set_string_array("a.strs", {"x", "", "\xf0\x9f\xa6\x99"});
    const std::vector<float> fl = {1.0f, -0.5f, 1e-30f};
    w.set_f32_array("a.f32s", fl);
    const std::vector<int32_t> il = {1, -2, 2147483647};
    w.set_i32_array("a.i32s", il);
    w.set_u32("a.replaced", 1);
    w.set_u32("a.replaced", 2);  // replaced in place
    w.set_u32("a.removed", 3);
    CHECK(w.remove("a.removed"));
    CHECK_FALSE(w.remove("a.removed"));

    const auto path = (vkllm::test::scratch_dir() / "writer_metadata.gguf").string();
    w.write_file(path);
    GgufFile f = GgufFile::open(path);
    CHECK(f.version() == 3);
    CHECK(f.metadata().size() == 14);
    CHECK(f.find("a.u8")->type == GgufType::UINT8);
    CHECK(f.get_u32("a.u8") == 250);
    CHECK(f.get_u32("a.u32") == 0xdeadbeef);
    CHECK(f.get_i32("a.i32") == -12345);
    CHECK(f.get_u64("a.u64") == (1ull << 50));
    CHECK(f.get_f32("a.f32") == 3.25f);
    CHECK(f.find("a.f64")->as_f64() == 1e300);
    CHECK(f.get_bool("a.bool"));
    CHECK_FALSE(f.get_bool("a.false"));
    CHECK(f.get_string("a.str") == "h\xc3\xa9llo \xe2\x96\x81 world");
    CHECK(f.get_string("a.empty").empty());
    const auto& strs = f.get_string_array("a.strs");
    REQUIRE(strs.size() == 3);
    CHECK(strs[2] == "\xf0\x9f\xa6\x99");
    CHECK(f.get_f32_array("a.f32s") == fl);
    CHECK(f.get_i32_array("a.i32s") == il);
    CHECK(f.get_u32("a.replaced") == 2);
    CHECK(f.metadata()[13].key == "a.replaced");
    CHECK_FALSE(f.has("a.removed"));
    CHECK(f.tensors().empty());
}

TEST_CASE("gguf writer: tensor data is bit-exact in every type, at the declared alignment") {
    for (uint32_t alignment : {32u, 256u}) {
        CAPTURE(alignment);
        GgufWriter w;
        if (alignment != 32) w.set_alignment(alignment);
        std::vector<float> src(96 * 3);
        for (size_t i = 0; i < src.size(); ++i) src[i] = std::sin(float(i) * 0.37f) * 3.0f;
        std::vector<std::vector<uint8_t>> encoded;
        const TensorType types[] = {TensorType::F32,  TensorType::F16,  TensorType::BF16,
                                    TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_1,
                                    TensorType::Q5_0, TensorType::Q5_1, TensorType::IQ4_NL};
        for (TensorType t : types) {
            std::vector<uint8_t> bytes(row_bytes(t, 96) * 3);
            for (size_t r = 0; r < 3; ++r)
                quantize_row(t, src.data() + 96 * r, bytes.data() + r * row_bytes(t, 96), 96);
            w.add_tensor_data(std::string("t.") + std::string(type_traits(t).name), t, {96, 3}, bytes);
            encoded.push_back(std::move(bytes));
        }
        w.add_tensor_data("t.odd", TensorType::F32, {3, 1, 1, 2}, std::vector<uint8_t>(24, 0xab));

        const std::vector<uint8_t> mem = w.write_memory();
        const auto path = (vkllm::test::scratch_dir() / "writer_tensors.gguf").string();
        w.write_file(path);
        CHECK(vkllm::test::read_text_file(path) == std::string(mem.begin(), mem.end()));

        GgufFile f = GgufFile::open(path);
        CHECK(f.alignment() == alignment);
        CHECK(f.data_offset() % alignment == 0);
        REQUIRE(f.tensors().size() == std::size(types) + 1);
        for (size_t i = 0; i < std::size(types); ++i) {
            const GgufTensorInfo& t = f.tensors()[i];
            CAPTURE(t.name);
            CHECK(t.type == types[i]);
            CHECK(t.n_dims == 2);
            CHECK(t.ne[0] == 96);
            CHECK(t.ne[1] == 3);
            CHECK(t.offset % alignment == 0);
            auto d = f.tensor_data(t);
            REQUIRE(d.size() == encoded[i].size());
            CHECK(std::memcmp(d.data(), encoded[i].data(), d.size()) == 0);
            // and the values decode to what round_trip predicts
            std::vector<float> expect(src);
            round_trip(types[i], expect);
            CHECK(dequantize(f, t) == expect);
        }
        const GgufTensorInfo& odd = *f.find_tensor("t.odd");
        CHECK(odd.n_dims == 4);
        CHECK(odd.shape_string() == "[3, 1, 1, 2]");
        CHECK(f.tensor_data(odd)[23] == 0xab);
    }
}

TEST_CASE("gguf writer: argument errors") {
    GgufWriter w;
    w.add_tensor("a", TensorType::F32, {4}, {});
    VKLLM_CHECK_THROWS_WITH_SUBSTR(w.add_tensor("a", TensorType::F32, {4}, {}), GgufError, "duplicate tensor name");
    VKLLM_CHECK_THROWS_WITH_SUBSTR(w.add_tensor("", TensorType::F32, {4}, {}), GgufError, "empty tensor name");
    VKLLM_CHECK_THROWS_WITH_SUBSTR(w.add_tensor("b", TensorType::F32, {4, 0}, {}), GgufError, "zero dimension");
    VKLLM_CHECK_THROWS_WITH_SUBSTR(w.add_tensor("b", TensorType::F32, {1, 1, 1, 1, 1}, {}), GgufError,
                                   "5 dims; must be 1..4");
    VKLLM_CHECK_THROWS_WITH_SUBSTR(w.add_tensor("b", TensorType::Q4_0, {48, 2}, {}), GgufError,
                                   "row length 48 is not a multiple of the Q4_0 block size 32");
    VKLLM_CHECK_THROWS_WITH_SUBSTR(w.set_alignment(24), GgufError, "alignment 24 is not a power of two");
    w.add_tensor_data("c", TensorType::F32, {2}, std::vector<uint8_t>(4));
    VKLLM_CHECK_THROWS_WITH_SUBSTR(w.write_memory(), GgufError, "tensor 'c': 4 bytes given, 8 needed");
    // A failed write leaves nothing behind.
    const auto path = (vkllm::test::scratch_dir() / "writer_failed.gguf").string();
    std::filesystem::remove(path);
    CHECK_THROWS_AS(w.write_file(path), GgufError);
    CHECK_FALSE(std::filesystem::exists(path));
    CHECK_FALSE(std::filesystem::exists(path + ".partial"));
    VKLLM_CHECK_THROWS_WITH_SUBSTR(GgufWriter().write_file("/nonexistent/dir/x.gguf"), GgufError,
                                   "/nonexistent/dir/x.gguf.partial: cannot create");
}

TEST_CASE("gguf writer: random LLaMA models of every weight type validate and round trip") {
    for (TensorType type : kAllTensorTypes) {
        ModelShape s = test_shape(type);
        if (type_traits(type).block_elems == kSuperBlock) s.dim = 256, s.ffn_dim = 512;
        CAPTURE(type_traits(type).name);
        const auto path = (vkllm::test::scratch_dir() / ("random_" + std::string(type_traits(type).name) + ".gguf")).string();
        write_random_model(path, s);
        GgufFile f = GgufFile::open(path);
        CHECK(f.version() == 3);
        CHECK(f.alignment() == 32);
        CHECK(f.get_string("general.architecture") == "llama");
        CHECK(f.get_u32("general.file_type") == llama_file_type(type));
        CHECK(f.get_string("tokenizer.ggml.model") == "llama");

        ModelConfig c = ModelConfig::from_gguf(f);
        CHECK(c.dim == s.dim);
        CHECK(c.n_layers == 2);
        CHECK(c.n_heads == 4);
        CHECK(c.n_kv_heads == 2);
        CHECK(c.head_dim == s.dim / 4);
        CHECK(c.ffn_dim == s.ffn_dim);
        CHECK(c.n_vocab == 300);
        CHECK(c.n_ctx_train == 128);
        CHECK(c.norm_eps == 1e-6f);
        CHECK(c.rope.base == 500000.0f);
        CHECK(c.rope_dim == s.dim / 4);
        CHECK_FALSE(c.tied_embeddings);
        CHECK(f.tensors().size() == 3 + 9 * 2);

        // Same bytes as the in-memory writer (deterministic, streaming == buffered).
        const std::vector<uint8_t> mem = make_random_model(s).write_memory();
        REQUIRE(mem.size() == f.bytes().size());
        CHECK(std::memcmp(mem.data(), f.bytes().data(), mem.size()) == 0);

        for (const GgufTensorInfo& t : f.tensors()) {
            CAPTURE(t.name);
            CHECK(t.offset % 32 == 0);
            std::vector<float> v = dequantize(f, t);
            if (t.n_dims == 1) {
                CHECK(t.type == TensorType::F32);
                for (float x : v) CHECK((x > 0.8f && x < 1.2f));
                continue;
            }
            CHECK(t.type == type);
            // N(0, 1/sqrt(row length)) within sampling error.
            double mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
            double var = 0;
            for (float x : v) var += (x - mean) * (x - mean);
            const double sd = std::sqrt(var / double(v.size())), want = 1.0 / std::sqrt(double(t.ne[0]));
            CHECK(std::fabs(mean) < 0.1 * want);
            CHECK(sd == doctest::Approx(want).epsilon(0.08));
        }

        auto tok = make_tokenizer(f);
        CHECK(tok->n_vocab() == 300);
        const std::string text = "the cat ate  a tree\nok \xf0\x9f\xa6\x99!";
        auto ids = tok->encode(text, true);
        CHECK(ids.front() == 1);
        CHECK(ids.size() < text.size());  // merges happened
        CHECK(tok->decode(ids) == text);
    }
}

TEST_CASE("gguf writer: seeds, tied embeddings and the random vocab") {
    ModelShape s = test_shape(TensorType::Q4_0);
    const auto a = make_random_model(s).write_memory();
    CHECK(make_random_model(s).write_memory() == a);
    s.seed = 43;
    CHECK(make_random_model(s).write_memory() != a);
    s.tied_embeddings = true;
    GgufFile f = GgufFile::from_memory(make_random_model(s).write_memory());
    CHECK(f.find_tensor("output.weight") == nullptr);
    CHECK(ModelConfig::from_gguf(f).tied_embeddings);

    for (uint32_t n : {259u, 260u, 1000u, 32000u}) {
        RandomVocab v = make_random_vocab(n);
        REQUIRE(v.tokens.size() == n);
        REQUIRE(v.scores.size() == n);
        REQUIRE(v.types.size() == n);
        CHECK(v.tokens[0] == "<unk>");
        CHECK(v.tokens[2] == "</s>");
        CHECK(v.tokens[3 + 0x0a] == "<0x0A>");
        CHECK(v.types[3 + 255] == 6);
        std::set<std::string> unique(v.tokens.begin(), v.tokens.end());
        CHECK(unique.size() == n);
        if (n > 259) CHECK(v.tokens[259] == "\xe2\x96\x81");
    }
}

TEST_CASE("gguf writer: shape validation names the field") {
    auto bad = [](auto edit, const char* expect) {
        ModelShape s = test_shape(TensorType::Q8_0);
        edit(s);
        VKLLM_CHECK_THROWS_WITH_SUBSTR(validate_model_shape(s), std::invalid_argument, expect);
        CHECK_THROWS_AS(make_random_model(s), std::invalid_argument);
    };
    bad([](ModelShape& s) { s.dim = 0; }, "dim must be positive");
    bad([](ModelShape& s) { s.n_layers = 0; }, "layers must be positive");
    bad([](ModelShape& s) { s.n_kv_heads = 0; }, "kv-heads must be positive");
    bad([](ModelShape& s) { s.n_heads = 3; }, "heads (3) must divide dim (64)");
    bad([](ModelShape& s) { s.n_kv_heads = 3; }, "kv-heads (3) must divide heads (4)");
    bad([](ModelShape& s) { s.ffn_dim = 100; },
        "Q8_0 weights need rows that are whole 32-element blocks, but ffn = 100 is the row length of "
        "blk.*.ffn_down.weight");
    bad([](ModelShape& s) { s.weight_type = TensorType::Q4_K, s.dim = 320, s.ffn_dim = 768; },
        "Q4_K weights need rows that are whole 256-element blocks, but dim = 320 is the row length of "
        "token_embd.weight, blk.*.attn_q/k/v/output.weight");
    bad([](ModelShape& s) { s.weight_type = TensorType::Q6_K, s.dim = 256, s.ffn_dim = 800; },
        "ffn = 800 is the row length of blk.*.ffn_down.weight; a llama.cpp mix such as q4_k_m falls back");
    bad([](ModelShape& s) { s.mix = QuantMix::Q4_K_M, s.dim = 64, s.ffn_dim = 100; },
        "the q4_k_m mix needs rows that are whole 32-element blocks, but ffn = 100");
    bad([](ModelShape& s) { s.n_vocab = 100; }, "vocab (100) must be at least 259");
    bad([](ModelShape& s) { s.n_heads = 64, s.n_kv_heads = 64; }, "head dim 1 must be a multiple of 4 and at most 256");
    bad([](ModelShape& s) { s.rms_eps = 0; }, "rms eps must be positive");
    ModelShape ok = test_shape(TensorType::F32);
    ok.ffn_dim = 100;  // only block types need multiples of 32
    CHECK_NOTHROW(validate_model_shape(ok));
}

// --- llama.cpp quantization mixes ---------------------------------------------------------------

namespace {

// The per-tensor types of one mix for an 8-layer model, written out by hand from the rules of
// llama_tensor_get_type() (llama.cpp src/llama-quant.cpp) and identical to what
// `llama-quantize in-f16.gguf out.gguf Q4_K_M` (etc.; /work/shared/peer/bin, build 9749) chose
// for the same shapes. With 8 layers, use_more_bits() upgrades layers 0, 3, 6 and 7.
struct MixExpectation {
    const char* mix;
    uint32_t file_type;
    const char* token_embd;
    const char* output;
    const char* attn_q_k;  // attn_q and attn_k
    const char* attn_output;
    const char* ffn_gate_up;  // ffn_gate and ffn_up
    const char* attn_v[8];
    const char* ffn_down[8];
};

// dim 256, ffn 768, 4 query heads per KV head: every row is whole 256-element blocks.
const MixExpectation kMixesDim256[] = {
    {"q4_k_m", 15, "Q4_K", "Q6_K", "Q4_K", "Q4_K", "Q4_K",
     {"Q6_K", "Q4_K", "Q4_K", "Q6_K", "Q4_K", "Q4_K", "Q6_K", "Q6_K"},
     {"Q6_K", "Q4_K", "Q4_K", "Q6_K", "Q4_K", "Q4_K", "Q6_K", "Q6_K"}},
    {"q5_k_m", 17, "Q5_K", "Q6_K", "Q5_K", "Q5_K", "Q5_K",
     {"Q6_K", "Q5_K", "Q5_K", "Q6_K", "Q5_K", "Q5_K", "Q6_K", "Q6_K"},
     {"Q6_K", "Q5_K", "Q5_K", "Q6_K", "Q5_K", "Q5_K", "Q6_K", "Q6_K"}},
    // attn_v: Q5_K in the first two layers; ffn_down: Q5_K below n/16 = 0 layers, else Q4_K.
    {"q3_k_m", 12, "Q3_K", "Q6_K", "Q3_K", "Q4_K", "Q3_K",
     {"Q5_K", "Q5_K", "Q4_K", "Q4_K", "Q4_K", "Q4_K", "Q4_K", "Q4_K"},
     {"Q4_K", "Q4_K", "Q4_K", "Q4_K", "Q4_K", "Q4_K", "Q4_K", "Q4_K"}},
    // attn_v: Q4_K because 4 query heads share each KV head (Q3_K otherwise).
    {"q2_k", 10, "Q2_K", "Q6_K", "Q2_K", "Q3_K", "Q2_K",
     {"Q4_K", "Q4_K", "Q4_K", "Q4_K", "Q4_K", "Q4_K", "Q4_K", "Q4_K"},
     {"Q3_K", "Q3_K", "Q3_K", "Q3_K", "Q3_K", "Q3_K", "Q3_K", "Q3_K"}},
    {"q6_k", 18, "Q6_K", "Q6_K", "Q6_K", "Q6_K", "Q6_K",
     {"Q6_K", "Q6_K", "Q6_K", "Q6_K", "Q6_K", "Q6_K", "Q6_K", "Q6_K"},
     {"Q6_K", "Q6_K", "Q6_K", "Q6_K", "Q6_K", "Q6_K", "Q6_K", "Q6_K"}},
};

// dim 320, ffn 768, plain multi-head attention: rows of 320 fall back (Q2_K/Q3_K -> Q4_0,
// Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0; the output head becomes Q8_0); ffn_down rows of 768
// keep the K types.
const MixExpectation kMixesDim320[] = {
    {"q4_k_m", 15, "Q5_0", "Q8_0", "Q5_0", "Q5_0", "Q5_0",
     {"Q8_0", "Q5_0", "Q5_0", "Q8_0", "Q5_0", "Q5_0", "Q8_0", "Q8_0"},
     {"Q6_K", "Q4_K", "Q4_K", "Q6_K", "Q4_K", "Q4_K", "Q6_K", "Q6_K"}},
    {"q5_k_m", 17, "Q5_1", "Q8_0", "Q5_1", "Q5_1", "Q5_1",
     {"Q8_0", "Q5_1", "Q5_1", "Q8_0", "Q5_1", "Q5_1", "Q8_0", "Q8_0"},
     {"Q6_K", "Q5_K", "Q5_K", "Q6_K", "Q5_K", "Q5_K", "Q6_K", "Q6_K"}},
    {"q3_k_m", 12, "Q4_0", "Q8_0", "Q4_0", "Q5_0", "Q4_0",
     {"Q5_1", "Q5_1", "Q5_0", "Q5_0", "Q5_0", "Q5_0", "Q5_0", "Q5_0"},
     {"Q4_K", "Q4_K", "Q4_K", "Q4_K", "Q4_K", "Q4_K", "Q4_K", "Q4_K"}},
    // attn_v: Q3_K (no grouped-query attention), falling back to Q4_0.
    {"q2_k", 10, "Q4_0", "Q8_0", "Q4_0", "Q4_0", "Q4_0",
     {"Q4_0", "Q4_0", "Q4_0", "Q4_0", "Q4_0", "Q4_0", "Q4_0", "Q4_0"},
     {"Q3_K", "Q3_K", "Q3_K", "Q3_K", "Q3_K", "Q3_K", "Q3_K", "Q3_K"}},
    {"q6_k", 18, "Q8_0", "Q8_0", "Q8_0", "Q8_0", "Q8_0",
     {"Q8_0", "Q8_0", "Q8_0", "Q8_0", "Q8_0", "Q8_0", "Q8_0", "Q8_0"},
     {"Q6_K", "Q6_K", "Q6_K", "Q6_K", "Q6_K", "Q6_K", "Q6_K", "Q6_K"}},
};

ModelShape mix_shape(uint32_t dim, uint32_t kv_heads) {
    ModelShape s = test_shape(TensorType::F32);
    s.dim = dim;
    s.n_layers = 8;
    s.n_heads = 4;
    s.n_kv_heads = kv_heads;
    s.ffn_dim = 768;
    return s;
}

std::string type_name(const GgufFile& f, const std::string& tensor) {
    const GgufTensorInfo* t = f.find_tensor(tensor);
    REQUIRE(t != nullptr);
    return std::string(type_traits(t->type).name);
}

void check_mix(const ModelShape& shape, const MixExpectation& e) {
    CAPTURE(e.mix);
    CAPTURE(shape.dim);
    ModelShape s = shape;
    s.mix = parse_quant_mix(e.mix);
    REQUIRE(s.mix.has_value());
    const auto path = (vkllm::test::scratch_dir() / fmt::format("mix_{}_{}.gguf", e.mix, s.dim)).string();
    write_random_model(path, s);
    GgufFile f = GgufFile::open(path);
    CHECK(f.get_u32("general.file_type") == e.file_type);
    CHECK(type_name(f, "token_embd.weight") == e.token_embd);
    CHECK(type_name(f, "output.weight") == e.output);
    CHECK(type_name(f, "output_norm.weight") == "F32");
    for (int l = 0; l < 8; ++l) {
        CAPTURE(l);
        const std::string p = fmt::format("blk.{}.", l);
        CHECK(type_name(f, p + "attn_norm.weight") == "F32");
        CHECK(type_name(f, p + "ffn_norm.weight") == "F32");
        CHECK(type_name(f, p + "attn_q.weight") == e.attn_q_k);
        CHECK(type_name(f, p + "attn_k.weight") == e.attn_q_k);
        CHECK(type_name(f, p + "attn_v.weight") == e.attn_v[l]);
        CHECK(type_name(f, p + "attn_output.weight") == e.attn_output);
        CHECK(type_name(f, p + "ffn_gate.weight") == e.ffn_gate_up);
        CHECK(type_name(f, p + "ffn_up.weight") == e.ffn_gate_up);
        CHECK(type_name(f, p + "ffn_down.weight") == e.ffn_down[l]);
    }
    CHECK_NOTHROW(ModelConfig::from_gguf(f));

    // The same shape in F32 holds the originals (each tensor's random stream depends only on the
    // seed and its name): every decoded tensor is within its type's error bound of them.
    ModelShape f32_shape = shape;
    f32_shape.weight_type = TensorType::F32;
    GgufFile ref = GgufFile::from_memory(make_random_model(f32_shape).write_memory());
    for (const GgufTensorInfo& t : f.tensors()) {
        CAPTURE(t.name);
        const std::vector<float> got = dequantize(f, t), want = dequantize(ref, *ref.find_tensor(t.name));
        REQUIRE(got.size() == want.size());
        double err = 0, sig = 0;
        for (size_t i = 0; i < got.size(); ++i) {
            err += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
            sig += double(want[i]) * want[i];
        }
        CHECK(std::sqrt(err / sig) <= type_traits(t.type).rel_rms_bound);
    }
}

}  // namespace

TEST_CASE("gguf writer: llama.cpp mixes give each tensor llama-quantize's type") {
    for (const MixExpectation& e : kMixesDim256) check_mix(mix_shape(256, 1), e);
}

TEST_CASE("gguf writer: llama.cpp mixes fall back per tensor for rows that are not whole 256-blocks") {
    for (const MixExpectation& e : kMixesDim320) check_mix(mix_shape(320, 4), e);
}

TEST_CASE("gguf writer: mix names, file types and the rules at other layer counts") {
    CHECK(parse_quant_mix("q4_k_m") == QuantMix::Q4_K_M);
    CHECK(parse_quant_mix("Q3_K_L") == QuantMix::Q3_K_L);
    CHECK(parse_quant_mix("iq4_xs") == QuantMix::IQ4_XS);
    CHECK_FALSE(parse_quant_mix("q4_k").has_value());
    CHECK_FALSE(parse_quant_mix("q8_0").has_value());
    for (QuantMix m : kAllQuantMixes) CHECK(parse_quant_mix(quant_mix_info(m).name) == m);
    // LLAMA_FTYPE_MOSTLY_* values.
    CHECK(quant_mix_info(QuantMix::Q3_K_S).file_type == 11);
    CHECK(quant_mix_info(QuantMix::Q4_K_S).file_type == 14);
    CHECK(quant_mix_info(QuantMix::Q5_K_S).file_type == 16);
    CHECK(quant_mix_info(QuantMix::IQ4_NL).file_type == 25);
    CHECK(quant_mix_info(QuantMix::IQ4_XS).file_type == 30);
    CHECK(llama_file_type(TensorType::Q4_K) == 15);
    CHECK(llama_file_type(TensorType::BF16) == 32);

    // 22 layers (TinyLlama), 8 query heads per KV head: n/8 = 2, 7n/8 = 19, n/16 = 1.
    ModelShape s = mix_shape(256, 1);
    s.n_layers = 22;
    s.n_heads = 8;
    auto type = [&](QuantMix m, const std::string& name) {
        return std::string(type_traits(mix_tensor_type(m, s, name, 256)).name);
    };
    std::string more_bits, q3_down, iq4_down, q4s_v;
    for (int l = 0; l < 22; ++l) {
        const std::string p = fmt::format("blk.{}.", l);
        more_bits += type(QuantMix::Q4_K_M, p + "ffn_down.weight") == "Q6_K" ? 'x' : '.';
        q3_down += type(QuantMix::Q3_K_M, p + "ffn_down.weight") == "Q5_K" ? 'x' : '.';
        iq4_down += type(QuantMix::IQ4_XS, p + "ffn_down.weight") == "Q5_K" ? 'x' : '.';
        q4s_v += type(QuantMix::Q4_K_S, p + "attn_v.weight") == "Q5_K" ? 'x' : '.';
    }
    CHECK(more_bits == "xx..x..x..x..x..x..xxx");  // l < 2, l >= 19, (l - 2) % 3 == 2
    CHECK(q3_down == "x.....................");
    CHECK(iq4_down == "xx....................");
    CHECK(q4s_v == "xxxx..................");
    CHECK(type(QuantMix::IQ4_XS, "blk.5.attn_v.weight") == "Q5_K");  // 8 heads per KV head
    CHECK(type(QuantMix::IQ4_NL, "output.weight") == "Q6_K");
    CHECK(type(QuantMix::Q3_K_S, "blk.0.attn_v.weight") == "Q3_K");
    CHECK(type(QuantMix::Q3_K_L, "blk.9.ffn_down.weight") == "Q5_K");
    CHECK(type(QuantMix::Q3_K_L, "blk.9.attn_output.weight") == "Q5_K");
    CHECK(type(QuantMix::Q5_K_S, "blk.0.ffn_down.weight") == "Q5_K");
    CHECK(type(QuantMix::Q4_K_M, "blk.3.attn_norm.weight") == "F32");
    // IQ4_XS rows that are not whole 256-blocks become IQ4_NL.
    CHECK(std::string(type_traits(mix_tensor_type(QuantMix::IQ4_XS, s, "blk.1.attn_q.weight", 288)).name) ==
          "IQ4_NL");
    // Tied embeddings: token_embd is quantized as the output head.
    s.tied_embeddings = true;
    CHECK(type(QuantMix::Q4_K_M, "token_embd.weight") == "Q6_K");
    // 80 layers with grouped-query attention is llama.cpp's 70B: attn_v Q3_K/Q4_K become Q5_K.
    s.tied_embeddings = false;
    s.n_layers = 80;
    CHECK(type(QuantMix::Q4_K_S, "blk.40.attn_v.weight") == "Q5_K");
    CHECK(type(QuantMix::Q2_K, "blk.40.attn_v.weight") == "Q5_K");
    s.n_kv_heads = s.n_heads;
    CHECK(type(QuantMix::Q4_K_S, "blk.40.attn_v.weight") == "Q4_K");
}

TEST_CASE("gguf writer: llama.cpp mixes of mixtures of experts give each tensor llama-quantize's type") {
    // What `llama-quantize in-f16.gguf out.gguf MIX` (build 9749) chose for gen-model's F16 files
    // of the same shapes, 8 layers (more bits in layers 0, 3, 6, 7), every mix of kAllQuantMixes
    // compared tensor by tensor when these rules were written; the cases below pin the MoE rules.
    // llama.cpp's layer of an expert tensor comes from its name, ffn_down_exps and ffn_down_shexp
    // follow ffn_down's rule, and exactly 8 experts (Mixtral 8x7B's class) give attn_k and attn_v
    // Q8_0 and most mixes' attn_output Q5_K.
    auto write = [](const std::string& tag, ModelShape s, QuantMix mix) {
        s.mix = mix;
        const auto path = (vkllm::test::scratch_dir() / fmt::format("moe_mix_{}.gguf", tag)).string();
        write_random_model(path, s);
        return GgufFile::open(path);
    };
    auto layers = [](const GgufFile& f, const std::string& suffix) {
        std::string out;
        for (int l = 0; l < 8; ++l) {
            if (l) out += ' ';
            out += type_name(f, fmt::format("blk.{}.{}", l, suffix));
        }
        return out;
    };
    ModelShape mixtral = mix_shape(256, 2);
    mixtral.ffn_dim = 512;
    mixtral.n_expert = 8;
    mixtral.n_expert_used = 2;
    {
        GgufFile f = write("mixtral8_q4_k_m", mixtral, QuantMix::Q4_K_M);
        CHECK(layers(f, "attn_k.weight") == "Q8_0 Q8_0 Q8_0 Q8_0 Q8_0 Q8_0 Q8_0 Q8_0");
        CHECK(layers(f, "attn_v.weight") == "Q8_0 Q8_0 Q8_0 Q8_0 Q8_0 Q8_0 Q8_0 Q8_0");
        CHECK(layers(f, "attn_output.weight") == "Q5_K Q5_K Q5_K Q5_K Q5_K Q5_K Q5_K Q5_K");
        CHECK(layers(f, "attn_q.weight") == "Q4_K Q4_K Q4_K Q4_K Q4_K Q4_K Q4_K Q4_K");
        CHECK(layers(f, "ffn_down_exps.weight") == "Q6_K Q4_K Q4_K Q6_K Q4_K Q4_K Q6_K Q6_K");
        CHECK(layers(f, "ffn_gate_exps.weight") == "Q4_K Q4_K Q4_K Q4_K Q4_K Q4_K Q4_K Q4_K");
        CHECK(layers(f, "ffn_up_exps.weight") == "Q4_K Q4_K Q4_K Q4_K Q4_K Q4_K Q4_K Q4_K");
        CHECK(layers(f, "ffn_gate_inp.weight") == "F32 F32 F32 F32 F32 F32 F32 F32");  // the router stays f32
        CHECK(type_name(f, "output.weight") == "Q6_K");
        CHECK_NOTHROW(ModelConfig::from_gguf(f));
    }
    CHECK(type_name(write("mixtral8_q3_k_l", mixtral, QuantMix::Q3_K_L), "blk.2.attn_output.weight") == "Q3_K");
    CHECK(type_name(write("mixtral8_q2_k", mixtral, QuantMix::Q2_K), "blk.2.attn_output.weight") == "Q5_K");
    {
        // Split experts take the stack's type.
        ModelShape split = mixtral;
        split.split_experts = true;
        GgufFile f = write("mixtral8_split_q4_k_m", split, QuantMix::Q4_K_M);
        CHECK(type_name(f, "blk.3.ffn_down.7.weight") == "Q6_K");
        CHECK(type_name(f, "blk.4.ffn_down.0.weight") == "Q4_K");
        CHECK_NOTHROW(ModelConfig::from_gguf(f));
    }
    {
        // 4 experts: the dense rules.
        ModelShape m4 = mixtral;
        m4.n_expert = 4;
        GgufFile f = write("mixtral4_q4_k_m", m4, QuantMix::Q4_K_M);
        CHECK(layers(f, "attn_k.weight") == "Q4_K Q4_K Q4_K Q4_K Q4_K Q4_K Q4_K Q4_K");
        CHECK(layers(f, "attn_v.weight") == "Q6_K Q4_K Q4_K Q6_K Q4_K Q4_K Q6_K Q6_K");
        CHECK(layers(f, "attn_output.weight") == "Q4_K Q4_K Q4_K Q4_K Q4_K Q4_K Q4_K Q4_K");
    }
    {
        ModelShape q = mix_shape(256, 2);
        q.arch = "qwen2moe";
        q.ffn_dim = 512;
        q.n_expert = 8;
        q.n_expert_used = 4;
        q.expert_ffn = 256;
        q.shared_ffn = 256;
        GgufFile f = write("qwen2moe_q4_k_m", q, QuantMix::Q4_K_M);
        CHECK(layers(f, "ffn_down_shexp.weight") == "Q6_K Q4_K Q4_K Q6_K Q4_K Q4_K Q6_K Q6_K");
        CHECK(layers(f, "ffn_up_shexp.weight") == "Q4_K Q4_K Q4_K Q4_K Q4_K Q4_K Q4_K Q4_K");
        CHECK(type_name(f, "blk.5.ffn_gate_inp_shexp.weight") == "F32");
        CHECK_NOTHROW(ModelConfig::from_gguf(f));
    }
    {
        // DeepSeek (16 experts: no 8-expert rule): the leading dense layer's ffn_down by its layer,
        // the latent attention's short rows falling back (attn_k_b rows of 64, attn_q_b of 96).
        ModelShape d = mix_shape(256, 4);
        d.arch = "deepseek2";
        d.ffn_dim = 512;
        d.head_dim = 96;
        d.kv_lora = 128;
        d.rope_dim = 32;
        d.v_head_dim = 64;
        d.q_lora = 96;
        d.n_expert = 16;
        d.n_expert_used = 4;
        d.expert_ffn = 256;
        d.n_dense_lead = 1;
        GgufFile f = write("deepseek2_q4_k_m", d, QuantMix::Q4_K_M);
        CHECK(type_name(f, "blk.0.ffn_down.weight") == "Q6_K");
        CHECK(type_name(f, "blk.3.ffn_down_exps.weight") == "Q6_K");
        CHECK(type_name(f, "blk.3.ffn_down_shexp.weight") == "Q6_K");
        CHECK(type_name(f, "blk.4.ffn_down_exps.weight") == "Q4_K");
        CHECK(type_name(f, "blk.4.attn_output.weight") == "Q4_K");
        CHECK(type_name(f, "blk.4.attn_k_b.weight") == "Q5_0");
        CHECK(type_name(f, "blk.4.attn_v_b.weight") == "Q5_0");
        CHECK(type_name(f, "blk.4.attn_q_b.weight") == "Q5_0");
        CHECK(type_name(f, "blk.4.attn_kv_a_mqa.weight") == "Q4_K");
        CHECK_NOTHROW(ModelConfig::from_gguf(f));
        // An older file's attn_kv_b takes attn_v's rules (rows of 128: Q5_K -> Q5_1, Q4_K -> Q5_0).
        d.mla_kv_b = true;
        GgufFile old = write("deepseek2_kv_b_q3_k_m", d, QuantMix::Q3_K_M);
        CHECK(layers(old, "attn_kv_b.weight") == "Q5_1 Q5_1 Q5_0 Q5_0 Q5_0 Q5_0 Q5_0 Q5_0");
        CHECK(old.find_tensor("blk.0.attn_k_b.weight") == nullptr);
        CHECK_NOTHROW(ModelConfig::from_gguf(old));
    }
    // Expert widths a mix cannot hold (no 32-element fallback).
    ModelShape bad = mixtral;
    bad.arch = "qwen3moe";
    bad.expert_ffn = 48;
    bad.mix = QuantMix::Q4_K_M;
    CHECK_THROWS_WITH_AS(validate_model_shape(bad),
                         "the q4_k_m mix's weights need expert and shared-expert ffn sizes of whole 32-element blocks, not 48",
                         std::invalid_argument);
}
