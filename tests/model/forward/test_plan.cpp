// The pure decisions of the forward pass: the tensor schema against the files gen-model writes and
// the config checker's errors, the weight layout's fusion (one type -> back to back, else apart),
// the layer plans' folds and fusions per architecture and batch shape, and the layer range that
// plan_memory and plan_weights take. The recordings that follow the plans are tested end to end in
// test_forward.cpp (and against llama.cpp in test_architectures.cpp).
#include "support/model_test_util.h"
#include "support/test_context.h"

#include "model/arch/tensor_schema.h"
#include "model/forward/device_split.h"
#include "model/forward/layer_plan.h"
#include "model/forward/model_gpu.h"
#include "model/gguf/gguf_writer.h"
#include "model/testgen/random_model.h"
#include "runtime/vk_check.h"

#include <set>

using namespace vkllm;

namespace {

struct File {
    explicit File(const ModelShape& s) : file(GgufFile::from_memory(make_random_model(s).write_memory(), s.arch + ".gguf")),
                                         cfg(ModelConfig::from_gguf(file)) {}
    File(GgufWriter w, const std::string& name)
        : file(GgufFile::from_memory(w.write_memory(), name)), cfg(ModelConfig::from_gguf(file)) {}
    GgufFile file;
    ModelConfig cfg;
};

// The row's test shape (ArchDesc::test).
ModelShape shape_of(const std::string& arch) { return test_shape(*find_arch(arch)); }

}  // namespace

TEST_CASE("schema: gen-model writes exactly the schema's required tensors (and the optional ones it asks for)") {
    for (const ArchDesc& row : all_archs()) {
        CAPTURE(row.name);
        CAPTURE(row.variant);
        const File f(test_shape(row));
        std::set<std::string> required, known;
        // An encoder-decoder's file holds its encoder too (StackDesc::encoder_arch), whose layers have
        // names of their own.
        std::vector<const ArchDesc*> stacks = {f.cfg.arch};
        if (!f.cfg.arch->stack.encoder_arch.empty())
            stacks.push_back(find_arch(f.cfg.arch->stack.encoder_arch, f.cfg.arch->variant));
        for (const ArchDesc* a : stacks) {
            for (const TensorSpec& t : model_schema(*a)) {
                known.insert(tensor_name(t, 0));
                if (t.required) required.insert(tensor_name(t, 0));
            }
            for (uint32_t l = 0; l < f.cfg.n_layers; ++l)
                for (const TensorSpec& t : layer_schema(*a)) {
                    CHECK(known.insert(tensor_name(t, l)).second);  // no name twice
                    // required in the layers it is for (DeepSeek: dense FFN first, then experts)
                    if (t.required && in_layer(t, l, f.cfg.n_dense_lead)) required.insert(tensor_name(t, l));
                }
        }
        for (const GgufTensorInfo& t : f.file.tensors()) {
            CAPTURE(t.name);
            CHECK(known.count(t.name) == 1);
            required.erase(t.name);
        }
        CHECK(required.empty());
    }
}

TEST_CASE("schema: a missing required tensor is named with its expected shape") {
    ModelShape s = shape_of("qwen2");
    GgufWriter w = make_random_model(s);
    REQUIRE(w.remove_tensor("blk.1.attn_k.bias"));
    try {
        File f(std::move(w), "no-bias.gguf");
        FAIL("a qwen2 file without blk.1.attn_k.bias was accepted");
    } catch (const ModelConfigError& e) {
        CHECK(std::string(e.what()).find("'blk.1.attn_k.bias': required tensor is missing (expected shape [32])") !=
              std::string::npos);
    }
}

TEST_CASE("layout: parts of one type are placed back to back as one fused tensor, else apart") {
    ModelShape s = shape_of("llama");
    const File same(s);
    const WeightLayout a = plan_weights(same.file, same.cfg, 256);
    const LayerPlaces& L = a.layers[0];
    REQUIRE(L[Role::Wqkv].present());
    CHECK(L[Role::Wqkv].rows == same.cfg.q_dim() + 2 * same.cfg.kv_dim());
    CHECK(L[Role::Wk].buffer == L[Role::Wq].buffer);
    CHECK(L[Role::Wk].offset == L[Role::Wq].offset + L[Role::Wq].bytes());
    CHECK(L[Role::WGateUp].present());
    CHECK(!L[Role::Bqkv].present());

    // attn_k in another type: q, k and v stay apart, and a lone token projects them one by one.
    GgufWriter w = make_random_model(s);
    w.remove_tensor("blk.0.attn_k.weight");
    w.add_tensor("blk.0.attn_k.weight", TensorType::F16, {s.dim, same.cfg.kv_dim()},
                 [](std::span<uint8_t> dst) { std::fill(dst.begin(), dst.end(), uint8_t(0)); });
    const File mixed(std::move(w), "mixed.gguf");
    const WeightLayout b = plan_weights(mixed.file, mixed.cfg, 256);
    CHECK(!b.layers[0][Role::Wqkv].present());
    CHECK(b.layers[1][Role::Wqkv].present());
    const KvGeometry kv{256, 64, ops::KvType::F16};
    const LayerPlan p = plan_layer(test::context().caps(), mixed.cfg, b.layers[0], 0, {1, false}, kv);
    CHECK(!p.attn.fused_qkv);
    CHECK(p.attn.q.runs());
    CHECK(p.attn.k.runs());
    CHECK(p.attn.v.runs());

    // Phi-3 stores q|k|v and gate|up whole: the parts are row ranges of them.
    const File phi(shape_of("phi3"));
    const WeightLayout c = plan_weights(phi.file, phi.cfg, 256);
    const LayerPlaces& P = c.layers[0];
    CHECK(P[Role::Wk].source == P[Role::Wqkv].source);
    CHECK(P[Role::Wk].first == uint64_t(phi.cfg.q_dim()) * phi.cfg.dim);
    CHECK(P[Role::WUp].rows == phi.cfg.ffn_dim);
    CHECK(P[Role::WUp].offset == P[Role::WGateUp].offset + P[Role::WGate].bytes());
}

TEST_CASE("plan: folds and fusions per architecture and batch shape") {
    const DeviceCaps& caps = test::context().caps();
    const KvGeometry kv{256, 64, ops::KvType::F16};
    for (const ArchDesc* arch : test::dense_decoder_archs()) {
        CAPTURE(arch->name);
        const File f(test_shape(*arch));
        const WeightLayout w = plan_weights(f.file, f.cfg, 256);
        const bool rms = f.cfg.arch->norm.kind == NormKind::Rms, gelu = !gated(f.cfg.arch->ffn.kind);
        const bool post = f.cfg.arch->norm.placement == NormPlacement::PreAndPost;
        for (const StepShape shape : {StepShape{1, false}, StepShape{3, true}, StepShape{3, false}, StepShape{64, false}}) {
            CAPTURE(shape.n);
            CAPTURE(shape.decode_batch);
            const LayerPlan p = plan_layer(caps, f.cfg, w.layers[1], 1, shape, kv);
            CHECK(p.attn.fold_norm == (shape.decode() && rms));
            CHECK(p.attn.fused_qkv == (shape.n == 1));  // one type everywhere, biases fused or absent
            CHECK(p.ffn.fused_gate_up == (shape.n == 1 && !gelu));
            CHECK(p.ffn.fold_act == (shape.decode() && !gelu));
            // M-RoPE's four positions per token: the fused kernels rotate with one, so it rotates apart.
            CHECK(p.attn.fused_store == (shape.decode() && !f.cfg.arch->attn.mrope));
            CHECK(p.attn.post_norm == post);
            CHECK(p.attn.wo.residual == !post);
            CHECK(p.ffn.down.residual == !post);
            // A decode batch's attention is one call for all its sequences, each through its block table.
            CHECK(p.attn.batched == shape.decode_batch);
            CHECK(p.attn.params.batch == shape.decode_batch);
            CHECK(p.attn.params.n_tokens == shape.n);
            // Prompt chunks of more than 8 rows use matmul; decode batches stay on matvec.
            const bool matmul = shape.n > 8 && !shape.decode_batch;
            CHECK((p.attn.wo.kernel.kernel == ops::LinearPlan::Kernel::Matmul) == matmul);
            // The warm-up list: the attention kernel the plan ends with, and a linear kernel.
            std::set<std::string> shaders;
            for (const PipelineDesc& d : p.pipelines(test::context())) shaders.insert(d.shader);
            CHECK(shaders.count(p.attn.fused_store ? "attention_decode_store_f16" : "attention_prefill_f16") +
                      shaders.count("attention_decode_f16") >= 1);
            CHECK(std::any_of(shaders.begin(), shaders.end(),
                              [&](const std::string& n) { return n.starts_with(matmul ? "matmul" : "matvec"); }));
        }
    }
    // A q8_0 cache whose heads are not whole blocks: decode runs rope, the store and attention apart.
    ModelShape s = shape_of("llama");
    s.dim = 96, s.n_heads = 6, s.n_kv_heads = 2;  // head_dim 16, kv rows of 32
    const File q8(s);
    const LayerPlan p = plan_layer(caps, q8.cfg, plan_weights(q8.file, q8.cfg, 256).layers[0], 0, {1, false},
                                   {256, 64, ops::KvType::Q8_0});
    CHECK(!p.attn.fused_store);
    CHECK(p.attn.rope);
}

TEST_CASE("plan: partial q/k/v biases keep the lone token's projections apart") {
    ModelShape s = shape_of("llama");
    GgufWriter w = make_random_model(s);
    w.add_tensor("blk.0.attn_q.bias", TensorType::F32, {s.dim},
                 [](std::span<uint8_t> dst) { std::fill(dst.begin(), dst.end(), uint8_t(0)); });
    const File f(std::move(w), "q-bias.gguf");
    const WeightLayout lay = plan_weights(f.file, f.cfg, 256);
    CHECK(lay.layers[0][Role::Wqkv].present());
    CHECK(!lay.layers[0][Role::Bqkv].present());
    const LayerPlan p = plan_layer(test::context().caps(), f.cfg, lay.layers[0], 0, {1, false}, {256, 64, ops::KvType::F16});
    CHECK(!p.attn.fused_qkv);
    CHECK(p.attn.q.bias == Role::Bq);
    CHECK(p.attn.k.bias == kNoRole);
}

TEST_CASE("layer range: weights and KV of two halves add up to the whole; bad ranges are refused") {
    ModelShape s = shape_of("llama");
    s.n_layers = 4;
    const File f(s);
    const DeviceCaps& caps = test::context().caps();
    ModelOptions o;
    o.n_ctx = 128;
    const MemoryPlan all = plan_memory(caps, f.file, f.cfg, o);
    const MemoryPlan lo = plan_memory(caps, f.file, f.cfg, o, {0, 1});
    const MemoryPlan hi = plan_memory(caps, f.file, f.cfg, o, {1, 3});
    const uint64_t rope_bytes = 0;  // no rope factors in this file
    CHECK(lo.weights + hi.weights == all.weights + rope_bytes);
    CHECK(lo.kv_cache + hi.kv_cache == all.kv_cache);
    const WeightLayout first = plan_weights(f.file, f.cfg, 128, {0, 1}), last = plan_weights(f.file, f.cfg, 128, {1, 0});
    CHECK(first.token_embd.present());
    CHECK(!first.output.present());
    CHECK(first.layers[0][Role::Wq].present());
    CHECK(!first.layers[1][Role::Wq].present());
    CHECK(!last.token_embd.present());
    CHECK(last.output.present());
    CHECK(last.range.count == 3);
    CHECK_THROWS_WITH_AS(plan_weights(f.file, f.cfg, 128, {3, 2}), doctest::Contains("not a range"), std::invalid_argument);
    CHECK_THROWS_AS(plan_memory(caps, f.file, f.cfg, o, {4, 0}), std::invalid_argument);
}

TEST_CASE("memory plan: a spare sequence borrows the others' KV pool and adds no memory of its own") {
    const File f(shape_of("llama"));
    const DeviceCaps& caps = test::context().caps();
    ModelOptions two;
    two.n_ctx = 128;
    two.n_seq = 2;
    ModelOptions spare = two;
    spare.n_seq = 3;
    spare.spare_seqs = 1;
    const MemoryPlan a = plan_memory(caps, f.file, f.cfg, two), b = plan_memory(caps, f.file, f.cfg, spare);
    CHECK(b.kv_budget == a.kv_budget);
    CHECK(b.kv_budget == 2 * 128);
    CHECK(b.kv_cache == a.kv_cache);
    CHECK(b.scratch == a.scratch);  // nor decode rows: it is never in a decode batch
    CHECK(decode_rows(spare) == decode_rows(two));
    ModelOptions three = two;
    three.n_seq = 3;
    CHECK(plan_memory(caps, f.file, f.cfg, three).kv_budget == 3 * 128);
    spare.spare_seqs = 3;  // no sequence left to size the pool for
    CHECK_THROWS_AS(plan_memory(caps, f.file, f.cfg, spare), std::invalid_argument);
}

TEST_CASE("device split: layer counts in proportion, --split's syntax, every part's fit and one context") {
    using V = std::vector<uint32_t>;
    CHECK(split_layer_counts(5, std::vector<double>{3, 1}) == V{4, 1});  // 3.75 / 1.25
    CHECK(split_layer_counts(32, std::vector<double>{1, 1, 1}) == V{11, 11, 10});  // ties: the earlier device
    CHECK(split_layer_counts(4, std::vector<double>{1, 0, 1}) == V{2, 0, 2});
    CHECK(split_layer_counts(2, std::vector<double>{1, 20}) == V{0, 2});
    CHECK(split_layer_counts(7, std::vector<double>{0.5}) == V{7});
    CHECK_THROWS_WITH_AS(split_layer_counts(4, std::vector<double>{0, 0}), doctest::Contains("all 0"), std::invalid_argument);
    CHECK_THROWS_AS(split_layer_counts(4, std::vector<double>{1, -1}), std::invalid_argument);
    CHECK_THROWS_AS(split_layer_counts(4, std::vector<double>{}), std::invalid_argument);

    CHECK(parse_split("layer").empty());
    CHECK(parse_split("layer:3,1") == std::vector<double>{3, 1});
    CHECK(parse_split("layer:0.25,0.75,0") == std::vector<double>{0.25, 0.75, 0});
    for (const char* bad : {"row", "layer:", "layer:3,", "layer:a", "layer:-1,2", "layer:1,,2", "layer:inf", "tensor:1,1"})
        CHECK_THROWS_AS(parse_split(bad), std::invalid_argument);

    ModelShape s = shape_of("llama");
    s.n_layers = 5;
    const File f(s);
    DeviceCaps small = test::context().caps(), big = small;
    auto devs = [](std::vector<DeviceCaps> caps) {  // indices 0, 1, ...
        std::vector<SplitDevice> d;
        for (size_t i = 0; i < caps.size(); ++i) d.push_back({uint32_t(i), caps[i]});
        return d;
    };
    ModelOptions o;
    o.n_ctx = 128;
    small.device_local_bytes = 1ull << 30;
    big.device_local_bytes = 3ull << 30;
    // By memory: 1.25 and 3.75 layers.
    const std::vector<SplitDevice> two = devs({small, big});
    SplitPlan p = plan_split(two, f.file, f.cfg, o);
    CHECK(p.by_memory);
    REQUIRE(p.parts.size() == 2);
    CHECK((p.parts[0].layers.first == 0 && p.parts[0].layers.count == 1));
    CHECK((p.parts[1].layers.first == 1 && p.parts[1].layers.count == 4));
    const MemoryPlan whole = plan_memory(small, f.file, f.cfg, o);
    CHECK(p.parts[0].memory.weights + p.parts[1].memory.weights == whole.weights);
    CHECK(p.parts[0].memory.kv_cache + p.parts[1].memory.kv_cache == whole.kv_cache);
    CHECK(p.n_ctx == 128);
    // By ratios; a device given no layer has no part.
    p = plan_split(devs({small, big, big}), f.file, f.cfg, o, std::vector<double>{1, 0, 1});
    REQUIRE(p.parts.size() == 2);
    CHECK(p.parts[0].device == 0);
    CHECK(p.parts[1].device == 2);
    CHECK(p.parts[1].layers.end() == 5);
    CHECK_THROWS_WITH_AS(plan_split(two, f.file, f.cfg, o, std::vector<double>{1}), doctest::Contains("1 ratios for 2 devices"),
                         std::invalid_argument);
    // Without --ctx: the largest context every part holds, the same on each.
    ModelOptions any = o;
    any.n_ctx = 0;
    DeviceCaps tight = small;
    const MemoryPlan head = plan_memory(small, f.file, f.cfg, o, {0, 3});  // 128 rows
    tight.device_local_bytes = (head.weights + head.scratch + head.kv_cache / 2) / 9 * 10 + 64;  // 64 rows (10% kept)
    p = plan_split(devs({tight, big}), f.file, f.cfg, any, std::vector<double>{3, 2});
    REQUIRE(p.parts.size() == 2);
    CHECK(p.n_ctx >= 32);
    CHECK(p.n_ctx <= 64);
    CHECK(plan_memory(big, f.file, f.cfg, any, {3, 2}).n_ctx > 64);
    CHECK(p.parts[0].memory.n_ctx == p.n_ctx);
    CHECK(p.parts[1].memory.n_ctx == p.n_ctx);
    // A part that cannot fit is named with its device, its layers and its sizes.
    DeviceCaps tiny = small;
    tiny.device_local_bytes = 64ull << 10;
    CHECK_THROWS_WITH_AS(plan_split(devs({big, tiny}), f.file, f.cfg, o, std::vector<double>{1, 1}),
                         doctest::Contains("device 1"), DeviceLimitError);
    CHECK_THROWS_WITH_AS(plan_split(devs({big, tiny}), f.file, f.cfg, o, std::vector<double>{1, 1}),
                         doctest::Contains("layers 3-4"), DeviceLimitError);
    // Encoders are not split.
    ModelShape e;
    e.arch = "bert";
    const File enc(e);
    CHECK_THROWS_WITH_AS(plan_split(two, enc.file, enc.cfg, o), doctest::Contains("only decoder-only models"), ModelConfigError);
}
