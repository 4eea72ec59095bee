// GGUF v3 writer, and a generator of models with random weights for every architecture vkllm runs.
//
// Tensors are declared with a fill callback and their bytes are produced only while the file is
// written, one tensor at a time: writing a multi-GB model needs memory for one tensor, not the
// whole model.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/gguf.h"
#include "runtime/tensor_types.h"

namespace vkllm {

class GgufWriter {
public:
    // Fills `dst` (exactly the tensor's byte size) with the tensor's encoded data.
    using FillFn = std::function<void(std::span<uint8_t> dst)>;
    // Called before each tensor is produced: (index, count, tensor).
    using ProgressFn = std::function<void(size_t, size_t, const GgufTensorInfo&)>;

    // Setting an existing key replaces its value in place (file order is first-set order).
    void set_u8(std::string_view key, uint8_t v);
    void set_u32(std::string_view key, uint32_t v);
    void set_i32(std::string_view key, int32_t v);
    void set_u64(std::string_view key, uint64_t v);
    void set_f32(std::string_view key, float v);
    void set_f64(std::string_view key, double v);
    void set_bool(std::string_view key, bool v);
    void set_string(std::string_view key, std::string_view v);
    void set_string_array(std::string_view key, const std::vector<std::string>& v);
    void set_f32_array(std::string_view key, std::span<const float> v);
    void set_i32_array(std::string_view key, std::span<const int32_t> v);
    void set_u8_array(std::string_view key, std::span<const uint8_t> v);
    bool remove(std::string_view key);  // false when absent
    size_t remove_prefix(std::string_view prefix);  // every key starting with it; how many
    // A value read from another file, copied as it is (any type, arrays of strings included).
    void set_value(std::string_view key, const GgufValue& v);

    // Writes general.alignment too; must be a power of two. Default 32 (no key written).
    void set_alignment(uint32_t alignment);

    // Declares a tensor (ggml dim order, ne[0] = row length). Throws GgufError for an empty or
    // duplicate name, 0 or > 4 dims, a zero dim, or a row length that is not a whole number of
    // blocks.
    void add_tensor(std::string name, TensorType type, std::span<const uint64_t> ne, FillFn fill);
    void add_tensor(std::string name, TensorType type, std::initializer_list<uint64_t> ne, FillFn fill) {
        add_tensor(std::move(name), type, std::span<const uint64_t>(ne.begin(), ne.size()), std::move(fill));
    }
    // Same, for data already in memory (copied).
    void add_tensor_data(std::string name, TensorType type, std::initializer_list<uint64_t> ne,
                         std::span<const uint8_t> data);
    bool remove_tensor(std::string_view name);
    // Declared tensors with their offsets as they will be written (offsets change on add/remove).
    const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }

    // Writes the file through a temporary name and renames it into place, so a failure never
    // leaves a truncated file at `path`. Throws GgufError naming the path on I/O errors.
    void write_file(const std::string& path, const ProgressFn& progress = {}) const;
    std::vector<uint8_t> write_memory() const;

private:
    struct Entry {
        std::string key;
        GgufType type;
        std::vector<uint8_t> payload;  // encoded value, without key and type
    };
    void set(std::string_view key, GgufType type, std::vector<uint8_t> payload);
    template <class Sink>
    void write_to(Sink& sink, const ProgressFn& progress) const;
    void relayout();

    std::vector<Entry> kv_;
    std::vector<GgufTensorInfo> tensors_;
    std::vector<FillFn> fills_;
    uint32_t alignment_ = kGgufDefaultAlignment;
};

// --- llama.cpp quantization mixes ---------------------------------------------------------------

// The file types of llama.cpp's quantizer (`llama-quantize in.gguf out.gguf Q4_K_M`) that
// gen-model writes: each gives every tensor a type by llama.cpp's rules (mix_tensor_type).
enum class QuantMix : uint8_t { Q2_K, Q3_K_S, Q3_K_M, Q3_K_L, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q6_K, IQ4_NL, IQ4_XS };

inline constexpr QuantMix kAllQuantMixes[] = {
    QuantMix::Q2_K,   QuantMix::Q3_K_S, QuantMix::Q3_K_M, QuantMix::Q3_K_L, QuantMix::Q4_K_S, QuantMix::Q4_K_M,
    QuantMix::Q5_K_S, QuantMix::Q5_K_M, QuantMix::Q6_K,   QuantMix::IQ4_NL, QuantMix::IQ4_XS,
};

struct QuantMixInfo {
    std::string_view name;  // as gen-model's --type spells it: "q4_k_m"
    uint32_t file_type;     // llama.cpp's LLAMA_FTYPE_MOSTLY_* value, written as general.file_type
    TensorType base;        // the type of the matrices no rule changes
};
const QuantMixInfo& quant_mix_info(QuantMix m);
// "q4_k_m" or "Q4_K_M" -> QuantMix::Q4_K_M; nullopt for any other name.
std::optional<QuantMix> parse_quant_mix(std::string_view name);

// --- random models ------------------------------------------------------------------------------

struct ArchDesc;

struct ModelShape {
    std::string arch = "llama";  // general.architecture: any of supported_arch_list()
    std::string variant;         // a variant row of it (ArchDesc::variant: t5 / t5encoder "v1.0"); "": the main one
    uint32_t dim = 64;
    uint32_t n_layers = 2;
    uint32_t n_heads = 4;
    uint32_t n_kv_heads = 4;
    uint32_t ffn_dim = 128;
    uint32_t n_vocab = 512;
    uint32_t n_ctx = 256;
    uint32_t head_dim = 0;   // 0: dim / n_heads; else written as attention.key_length (Gemma, Qwen3 shapes)
    uint32_t window = 0;     // sliding window of the architectures that have one; 0: the architecture's default (32)
    bool rope_freqs = false; // llama: a rope_freqs.weight of frequency factors (Llama 3.x scaling)
    // RoPE scaling written as <arch>.rope.scaling.*: "none", "linear" or "yarn" with this factor;
    // the original context is n_ctx / factor.
    std::string rope_scaling = "none";
    float rope_factor = 1.0f;
    TensorType weight_type = TensorType::F32;  // 2D matrices incl. token_embd; norms are always F32
    std::optional<QuantMix> mix;               // set: each matrix gets its type from the mix instead
    uint64_t seed = 1;
    float rms_eps = 1e-5f;   // the norm epsilon (LayerNorm's for gpt2)
    float rope_base = 10000.0f;
    bool tied_embeddings = false;  // true: no output.weight (always for gemma2 / gemma3, as the real ones)
    // <arch>.pooling_type (ModelConfig's Pooling values): encoders always have one (unset: 1, mean);
    // a decoder gets the key only when set (an embedding decoder such as Qwen3-Embedding: 3, last).
    std::optional<uint32_t> pooling;
    float clamp_kqv = 0;     // mpt: <arch>.attention.clamp_kqv (0: not written)
    bool optional_biases = false;  // also write the biases the architecture reads only when present
    uint32_t n_token_types = 2;       // rows of token_types.weight (encoders): BERT 2, XLM-RoBERTa 1
    // Mixture of experts: n_expert experts of expert_ffn (0: ffn_dim) per layer, n_expert_used per token,
    // a shared expert of shared_ffn (0: ffn_dim) where the architecture has one. A llama with
    // n_expert > 0 is written as Mixtral is (its "moe" row); qwen2moe / qwen3moe need n_expert > 0.
    uint32_t n_expert = 0, n_expert_used = 0, expert_ffn = 0, shared_ffn = 0;
    // Each expert of a stack as its own tensor (ffn_gate.N, ...), as Mixtral's first conversions
    // wrote them; the bytes are the stacked file's, expert by expert (ArchDesc::per_expert_tensors).
    bool split_experts = false;
    // deepseek2: latent attention with head_dim the per-head q/k dims (key_length_mla) of which rope_dim
    // rotate (0: 32), values of v_head_dim per head (0: head_dim - rope_dim), a latent of kv_lora
    // (0: 128) and q through a q_lora rank (0: wq directly, as V2-Lite). The first n_dense_lead layers
    // dense (ffn_dim), n_shared experts of expert_ffn beside the routed ones, groups for the routing;
    // sigmoid_gating writes V3's sigmoid router with its selection bias (exp_probs_b), else V2's softmax.
    uint32_t kv_lora = 0, q_lora = 0, rope_dim = 0, v_head_dim = 0;
    // deepseek2 as converted before 2025: no *_mla keys, key_length / value_length the uncompressed
    // heads', a KV head per query head, and one attn_kv_b per layer instead of attn_k_b / attn_v_b.
    bool mla_kv_b = false;
    uint32_t n_dense_lead = 0, n_shared_experts = 1, expert_groups = 1, groups_used = 1;
    bool sigmoid_gating = false, expert_norm = false;
    float expert_scale = 1.0f;
    // The row of the architecture table this shape writes (variant, or experts on a llama).
    const ArchDesc& arch_desc() const;
    uint32_t q_dim() const { return n_heads * (head_dim ? head_dim : dim / n_heads); }
    std::string name = "vkllm-random";
};

// deepseek2's latent attention sizes of a shape, its defaults filled in.
struct MlaDims {
    uint32_t rope = 0, kv_lora = 0, q_lora = 0, v = 0;
};
MlaDims mla_dims(const ModelShape& s);

// Throws std::invalid_argument naming the offending field: zero sizes, heads not dividing dim,
// kv heads not dividing heads, odd head_dim, a row length (dim or ffn, naming the tensors that
// have it) that is not a whole number of the weight type's blocks (of 32 for a mix, whose
// 256-element types fall back per tensor), a vocab too small for the 259 special and byte tokens.
void validate_model_shape(const ModelShape& shape);

// The type llama.cpp's quantizer gives the LLaMA tensor `name` (as make_random_model names it, with
// rows of `row_len` elements) in a model of `shape` for the file type `mix`. Mirrors
// llama_tensor_get_type() in llama.cpp's src/llama-quant.cpp for the llama architecture without
// experts or importance matrix, including its fallback for rows that are not whole 256-element
// blocks. 1D tensors (norms) are not quantized: F32.
TensorType mix_tensor_type(QuantMix mix, const ModelShape& shape, std::string_view name, uint64_t row_len);

// The tokenizer vocab written into random models: <unk>, <s>, </s>, <0x00>..<0xFF>, then "▁",
// single characters, and "▁"-prefixed and plain letter pieces of growing length, with descending
// scores, so the SentencePiece-style tokenizer works and merges on it.
struct RandomVocab {
    std::vector<std::string> tokens;
    std::vector<float> scores;
    std::vector<int32_t> types;
};
RandomVocab make_random_vocab(uint32_t n_vocab);
// The same pieces as a WordPiece vocab in llama.cpp's layout, for encoders (architectures with token
// types): [PAD] [UNK] [CLS] [SEP] [MASK] (ids 0..4), then the normal pieces ("▁x" starts a word,
// "x" continues one).
RandomVocab make_random_wordpiece_vocab(uint32_t n_vocab);

// Declares the metadata and tensors of a random model; tests adjust the result before writing.
GgufWriter make_random_model(const ModelShape& shape);
void write_random_model(const std::string& path, const ModelShape& shape,
                        const GgufWriter::ProgressFn& progress = {});

// ggml "general.file_type" for a model whose matrices are of type t (for a single 256-element
// type, the file type llama.cpp's loader infers from it: Q4_K -> MOSTLY_Q4_K_M).
uint32_t llama_file_type(TensorType t);
// The type of every tensor of the model `shape` describes (its weight_type, or its mix's choice).
TensorType llama_tensor_type(const ModelShape& shape, std::string_view name, uint64_t row_len);

}  // namespace vkllm
