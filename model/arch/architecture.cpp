#include "model/arch/architecture.h"

#include <array>

namespace vkllm {

namespace {

using ops::RopeLayout;

ArchDesc llama() {
    ArchDesc a;
    a.name = "llama";  // LLaMA 1/2/3.x, TinyLlama, SmolLM, Mistral-style dense models
    return a;
}

ArchDesc qwen2() {
    ArchDesc a;
    a.name = "qwen2";
    a.rope_layout = RopeLayout::HalfSplit;
    a.qkv_bias = true;
    return a;
}

ArchDesc qwen3() {
    ArchDesc a;
    a.name = "qwen3";
    a.rope_layout = RopeLayout::HalfSplit;
    a.qk_norm = true;
    return a;
}

ArchDesc llama_moe() {
    ArchDesc a = llama();
    a.variant = "moe";  // Mixtral: a llama file with llama.expert_count (arch_for_file picks this row)
    a.moe = true;
    a.moe_norm_weights = true;  // softmax over the chosen experts' probabilities, as llama.cpp
    a.per_expert_tensors = true;
    return a;
}

ArchDesc qwen2moe() {
    ArchDesc a = qwen2();
    a.name = "qwen2moe";  // Qwen1.5-MoE, Qwen2-57B-A14B: experts beside a gated shared expert
    a.moe = true;
    a.shared_expert = true;
    a.expert_ffn_per_used = true;
    return a;
}

ArchDesc qwen3moe() {
    ArchDesc a = qwen3();
    a.name = "qwen3moe";  // Qwen3-30B-A3B, Qwen3-235B-A22B
    a.moe = true;
    a.moe_norm_weights = true;
    a.expert_ffn_per_used = true;
    return a;
}

ArchDesc olmoe() {
    ArchDesc a;
    a.name = "olmoe";  // OLMoE-1B-7B: 64 experts, top-8, unnormalised; q and k normed whole
    a.rope_layout = RopeLayout::HalfSplit;
    a.qk_norm = true;
    a.qk_norm_full = true;
    a.moe = true;
    return a;
}

ArchDesc gpt_oss() {
    ArchDesc a;
    a.name = "gpt-oss";  // gpt-oss-20b / -120b: 32 / 128 experts of top-4, every other layer a window of 128
    a.rope_layout = RopeLayout::HalfSplit;
    a.qkv_bias = true;
    a.out_bias = true;
    a.moe = true;
    a.moe_biases = true;
    a.moe_softmax_chosen = true;
    a.expert_ffn_required = true;
    a.ffn = FfnKind::SwiGluOai;
    a.attn_sinks = true;
    a.swa_period = 2;  // layers 0, 2, 4, ... are local; the window is the file's (required)
    a.ffn_norm_name = "post_attention_norm.weight";
    return a;
}

ArchDesc deepseek2() {
    ArchDesc a;
    a.name = "deepseek2";  // DeepSeek-V2 / V2-Lite / V3 / R1: latent attention, leading dense layers, shared experts
    a.mla = true;
    a.moe = true;
    a.shared_expert = true;
    a.shared_ungated = true;
    a.leading_dense = true;
    a.expert_ffn_required = true;
    return a;
}

ArchDesc phi3() {
    ArchDesc a;
    a.name = "phi3";
    a.rope_layout = RopeLayout::HalfSplit;
    a.fused_qkv = true;
    a.fused_gate_up = true;
    a.rope_factor_tensors = true;
    // Phi-3 files carry attention.sliding_window, but like llama.cpp (which disabled it for Phi-3)
    // vkllm attends over the whole context: swa_period stays 0.
    return a;
}

ArchDesc gemma2() {
    ArchDesc a;
    a.name = "gemma2";
    a.ffn = FfnKind::GeGlu;
    a.rope_layout = RopeLayout::HalfSplit;
    a.norm_placement = NormPlacement::PreAndPost;
    a.embed_scale = true;
    a.swa_period = 2;
    a.default_window = 4096;
    a.default_attn_softcap = 50.0f;
    a.default_final_softcap = 30.0f;
    a.dim_scale_layers = 46;
    return a;
}

ArchDesc gemma3() {
    ArchDesc a;
    a.name = "gemma3";
    a.ffn = FfnKind::GeGlu;
    a.rope_layout = RopeLayout::HalfSplit;
    a.qk_norm = true;
    a.norm_placement = NormPlacement::PreAndPost;
    a.embed_scale = true;
    a.swa_period = 6;
    a.local_rope_base = true;
    a.dim_scale_layers = 62;
    return a;
}

ArchDesc gpt2() {
    ArchDesc a;
    a.name = "gpt2";
    a.norm = NormKind::Layer;
    a.ffn = FfnKind::Gelu;
    a.positions = PositionKind::Learned;
    a.fused_qkv = true;
    a.all_bias = true;
    return a;
}

ArchDesc bert() {
    ArchDesc a;
    a.name = "bert";  // BERT, bge, all-MiniLM, e5: a post-norm encoder with learned positions
    a.norm = NormKind::Layer;
    a.ffn = FfnKind::Gelu;
    a.positions = PositionKind::Learned;
    a.all_bias = true;
    a.norm_placement = NormPlacement::Post;
    a.causal = false;
    a.token_types = true;
    a.embed_norm = true;
    a.lm_head = false;
    return a;
}

ArchDesc nomic_bert() {
    ArchDesc a = bert();
    a.name = "nomic-bert";  // nomic-embed-text: BERT with rotary positions, SwiGLU and no biases
    a.positions = PositionKind::Rope;
    a.rope_layout = RopeLayout::HalfSplit;
    a.ffn = FfnKind::SwiGlu;
    a.fused_qkv = true;
    a.all_bias = false;
    return a;
}

ArchDesc bloom() {
    ArchDesc a;
    a.name = "bloom";  // BLOOM, BLOOMZ: GPT-2's blocks with ALiBi and a norm on the embeddings
    a.norm = NormKind::Layer;
    a.ffn = FfnKind::Gelu;
    a.positions = PositionKind::Alibi;
    a.default_max_alibi_bias = 8.0f;
    a.fused_qkv = true;
    a.all_bias = true;
    a.embed_norm = true;
    return a;
}

ArchDesc mpt() {
    ArchDesc a;
    a.name = "mpt";  // MPT-7B/30B: ALiBi, LayerNorm, usually no biases at all, optional q/k/v clamp
    a.norm = NormKind::Layer;
    a.ffn = FfnKind::Gelu;
    a.positions = PositionKind::Alibi;
    a.fused_qkv = true;
    a.optional_biases = true;
    a.clamp_kqv = true;
    return a;
}

ArchDesc jina_bert_v2() {
    ArchDesc a = bert();
    a.name = "jina-bert-v2";  // jina-embeddings-v2: BERT with ALiBi both ways and a GEGLU feed-forward
    a.positions = PositionKind::Alibi;
    a.default_max_alibi_bias = 8.0f;
    a.ffn = FfnKind::GeGlu;
    a.fused_gate_up = true;  // ffn_up holds the gated half (gelu'd), then the other
    a.cls_single = true;
    return a;
}

// jina-embeddings-v2-base-code (jinaai/jina-bert-v2-qk-post-norm): q and k LayerNorm'd whole after
// their projections, and a second norm after attention over the layer's input added again.
ArchDesc jina_bert_v2_qk(ArchDesc a, std::string_view variant) {
    a.variant = variant;
    a.qk_norm = true;
    a.qk_norm_full = true;
    a.attn_norm_2 = true;
    return a;
}

// Files of llama.cpp's converters before the fused GEGLU: ffn_gate (gelu'd) and ffn_up apart.
ArchDesc jina_bert_v2_split(ArchDesc a, std::string_view variant) {
    a.variant = variant;
    a.fused_gate_up = false;
    return a;
}

ArchDesc t5encoder() {
    ArchDesc a;
    a.name = "t5encoder";  // T5's encoder alone (text-to-image pipelines: T5 v1.1 XXL in Flux, SD3)
    a.norm = NormKind::Rms;
    a.ffn = FfnKind::GeGlu;  // T5 v1.1 / flan-T5: gated GELU (T5 v1.0's ReLU is refused by name)
    a.positions = PositionKind::RelativeBias;
    a.causal = false;
    a.lm_head = false;
    a.encoder_output_norm = true;
    a.t5 = T5Stack::Encoder;
    a.unscaled_scores = true;
    return a;
}

ArchDesc t5encoder_v10() {
    ArchDesc a = t5encoder();
    a.variant = "v1.0";  // T5 v1.0 (t5-small, t5-base, t5-large): ReLU, no ffn_gate
    a.ffn = FfnKind::Relu;
    return a;
}

ArchDesc t5() {
    ArchDesc a = t5encoder();
    a.name = "t5";  // T5 v1.1, flan-T5: the decoder (causal, cross-attention) over t5encoder's encoder
    a.causal = true;
    a.lm_head = true;
    a.encoder_output_norm = false;
    a.t5 = T5Stack::Decoder;
    a.cross_attention = true;
    a.encoder_arch = "t5encoder";
    return a;
}

ArchDesc t5_v10() {
    ArchDesc a = t5();
    a.variant = "v1.0";
    a.ffn = FfnKind::Relu;
    return a;
}

// A variant comes after its main row (find_arch(name) gives the first row of a name).
const std::array<ArchDesc, 25>& archs() {
    static const std::array<ArchDesc, 25> table = {
        llama(), llama_moe(),  qwen2(),        qwen3(),     qwen2moe(), qwen3moe(), olmoe(), gpt_oss(), deepseek2(), phi3(), gemma2(),
        gemma3(), gpt2(),      bloom(),        mpt(),       bert(),     nomic_bert(), jina_bert_v2(),
        jina_bert_v2_qk(jina_bert_v2(), "qk-post-norm"), jina_bert_v2_split(jina_bert_v2(), "split-gate"),
        jina_bert_v2_split(jina_bert_v2_qk(jina_bert_v2(), ""), "qk-post-norm,split-gate"), t5encoder(),
        t5encoder_v10(), t5(), t5_v10()};
    return table;
}

}  // namespace

const ArchDesc* find_arch(std::string_view name) { return find_arch(name, ""); }

const ArchDesc* find_arch(std::string_view name, std::string_view variant) {
    for (const ArchDesc& a : archs())
        if (a.name == name && a.variant == variant) return &a;
    return nullptr;
}

std::string supported_arch_list() {
    std::string out;
    for (const ArchDesc& a : archs())
        if (a.variant.empty()) out += (out.empty() ? "" : ", ") + std::string(a.name);
    return out;
}


}  // namespace vkllm
