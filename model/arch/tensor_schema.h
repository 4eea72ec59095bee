// Every tensor a model reads, as data. The config checker (model_config.cpp), the weight layout
// and upload (model/forward/model_weights.cpp), the host reference (model_cpu.cpp), the device pass
// (through the roles of LayerWeights) and gen-model (model/testgen/random_model.cpp) all walk these
// lists, so adding a tensor is one line in tensor_schema.cpp. The tensors some files hold that vkllm
// refuses by name are here too (unsupported_tensor), for the checker.
//
// Names are the GGUF ones (llama.cpp's conventions); a layer's tensors are "blk.N.<name>". Shapes
// are ggml dims (ne0 = the row length first), in terms of the model's hyperparameters.
#pragma once

#include "model/arch/architecture.h"
#include "model/gguf/gguf.h"

#include <array>
#include <optional>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace vkllm {

// What a tensor is for. A layer's roles index LayerWeights; the model-level roles name the rest.
enum class Role : uint8_t {
    // --- per layer
    AttnNorm,
    AttnNormB,  // (dim) before attention, or after its residual add (NormPlacement::Post)
    Wq,
    Wk,
    Wv,
    Wqkv,  // (dim -> q), (dim -> kv), (dim -> kv), (dim -> q + 2 kv)
    Bq,
    Bk,
    Bv,
    Bqkv,  // (q), (kv), (kv), (q + 2 kv)
    QNorm,
    KNorm,  // (head_dim) per-head RMSNorm of q and k, or (q), (kv) over all of them
    QNormB,
    KNormB,  // their biases (a LayerNorm architecture's)
    Wo,
    Bo,  // (q -> dim), (dim)
    PostAttnNorm,  // (dim) on the attention output before the residual add
    AttnNorm2,
    AttnNorm2B,  // (dim) NormDesc::attn_norm_2
    FfnNorm,
    FfnNormB,  // (dim) before the FFN, or after its residual add (NormPlacement::Post)
    WGate,
    WUp,
    WGateUp,  // (dim -> ffn), (dim -> ffn), (dim -> 2 ffn)
    BUp,
    WDown,
    BDown,  // (ffn), (ffn -> dim), (dim)
    PostFfnNorm,  // (dim)
    // mixture of experts (ArchDesc::moe()), instead of the dense FFN's WGate, WUp, WDown:
    WRouter,  // (dim -> n_expert) router logits, ffn_gate_inp
    WGateExps,
    WUpExps,  // n_expert x (dim -> expert_ffn), stacked along ne2
    WDownExps,  // n_expert x (expert_ffn -> dim)
    WGateShexp,
    WUpShexp,  // (dim -> shared_ffn) the shared expert (ExpertDesc::shared)
    WDownShexp,  // (shared_ffn -> dim)
    WShexpGate,  // (dim -> 1) its gate logit, ffn_gate_inp_shexp (a vector in the file)
    BRouter,  // (n_expert) router bias (ExpertDesc::biases)
    BGateExps,
    BUpExps,
    BDownExps,  // n_expert x (expert_ffn), x (expert_ffn), x (dim) expert biases
    Sinks,  // (n_heads) attention sink logits (AttentionDesc::sinks)
    AttnRelB,  // (n_heads) x (buckets) T5's relative-position bias, read on the host
    CrossNorm,  // (dim) before cross-attention (T5's decoder)
    WqCross,
    WkCross,
    WvCross,
    WoCross,  // (dim -> q), (dim -> kv) of the encoder output, (dim -> kv), (q -> dim)
    // multi-head latent attention (AttentionDesc::mla), instead of Wq (or with it: Wq is (dim -> H * qk_mla)
    // in a file without q_lora_rank), Wk, Wv:
    WqA,
    QANorm,
    WqB,  // (dim -> q_lora), (q_lora), (q_lora -> H * qk_mla)
    WkvA,
    KvANorm,  // (dim -> kv_lora + rope) the latent and the shared rotary key, (kv_lora)
    WkB,
    WvB,  // H x (nope -> kv_lora) absorbed into q, H x (kv_lora -> v_mla) after attention
    WkvB,  // (kv_lora -> H * (nope + v_mla)) older files' joined form of both: per head
    // nope k rows then v_mla v rows (ModelConfig::mla_joined_kv_b; host only)
    BExpProbs,  // (n_expert) DeepSeek-V3's expert selection bias, exp_probs_b
    LayerCount,
    // --- model level
    TokenEmbd = LayerCount,
    PositionEmbd,
    TokenTypes,
    TokenEmbdNorm,
    TokenEmbdNormB,
    RopeFreqs,
    RopeFactorsLong,
    RopeFactorsShort,
    OutputNorm,
    OutputNormB,
    Output,
    // A reranker's classification head on the first token's state (encoders, pooling rank; read on
    // the host, never uploaded): cls (dim -> dim) + bias, tanh, then cls.output (dim -> labels) + bias;
    // with StackDesc::cls_single, cls (dim -> 1) + bias, tanh, alone.
    Cls,
    ClsB,
    ClsOut,
    ClsOutB,
    None,  // no tensor: a plan step that does not run, or has no bias (kNoRole)
};
inline constexpr size_t kLayerRoles = size_t(Role::LayerCount);

// A dimension of a shape, resolved by SchemaDims::get().
enum class Dim : uint8_t {
    One,
    Embd,
    Q,
    Kv,
    Qkv,
    Ffn,
    Ffn2,
    HeadDim,
    Vocab,
    CtxTrain,
    RopeHalf,
    TokenTypes,
    ClsOut,
    Heads,
    RelBuckets,
    Experts,
    FfnExp,
    FfnShexp,
    QLora,
    KvLora,
    KvA,
    MlaQ,
    MlaNope,
    MlaV,
    MlaO,  // latent attention: ranks, kv_lora + rope, H * qk_mla, qk_mla - rope, v_mla, H * v_mla
    MlaKvB,  // H * (qk_mla - rope + v_mla)
};

struct SchemaDims {
    uint64_t embd = 0, q = 0, kv = 0, ffn = 0, head_dim = 0, vocab = 0, ctx_train = 0, rope_dim = 0, token_types = 0;
    uint64_t cls_out = 0;  // classification labels (rows of cls.output.weight)
    uint64_t heads = 0, rel_buckets = 0;  // query heads; T5's relative-position buckets
    uint64_t experts = 0, ffn_exp = 0, ffn_shexp = 0;  // mixture of experts: count, each one's FFN, the shared one's
    // multi-head latent attention: q and kv ranks, per-head q/k dims (nope + rope) and v dims
    uint64_t q_lora = 0, kv_lora = 0, mla_qk = 0, mla_v = 0;
    uint64_t get(Dim d) const;
};

// How gen-model fills the tensor: a quantized random matrix, or an f32 vector of N(mean, sigma)
// values (abs() of them when positive).
struct Init {
    bool matrix = false;
    float mean = 0, sigma = 0;
    bool positive = false;
};

// The layers a per-layer tensor belongs to: every one, or in a model with leading dense layers
// (ExpertLayers::AfterDense) only those (Dense) or only the mixture-of-experts ones (Moe).
enum class LayerSet : uint8_t { All, Dense, Moe };

struct TensorSpec {
    Role role;
    const char* name;  // GGUF name; per-layer names without the "blk.N." prefix
    std::array<Dim, 3> ne;  // ggml dims; Dim::One for vectors (and ne2 of everything but expert stacks)
    bool required;  // absent: a clear error when required, else the model runs without it
    Init init;
    bool f32 = false;  // uploaded as f32 whatever the file stores (norms, biases, rope factors)
    const char* prefix = "blk.";  // of per-layer names: "blk.", or T5's "enc.blk."
    LayerSet layers = LayerSet::All;
    // An expert stack that older files (Mixtral's first conversions) store as one tensor per expert
    // instead: the name of expert e's ("ffn_gate.{}.weight", {} the expert), shape [ne0, ne1], all of
    // one type. nullptr: only the stacked form exists.
    const char* per_expert_name = nullptr;
};
// Whether layer `layer` of a model whose first n_dense_lead layers are dense holds `s`.
bool in_layer(const TensorSpec& s, uint32_t layer, uint32_t n_dense_lead);

// A tensor that holds several roles' rows back to back: the file may store it whole (attn_qkv:
// Phi-3, GPT-2), or the uploader may place the parts contiguously when they share a type, so that a
// decode step projects all of them with one matvec. Parts are split along ne1 (rows; elements for
// vectors) in the order given, with sizes `sizes`.
struct FusedGroup {
    Role whole;
    std::array<Role, 3> parts;
    std::array<Dim, 3> sizes;
    uint32_t n_parts;
};
std::span<const FusedGroup> fused_groups();
// The group whose whole is `whole`; nullptr when it is none.
const FusedGroup* fused_group(Role whole);
// The group `part` is a part of; nullptr when it is none.
const FusedGroup* fused_group_of_part(Role part);

// The tensors of one layer of the architecture, in the order gen-model writes them.
std::vector<TensorSpec> layer_schema(const ArchDesc& a);
// The model-level tensors; `head` ones come after the layers in gen-model's files.
std::vector<TensorSpec> model_schema(const ArchDesc& a);
bool is_head_role(Role r);
// The file's model-level tensor in `role` under the schema's name; nullptr when the file lacks it or
// the architecture's schema has no such role.
const GgufTensorInfo* find_model_tensor(const GgufFile& file, const ArchDesc& a, Role role);
// Cls, ClsB, ClsOut, ClsOutB.
bool is_classifier_role(Role r);
// The bias of a projection or a norm (Bq, Bo, AttnNormB, ...; not the classifier's).
bool is_bias_role(Role r);

// "blk.3.attn_q.weight" (the spec's prefix, the layer, its name) for per-layer roles, the name itself
// for the others.
std::string tensor_name(const TensorSpec& s, uint32_t layer);
// "blk.3.ffn_gate.5.weight": expert e's tensor of an expert stack stored one tensor per expert
// (s.per_expert_name must be set).
std::string expert_tensor_name(const TensorSpec& s, uint32_t layer, uint32_t e);
// e when `name` is expert e's tensor of s in layer `layer` ("blk.3.ffn_gate.5.weight" -> 5); nullopt
// for any other name or a spec without a per-expert form.
std::optional<uint32_t> expert_of(const TensorSpec& s, uint32_t layer, std::string_view name);
// The name of `role` in layer `layer` of the architecture; empty when its layers have no such role.
std::string layer_tensor_name(const ArchDesc& A, Role role, uint32_t layer);
// "blk.12.attn_q.weight" -> 12 for prefix "blk." (T5: "enc.blk.", "dec.blk."); nullopt for a tensor of
// no layer.
std::optional<uint64_t> layer_of(std::string_view name, std::string_view prefix);
// Optional tensors llama.cpp reads for some variants of these architectures, which change the
// math and which vkllm does not implement: refused by name rather than silently ignored. The reason,
// or nullptr; `prefix` is the architecture's layer prefix (TensorSpec::prefix).
const char* unsupported_tensor(const ArchDesc& A, std::string_view prefix, std::string_view name);

}  // namespace vkllm
