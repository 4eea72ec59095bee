#include "model/arch/architecture.h"

namespace vkllm {

namespace {

using ops::RopeLayout;

// One row per architecture and variant; a field left out is the default of architecture.h (LLaMA's
// choice). A variant comes after its main row (find_arch(name) gives the first row of a name).
constexpr ArchDesc kArchs[] = {
    // LLaMA 1/2/3.x, TinyLlama, SmolLM, Mistral-style dense models
    {.name = "llama"},
    // Mixtral: a llama file with llama.expert_count (arch_for_file picks this row); softmax over the
    // chosen experts' probabilities, as llama.cpp
    {.name = "llama",
     .variant = "moe",
     .experts = {.layers = ExpertLayers::All, .gating = ExpertGating::SoftmaxNormed, .per_expert_tensors = true},
     .test = {.n_expert = 6, .n_expert_used = 2}},
    {.name = "qwen2", .attn = {.rope_layout = RopeLayout::HalfSplit}, .biases = Biases::Qkv},
    // Qwen2-VL, Qwen2.5-VL's text model: Qwen2 with M-RoPE (images' rows at their grid's positions)
    {.name = "qwen2vl",
     .attn = {.rope_layout = RopeLayout::HalfSplit, .mrope = true},
     .biases = Biases::Qkv,
     .test = {.head_dim = 32}},
    {.name = "qwen3",
     .attn = {.rope_layout = RopeLayout::HalfSplit, .qk_norm = QkNorm::PerHead},
     .test = {.head_dim = 32}},
    // Qwen1.5-MoE, Qwen2-57B-A14B: experts beside a gated shared expert
    {.name = "qwen2moe",
     .attn = {.rope_layout = RopeLayout::HalfSplit},
     .experts = {.layers = ExpertLayers::All, .width = ExpertWidth::FfnPerUsed, .shared = SharedExpert::Gated},
     .biases = Biases::Qkv,
     .test = {.n_expert = 6, .n_expert_used = 4, .shared_ffn = 160}},
    // Qwen3-30B-A3B, Qwen3-235B-A22B
    {.name = "qwen3moe",
     .attn = {.rope_layout = RopeLayout::HalfSplit, .qk_norm = QkNorm::PerHead},
     .experts = {.layers = ExpertLayers::All, .gating = ExpertGating::SoftmaxNormed, .width = ExpertWidth::FfnPerUsed},
     .test = {.head_dim = 32, .n_expert = 6, .n_expert_used = 2, .expert_ffn = 32}},
    // OLMoE-1B-7B: 64 experts, top-8, unnormalised; q and k normed whole
    {.name = "olmoe",
     .attn = {.rope_layout = RopeLayout::HalfSplit, .qk_norm = QkNorm::Whole},
     .experts = {.layers = ExpertLayers::All},
     .test = {.n_expert = 6, .n_expert_used = 4}},
    // gpt-oss-20b / -120b: 32 / 128 experts of top-4, every other layer a window of 128: layers 0, 2,
    // 4, ... are local; the window is the file's (required)
    {.name = "gpt-oss",
     .norm = {.ffn_norm_name = "post_attention_norm.weight"},
     .attn = {.rope_layout = RopeLayout::HalfSplit, .sinks = true, .swa_period = 2},
     .ffn = {.kind = FfnKind::SwiGluOai},
     .experts = {.layers = ExpertLayers::All,
                 .gating = ExpertGating::SoftmaxOfChosen,
                 .width = ExpertWidth::Required,
                 .biases = true},
     .biases = Biases::QkvOut,
     .test = {.window = 8, .n_expert = 6, .n_expert_used = 4}},
    // DeepSeek-V2 / V2-Lite / V3 / R1: latent attention, leading dense layers, shared experts
    {.name = "deepseek2",
     .attn = {.mla = true},
     .experts = {.layers = ExpertLayers::AfterDense, .width = ExpertWidth::Required, .shared = SharedExpert::Ungated},
     .test = {.n_layers = 3,
              .head_dim = 48,
              .n_expert = 8,
              .n_expert_used = 2,
              .expert_ffn = 32,
              .rope_dim = 16,
              .kv_lora = 64,
              .q_lora = 32,
              .v_head_dim = 32,
              .n_dense_lead = 1}},
    // Phi-3 files carry attention.sliding_window, but like llama.cpp (which disabled it for Phi-3)
    // vkllm attends over the whole context: swa_period stays 0.
    {.name = "phi3",
     .attn = {.rope_layout = RopeLayout::HalfSplit, .rope_factor_tensors = true, .fused_qkv = true},
     .ffn = {.fused_gate_up = true},
     .test = {.n_kv_heads = 4}},
    {.name = "gemma2",
     .norm = {.placement = NormPlacement::PreAndPost, .embed_scale = true},
     .attn = {.rope_layout = RopeLayout::HalfSplit,
              .dim_scale_layers = 46,
              .default_softcap = 50.0f,
              .swa_period = 2,
              .default_window = 4096},
     .ffn = {.kind = FfnKind::GeGlu},
     .stack = {.default_final_softcap = 30.0f},
     .test = {.head_dim = 32, .window = 8}},
    {.name = "gemma3",
     .norm = {.placement = NormPlacement::PreAndPost, .embed_scale = true},
     .attn = {.rope_layout = RopeLayout::HalfSplit,
              .qk_norm = QkNorm::PerHead,
              .dim_scale_layers = 62,
              .swa_period = 6,
              .local_rope_base = true},
     .ffn = {.kind = FfnKind::GeGlu},
     .test = {.n_layers = 6, .window = 8}},  // five local layers, then a global one
    {.name = "gpt2",
     .norm = {.kind = NormKind::Layer},
     .attn = {.positions = PositionKind::Learned, .fused_qkv = true},
     .ffn = {.kind = FfnKind::Gelu},
     .biases = Biases::All,
     .test = {.n_kv_heads = 4}},
    // BLOOM, BLOOMZ: GPT-2's blocks with ALiBi and a norm on the embeddings
    {.name = "bloom",
     .norm = {.kind = NormKind::Layer, .embed_norm = true},
     .attn = {.positions = PositionKind::Alibi, .default_max_alibi_bias = 8.0f, .fused_qkv = true},
     .ffn = {.kind = FfnKind::Gelu},
     .biases = Biases::All,
     .test = {.n_kv_heads = 4}},
    // MPT-7B/30B: ALiBi, LayerNorm, usually no biases at all, optional q/k/v clamp (the test shape's
    // clips a good part of q, k and v, with the biases they are clamped after)
    {.name = "mpt",
     .norm = {.kind = NormKind::Layer},
     .attn = {.positions = PositionKind::Alibi, .fused_qkv = true, .clamp_kqv = true},
     .ffn = {.kind = FfnKind::Gelu},
     .biases = Biases::AllOptional,
     .test = {.n_kv_heads = 4, .clamp_kqv = 0.5f, .optional_biases = true}},
    // BERT, bge, all-MiniLM, e5: a post-norm encoder with learned positions
    {.name = "bert",
     .norm = {.kind = NormKind::Layer, .placement = NormPlacement::Post, .embed_norm = true},
     .attn = {.positions = PositionKind::Learned},
     .ffn = {.kind = FfnKind::Gelu},
     .biases = Biases::All,
     .stack = {.causal = false, .token_types = true, .lm_head = false}},
    // nomic-embed-text: BERT with rotary positions, SwiGLU and no biases
    {.name = "nomic-bert",
     .norm = {.kind = NormKind::Layer, .placement = NormPlacement::Post, .embed_norm = true},
     .attn = {.rope_layout = RopeLayout::HalfSplit, .fused_qkv = true},
     .stack = {.causal = false, .token_types = true, .lm_head = false}},
    // jina-embeddings-v2: BERT with ALiBi both ways and a GEGLU feed-forward; ffn_up holds the gated
    // half (gelu'd), then the other
    {.name = "jina-bert-v2",
     .norm = {.kind = NormKind::Layer, .placement = NormPlacement::Post, .embed_norm = true},
     .attn = {.positions = PositionKind::Alibi, .default_max_alibi_bias = 8.0f},
     .ffn = {.kind = FfnKind::GeGlu, .fused_gate_up = true},
     .biases = Biases::All,
     .stack = {.causal = false, .token_types = true, .lm_head = false, .cls_single = true}},
    // jina-embeddings-v2-base-code (jinaai/jina-bert-v2-qk-post-norm): q and k LayerNorm'd whole after
    // their projections, and a second norm after attention over the layer's input added again.
    {.name = "jina-bert-v2",
     .variant = "qk-post-norm",
     .norm = {.kind = NormKind::Layer, .placement = NormPlacement::Post, .attn_norm_2 = true, .embed_norm = true},
     .attn = {.positions = PositionKind::Alibi, .default_max_alibi_bias = 8.0f, .qk_norm = QkNorm::WholeLayerNorm},
     .ffn = {.kind = FfnKind::GeGlu, .fused_gate_up = true},
     .biases = Biases::All,
     .stack = {.causal = false, .token_types = true, .lm_head = false, .cls_single = true}},
    // Files of llama.cpp's converters before the fused GEGLU: ffn_gate (gelu'd) and ffn_up apart.
    {.name = "jina-bert-v2",
     .variant = "split-gate",
     .norm = {.kind = NormKind::Layer, .placement = NormPlacement::Post, .embed_norm = true},
     .attn = {.positions = PositionKind::Alibi, .default_max_alibi_bias = 8.0f},
     .ffn = {.kind = FfnKind::GeGlu},
     .biases = Biases::All,
     .stack = {.causal = false, .token_types = true, .lm_head = false, .cls_single = true}},
    // Both: the qk-post-norm model as the converters before the fused GEGLU wrote it.
    {.name = "jina-bert-v2",
     .variant = "qk-post-norm,split-gate",
     .norm = {.kind = NormKind::Layer, .placement = NormPlacement::Post, .attn_norm_2 = true, .embed_norm = true},
     .attn = {.positions = PositionKind::Alibi, .default_max_alibi_bias = 8.0f, .qk_norm = QkNorm::WholeLayerNorm},
     .ffn = {.kind = FfnKind::GeGlu},
     .biases = Biases::All,
     .stack = {.causal = false, .token_types = true, .lm_head = false, .cls_single = true}},
    // T5's encoder alone (text-to-image pipelines: T5 v1.1 XXL in Flux, SD3); T5 v1.1 / flan-T5: gated
    // GELU (T5 v1.0's ReLU is the variant below)
    {.name = "t5encoder",
     .attn = {.positions = PositionKind::RelativeBias, .unscaled_scores = true},
     .ffn = {.kind = FfnKind::GeGlu},
     .stack = {.causal = false, .lm_head = false, .encoder_output_norm = true, .t5 = T5Stack::Encoder}},
    // T5 v1.0 (t5-small, t5-base, t5-large): ReLU, no ffn_gate
    {.name = "t5encoder",
     .variant = "v1.0",
     .attn = {.positions = PositionKind::RelativeBias, .unscaled_scores = true},
     .ffn = {.kind = FfnKind::Relu},
     .stack = {.causal = false, .lm_head = false, .encoder_output_norm = true, .t5 = T5Stack::Encoder}},
    // T5 v1.1, flan-T5: the decoder (causal, cross-attention) over t5encoder's encoder
    {.name = "t5",
     .attn = {.positions = PositionKind::RelativeBias, .cross_attention = true, .unscaled_scores = true},
     .ffn = {.kind = FfnKind::GeGlu},
     .stack = {.t5 = T5Stack::Decoder, .encoder_arch = "t5encoder"}},
    {.name = "t5",
     .variant = "v1.0",
     .attn = {.positions = PositionKind::RelativeBias, .cross_attention = true, .unscaled_scores = true},
     .ffn = {.kind = FfnKind::Relu},
     .stack = {.t5 = T5Stack::Decoder, .encoder_arch = "t5encoder"}},
};

}  // namespace

std::span<const ArchDesc> all_archs() { return kArchs; }

const ArchDesc* find_arch(std::string_view name) { return find_arch(name, ""); }

const ArchDesc* find_arch(std::string_view name, std::string_view variant) {
    for (const ArchDesc& a : kArchs)
        if (a.name == name && a.variant == variant) return &a;
    return nullptr;
}

std::string supported_arch_list() {
    std::string out;
    for (const ArchDesc& a : kArchs)
        if (a.variant.empty()) out += (out.empty() ? "" : ", ") + std::string(a.name);
    return out;
}

}  // namespace vkllm
