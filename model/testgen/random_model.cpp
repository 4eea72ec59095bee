#include "model/testgen/random_model.h"

#include "model/arch/architecture.h"
#include "model/arch/model_config.h"
#include "model/arch/tensor_schema.h"
#include "model/testgen/random_vocab.h"
#include "model/testgen/weight_rng.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <future>
#include <iterator>
#include <span>
#include <thread>

namespace vkllm {

namespace {

// Rows from first_row on of the random matrix `name`: one expert of a stack written apart holds the
// rows the stacked tensor would.
GgufWriter::FillFn random_matrix(TensorType type, uint64_t row_len, uint64_t seed, std::string name,
                                 uint64_t first_row = 0) {
    return [=](std::span<uint8_t> dst) {
        const float sigma = 1.0f / std::sqrt(float(row_len));
        const size_t rb = row_bytes(type, size_t(row_len));
        const size_t rows = dst.size() / rb;
        auto fill_rows = [&](size_t first, size_t last) {
            WeightRng rng(seed, name);
            rng.skip((first_row + first) * row_len);
            std::vector<float> row(static_cast<size_t>(row_len));
            for (size_t r = first; r < last; ++r) {
                for (float& v : row) v = sigma * rng.normal();
                quantize_row(type, row.data(), dst.data() + r * rb, row.size());
            }
        };
        // Quantizing is most of gen-model's time (a Llama-3-8B-shaped Q4_K_M is 7.5e9 weights):
        // matrices of a million weights or more are split by rows over the hardware threads.
        const size_t threads = row_len * rows >= (1u << 20) ? std::max(1u, std::thread::hardware_concurrency()) : 1;
        std::vector<std::future<void>> parts;
        const size_t per = (rows + threads - 1) / threads;
        for (size_t first = per; first < rows; first += per)
            parts.push_back(std::async(std::launch::async, fill_rows, first, std::min(rows, first + per)));
        fill_rows(0, std::min(rows, per));
        for (auto& p : parts) p.get();
    };
}

// f32 values mean + sigma * N(0, 1): norms (1, 0.05), biases (0, 0.1), rope factors.
GgufWriter::FillFn random_vector(uint64_t seed, std::string name, float mean = 1.0f, float sigma = 0.05f,
                                 bool positive = false) {
    return [=](std::span<uint8_t> dst) {
        WeightRng rng(seed, name);
        for (size_t off = 0; off + 4 <= dst.size(); off += 4) {
            float v = mean + sigma * rng.normal();
            if (positive) v = std::max(std::fabs(v), 0.25f);
            std::memcpy(dst.data() + off, &v, 4);
        }
    };
}

constexpr uint32_t kT5Buckets = 32;  // T5's relative_attention_num_buckets

// The SentencePiece vocab (tokenizer.ggml.*) of random decoders.
void write_spm_vocab(GgufWriter& w, const ArchDesc& A, uint32_t n_vocab, bool fim_tokens,
                     const std::vector<std::string>& extra_control) {
    RandomVocab vocab = make_random_vocab(n_vocab);
    // The last pieces become control tokens with these texts.
    auto control_tail = [&](const auto& texts, size_t from_end) {
        for (size_t i = 0; i < std::size(texts); ++i) {
            const size_t id = vocab.tokens.size() - from_end - std::size(texts) + i;
            vocab.tokens[id] = std::string(texts[i]);
            vocab.types[id] = 3;  // control
            vocab.scores[id] = 0;
        }
    };
    // llama.cpp's loader looks Phi-3's chat tokens up by text.
    static constexpr const char* kChat[] = {"<|endoftext|>", "<|assistant|>", "<|end|>", "<|user|>", "<|system|>"};
    static constexpr const char* kFim[] = {"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>",
                                           "<|fim_pad|>",    "<|repo_name|>",  "<|file_sep|>"};
    if (A.attn.rope_factor_tensors) control_tail(kChat, 0);
    const size_t fim_from_end = A.attn.rope_factor_tensors ? std::size(kChat) : 0;
    if (fim_tokens) {
        control_tail(kFim, fim_from_end);
        const auto first = uint32_t(vocab.tokens.size() - fim_from_end - std::size(kFim));
        w.set_u32("tokenizer.ggml.fim_pre_token_id", first);
        w.set_u32("tokenizer.ggml.fim_suf_token_id", first + 1);
        w.set_u32("tokenizer.ggml.fim_mid_token_id", first + 2);
    }
    if (!extra_control.empty()) control_tail(extra_control, fim_from_end + (fim_tokens ? std::size(kFim) : 0));
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_string_array("tokenizer.ggml.tokens", vocab.tokens);
    w.set_f32_array("tokenizer.ggml.scores", vocab.scores);
    w.set_i32_array("tokenizer.ggml.token_type", vocab.types);
    w.set_u32("tokenizer.ggml.bos_token_id", 1);
    w.set_u32("tokenizer.ggml.eos_token_id", 2);
    w.set_u32("tokenizer.ggml.unknown_token_id", 0);
    w.set_bool("tokenizer.ggml.add_bos_token", true);
    w.set_bool("tokenizer.ggml.add_eos_token", false);
}

}  // namespace

GgufWriter make_random_model(const ModelShape& s) {
    validate_model_shape(s);
    const ArchDesc& A = s.arch_desc();
    const uint32_t head_dim = s.head_dim ? s.head_dim : s.dim / s.n_heads;
    const uint64_t q_dim = s.q_dim(), kv_dim = uint64_t(head_dim) * s.n_kv_heads;
    const std::string a = s.arch;
    auto key = [&](const char* k) { return a + "." + k; };
    GgufWriter w;
    w.set_string("general.architecture", a);
    w.set_string("general.name", s.name);
    w.set_u32("general.file_type", s.mix ? quant_mix_info(*s.mix).file_type : llama_file_type(s.weight_type));
    w.set_u32(key("context_length"), s.n_ctx);
    w.set_u32(key("embedding_length"), s.dim);
    w.set_u32(key("block_count"), s.n_layers);
    w.set_u32(key("feed_forward_length"), s.ffn_dim);
    w.set_u32(key("attention.head_count"), s.n_heads);
    const bool mla = A.attn.mla;
    const MlaDims m = mla ? mla_dims(s) : MlaDims{};
    // Latent attention: one KV head (the latent); older files: one per query head, as they stated it.
    w.set_u32(key("attention.head_count_kv"), mla ? (s.mla_kv_b ? s.n_heads : 1) : s.n_kv_heads);
    if (mla && s.mla_kv_b) {  // as llama.cpp's converter wrote DeepSeek before 2025: the uncompressed heads
        w.set_u32(key("attention.key_length"), head_dim);
        w.set_u32(key("attention.value_length"), m.v);
    } else if (
        mla) {  // as llama.cpp's converter writes DeepSeek since 2025: one KV head of the latent and the rotary key
        w.set_u32(key("attention.key_length"), m.kv_lora + m.rope);
        w.set_u32(key("attention.value_length"), m.kv_lora);
        w.set_u32(key("attention.key_length_mla"), head_dim);
        w.set_u32(key("attention.value_length_mla"), m.v);
    }
    if (mla) {
        w.set_u32(key("attention.kv_lora_rank"), m.kv_lora);
        if (m.q_lora) w.set_u32(key("attention.q_lora_rank"), m.q_lora);
        w.set_u32(key("leading_dense_block_count"), s.n_dense_lead);
    } else if (s.head_dim) {
        w.set_u32(key("attention.key_length"), head_dim);
        w.set_u32(key("attention.value_length"), head_dim);
    }
    w.set_f32(key(A.norm.kind == NormKind::Rms ? "attention.layer_norm_rms_epsilon" : "attention.layer_norm_epsilon"),
              s.rms_eps);
    if (A.attn.positions == PositionKind::Rope) {
        w.set_u32(key("rope.dimension_count"), mla ? m.rope : head_dim);
        w.set_f32(key("rope.freq_base"), s.rope_base);
        if (A.attn.mrope) {
            // Qwen2-VL's split of 64 pairs (16, 24, 24, 0) scaled to this head: a quarter for time,
            // the rest halved between height and width, all of the head's pairs used.
            const int32_t pairs = int32_t(head_dim / 2), h = (pairs - pairs / 4) / 2;
            const std::array<int32_t, 4> sections{pairs - 2 * h, h, h, 0};
            w.set_i32_array(key("rope.dimension_sections"), sections);
        }
        if (s.rope_scaling != "none") {
            w.set_string(key("rope.scaling.type"), s.rope_scaling);
            w.set_f32(key("rope.scaling.factor"), s.rope_factor);
            w.set_u32(key("rope.scaling.original_context_length"), std::max(1u, uint32_t(s.n_ctx / s.rope_factor)));
            // DeepSeek-V2's 0.1 x mscale_all_dim (0.707)
            if (mla && s.rope_scaling == "yarn") w.set_f32(key("rope.scaling.yarn_log_multiplier"), 0.0707f);
        } else if (mla && s.mla_kv_b) {
            // Older converters always wrote it, and llama.cpp of that time (b4748) requires it; with
            // no scaling it changes nothing (ln of a factor of 1).
            w.set_f32(key("rope.scaling.yarn_log_multiplier"), 0.0707f);
        }
    }
    if (A.attn.swa_period > 0) w.set_u32(key("attention.sliding_window"), s.window ? s.window : 32);
    // ALiBi: MPT files carry the max bias (8 in every released model); llama.cpp hard-codes BLOOM's
    // and jina-bert-v2's, so their files do not.
    if (A.attn.positions == PositionKind::Alibi && A.attn.default_max_alibi_bias == 0)
        w.set_f32(key("attention.max_alibi_bias"), 8.0f);
    if (s.clamp_kqv > 0) w.set_f32(key("attention.clamp_kqv"), s.clamp_kqv);
    if (A.attn.positions == PositionKind::RelativeBias) w.set_u32(key("attention.relative_buckets_count"), kT5Buckets);
    if (A.attn.cross_attention) {  // the encoder has as many layers as the decoder; generation starts at <pad> (0)
        w.set_u32(key("decoder_block_count"), s.n_layers);
        w.set_u32(key("decoder_start_token_id"), 0);
    }
    if (A.attn.default_softcap > 0) {
        w.set_f32(key("attn_logit_softcapping"), A.attn.default_softcap);
        w.set_f32(key("final_logit_softcapping"), A.stack.default_final_softcap);
    }
    const uint32_t expert_ffn = s.expert_ffn ? s.expert_ffn : s.ffn_dim,
                   shared_ffn = s.shared_ffn ? s.shared_ffn : s.ffn_dim;
    if (A.moe()) {
        w.set_u32(key("expert_count"), s.n_expert);
        w.set_u32(key("expert_used_count"), s.n_expert_used);
        if (A.experts.width != ExpertWidth::Ffn)  // Mixtral's, OLMoE's have none
            w.set_u32(key("expert_feed_forward_length"), expert_ffn);
        if (A.experts.shared == SharedExpert::Gated) w.set_u32(key("expert_shared_feed_forward_length"), shared_ffn);
        if (A.experts.shared == SharedExpert::Ungated) {  // DeepSeek's router and shared experts
            w.set_u32(key("expert_shared_count"), s.n_shared_experts);
            w.set_f32(key("expert_weights_scale"), s.expert_scale);
            w.set_bool(key("expert_weights_norm"), s.expert_norm);
            w.set_u32(key("expert_gating_func"), s.sigmoid_gating ? 2 : 1);
            if (s.expert_groups > 1) {
                w.set_u32(key("expert_group_count"), s.expert_groups);
                w.set_u32(key("expert_group_used_count"), s.groups_used);
            }
        }
    }
    if (A.attn.rope_factor_tensors && s.rope_scaling == "none")
        w.set_u32(key("rope.scaling.original_context_length"), s.n_ctx);
    w.set_u32(key("vocab_size"), s.n_vocab);
    if (!A.stack.causal) w.set_bool(key("attention.causal"), false);  // llama.cpp's default is causal
    if (!A.stack.lm_head || s.pooling) w.set_u32(key("pooling_type"), s.pooling.value_or(1));

    if (A.stack.token_types) {  // BERT-family encoders: WordPiece
        const RandomVocab vocab = make_random_wordpiece_vocab(s.n_vocab);
        w.set_string("tokenizer.ggml.model", "bert");
        w.set_string_array("tokenizer.ggml.tokens", vocab.tokens);
        w.set_i32_array("tokenizer.ggml.token_type", vocab.types);
        w.set_u32("tokenizer.ggml.token_type_count", s.n_token_types);
        w.set_u32("tokenizer.ggml.padding_token_id", 0);
        w.set_u32("tokenizer.ggml.unknown_token_id", 1);
        w.set_u32("tokenizer.ggml.cls_token_id", 2);
        w.set_u32("tokenizer.ggml.seperator_token_id", 3);
        w.set_u32("tokenizer.ggml.mask_token_id", 4);
    } else {
        write_spm_vocab(w, A, s.n_vocab, s.fim_tokens, s.control_tokens);
    }

    // ne: ggml dims, trailing ones dropped (a stack of experts has three).
    auto matrix = [&](const std::string& name, std::vector<uint64_t> ne, bool f32) {
        const TensorType t = f32 ? TensorType::F32 : llama_tensor_type(s, name, ne[0]);
        w.add_tensor(name, t, ne, random_matrix(t, ne[0], s.seed, name));
    };
    // ne: one dimension, or two for a row per expert (gpt-oss's expert biases)
    auto vector = [&](const std::string& name, std::vector<uint64_t> ne, float mean, float sigma,
                      bool positive = false) {
        w.add_tensor(name, TensorType::F32, ne, random_vector(s.seed, name, mean, sigma, positive));
    };
    // Every tensor of the architecture's schema that a file of this shape holds: the required ones,
    // the frequency factors when asked for (Phi-3 always has its pair), the output matrix unless tied.
    // A reranker (pooling rank) gets its architecture's head: cls, tanh, cls.output with one label (the
    // RoBERTa style), or for jina-bert-v2 cls to one label, tanh.
    const bool reranker = s.pooling == uint32_t(Pooling::Rank);
    const uint32_t shared = A.experts.shared == SharedExpert::Ungated ? expert_ffn * s.n_shared_experts : shared_ffn;
    const SchemaDims dims{s.dim,
                          mla ? uint64_t(s.n_heads) * (m.kv_lora + m.rope) : q_dim,
                          mla ? m.kv_lora + m.rope : kv_dim,
                          s.ffn_dim,
                          mla ? m.kv_lora + m.rope : head_dim,
                          s.n_vocab,
                          s.n_ctx,
                          mla ? m.rope : head_dim,
                          s.n_token_types,
                          1,
                          s.n_heads,
                          kT5Buckets,
                          s.n_expert,
                          expert_ffn,
                          shared,
                          m.q_lora,
                          m.kv_lora,
                          mla ? head_dim : 0,
                          m.v};
    const bool tied = s.tied_embeddings || A.norm.embed_scale;  // Gemma ties its embeddings
    auto write = [&](const TensorSpec& t, uint32_t layer) {
        bool wanted = t.required;
        if (t.role == Role::RopeFreqs) wanted = s.rope_freqs;
        if (t.role == Role::RopeFactorsLong || t.role == Role::RopeFactorsShort) wanted = true;
        if (t.role == Role::Output) wanted = !tied;
        if (t.role == Role::TokenTypes) wanted = true;  // optional when reading, as llama.cpp; written as BERT has it
        if (is_classifier_role(t.role)) wanted = reranker;
        if (s.optional_biases && is_bias_role(t.role)) wanted = true;
        if (t.role == Role::AttnRelB) wanted = layer == 0;  // T5: the other layers share layer 0's
        if (mla && t.role == Role::Wq) wanted = m.q_lora == 0;  // V2-Lite's wq, or the q_lora pair
        if (mla && (t.role == Role::WqA || t.role == Role::QANorm || t.role == Role::WqB)) wanted = m.q_lora > 0;
        if (t.role == Role::BExpProbs) wanted = s.sigmoid_gating;  // V3's selection bias
        if (mla && (t.role == Role::WkB || t.role == Role::WvB)) wanted = !s.mla_kv_b;
        if (mla && t.role == Role::WkvB) wanted = s.mla_kv_b;  // older files' joined form
        if (!in_layer(t, layer, s.n_dense_lead)) wanted = false;
        if (!wanted) return;
        const std::string name = tensor_name(t, layer);
        std::vector<uint64_t> ne{dims.get(t.ne[0])};
        if (t.ne[1] != Dim::One || t.ne[2] != Dim::One) ne.push_back(dims.get(t.ne[1]));
        if (t.ne[2] != Dim::One) ne.push_back(dims.get(t.ne[2]));
        if (s.split_experts && t.per_expert_name) {
            const TensorType type = llama_tensor_type(s, name, ne[0]);
            for (uint32_t e = 0; e < s.n_expert; ++e)
                w.add_tensor(expert_tensor_name(t, layer, e), type, {ne[0], ne[1]},
                             random_matrix(type, ne[0], s.seed, name, uint64_t(e) * ne[1]));
            return;
        }
        if (t.init.matrix)  // an f32 matrix (token_types, a router) stays f32, as llama.cpp's converter writes it
            matrix(name, ne, t.f32);
        else
            vector(name, ne, t.init.mean, t.init.sigma, t.init.positive);
    };
    const std::vector<TensorSpec> globals = model_schema(A), layer = layer_schema(A);
    for (const TensorSpec& t : globals)
        if (!is_head_role(t.role)) write(t, 0);
    if (!A.stack.encoder_arch.empty()) {  // an encoder-decoder file: the encoder's layers and output norm first
        const ArchDesc& E = *find_arch(A.stack.encoder_arch, A.variant);
        for (uint32_t l = 0; l < s.n_layers; ++l)
            for (const TensorSpec& t : layer_schema(E)) write(t, l);
        for (const TensorSpec& t : model_schema(E))
            if (t.role == Role::OutputNorm) write(t, 0);
    }
    for (uint32_t l = 0; l < s.n_layers; ++l)
        for (const TensorSpec& t : layer) write(t, l);
    for (const TensorSpec& t : globals)
        if (is_head_role(t.role)) write(t, 0);
    return w;
}

void write_random_model(const std::string& path, const ModelShape& shape, const GgufWriter::ProgressFn& progress) {
    make_random_model(shape).write_file(path, progress);
}

}  // namespace vkllm
