// Every architecture of model/arch: the device forward pass against the host reference, layer by
// layer, at F16 and at a K-quant, with shapes that stress each feature (head size != dim / heads,
// GQA, sliding windows shorter than the prompt, so the KV ring wraps); the ring against a full
// cache; the KV memory a sliding-window model saves; and the errors for files vkllm cannot run.
#include "support/test_context.h"

#include "model/arch/architecture.h"
#include "model/embedding.h"
#include "runtime/quant/tensor_types.h"
#include "model/forward/forward_check.h"
#include "model/forward/model_cpu.h"
#include "model/forward/model_gpu.h"
#include "model/forward/position_bias.h"
#include "runtime/vk_check.h"
#include "model/gguf/gguf_writer.h"
#include "model/testgen/random_model.h"
#include "support/model_test_util.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <functional>

using namespace vkllm;
namespace fs = std::filesystem;

namespace {

// A small model of row `a` that exercises its features, its row's test shape (ArchDesc::test): 4 query
// heads over 2 KV heads, and for the architectures that have them a head size that is not dim / heads
// (q_dim = 2 dim), a window of 8, experts. K-quant rows are whole 256-element blocks: dim 256 and
// heads as much wider, experts one block wide, a shared expert two (still wider than the experts).
ModelShape small_shape(const ArchDesc& a, TensorType type) {
    ModelShape s = test_shape(a);
    const bool k_quant = type_traits(type).block_elems == 256;
    s.dim = k_quant ? 256 : 64;
    s.ffn_dim = k_quant ? 256 : 96;
    s.n_heads = 4;
    s.n_vocab = 300;
    s.n_ctx = 256;
    s.weight_type = type;
    if (k_quant) {
        s.head_dim *= 4;
        if (s.expert_ffn) s.expert_ffn = 256;
        if (s.shared_ffn) s.shared_ffn = 512;
    }
    s.name = "arch-test-" + s.arch;
    return s;
}

// The main row of `arch`'s.
ModelShape small_shape(const std::string& arch, TensorType type) { return small_shape(*find_arch(arch), type); }

std::vector<int32_t> prompt_tokens(uint32_t n, uint32_t n_vocab) {
    std::vector<int32_t> t(n);
    for (uint32_t i = 0; i < n; ++i) t[i] = int32_t(1 + (i * 37 + 11) % (n_vocab - 1));
    return t;
}

// Prompt of 30 tokens in ubatches of 8 (the windowed layers' rings of 8 + 8 - 1 rows wrap twice),
// then 6 greedy decode steps; every layer's tensors and the logits are compared at each call.
void check_arch(const std::string& path, double tensor_nmse, double logits_nmse) {
    test::ValidationGuard guard;
    Context& ctx = test::float_path_context();
    test::LoadedModel m = test::open_model(path);
    ModelOptions opts;
    opts.n_ctx = 64;
    opts.ubatch = 8;
    ModelGpu gpu(ctx, m.file, m.cfg, opts);
    ModelCpu cpu(m.file, m.cfg, gpu.n_ctx(), opts.kv_type, opts.ubatch);
    CheckReport r = check_forward(gpu, cpu, prompt_tokens(30, m.cfg.n_vocab), tensor_nmse, logits_nmse);
    INFO(r.first_divergence);
    MESSAGE(path << ": prompt: worst tensor " << r.worst_tensor << " nmse " << r.worst_tensor_nmse
                 << ", logits nmse " << r.logits_nmse);
    CHECK(r.ok);
    int32_t next = r.gpu_argmax;
    for (int i = 0; i < 6; ++i) {
        CheckReport d = check_forward(gpu, cpu, std::span<const int32_t>(&next, 1), tensor_nmse, logits_nmse);
        INFO("decode step " << i << ": " << d.first_divergence);
        CHECK(d.ok);
        next = d.gpu_argmax;
    }
}

// An encoder attends over each whole input at once: inputs of 30, 1 and 17 tokens, each from
// position 0, every layer's tensors and the hidden states of every token compared.
void check_encoder(const std::string& path, double nmse) {
    test::ValidationGuard guard;
    Context& ctx = test::float_path_context();
    test::LoadedModel m = test::open_model(path);
    ModelOptions opts;
    opts.n_ctx = 64;
    opts.ubatch = 32;
    ModelGpu gpu(ctx, m.file, m.cfg, opts);
    ModelCpu cpu(m.file, m.cfg, gpu.n_ctx(), opts.kv_type, opts.ubatch);
    for (uint32_t n : {30u, 1u, 17u}) {
        CAPTURE(n);
        gpu.reset();
        cpu.reset();
        CheckReport r = check_forward(gpu, cpu, prompt_tokens(n, m.cfg.n_vocab), nmse, nmse);
        INFO(r.first_divergence);
        MESSAGE(path << ": " << n << " tokens: worst tensor " << r.worst_tensor << " nmse " << r.worst_tensor_nmse
                     << ", hidden states nmse " << r.logits_nmse);
        CHECK(r.ok);
        CHECK(gpu.hidden_states().size() == size_t(n) * m.cfg.dim);
    }
}

// The file of `shape`, changed by `edit`, is refused by ModelConfig with a message holding `why`.
void check_refused(const ModelShape& shape, const std::function<void(GgufWriter&)>& edit, const std::string& why) {
    CAPTURE(why);
    GgufWriter x = make_random_model(shape);
    edit(x);
    const fs::path p = ::vkllm::test::binary_dir() / "test-tmp" / "models" / "arch-refused-edit.gguf";
    fs::create_directories(p.parent_path());
    x.write_file(p.string());
    GgufFile fx = GgufFile::open(p.string());
    VKLLM_CHECK_THROWS_WITH_SUBSTR(ModelConfig::from_gguf(fx), ModelConfigError, why);
}

}  // namespace

TEST_CASE("architectures: the table lists every architecture the issue names") {
    CHECK(supported_arch_list() == "llama, qwen2, qwen2vl, qwen3, qwen2moe, qwen3moe, olmoe, gpt-oss, deepseek2, phi3, gemma2, gemma3, gpt2, bloom, "
                                   "mpt, bert, nomic-bert, jina-bert-v2, t5encoder, t5");
    // Every row of the table itself: found by its name and variant, after its main row, and the file
    // its test shape (ArchDesc::test) writes is read back as that very row, so a new row cannot come
    // without a shape the tests can write.
    std::string main_rows;
    for (const ArchDesc& a : all_archs()) {
        CAPTURE(a.name);
        CAPTURE(a.variant);
        CHECK(find_arch(a.name, a.variant) == &a);
        REQUIRE(find_arch(a.name) != nullptr);
        CHECK(find_arch(a.name) <= &a);
        if (a.variant.empty()) main_rows += (main_rows.empty() ? "" : ", ") + std::string(a.name);
        const GgufFile f = GgufFile::from_memory(make_random_model(test_shape(a)).write_memory(), "row.gguf");
        CHECK(ModelConfig::from_gguf(f).arch == &a);
    }
    CHECK(main_rows == supported_arch_list());
    CHECK(find_arch("mamba") == nullptr);
}

TEST_CASE("architectures: device matches the host reference layer by layer, F16") {
    for (const ArchDesc* a : test::dense_decoder_archs()) {
        const std::string arch(a->name);
        CAPTURE(arch);
        check_arch(test::write_model("arch-" + arch + "-f16", small_shape(*a, TensorType::F16)), 1e-5, 1e-5);
    }
}

TEST_CASE("architectures: device matches the host reference layer by layer, Q4_K") {
    for (const ArchDesc* a : test::dense_decoder_archs()) {
        const std::string arch(a->name);
        CAPTURE(arch);
        check_arch(test::write_model("arch-" + arch + "-q4_k", small_shape(*a, TensorType::Q4_K)), 1e-5, 1e-5);
    }
}

TEST_CASE("architectures: mixtures of experts (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE, gpt-oss) match the host reference layer by layer") {
    // 6 experts, top-2 (Mixtral's class) and top-4; Qwen3-MoE with head size != dim / heads and
    // experts narrower than the model; Qwen2-MoE's gated shared expert wider than its experts;
    // OLMoE's RMSNorm over all of q and k (2 KV heads: k narrower than q); gpt-oss's sinks, biases,
    // clamped SwiGLU and a window of 8 on layer 0, in F16, Q4_K and MXFP4.
    // Every row with experts (their sizes in its test shape) but DeepSeek's, whose latent attention has
    // its case below; MXFP4 is gpt-oss's experts' type (the clamped SwiGLU's).
    for (TensorType type : {TensorType::F16, TensorType::Q4_K, TensorType::MXFP4}) {
        for (const ArchDesc& a : all_archs()) {
            if (!a.moe() || a.attn.mla) continue;
            if (type == TensorType::MXFP4 && a.ffn.kind != FfnKind::SwiGluOai) continue;
            const std::string arch(a.name);
            CAPTURE(arch);
            CAPTURE(type_traits(type).name);
            check_arch(test::write_model(fmt::format("arch-moe-{}-{}", arch, type_traits(type).name), small_shape(a, type)),
                       1e-5, 1e-5);
        }
    }
    // Without expert_feed_forward_length a Qwen-MoE's experts are feed_forward_length /
    // expert_used_count wide (llama.cpp's rule, for Qwen1.5-MoE conversions); a Mixtral's are
    // feed_forward_length wide, and gen-model refuses to write it otherwise.
    ModelShape q = small_shape("qwen2moe", TensorType::F32);
    q.n_expert = 4;
    q.n_expert_used = 2;
    q.expert_ffn = q.ffn_dim / 2;
    GgufWriter w = make_random_model(q);
    w.remove("qwen2moe.expert_feed_forward_length");
    const fs::path p = ::vkllm::test::binary_dir() / "test-tmp" / "models" / "arch-moe-qwen2moe-no-expert-ffn.gguf";
    fs::create_directories(p.parent_path());
    w.write_file(p.string());
    GgufFile f = GgufFile::open(p.string());
    CHECK(ModelConfig::from_gguf(f).expert_ffn_dim == q.ffn_dim / 2);
    ModelShape mixtral = small_shape("llama", TensorType::F32);
    mixtral.n_expert = 4;
    mixtral.n_expert_used = 2;
    mixtral.expert_ffn = mixtral.ffn_dim / 2;
    CHECK_THROWS_AS(validate_model_shape(mixtral), std::invalid_argument);

    // Gating: expert_gating_func 3 is the softmax of the chosen logits (gpt-oss's, which it always
    // uses; 4 and up are refused below). gpt-oss needs its window and expert width keys.
    auto config_error = [&](const std::string& name, GgufWriter& gw) -> std::string {
        const fs::path path = ::vkllm::test::binary_dir() / "test-tmp" / "models" / (name + ".gguf");
        gw.write_file(path.string());
        GgufFile file = GgufFile::open(path.string());
        try {
            const ModelConfig cfg = ModelConfig::from_gguf(file);
            return cfg.expert_softmax_chosen ? "softmax of the chosen" : "softmax";
        } catch (const std::exception& e) {
            return e.what();
        }
    };
    ModelShape q3 = small_shape("qwen3moe", TensorType::F32);
    q3.n_expert = 4;
    q3.n_expert_used = 2;
    GgufWriter g3 = make_random_model(q3);
    CHECK(config_error("arch-moe-gating-default", g3) == "softmax");
    g3.set_u32("qwen3moe.expert_gating_func", 3);
    CHECK(config_error("arch-moe-gating-3", g3) == "softmax of the chosen");
    ModelShape go = small_shape("gpt-oss", TensorType::F32);
    go.n_expert = 4;
    go.n_expert_used = 2;
    go.window = 8;
    GgufWriter gw = make_random_model(go);
    CHECK(config_error("arch-gpt-oss-gating", gw) == "softmax of the chosen");
    gw.remove("gpt-oss.attention.sliding_window");
    CHECK(config_error("arch-gpt-oss-no-window", gw).find("gpt-oss.attention.sliding_window") != std::string::npos);
    GgufWriter gw2 = make_random_model(go);
    gw2.remove("gpt-oss.expert_feed_forward_length");
    CHECK(config_error("arch-gpt-oss-no-expert-ffn", gw2).find("gpt-oss.expert_feed_forward_length") != std::string::npos);
}

TEST_CASE("architectures: Mixtral files with one tensor per expert (ffn_gate.N) run as the stacked ones") {
    // The first Mixtral conversions stored each expert apart; current llama.cpp refuses them
    // (build 9749 and b4748: "missing tensor 'blk.0.ffn_down_exps.weight'"), so the oracle is the
    // stacked file of the same weights: the device must give its logits bit for bit, and the host
    // reference must read the split file as the device does.
    ModelShape s = small_shape("llama", TensorType::Q4_K);
    s.n_expert = 6;
    s.n_expert_used = 2;
    const std::string stacked = test::write_model("arch-moe-stacked", s);
    s.split_experts = true;
    const std::string split = test::write_model("arch-moe-split", s);
    {
        GgufFile f = GgufFile::open(split);
        CHECK(f.find_tensor("blk.1.ffn_down_exps.weight") == nullptr);
        CHECK(f.tensor("blk.1.ffn_down.5.weight").ne[0] == s.ffn_dim);
    }
    check_arch(split, 1e-5, 1e-5);

    test::ValidationGuard guard;
    Context& ctx = test::float_path_context();
    std::vector<std::vector<float>> logits;
    for (const std::string& path : {stacked, split}) {
        test::LoadedModel m = test::open_model(path);
        ModelOptions opts;
        opts.n_ctx = 64;
        opts.ubatch = 8;
        ModelGpu gpu(ctx, m.file, m.cfg, opts);
        gpu.eval(prompt_tokens(20, m.cfg.n_vocab));
        logits.push_back(gpu.logits());
        const int32_t next = 5;
        gpu.eval(std::span<const int32_t>(&next, 1));  // a decode step reads the experts' matvec path
        const std::vector<float> step = gpu.logits();
        logits.back().insert(logits.back().end(), step.begin(), step.end());
    }
    REQUIRE(logits[0].size() == logits[1].size());
    CHECK(logits[0] == logits[1]);

    // Every expert of each stack, of one type, none past expert_count, never beside the stack.
    ModelShape small_split = small_shape("llama", TensorType::F32);
    small_split.n_expert = 4;
    small_split.n_expert_used = 2;
    small_split.split_experts = true;
    auto refused = [&](const std::function<void(GgufWriter&)>& edit, const std::string& why) {
        check_refused(small_split, edit, why);
    };
    refused([](GgufWriter& x) { x.remove_tensor("blk.1.ffn_up.3.weight"); },
            "tensor 'blk.1.ffn_up.3.weight': required tensor is missing (expected shape [64, 96])");
    refused([](GgufWriter& x) {
                x.remove_tensor("blk.0.ffn_down.2.weight");
                x.add_tensor_data("blk.0.ffn_down.2.weight", TensorType::F16, {96, 64}, std::vector<uint8_t>(96 * 64 * 2));
            },
            "tensor 'blk.0.ffn_down.2.weight': is F16 where expert 0 is F32: a layer's experts must share one type");
    refused([](GgufWriter& x) { x.add_tensor_data("blk.0.ffn_gate.4.weight", TensorType::F32, {64, 96},
                                                  std::vector<uint8_t>(64 * 96 * 4)); },
            "tensor 'blk.0.ffn_gate.4.weight': is past the 4 experts of key 'llama.expert_count'");
    refused([](GgufWriter& x) { x.add_tensor_data("blk.1.ffn_gate_exps.weight", TensorType::F32, {64, 96, 4},
                                                  std::vector<uint8_t>(64 * 96 * 4 * 4)); },
            "tensor 'blk.1.ffn_gate_exps.weight': stacked experts, but the file stores them one tensor per expert "
            "(blk.0.ffn_gate.0.weight): one form for the whole file");
    refused([](GgufWriter& x) { x.add_tensor_data("blk.1.ffn_up.9.weight", TensorType::F32, {64, 96},
                                                  std::vector<uint8_t>(64 * 96 * 4)); },
            "tensor 'blk.1.ffn_up.9.weight': is past the 4 experts of key 'llama.expert_count'");
    // One expert must fit one binding (the expert kernels bind whole experts): checked at load, naming
    // the tensor, for either form. Here an expert's gate is 96 rows x 64 f32 = 24 KiB.
    {
        ModelShape b = small_shape("llama", TensorType::F32);
        b.n_expert = 4;
        b.n_expert_used = 2;
        b.split_experts = true;
        test::LoadedModel m = test::open_model(test::write_model("arch-moe-split-binding", b));
        DeviceCaps caps = ctx.caps();
        ModelOptions opts;
        opts.n_ctx = 64;
        caps.max_storage_buffer_range = 20000;
        VKLLM_CHECK_THROWS_WITH_SUBSTR(plan_memory(caps, m.file, m.cfg, opts), DeviceLimitError,
                                       "blk.0.ffn_gate.{0..3}.weight: one expert (96 rows of 64 elements, 24576 bytes) "
                                       "does not fit one binding (maxStorageBufferRange 20000 bytes)");
        caps.max_storage_buffer_range = 1u << 20;
        CHECK_NOTHROW(plan_memory(caps, m.file, m.cfg, opts));
    }
    ModelShape q = small_shape("qwen3moe", TensorType::F32);
    q.n_expert = 4;
    q.n_expert_used = 2;
    q.split_experts = true;
    CHECK_THROWS_WITH_AS(validate_model_shape(q),
                         "experts one tensor each (--split-experts) are written for Mixtral (llama) only, not qwen3moe",
                         std::invalid_argument);
}

namespace {

// DeepSeek-V2's shape at a small size: 4 heads of 48 q/k dims (16 rotary), values of 32, a latent
// of 64, q through a rank of 32, a leading dense layer, 8 experts of 32 (top-2) in 2 groups of which
// 1 is used, one shared expert, scaled by 16, YaRN.
ModelShape deepseek_shape(TensorType type) {
    ModelShape s = small_shape("deepseek2", type);  // the row's sizes; the routing's below
    s.expert_groups = 2;
    s.groups_used = 1;
    s.expert_scale = 16.0f;
    s.rope_scaling = "yarn";
    s.rope_factor = 4.0f;
    return s;
}

}  // namespace

TEST_CASE("architectures: DeepSeek-V2/V3 (latent attention, leading dense layers, grouped and biased routing) match the host reference layer by layer") {
    // The host reference runs latent attention uncompressed (per-head keys and values from the
    // latent, as trained), the device in its absorbed form: both from the same cached latent.
    for (TensorType type : {TensorType::F16, TensorType::Q8_0}) {
        CAPTURE(type_traits(type).name);
        check_arch(test::write_model(fmt::format("arch-deepseek2-{}", type_traits(type).name), deepseek_shape(type)),
                   1e-5, 1e-5);
    }
    ModelShape v3 = deepseek_shape(TensorType::F16);  // sigmoid routing with exp_probs_b, renormalised, 2 shared
    v3.sigmoid_gating = true;
    v3.expert_norm = true;
    v3.expert_scale = 2.5f;
    v3.n_shared_experts = 2;
    v3.rope_scaling = "none";
    check_arch(test::write_model("arch-deepseek-v3-f16", v3), 1e-5, 1e-5);
    ModelShape lite = deepseek_shape(TensorType::F16);  // V2-Lite: q = wq · x, no groups, every layer experts
    lite.q_lora = 0;
    lite.expert_groups = 1;
    lite.groups_used = 1;
    lite.n_dense_lead = 0;
    check_arch(test::write_model("arch-deepseek-lite-f16", lite), 1e-5, 1e-5);
    // Older conversions: one attn_kv_b per layer, which the host reference reads as it is (per-head
    // k and v rows of the latent) and from which the loader derives the device's attn_k_b (transposed,
    // F16) and attn_v_b (the v rows, the file's type).
    for (TensorType type : {TensorType::F16, TensorType::Q8_0}) {
        CAPTURE(type_traits(type).name);
        ModelShape old = deepseek_shape(type);
        old.mla_kv_b = true;
        check_arch(test::write_model(fmt::format("arch-deepseek2-kv-b-{}", type_traits(type).name), old), 1e-5, 1e-5);
    }
}

TEST_CASE("architectures: DeepSeek's KV cache holds the latent alone, and its files are checked") {
    test::ValidationGuard guard;
    Context& ctx = test::float_path_context();
    const ModelShape s = deepseek_shape(TensorType::F16);
    test::LoadedModel m = test::open_model(test::write_model("arch-deepseek2-kv", s));
    CHECK(m.cfg.head_dim == 80);  // kv_lora 64 + rope 16: one cached row per token and layer
    CHECK(m.cfg.v_dim() == 64);
    CHECK(m.cfg.n_kv_heads == 1);
    CHECK(m.cfg.n_dense_lead == 1);
    CHECK(!m.cfg.is_moe_layer(0));
    CHECK(m.cfg.is_moe_layer(1));
    ModelOptions opts;
    opts.n_ctx = 128;
    ModelGpu gpu(ctx, m.file, m.cfg, opts);
    // 3 layers x 128 rows x 80 f16 values: the latent's size, no V cache and no per-head keys.
    CHECK(gpu.memory_plan().kv_cache == 3ull * 128 * 80 * 2);
    CHECK(gpu.memory_plan().kv_cache_full == gpu.memory_plan().kv_cache);

    auto config_error = [&](const std::string& name, GgufWriter& gw) -> std::string {
        const fs::path path = ::vkllm::test::binary_dir() / "test-tmp" / "models" / (name + ".gguf");
        gw.write_file(path.string());
        GgufFile file = GgufFile::open(path.string());
        try {
            ModelConfig::from_gguf(file);
            return "loaded";
        } catch (const std::exception& e) {
            return e.what();
        }
    };
    auto contains = [](const std::string& text, const char* part) {
        INFO(text);
        return text.find(part) != std::string::npos;
    };
    {  // no key_length_mla and no attn_kv_b: neither layout
        GgufWriter w = make_random_model(s);
        w.remove("deepseek2.attention.key_length_mla");
        CHECK(contains(config_error("arch-deepseek-old", w),
                       "key 'deepseek2.attention.key_length_mla': missing, and the file has no blk.0.attn_kv_b.weight"));
    }
    {  // a current file with an attn_kv_b beside its attn_k_b / attn_v_b
        GgufWriter w = make_random_model(s);
        w.add_tensor("blk.0.attn_kv_b.weight", TensorType::F32, {64, 4 * 64}, [](std::span<uint8_t> b) {
            std::fill(b.begin(), b.end(), 0);
        });
        CHECK(contains(config_error("arch-deepseek-kv-b", w),
                       "tensor 'blk.0.attn_kv_b.weight': does not belong to this file (attention.key_length_mla is set"));
    }
    {  // the older layout: the same cache (the latent), attn_k_b / attn_v_b derived on the device only
        ModelShape old = s;
        old.mla_kv_b = true;
        test::LoadedModel mo = test::open_model(test::write_model("arch-deepseek2-kv-b", old));
        CHECK(mo.cfg.mla_joined_kv_b);
        CHECK(mo.cfg.head_dim == 80);
        CHECK(mo.cfg.n_kv_heads == 1);
        CHECK(mo.cfg.mla_qk == 48);
        CHECK(mo.cfg.mla_v == 32);
        ModelGpu og(ctx, mo.file, mo.cfg, opts);
        CHECK(og.memory_plan().kv_cache == gpu.memory_plan().kv_cache);
        const LayerPlaces& L = og.weight_layout().layers[1];
        CHECK(L[Role::WkvB].buffer == TensorPlace::kHostOnly);  // never uploaded
        CHECK(L[Role::WkB].type == TensorType::F16);
        CHECK(L[Role::WkB].row_elems == 32);  // nope = 48 - 16
        CHECK(L[Role::WkB].rows == 4 * 64);   // heads x kv_lora
        CHECK(L[Role::WvB].rows == 4 * 32);   // heads x v
        // The per-head matrices must fit a binding too, named by what they were derived from.
        DeviceCaps small = ctx.caps();
        small.max_storage_buffer_range = 3000;  // a head's k rows: 64 x 32 f16 = 4 KiB
        VKLLM_CHECK_THROWS_WITH_SUBSTR(plan_memory(small, mo.file, mo.cfg, opts), DeviceLimitError,
                                       "blk.0.attn_kv_b.weight (k rows, transposed): one expert (64 rows of 32 elements");
        GgufWriter w = make_random_model(old);
        w.remove_tensor("blk.2.attn_kv_b.weight");
        CHECK(contains(config_error("arch-deepseek-kv-b-missing", w),
                       "tensor 'blk.2.attn_kv_b.weight': required tensor is missing (the file has no "
                       "attention.key_length_mla: an older conversion's attn_kv_b)"));
        GgufWriter w2 = make_random_model(old);
        w2.set_u32("deepseek2.attention.head_count_kv", 1);
        CHECK(contains(config_error("arch-deepseek-kv-b-heads", w2), "an attn_kv_b file has one KV head per query head"));
        GgufWriter w3 = make_random_model(old);
        w3.remove("deepseek2.attention.value_length");
        CHECK(contains(config_error("arch-deepseek-kv-b-v", w3), "deepseek2.attention.value_length"));
    }
    {  // a q_lora_rank without its tensors names the missing one
        ModelShape lite = s;
        lite.q_lora = 0;
        GgufWriter w = make_random_model(lite);
        w.set_u32("deepseek2.attention.q_lora_rank", 32);
        CHECK(contains(config_error("arch-deepseek-q-lora", w), "attn_q_a.weight"));
    }
    {  // groups that do not divide the experts
        GgufWriter w = make_random_model(s);
        w.set_u32("deepseek2.expert_group_count", 3);
        CHECK(contains(config_error("arch-deepseek-groups", w), "deepseek2.expert_group_count"));
    }
    {  // more dense layers than layers
        GgufWriter w = make_random_model(s);
        w.set_u32("deepseek2.leading_dense_block_count", 9);
        CHECK(contains(config_error("arch-deepseek-dense", w), "deepseek2.leading_dense_block_count"));
    }
    {  // a q8_0 cache needs whole blocks per row (80 here) and the latent to start on one (rope 16 of 64)
        ModelOptions q8;
        q8.n_ctx = 64;
        q8.kv_type = ops::KvType::Q8_0;
        CHECK_THROWS_AS(plan_memory(ctx.caps(), m.file, m.cfg, q8), std::invalid_argument);
        ModelShape s48 = s;
        s48.kv_lora = 48;
        test::LoadedModel m48 = test::open_model(test::write_model("arch-deepseek2-kv48", s48));
        CHECK_THROWS_WITH_AS(plan_memory(ctx.caps(), m48.file, m48.cfg, q8), doctest::Contains("latent"),
                             std::invalid_argument);
    }
}

TEST_CASE("architectures: BERT, nomic-bert and jina-bert-v2 encoders match the host reference layer by layer, F16 and Q4_K") {
    check_encoder(test::write_model("arch-bert-f16", small_shape("bert", TensorType::F16)), 1e-5);
    check_encoder(test::write_model("arch-bert-q4_k", small_shape("bert", TensorType::Q4_K)), 1e-5);
    check_encoder(test::write_model("arch-nomic-bert-f16", small_shape("nomic-bert", TensorType::F16)), 1e-5);
    check_encoder(test::write_model("arch-jina-bert-v2-f16", small_shape("jina-bert-v2", TensorType::F16)), 1e-5);
    check_encoder(test::write_model("arch-jina-bert-v2-q4_k", small_shape("jina-bert-v2", TensorType::Q4_K)), 1e-5);
    // jina-embeddings-v2-base-code: q and k LayerNorm'd whole, attn_norm_2 over the input added again;
    // older conversions with ffn_gate apart from ffn_up; both. The file's tensors pick the variant.
    for (const char* variant : {"qk-post-norm", "split-gate", "qk-post-norm,split-gate"})
        for (TensorType t : {TensorType::F16, TensorType::Q4_K}) {
            CAPTURE(variant);
            ModelShape v = small_shape("jina-bert-v2", t);
            v.variant = variant;
            const std::string path =
                test::write_model(fmt::format("arch-jina-bert-v2-{}-{}", variant, type_traits(t).lower), v);
            test::LoadedModel m = test::open_model(path);
            CHECK(m.cfg.arch->variant == variant);
            check_encoder(path, 1e-5);
        }
    // Some converters write no token_types.weight (llama.cpp reads it when present): no row is added.
    GgufWriter w = make_random_model(small_shape("bert", TensorType::F16));
    w.remove_tensor("token_types.weight");
    const fs::path p = ::vkllm::test::binary_dir() / "test-tmp" / "models" / "arch-bert-no-types.gguf";
    fs::create_directories(p.parent_path());
    w.write_file(p.string());
    check_encoder(p.string(), 1e-5);
}

TEST_CASE("architectures: packed inputs give each input's own hidden states (learned positions, RoPE, ALiBi, T5 buckets)") {
    test::ValidationGuard guard;
    Context& ctx = test::float_path_context();
    for (const ArchDesc& encoder : all_archs()) {  // the encoders (their main rows)
        if (encoder.stack.lm_head || !encoder.variant.empty()) continue;
        const std::string arch(encoder.name);
        CAPTURE(arch);
        test::LoadedModel m = test::open_model(test::write_model("arch-" + arch + "-f16", small_shape(encoder, TensorType::F16)));
        ModelOptions opts;
        opts.n_ctx = 64;
        opts.ubatch = 32;
        ModelGpu gpu(ctx, m.file, m.cfg, opts);
        ModelCpu cpu(m.file, m.cfg, gpu.n_ctx(), opts.kv_type, opts.ubatch);
        const std::vector<int32_t> a = prompt_tokens(7, m.cfg.n_vocab), b = prompt_tokens(1, m.cfg.n_vocab),
                                   c = prompt_tokens(12, m.cfg.n_vocab);
        const std::vector<std::span<const int32_t>> pack = {a, b, c};
        gpu.eval_packed(pack);
        const std::vector<float> packed = gpu.hidden_states();
        REQUIRE(packed.size() == size_t(20) * m.cfg.dim);
        // The device's packed rows equal the host reference's packed rows ...
        test::validate_result("packed vs host", packed, cpu.eval_packed(pack), {1e-9, 1e-3, 1e-3});
        // ... and each input evaluated alone (the matmuls tile 20 rows differently from 7 or 12).
        size_t row = 0;
        for (const auto& in : pack) {
            gpu.reset();
            gpu.eval(in);
            const std::vector<float> alone = gpu.hidden_states();
            test::validate_result("packed vs alone", std::vector<float>(packed.begin() + row * m.cfg.dim,
                                                                        packed.begin() + (row + in.size()) * m.cfg.dim),
                                  alone, {1e-9, 1e-3, 1e-3});
            row += in.size();
        }
    }
    // Packing is for bidirectional models; a pack must fit one ubatch.
    test::LoadedModel d = test::open_model(test::write_model("arch-llama-f16", small_shape("llama", TensorType::F16)));
    ModelOptions opts;
    opts.n_ctx = 64;
    opts.ubatch = 8;
    ModelGpu dec(ctx, d.file, d.cfg, opts);
    const std::vector<int32_t> t = prompt_tokens(3, d.cfg.n_vocab);
    const std::vector<std::span<const int32_t>> one = {t};
    VKLLM_CHECK_THROWS_WITH_SUBSTR(dec.eval_packed(one), std::logic_error, "packing needs a bidirectional model");
}

TEST_CASE("architectures: T5's encoder matches the host reference layer by layer, F16 and Q4_K, shared and own bias "
          "tables, v1.1 and v1.0") {
    check_encoder(test::write_model("arch-t5encoder-f16", small_shape("t5encoder", TensorType::F16)), 1e-5);
    check_encoder(test::write_model("arch-t5encoder-q4_k", small_shape("t5encoder", TensorType::Q4_K)), 1e-5);
    // T5 v1.0: no ffn_gate, a ReLU feed-forward.
    ModelShape v10 = small_shape("t5encoder", TensorType::F16);
    v10.variant = "v1.0";
    const std::string v10_path = test::write_model("arch-t5encoder-v1.0-f16", v10);
    {
        const GgufFile f = GgufFile::open(v10_path);
        CHECK(f.find_tensor("enc.blk.0.ffn_gate.weight") == nullptr);
        const ModelConfig cfg = ModelConfig::from_gguf(f);
        CHECK(cfg.arch->variant == "v1.0");
        CHECK(cfg.arch->ffn.kind == FfnKind::Relu);
    }
    check_encoder(v10_path, 1e-5);
    // A layer with its own attn_rel_b (llama.cpp reads one where present).
    const ModelShape s = small_shape("t5encoder", TensorType::F16);
    GgufWriter w = make_random_model(s);
    std::vector<float> rel(size_t(s.n_heads) * 32);
    for (size_t i = 0; i < rel.size(); ++i) rel[i] = float(std::sin(0.7 * double(i))) * 3.0f;
    w.add_tensor_data("enc.blk.1.attn_rel_b.weight", TensorType::F32, {s.n_heads, 32},
                      std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(rel.data()),
                                           reinterpret_cast<const uint8_t*>(rel.data() + rel.size())));
    const fs::path p = ::vkllm::test::binary_dir() / "test-tmp" / "models" / "arch-t5encoder-own-bias.gguf";
    fs::create_directories(p.parent_path());
    w.write_file(p.string());
    check_encoder(p.string(), 1e-5);
    const GgufFile f = GgufFile::open(p.string());
    const ModelConfig cfg = ModelConfig::from_gguf(f);
    CHECK(has_own_position_bias(f, cfg, 1));
    CHECK(t5_position_bias(f, cfg, 1) != t5_position_bias(f, cfg, 0));
    // Distance 0 is bucket 0 both ways: the table's middle column is row 0 of attn_rel_b.
    const std::vector<float> t1 = t5_position_bias(f, cfg, 1);
    for (uint32_t h = 0; h < s.n_heads; ++h) CHECK(t1[h * (2 * kT5MaxDistance + 1) + kT5MaxDistance] == rel[h]);
}

TEST_CASE("architectures: bidirectional attention sees later tokens, and one input must fit one ubatch") {
    test::ValidationGuard guard;
    Context& ctx = test::float_path_context();
    test::LoadedModel m = test::open_model(test::write_model("arch-bert-f16", small_shape("bert", TensorType::F16)));
    CHECK_FALSE(m.cfg.causal);
    CHECK(m.cfg.pooling == Pooling::Mean);
    ModelOptions opts;
    opts.n_ctx = 64;
    opts.ubatch = 16;
    ModelGpu gpu(ctx, m.file, m.cfg, opts);
    // The first token's state changes with the tokens after it (a causal model's would not).
    std::vector<int32_t> a = prompt_tokens(8, m.cfg.n_vocab), b = a;
    b[7] = b[7] % 50 + 1;
    gpu.eval(a);
    const std::vector<float> ha = gpu.hidden_states();
    gpu.reset();
    gpu.eval(b);
    const std::vector<float> hb = gpu.hidden_states();
    const TensorDiff first = diff_tensors(std::span(hb).first(m.cfg.dim), std::span(ha).first(m.cfg.dim));
    CHECK(first.max_abs > 1e-3);
    // A second input without reset(), or one longer than the ubatch, is refused.
    CHECK_THROWS_AS(gpu.eval(a), std::logic_error);
    gpu.reset();
    VKLLM_CHECK_THROWS_WITH_SUBSTR(gpu.eval(prompt_tokens(17, m.cfg.n_vocab)), ContextFullError,
                                   "17 tokens: a bidirectional model attends over its whole input in one ubatch, "
                                   "and the ubatch holds 16");
    CHECK_THROWS_AS((void)gpu.logits(), std::logic_error);
}

TEST_CASE("architectures: Llama 3 rope factors, linear and YaRN scaling match the host reference") {
    ModelShape s = small_shape("llama", TensorType::F16);
    s.rope_freqs = true;
    check_arch(test::write_model("arch-llama-rope-freqs", s), 1e-5, 1e-5);
    s.rope_freqs = false;
    s.rope_scaling = "linear", s.rope_factor = 2;
    check_arch(test::write_model("arch-llama-linear", s), 1e-5, 1e-5);
    s.rope_scaling = "yarn", s.rope_factor = 4;
    check_arch(test::write_model("arch-llama-yarn", s), 1e-5, 1e-5);
    test::LoadedModel m = test::open_model(test::write_model("arch-llama-yarn", s));
    CHECK(m.cfg.rope.freq_scale == doctest::Approx(0.25));
    CHECK(m.cfg.rope.ext_factor == 1.0f);
    CHECK(m.cfg.rope.n_ctx_orig == 64);
}

TEST_CASE("architectures: a sliding-window ring gives the same logits as a full cache") {
    // The host reference with ubatch 4 keeps window + 3 = 11 rows per local layer; with ubatch 64
    // the cache holds every row and the window is only a mask. 40 tokens in chunks of 4.
    for (const ArchDesc* a : test::dense_decoder_archs()) {  // the ones with sliding windows
        if (a->attn.swa_period == 0) continue;
        const std::string arch(a->name);
        CAPTURE(arch);
        test::LoadedModel m = test::open_model(test::write_model("arch-" + arch + "-ring", small_shape(*a, TensorType::F32)));
        REQUIRE(m.cfg.window == 8);
        CHECK(kv_cache_rows(m.cfg, 0, 64, 4) == 11);
        CHECK(kv_cache_rows(m.cfg, 0, 64, 64) == 71);  // never wraps below 64 positions; a mask only
        ModelCpu ring(m.file, m.cfg, 64, ops::KvType::F32, 4), full(m.file, m.cfg, 64, ops::KvType::F32, 64);
        const std::vector<int32_t> t = prompt_tokens(40, m.cfg.n_vocab);
        double worst = 0;
        for (size_t i = 0; i < t.size(); i += 4) {
            std::span<const int32_t> chunk(t.data() + i, 4);
            std::vector<float> a = ring.eval(chunk), b = full.eval(chunk);
            worst = std::max(worst, diff_tensors(a, b).nmse);
        }
        MESSAGE(arch << ": ring vs full cache worst logits nmse " << worst);
        CHECK(worst < 1e-12);
    }
}

TEST_CASE("architectures: the window masks, so a local layer differs from full attention") {
    // The same model without a window must give different logits past the window: otherwise the
    // tests above could not tell a window from none.
    ModelShape s = small_shape("gemma3", TensorType::F32);
    test::LoadedModel windowed = test::open_model(test::write_model("arch-gemma3-w8", s));
    s.window = 4096;
    test::LoadedModel wide = test::open_model(test::write_model("arch-gemma3-w4096", s));
    ModelCpu a(windowed.file, windowed.cfg, 64, ops::KvType::F32, 64), b(wide.file, wide.cfg, 64, ops::KvType::F32, 64);
    const std::vector<int32_t> t = prompt_tokens(7, windowed.cfg.n_vocab), u = prompt_tokens(20, windowed.cfg.n_vocab);
    CHECK(diff_tensors(a.eval(t), b.eval(t)).nmse < 1e-12);  // within the window: identical
    a.reset(), b.reset();
    CHECK(diff_tensors(a.eval(u), b.eval(u)).nmse > 1e-6);   // beyond it: not
}

TEST_CASE("architectures: Gemma 3 keeps about a sixth of the naive KV cache at long context") {
    ModelShape s = small_shape("gemma3", TensorType::F16);
    s.window = 512, s.n_ctx = 32768, s.n_layers = 12;
    test::LoadedModel m = test::open_model(test::write_model("arch-gemma3-long", s));
    ModelOptions opts;
    opts.n_ctx = 32768;
    opts.ubatch = 512;
    MemoryPlan p = plan_memory(test::context().caps(), m.file, m.cfg, opts);
    // 2 global layers keep 32768 rows; 10 local ones 512 + 511, in whole blocks of 8 rows: 1024.
    const uint64_t row = 2ull * m.cfg.kv_dim() * 2;
    CHECK(p.kv_cache == row * (2 * 32768ull + 10 * 1024ull));
    CHECK(p.kv_cache_full == row * 12 * 32768ull);
    MESSAGE("gemma3 12 layers at 32k context: KV " << p.kv_cache / 1024 << " KiB vs naive "
                                                   << p.kv_cache_full / 1024 << " KiB ("
                                                   << double(p.kv_cache) / double(p.kv_cache_full) << ")");
    CHECK(double(p.kv_cache) / double(p.kv_cache_full) < 0.2);
}

TEST_CASE("architectures: files vkllm cannot run are refused with the reason") {
    ModelShape s = small_shape("llama", TensorType::F32);
    GgufWriter w = make_random_model(s);
    w.set_string("general.architecture", "mamba");
    const fs::path p = ::vkllm::test::binary_dir() / "test-tmp" / "models" / "arch-refused.gguf";
    fs::create_directories(p.parent_path());
    w.write_file(p.string());
    GgufFile f = GgufFile::open(p.string());
    VKLLM_CHECK_THROWS_WITH_SUBSTR(ModelConfig::from_gguf(f), ModelConfigError,
                                   "architecture 'mamba' is not supported; supported: llama, qwen2, qwen2vl, qwen3, qwen2moe, "
                                   "qwen3moe, olmoe, gpt-oss, deepseek2, phi3, gemma2, gemma3, gpt2, bloom, mpt, bert, nomic-bert, "
                                   "jina-bert-v2, t5encoder, t5");
    // A Qwen2 file without its required q bias.
    GgufWriter q = make_random_model(small_shape("qwen2", TensorType::F32));
    q.remove_tensor("blk.1.attn_q.bias");
    q.write_file(p.string());
    GgufFile fq = GgufFile::open(p.string());
    VKLLM_CHECK_THROWS_WITH_SUBSTR(ModelConfig::from_gguf(fq), ModelConfigError, "tensor 'blk.1.attn_q.bias'");
    // Gemma 3 needs its window.
    GgufWriter g = make_random_model(small_shape("gemma3", TensorType::F32));
    g.remove("gemma3.attention.sliding_window");
    g.write_file(p.string());
    GgufFile fg = GgufFile::open(p.string());
    VKLLM_CHECK_THROWS_WITH_SUBSTR(ModelConfig::from_gguf(fg), ModelConfigError, "gemma3.attention.sliding_window");
    // MPT needs its ALiBi max bias (BLOOM's and jina-bert-v2's are fixed, as in llama.cpp).
    GgufWriter m = make_random_model(small_shape("mpt", TensorType::F32));
    m.remove("mpt.attention.max_alibi_bias");
    m.write_file(p.string());
    GgufFile fm = GgufFile::open(p.string());
    VKLLM_CHECK_THROWS_WITH_SUBSTR(ModelConfig::from_gguf(fm), ModelConfigError,
                                   "key 'mpt.attention.max_alibi_bias': required for this architecture");
    // Variants whose extra tensors change the math are refused by name, never silently ignored.
    auto refused = [&](const std::string& arch, const std::string& extra, uint64_t ne0, uint64_t ne1, const char* why) {
        check_refused(
            small_shape(arch, TensorType::F32),
            [&](GgufWriter& x) { x.add_tensor_data(extra, TensorType::F32, {ne0, ne1}, std::vector<uint8_t>(ne0 * ne1 * 4)); },
            "tensor '" + extra + "': " + why);
    };
    refused("jina-bert-v2", "blk.1.attn_q_norm.weight", 64, 1, "a LayerNorm over all of q or k");  // not in layer 0
    refused("phi3", "blk.0.ffn_gate.weight", 64, 96, "a separate ffn_gate is not supported");
    refused("mpt", "blk.0.attn_k_norm.weight", 64, 1, "a LayerNorm over all of q or k");
    refused("jina-bert-v2", "blk.1.attn_norm_2.weight", 64, 1, "a second attention norm is read only in");
    refused("jina-bert-v2", "blk.1.ffn_gate.weight", 64, 96, "a separate ffn_gate is not supported");  // not in layer 0
    refused("mpt", "position_embd.weight", 64, 256, "learned positions are not supported");
    refused("mpt", "blk.0.ffn_act.scales", 96, 1, "AWQ activation scales");
    // Mixtures of experts: the keys the router needs, and layouts vkllm does not read.
    auto moe_refused = [&](const std::string& arch, const std::function<void(GgufWriter&)>& edit, const char* why) {
        ModelShape ms = small_shape(arch, TensorType::F32);
        ms.n_expert = 4;
        ms.n_expert_used = 2;
        ms.expert_ffn = 0;  // experts as wide as the model's ffn, as the shapes below say
        check_refused(ms, edit, why);
    };
    moe_refused("qwen3moe", [](GgufWriter& x) { x.remove("qwen3moe.expert_count"); }, "qwen3moe.expert_count");
    moe_refused("qwen3moe", [](GgufWriter& x) { x.remove("qwen3moe.expert_used_count"); }, "qwen3moe.expert_used_count");
    moe_refused("qwen3moe", [](GgufWriter& x) { x.set_u32("qwen3moe.expert_used_count", 5); },
                "5 experts per token of 4: at most min(expert_count, 64)");
    moe_refused("qwen3moe", [](GgufWriter& x) { x.set_u32("qwen3moe.expert_gating_func", 4); },
                "key 'qwen3moe.expert_gating_func': gating function 4 is not supported");
    moe_refused("qwen2moe", [](GgufWriter& x) { x.remove_tensor("blk.1.ffn_gate_inp_shexp.weight"); },
                "tensor 'blk.1.ffn_gate_inp_shexp.weight': required tensor is missing");
    moe_refused("qwen3moe", [](GgufWriter& x) { x.remove_tensor("blk.0.ffn_up_exps.weight"); },
                "tensor 'blk.0.ffn_up_exps.weight': required tensor is missing (expected shape [64, 96, 4])");
    moe_refused("qwen3moe", [](GgufWriter& x) { x.add_tensor_data("blk.0.ffn_gate.0.weight", TensorType::F32, {64, 96},
                                                                  std::vector<uint8_t>(64 * 96 * 4)); },
                "tensor 'blk.0.ffn_gate.0.weight': experts stored one tensor each (ffn_gate.N) are read for Mixtral");
    moe_refused("llama", [](GgufWriter& x) { x.add_tensor_data("blk.0.ffn_gate.0.weight", TensorType::F32, {64, 96},
                                                               std::vector<uint8_t>(64 * 96 * 4)); },
                "tensor 'blk.0.ffn_gate.0.weight': one tensor per expert, but the file stacks its experts "
                "(blk.0.ffn_gate_exps.weight): one form for the whole file");
    // T5's encoder: layer 0 carries the relative-position bias the others share; layer 0's ffn_gate
    // says v1.1 (gated GELU) or, absent, v1.0 (ReLU), and every layer must agree; the bucket count
    // is required.
    auto t5_refused = [&](const std::function<void(GgufWriter&)>& edit, const char* why) {
        check_refused(small_shape("t5encoder", TensorType::F32), edit, why);
    };
    t5_refused([](GgufWriter& x) { x.remove_tensor("enc.blk.0.attn_rel_b.weight"); },
               "tensor 'enc.blk.0.attn_rel_b.weight': required tensor is missing: T5's relative-position bias");
    t5_refused([](GgufWriter& x) { x.remove_tensor("enc.blk.1.ffn_gate.weight"); }, "enc.blk.1.ffn_gate.weight");
    t5_refused([](GgufWriter& x) { x.remove_tensor("enc.blk.0.ffn_gate.weight"); },
               "tensor 'enc.blk.1.ffn_gate.weight': an ffn_gate in a T5 v1.0 stack");
    t5_refused([](GgufWriter& x) { x.remove("t5encoder.attention.relative_buckets_count"); },
               "t5encoder.attention.relative_buckets_count");
    t5_refused([](GgufWriter& x) { x.set_u32("t5encoder.attention.relative_buckets_count", 3); },
               "3 buckets: expected an even count in 4..1024 (T5: 32)");
    t5_refused([](GgufWriter& x) { x.add_tensor_data("enc.blk.7.attn_q.weight", TensorType::F32, {64, 64},
                                                     std::vector<uint8_t>(64 * 64 * 4)); },
               "belongs to layer 7 but block_count is 2");
}

TEST_CASE("architectures: T5's decoder (causal bias table, cross-attention over the encoder) matches the host reference") {
    test::ValidationGuard guard;
    Context& ctx = test::float_path_context();
    for (const auto& [type, variant] : {std::pair{TensorType::F16, ""}, std::pair{TensorType::Q4_K, ""},
                                        std::pair{TensorType::F16, "v1.0"}}) {
        CAPTURE(type_traits(type).name);
        CAPTURE(std::string(variant));
        ModelShape shape = small_shape("t5", type);
        shape.variant = variant;
        const std::string path = test::write_model(fmt::format("arch-t5-{}{}", type_traits(type).name, variant), shape);
        test::LoadedModel m = test::open_model(path);
        const ModelConfig enc_cfg = ModelConfig::encoder_from_gguf(m.file);
        CHECK(enc_cfg.arch->name == "t5encoder");
        CHECK(enc_cfg.arch->variant == variant);
        CHECK(m.cfg.arch->variant == variant);
        CHECK(m.cfg.decoder_start_token == 0);
        ModelOptions opts;
        opts.n_ctx = 64;
        opts.ubatch = 8;
        // The encoder's output as the host computes it (20 rows), given to both decoders.
        ModelCpu enc(m.file, enc_cfg, 64, opts.kv_type, 32);
        const std::vector<float> states = enc.eval(prompt_tokens(20, m.cfg.n_vocab));
        ModelGpu gpu(ctx, m.file, m.cfg, opts);
        ModelCpu cpu(m.file, m.cfg, gpu.n_ctx(), opts.kv_type, opts.ubatch);
        VKLLM_CHECK_THROWS_WITH_SUBSTR(gpu.eval(prompt_tokens(3, m.cfg.n_vocab)), std::logic_error,
                                       "needs the encoder's output first");
        gpu.set_encoder_output(states, 20);
        cpu.set_encoder_output(states, 20);
        // A 13-token chunked prompt (the self-attention table over distances up to 12), then decode steps.
        CheckReport r = check_forward(gpu, cpu, prompt_tokens(13, m.cfg.n_vocab), 1e-5, 1e-5);
        INFO(r.first_divergence);
        MESSAGE(path << ": worst tensor " << r.worst_tensor << " nmse " << r.worst_tensor_nmse << ", logits nmse "
                     << r.logits_nmse);
        CHECK(r.ok);
        const std::vector<float> first_logits = gpu.logits();
        int32_t next = r.gpu_argmax;
        for (int i = 0; i < 5; ++i) {
            CheckReport d = check_forward(gpu, cpu, std::span<const int32_t>(&next, 1), 1e-5, 1e-5);
            INFO("decode step " << i << ": " << d.first_divergence);
            CHECK(d.ok);
            next = d.gpu_argmax;
        }
        // A different encoder output changes the logits: the cross-attention reads it.
        std::vector<float> other = states;
        for (float& x : other) x = -x;
        gpu.set_encoder_output(other, 20);
        cpu.set_encoder_output(other, 20);
        CheckReport o = check_forward(gpu, cpu, prompt_tokens(13, m.cfg.n_vocab), 1e-5, 1e-5);
        CHECK(o.ok);
        const std::vector<float> other_logits = gpu.logits();
        double moved = 0;
        for (size_t i = 0; i < other_logits.size(); ++i) moved = std::max(moved, double(std::fabs(other_logits[i] - first_logits[i])));
        CHECK(moved > 1e-2);
    }
}

TEST_CASE("architectures: T5's encoder reads its decoder's token embedding: one upload, the same states") {
    test::ValidationGuard guard;
    Context& ctx = test::float_path_context();
    const std::string path = test::write_model("arch-t5-shared-embd", small_shape("t5", TensorType::F16));
    test::LoadedModel m = test::open_model(path);
    const ModelConfig enc_cfg = ModelConfig::encoder_from_gguf(m.file);
    ModelOptions opts;
    opts.n_ctx = opts.ubatch = 64;
    ModelGpu dec(ctx, m.file, m.cfg, opts);
    ModelGpu own(ctx, m.file, enc_cfg, opts);
    ModelOptions so = opts;
    so.shared_token_embd = &dec.token_embedding();
    ModelGpu shared(ctx, m.file, enc_cfg, so);
    REQUIRE(dec.token_embedding().present());
    CHECK(shared.token_embedding().view.buffer == dec.token_embedding().view.buffer);
    CHECK(shared.memory_plan().weights + dec.token_embedding().view.size == own.memory_plan().weights);
    const std::vector<int32_t> tokens = prompt_tokens(20, m.cfg.n_vocab);
    own.eval(tokens);
    shared.eval(tokens);
    CHECK(own.hidden_states() == shared.hidden_states());
    // Not this file's embedding: refused by name.
    DeviceTensor wrong = dec.token_embedding();
    wrong.rows -= 1;
    so.shared_token_embd = &wrong;
    VKLLM_CHECK_THROWS_WITH_SUBSTR(ModelGpu(ctx, m.file, enc_cfg, so), std::invalid_argument, "shared token embedding");
}

TEST_CASE("architectures: T5's relative-position buckets as the T5 paper's code defines them") {
    // 32 buckets both ways: 16 per direction, distances 0..7 exact, then 8 buckets for 8..127 on a
    // log scale (bucket 8 + floor(8 log(r / 8) / log(16))), the last from 128 on; keys after the
    // query use buckets 16..31.
    const std::pair<int32_t, uint32_t> before[] = {{0, 0},   {-1, 1},   {-7, 7},   {-8, 8},   {-11, 8},  {-12, 9},
                                                   {-15, 9}, {-16, 10}, {-22, 10}, {-23, 11}, {-31, 11}, {-32, 12},
                                                   {-45, 12}, {-46, 13}, {-63, 13}, {-64, 14}, {-90, 14}, {-91, 15},
                                                   {-127, 15}, {-128, 15}, {-5000, 15}};
    for (auto [d, b] : before) {
        CAPTURE(d);
        CHECK(t5_relative_bucket(d, 32, true) == b);
        CHECK(t5_relative_bucket(-d, 32, true) == (d == 0 ? 0u : b + 16));
    }
    // Causal (a decoder's self-attention): 32 buckets for keys before the query, 0..15 exact, then
    // 16 + floor(16 log(r / 16) / log(8)); keys after the query (never seen) fall in bucket 0.
    const std::pair<int32_t, uint32_t> causal[] = {{0, 0},    {-15, 15},  {-16, 16},  {-18, 16},  {-19, 17},
                                                   {-32, 21}, {-64, 26},  {-127, 31}, {-128, 31}, {-1000, 31}, {5, 0}};
    for (auto [d, b] : causal) {
        CAPTURE(d);
        CHECK(t5_relative_bucket(d, 32, false) == b);
    }
}

TEST_CASE("architectures: a reranker's classification head (cls, tanh, cls.output; jina-bert-v2's cls alone) from its definition") {
    for (const ArchDesc& a : all_archs()) {  // the BERT-style encoders (main rows), both head forms
        if (a.stack.lm_head || !a.stack.token_types || !a.variant.empty()) continue;
        const std::string arch(a.name);
        CAPTURE(arch);
        ModelShape s = small_shape(a, TensorType::F16);
        s.pooling = uint32_t(Pooling::Rank);
        test::LoadedModel m = test::open_model(test::write_model("arch-" + arch + "-rank", s));
        REQUIRE(m.cfg.pooling == Pooling::Rank);
        const std::vector<float> x = test::random_floats(m.cfg.dim, 5, -2.0f, 2.0f);
        // y = W x + b from the file's values, in double
        auto dense = [&](const std::string& w_name, const std::string& b_name, const std::vector<double>& in) {
            const GgufTensorInfo& w = m.file.tensor(w_name);
            const GgufTensorInfo& b = m.file.tensor(b_name);
            const size_t k = w.ne[0], n = w.ne[1];
            std::vector<float> wf(k * n), bf(n);
            dequantize_row(w.type, m.file.tensor_data(w).data(), wf.data(), wf.size());
            dequantize_row(b.type, m.file.tensor_data(b).data(), bf.data(), n);
            std::vector<double> out(n);
            for (size_t r = 0; r < n; ++r) {
                double acc = bf[r];
                for (size_t c = 0; c < k; ++c) acc += double(wf[r * k + c]) * in[c];
                out[r] = acc;
            }
            return out;
        };
        std::vector<double> y = dense("cls.weight", "cls.bias", std::vector<double>(x.begin(), x.end()));
        for (double& v : y) v = std::tanh(v);
        if (!a.stack.cls_single) y = dense("cls.output.weight", "cls.output.bias", y);
        const std::vector<float> got = classify(m.file, m.cfg, x);
        REQUIRE(got.size() == 1);
        REQUIRE(y.size() == 1);
        CHECK(got[0] == doctest::Approx(y[0]).epsilon(1e-6));
        CHECK(std::fabs(y[0]) > 1e-3);  // a score, not a vanishing one
    }
    // Rank pooling without a head is refused when the file is read, naming the tensors.
    ModelShape s = small_shape("bert", TensorType::F16);
    GgufWriter w = make_random_model(s);
    w.set_u32("bert.pooling_type", uint32_t(Pooling::Rank));
    const fs::path p = ::vkllm::test::binary_dir() / "test-tmp" / "models" / "arch-rank-headless.gguf";
    w.write_file(p.string());
    GgufFile f = GgufFile::open(p.string());
    VKLLM_CHECK_THROWS_WITH_SUBSTR(ModelConfig::from_gguf(f), ModelConfigError,
                                   "rank pooling needs a classification head: cls.weight and cls.bias, or cls.output.weight");
}
