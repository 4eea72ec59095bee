// The device forward pass against the host reference: real weights (stories260K), random weights
// at real LLaMA layer shapes for every weight type, the F16 tiny model, and the per-token host
// work of decoding.
#include "support/test_context.h"

#include "support/model_test_util.h"

#include "model/forward/forward_check.h"
#include "model/forward/layer_plan.h"
#include "model/forward/model_weights.h"
#include "model/testgen/model_shape.h"
#include "model/forward/model_cpu.h"
#include "model/forward/model_gpu.h"
#include "model/sampler.h"
#include "runtime/vk_check.h"

#include <filesystem>
#include <fstream>
#include <set>

using namespace vkllm;
namespace fs = std::filesystem;

namespace {

// Intermediate tensors: host and device compute K and V that differ in the last f32 bits, and a
// value near an f16 rounding boundary then lands one f16 ulp (~1e-3 relative) apart in the cache.
// That shows as ~1e-6 NMSE in the attention output of a few-dozen-element model; logits stay ~1e-9.
constexpr double kTensorNmse = 1e-5;

// Evaluates `prompt` then `decode_steps` greedy tokens on device and host, comparing every layer's
// tensors on the prompt and the logits at every step.
void compare_with_reference(const std::string& path, const ModelOptions& opts, std::vector<int32_t> prompt,
                            int decode_steps, double tensor_nmse, double logits_nmse, Context* on = nullptr) {
    test::ValidationGuard guard;
    Context& ctx = on ? *on : test::float_path_context();
    test::LoadedModel m = test::open_model(path);
    ModelGpu gpu(ctx, m.file, m.cfg, opts);
    ModelCpu cpu(m.file, m.cfg, gpu.n_ctx(), opts.kv_type, opts.ubatch);
    CheckReport r = check_forward(gpu, cpu, prompt, tensor_nmse, logits_nmse);
    INFO(r.first_divergence);
    MESSAGE(path << ": prompt of " << prompt.size() << " tokens: worst tensor " << r.worst_tensor << " nmse "
                 << r.worst_tensor_nmse << ", logits nmse " << r.logits_nmse);
    CHECK(r.ok);
    double worst = r.logits_nmse;
    int32_t next = r.gpu_argmax;
    for (int i = 0; i < decode_steps; ++i) {
        int32_t tok = next;
        CheckReport d = check_forward(gpu, cpu, std::span<const int32_t>(&tok, 1), tensor_nmse, logits_nmse);
        INFO("decode step " << i << ": " << d.first_divergence);
        CHECK(d.ok);
        worst = std::max(worst, d.logits_nmse);
        next = d.gpu_argmax;
    }
    MESSAGE("worst logits nmse over " << decode_steps << " decode steps: " << worst);
}

// 40 tokens of stories260K's vocab in ubatches of 16: two full chunks and a remainder of 8.
std::vector<int32_t> chunked_prompt() {
    std::vector<int32_t> prompt(40);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t(1 + (i * 37) % 500);
    return prompt;
}
ModelOptions chunked_options(ops::KvType kv) {
    ModelOptions opts;
    opts.n_ctx = 256;
    opts.ubatch = 16;
    opts.kv_type = kv;
    return opts;
}

}  // namespace

TEST_CASE("forward: stories260K logits match the host reference at every position of 64 tokens") {
    std::string path = test::model_path("stories260K.gguf");
    if (path.empty()) return;
    test::ValidationGuard guard;
    Context& ctx = test::context();
    test::LoadedModel m = test::open_model(path);
    ModelOptions opts;
    opts.n_ctx = 128;
    ModelGpu gpu(ctx, m.file, m.cfg, opts);
    ModelCpu cpu(m.file, m.cfg, gpu.n_ctx());
    int32_t tok = 1;  // BOS, then the device's greedy choice
    double worst = 0;
    for (int pos = 0; pos < 64; ++pos) {
        std::vector<float> ref = cpu.eval(std::span<const int32_t>(&tok, 1));
        gpu.eval(std::span<const int32_t>(&tok, 1));
        std::vector<float> got = gpu.logits();
        test::Compare c = test::validate_result("logits@" + std::to_string(pos), got, ref, {1e-6, 2e-2, 1e-2});
        worst = std::max(worst, c.nmse);
        tok = gpu.argmax();
        CHECK(tok == int32_t(std::max_element(ref.begin(), ref.end()) - ref.begin()));
    }
    MESSAGE("stories260K: worst logits nmse over 64 positions: " << worst);
}

TEST_CASE("forward: stories260K prefill in ubatch chunks matches the reference layer by layer") {
    std::string path = test::model_path("stories260K.gguf");
    if (path.empty()) return;
    compare_with_reference(path, chunked_options(ops::KvType::F16), chunked_prompt(), 4, kTensorNmse, 1e-6);
}

TEST_CASE("forward: a q8_0 KV cache matches the host reference layer by layer; rows of partial blocks are refused") {
    std::string path = test::model_path("stories260K.gguf");
    if (path.empty()) return;
    const ModelOptions opts = chunked_options(ops::KvType::Q8_0);
    // The host quantizes the same rows by the definition; a device whose division is a few ulps off
    // may store a value at a rounding tie one step away, hence a looser bound than f16's.
    compare_with_reference(path, opts, chunked_prompt(), 4, 1e-4, 1e-5);

    test::LoadedModel m = test::open_model(path);
    ModelConfig odd = m.cfg;
    odd.head_dim = 20;  // 4 KV heads x 20 = 80 values per row: 2.5 blocks
    try {
        plan_memory(test::context().caps(), m.file, odd, opts);
        FAIL("a q8_0 cache of 80-value rows was accepted");
    } catch (const std::invalid_argument& e) {
        CHECK(std::string(e.what()).find("not a multiple of 32") != std::string::npos);
    }
}

TEST_CASE("forward: decoding does no per-token recording, allocation or descriptor work") {
    std::string path = test::model_path("stories260K.gguf");
    if (path.empty()) return;
    test::ValidationGuard guard;
    Context& ctx = test::context();
    test::LoadedModel m = test::open_model(path);
    ModelGpu gpu(ctx, m.file, m.cfg, {});
    int32_t tok = 1;
    gpu.eval(std::span<const int32_t>(&tok, 1));  // records the decode streams once
    ForwardStats before = gpu.stats();
    AllocatorStats alloc_before = ctx.allocator().stats();
    uint32_t pipelines_before = ctx.pipeline_stats().created;
    for (int i = 0; i < 20; ++i) {
        tok = gpu.argmax();
        gpu.eval(std::span<const int32_t>(&tok, 1));
    }
    CHECK(gpu.stats().recordings == before.recordings);  // hence zero descriptor-set updates
    CHECK(gpu.stats().submits == before.submits + 20);   // one vkQueueSubmit per token
    CHECK(ctx.allocator().stats().used_bytes == alloc_before.used_bytes);
    CHECK(ctx.allocator().stats().blocks == alloc_before.blocks);
    CHECK(ctx.pipeline_stats().created == pipelines_before);
}

TEST_CASE("forward: start-up compiles every pipeline prompts, decode steps and decode batches record") {
    // ForwardStage::pipelines() is the start-up warm-up list; a pipeline it misses is compiled at first
    // use, in the middle of a reply. A fresh context, so that no other test's pipelines count.
    std::string path = test::model_path("stories260K.gguf");
    if (path.empty()) return;
    test::ValidationGuard guard;
    auto ctx = test::make_context({});
    test::LoadedModel m = test::open_model(path);
    ModelOptions opts;
    opts.n_ctx = 64;
    opts.ubatch = 8;
    opts.n_seq = 3;
    ModelGpu gpu(*ctx, m.file, m.cfg, opts);
    const uint32_t after_load = ctx->pipeline_stats().created;
    CHECK(after_load > 0);
    const std::vector<int32_t> prompt = {1, 400, 401, 402, 403, 404, 405, 406, 407, 408, 409};  // chunks of 8 + 3
    for (uint32_t s = 0; s < 3; ++s) gpu.eval(s, prompt);
    int32_t tok = gpu.argmax();
    gpu.decode(std::vector<SeqToken>{{0, tok}});                       // a lone token
    gpu.decode(std::vector<SeqToken>{{0, tok}, {1, tok}, {2, tok}});   // a decode batch of 3
    gpu.decode(std::vector<SeqToken>{{1, tok}, {2, tok}});             // and of 2
    CHECK(ctx->pipeline_stats().created == after_load);
}

TEST_CASE("forward: the context is never overrun") {
    std::string path = test::model_path("stories260K.gguf");
    if (path.empty()) return;
    test::ValidationGuard guard;
    test::LoadedModel m = test::open_model(path);
    ModelOptions opts;
    opts.n_ctx = 32;
    ModelGpu gpu(test::context(), m.file, m.cfg, opts);
    std::vector<int32_t> tokens(30, 5);
    gpu.eval(tokens);
    CHECK(gpu.n_past() == 30);
    std::vector<int32_t> three(3, 5);
    CHECK_THROWS_WITH_AS(gpu.eval(three), doctest::Contains("do not fit"), ContextFullError);
    CHECK(gpu.n_past() == 30);  // nothing was evaluated
    std::vector<int32_t> bad = {int32_t(m.cfg.n_vocab)};
    CHECK_THROWS_AS(gpu.eval(bad), std::out_of_range);
}

TEST_CASE("forward: a model too big for the device is refused before allocating") {
    std::string path = test::model_path("stories260K.gguf");
    if (path.empty()) return;
    test::LoadedModel m = test::open_model(path);
    DeviceCaps caps = test::context().caps();
    caps.device_local_bytes = 512 << 10;  // 512 KiB device: the 1 MiB of weights cannot fit
    CHECK_THROWS_WITH_AS(plan_memory(caps, m.file, m.cfg, {}), doctest::Contains("does not fit"), DeviceLimitError);
    caps = test::context().caps();
    ModelOptions huge;
    huge.n_ctx = 1u << 30;
    CHECK_THROWS_WITH_AS(plan_memory(caps, m.file, m.cfg, huge), doctest::Contains("--ctx"), DeviceLimitError);
    MemoryPlan p = plan_memory(caps, m.file, m.cfg, {});
    CHECK(p.n_ctx == 2048);  // the model's own context when it fits
    CHECK(p.kv_cache == 2ull * 5 * 2048 * 32 * 2);
}

TEST_CASE("forward: llama-2-tiny-random (F16 weights, 32000 vocab) loads and matches the reference") {
    std::string path = test::model_path("llama-2-tiny-random.gguf");
    if (path.empty()) return;
    ModelOptions opts;
    opts.n_ctx = 64;
    compare_with_reference(path, opts, {1, 450, 4996, 17354, 1701, 29916}, 3, kTensorNmse, 1e-6);
}

TEST_CASE("forward: random models at real layer shapes, every weight type") {
    struct Case {
        const char* name;
        uint32_t dim, heads, kv_heads, ffn;
    };
    // GQA 8:1 with head_dim 64 and with head_dim 128 (LLaMA-3 / Llama-2-7B layer geometry, fewer heads).
    // ffn 1376 is not a multiple of 256, so the K-quants and IQ4_XS run on the second shape only.
    const Case cases[] = {{"gqa8_hd64", 512, 8, 1, 1376}, {"gqa8_hd128", 1024, 8, 1, 2816}};
    for (const Case& c : cases) {
        for (TensorType t : kAllTensorTypes) {
            if (c.ffn % type_traits(t).block_elems != 0) continue;
            std::string name = std::string(c.name) + "_" + std::string(type_traits(t).name);
            CAPTURE(name);
            ModelShape shape;
            shape.dim = c.dim;
            shape.n_layers = 2;
            shape.n_heads = c.heads;
            shape.n_kv_heads = c.kv_heads;
            shape.ffn_dim = c.ffn;
            shape.n_vocab = 1024;
            shape.n_ctx = 256;
            shape.weight_type = t;
            shape.seed = 7;
            std::string path = test::write_model(name, shape);
            ModelOptions opts;
            opts.ubatch = 16;
            std::vector<int32_t> prompt(37);  // longer than two ubatches
            for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 131 + 7) % shape.n_vocab);
            // Host and device use the same dequantized weights, so even quantized models agree to
            // summation order; the KV cache is f16 on both.
            compare_with_reference(path, opts, prompt, 3, kTensorNmse, 1e-5);
        }
    }
}

TEST_CASE("forward: mixed-type files (llama.cpp mixes) match the reference") {
    // ffn 1376 is not a multiple of 256: ffn_down rows fall back (Q4_K -> Q5_0, Q3_K -> Q4_0), and
    // the mixes upgrade attn_v / ffn_down / output (Q6_K, Q5_K), so one file holds 4-5 types, Q|K|V
    // and gate|up of different types in some layers (decoded without the fused matvec there).
    struct Case {
        const char* name;
        QuantMix mix;
    };
    for (const Case& c : {Case{"q4_k_m", QuantMix::Q4_K_M}, Case{"q3_k_m", QuantMix::Q3_K_M},
                          Case{"q2_k", QuantMix::Q2_K}, Case{"iq4_xs", QuantMix::IQ4_XS}}) {
        CAPTURE(c.name);
        ModelShape shape;
        shape.dim = 512;
        shape.n_layers = 8;
        shape.n_heads = 8;
        shape.n_kv_heads = 2;
        shape.ffn_dim = 1376;
        shape.n_vocab = 1024;
        shape.n_ctx = 256;
        shape.mix = c.mix;
        shape.seed = 9;
        const std::string path = test::write_model(std::string("mix_") + c.name, shape);
        test::LoadedModel m = test::open_model(path);
        std::set<TensorType> types;
        for (const auto& t : m.file.tensors())
            if (t.n_dims == 2) types.insert(t.type);
        CHECK(types.size() >= 3);
        ModelOptions opts;
        opts.ubatch = 16;
        std::vector<int32_t> prompt(21);
        for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 97 + 3) % shape.n_vocab);
        compare_with_reference(path, opts, prompt, 3, kTensorNmse, 1e-5);
    }
}

TEST_CASE("sampler: top-k 1 is greedy; the penalty lowers repeated tokens") {
    std::vector<float> logits = {0.1f, 2.0f, 1.9f, -1.0f};
    SamplerParams p;
    p.temperature = 1.0f;
    p.top_k = 1;
    Sampler s(p);
    for (int i = 0; i < 10; ++i) {
        std::vector<float> l = logits;
        CHECK(s.sample(l) == 1);
    }
    p = {};
    p.temperature = 0;
    p.repeat_penalty = 2.0f;
    Sampler pen(p);
    pen.accept(1);
    std::vector<float> l = logits;
    CHECK(pen.sample(l) == 2);  // 2.0 / 2 = 1.0 < 1.9
}

TEST_CASE("sampler: logit_bias shifts a token's logit first; -100 bans it") {
    SamplerParams p;
    p.temperature = 0;
    p.logit_bias = {{1, -100.0f}, {3, 2.5f}};
    CHECK(p.adjusts_logits());
    Sampler s(p);
    std::vector<float> l = {0.1f, 2.0f, 1.9f, -1.0f};
    CHECK(s.sample(l) == 2);  // 1 banned; 3 rises to 1.5 < 1.9
    CHECK(l[3] == doctest::Approx(1.5f));
    // Sampled hot, a banned token never comes, however likely it was.
    p.temperature = 1.5f;
    p.top_k = 0;
    p.logit_bias = {{1, -100.0f}};
    Sampler hot(p);
    for (int i = 0; i < 200; ++i) {
        std::vector<float> h = {0.1f, 20.0f, 1.9f, -1.0f};
        CHECK(hot.sample(h) != 1);
    }
    p.logit_bias = {{1, 101.0f}};
    CHECK_THROWS_WITH_AS(p.validate(), doctest::Contains("logit_bias"), std::invalid_argument);
    p.logit_bias = {{-1, 1.0f}};
    CHECK_THROWS_WITH_AS(p.validate(), doctest::Contains("logit_bias"), std::invalid_argument);
}

TEST_CASE("sampler: presence and frequency penalties subtract by the token's count in the output") {
    SamplerParams p;
    p.temperature = 0;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    Sampler s(p);
    s.accept(4);  // a prompt token: not penalized
    for (int32_t t : {1, 1, 2, 3, 1}) s.accept(t, true);
    std::vector<float> l = {0.0f, 2.0f, 2.0f, 2.0f, 1.0f};
    s.sample(l);
    CHECK(l[0] == 0.0f);
    CHECK(l[1] == doctest::Approx(2.0f - 0.5f - 0.75f));  // generated three times
    CHECK(l[2] == doctest::Approx(2.0f - 0.5f - 0.25f));
    CHECK(l[4] == 1.0f);
    p.presence_penalty = 2.5f;
    CHECK_THROWS_WITH_AS(p.validate(), doctest::Contains("presence_penalty"), std::invalid_argument);
    p.presence_penalty = 0;
    p.frequency_penalty = NAN;
    CHECK_THROWS_WITH_AS(p.validate(), doctest::Contains("frequency_penalty"), std::invalid_argument);
}

TEST_CASE("forward: integer-dot matvecs and matmuls (--caps int-dot) on a Q4_K_M mix stay within X's quantization") {
    // Chunks of at most 8 tokens and decode steps run matvecs, longer chunks matmuls: with int-dot
    // forced, every Q4_K, Q5_0, Q6_K, ... projection quantizes its input to Q8_1 (once for Q, K and
    // V, once for gate and up) and multiplies integers. The host reference keeps f32 activations, so the tolerance is the
    // activation quantization's compounded over 4 layers of random weights (measured: 1e-3 at
    // worst, in ffn_act), far above the float path's 1e-9 and far below what a wrong block, scale
    // or offset gives (~1).
    ModelShape shape;
    shape.dim = 512;
    shape.n_layers = 4;
    shape.n_heads = 8;
    shape.n_kv_heads = 2;
    shape.ffn_dim = 1376;
    shape.n_vocab = 1024;
    shape.n_ctx = 256;
    shape.mix = QuantMix::Q4_K_M;
    shape.seed = 11;
    const std::string path = test::write_model("int_dot_q4_k_m", shape);
    auto ctx = test::make_context(CapsOverride::parse("int-dot"));
    REQUIRE(ctx->caps().int_dot_kernels);
    ModelOptions opts;
    opts.ubatch = 8;
    opts.n_seq = 2;
    std::vector<int32_t> prompt(19);  // chunks of 8, 8 and 3
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 131 + 7) % shape.n_vocab);
    compare_with_reference(path, opts, prompt, 3, 5e-3, 5e-3, ctx.get());
    opts.ubatch = 16;  // chunks of 16 (matmul_dot) and 3
    compare_with_reference(path, opts, prompt, 3, 5e-3, 5e-3, ctx.get());

    // The warm-up lists the quantizer and every integer-dot variant: prompts in chunks of 16 and 3
    // and decode batches of 1 to 3 compile nothing after the load (a fresh context).
    auto fresh = test::make_context(CapsOverride::parse("int-dot"));
    test::LoadedModel m = test::open_model(path);
    opts.n_seq = 3;
    ModelGpu gpu(*fresh, m.file, m.cfg, opts);
    const uint32_t after_load = fresh->pipeline_stats().created;
    for (uint32_t q = 0; q < 3; ++q) gpu.eval(q, std::span<const int32_t>(prompt.data(), 19));
    const int32_t tok = gpu.argmax();
    gpu.decode(std::vector<SeqToken>{{0, tok}});
    gpu.decode(std::vector<SeqToken>{{0, tok}, {1, tok}, {2, tok}});
    gpu.decode(std::vector<SeqToken>{{1, tok}, {2, tok}});
    CHECK(fresh->pipeline_stats().created == after_load);
}

TEST_CASE("forward: a mixture of experts on integer dot products (--caps int-dot) stays within X's quantization") {
    // Chunks of 16 tokens group their slots per expert and run matmul_dot_id (gate and up share one
    // quantized X, down quantizes each slot's GLU row); decode steps run matvec_dot_id per slot
    // (down's GLU applied as its X is quantized).
    ModelShape shape;
    shape.arch = "qwen3moe";
    shape.dim = 256;
    shape.n_layers = 2;
    shape.n_heads = 4;
    shape.n_kv_heads = 2;
    shape.ffn_dim = 256;
    shape.n_expert = 8;
    shape.n_expert_used = 2;
    shape.expert_ffn = 96;
    shape.n_vocab = 512;
    shape.n_ctx = 128;
    shape.weight_type = TensorType::Q4_0;
    shape.seed = 23;
    const std::string path = test::write_model("int_dot_qwen3moe_q4_0", shape);
    auto ctx = test::make_context(CapsOverride::parse("int-dot"));
    ModelOptions opts;
    opts.ubatch = 16;
    std::vector<int32_t> prompt(37);  // chunks of 16, 16 and 5
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 97 + 3) % shape.n_vocab);
    test::LoadedModel m = test::open_model(path);
    const LayerPlan p = plan_layer(ctx->caps(), m.cfg, plan_weights(m.file, m.cfg, 128).layers[0], 0,
                                   StepShape{16, false}, {128, 16, opts.kv_type});
    REQUIRE(p.ffn.moe.grouped);
    CHECK(p.ffn.moe.gate_mm.int_dot());
    CHECK(p.ffn.moe.down_mm.int_dot());
    const LayerPlan d = plan_layer(ctx->caps(), m.cfg, plan_weights(m.file, m.cfg, 128).layers[0], 0, StepShape{1, false},
                                   {128, 16, opts.kv_type});
    REQUIRE_FALSE(d.ffn.moe.grouped);
    CHECK(d.ffn.moe.up.int_dot());
    CHECK(d.ffn.moe.down.int_dot());
    // Tiles follow the slots an expert gets on average, not the chunk: 64 tokens x 2 of 8 experts
    // are 16 per expert, a 32-row tile, where the chunk's dense projections take 64 rows.
    const LayerPlan c64 = plan_layer(ctx->caps(), m.cfg, plan_weights(m.file, m.cfg, 128).layers[0], 0,
                                     StepShape{64, false}, {128, 64, opts.kv_type});
    CHECK(c64.attn.wo.kernel.matmul.tile_m() == 64);
    CHECK(c64.ffn.moe.gate_mm.mm.tile_m() == 32);
    CHECK(c64.ffn.moe.down_mm.mm.tile_m() == 32);
    compare_with_reference(path, opts, prompt, 2, 5e-3, 5e-3, ctx.get());
}

TEST_CASE("forward: cooperative-matrix matmuls (--caps coopmat) on a Q4_K_M mix and on experts stay within half precision") {
    // Chunks of 16 tokens run every projection, and the experts grouped per expert, on the matrix
    // units: X and the weights rounded to half, f32 sums. Decode steps keep the matvecs. The host
    // reference keeps f32: the tolerance is half precision's rounding compounded over the layers
    // (about 2^-11 per operand), as the integer-dot test bounds X's quantization, far below a
    // wrong tile or slice (~1).
    Context* ctx = test::coopmat_context();
    if (!ctx) return;
    ModelShape shape;
    shape.dim = 512;
    shape.n_layers = 4;
    shape.n_heads = 8;
    shape.n_kv_heads = 2;
    shape.ffn_dim = 1376;
    shape.n_vocab = 1024;
    shape.n_ctx = 256;
    shape.mix = QuantMix::Q4_K_M;
    shape.seed = 11;
    const std::string dense = test::write_model("coopmat_q4_k_m", shape);
    test::LoadedModel dm = test::open_model(dense);
    const LayerPlan dp = plan_layer(ctx->caps(), dm.cfg, plan_weights(dm.file, dm.cfg, 256).layers[0], 0,
                                    StepShape{16, false}, {256, 16, ops::KvType::F16});
    CHECK(dp.attn.wo.kernel.matmul.kernel == ops::MatmulPlan::Kernel::Coopmat);
    ModelOptions opts;
    opts.ubatch = 16;
    std::vector<int32_t> prompt(37);  // chunks of 16, 16 and 5
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 131 + 7) % shape.n_vocab);
    compare_with_reference(dense, opts, prompt, 3, 1e-4, 1e-4, ctx);

    shape.arch = "qwen3moe";
    shape.dim = 256;
    shape.n_layers = 2;
    shape.n_heads = 4;
    shape.ffn_dim = 256;
    shape.n_expert = 8;
    shape.n_expert_used = 2;
    shape.expert_ffn = 96;
    shape.n_vocab = 512;
    shape.n_ctx = 128;
    shape.mix.reset();
    shape.weight_type = TensorType::Q4_0;
    shape.seed = 23;
    const std::string moe = test::write_model("coopmat_qwen3moe_q4_0", shape);
    test::LoadedModel mm = test::open_model(moe);
    const LayerPlan mp = plan_layer(ctx->caps(), mm.cfg, plan_weights(mm.file, mm.cfg, 128).layers[0], 0,
                                    StepShape{16, false}, {128, 16, ops::KvType::F16});
    REQUIRE(mp.ffn.moe.grouped);
    CHECK(mp.ffn.moe.gate_mm.mm.kernel == ops::MatmulPlan::Kernel::Coopmat);
    CHECK(mp.ffn.moe.down_mm.mm.kernel == ops::MatmulPlan::Kernel::Coopmat);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 97 + 3) % shape.n_vocab);
    compare_with_reference(moe, opts, prompt, 2, 1e-4, 1e-4, ctx);
}
