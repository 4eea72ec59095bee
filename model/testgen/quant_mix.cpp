#include "model/testgen/quant_mix.h"

#include "model/testgen/model_shape.h"

#include <cctype>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace vkllm {

uint32_t llama_file_type(TensorType t) {
    // llama.cpp's LLAMA_FTYPE values; a single-type K model gets the ftype llama.cpp's loader
    // infers from its most common tensor type (Q4_K -> MOSTLY_Q4_K_M, ...).
    switch (t) {
        case TensorType::F32: return 0;
        case TensorType::F16: return 1;
        case TensorType::Q4_0: return 2;
        case TensorType::Q4_1: return 3;
        case TensorType::Q8_0: return 7;
        case TensorType::Q5_0: return 8;
        case TensorType::Q5_1: return 9;
        case TensorType::Q2_K: return 10;
        case TensorType::Q3_K: return 12;
        case TensorType::Q4_K: return 15;
        case TensorType::Q5_K: return 17;
        case TensorType::Q6_K: return 18;
        case TensorType::IQ4_NL: return 25;
        case TensorType::IQ4_XS: return 30;
        case TensorType::BF16: return 32;
        case TensorType::MXFP4: return 38;  // MOSTLY_MXFP4_MOE, the only MXFP4 file type llama.cpp names
    }
    return 0;
}

const QuantMixInfo& quant_mix_info(QuantMix m) {
    // llama.cpp's LLAMA_FTYPE_MOSTLY_* values and llama_ftype_get_default_type().
    static constexpr QuantMixInfo kInfo[] = {
        {"q2_k", 10, TensorType::Q2_K},     {"q3_k_s", 11, TensorType::Q3_K},   {"q3_k_m", 12, TensorType::Q3_K},
        {"q3_k_l", 13, TensorType::Q3_K},   {"q4_k_s", 14, TensorType::Q4_K},   {"q4_k_m", 15, TensorType::Q4_K},
        {"q5_k_s", 16, TensorType::Q5_K},   {"q5_k_m", 17, TensorType::Q5_K},   {"q6_k", 18, TensorType::Q6_K},
        {"iq4_nl", 25, TensorType::IQ4_NL}, {"iq4_xs", 30, TensorType::IQ4_XS},
    };
    const auto i = size_t(m);
    if (i >= std::size(kInfo)) throw std::invalid_argument(fmt::format("unknown quantization mix {}", i));
    return kInfo[i];
}

std::optional<QuantMix> parse_quant_mix(std::string_view name) {
    std::string lower(name);
    for (char& c : lower) c = char(std::tolower(uint8_t(c)));
    for (QuantMix m : kAllQuantMixes)
        if (quant_mix_info(m).name == lower) return m;
    return std::nullopt;
}

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// The layer of "blk.N.*", -1 for other names.
int layer_of(std::string_view name) {
    if (name.substr(0, 4) != "blk.") return -1;
    int layer = 0;
    size_t i = 4;
    for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) layer = layer * 10 + (name[i] - '0');
    return i > 4 && i < name.size() && name[i] == '.' ? layer : -1;
}

// llama.cpp's tensor_type_fallback(): a type whose block does not divide the row becomes a
// 32-element type of about the same size (F16 when not even 32 divides it). Q2_K and Q3_K go to
// Q4_0, as llama-quantize build 9749 does (the tests' expectations were checked against it).
TensorType fallback_type(TensorType t, uint64_t row_len) {
    if (row_len % type_traits(t).block_elems == 0) return t;
    TensorType f = t;
    switch (t) {
        case TensorType::IQ4_XS: f = TensorType::IQ4_NL; break;
        case TensorType::Q2_K:
        case TensorType::Q3_K: f = TensorType::Q4_0; break;
        case TensorType::Q4_K: f = TensorType::Q5_0; break;
        case TensorType::Q5_K: f = TensorType::Q5_1; break;
        case TensorType::Q6_K: f = TensorType::Q8_0; break;
        default:
            throw std::invalid_argument(
                fmt::format("no fallback type for {} rows of {} elements", type_traits(t).name, row_len));
    }
    return row_len % type_traits(f).block_elems == 0 ? f : TensorType::F16;
}

}  // namespace

TensorType mix_tensor_type(QuantMix mix, const ModelShape& s, std::string_view name, uint64_t row_len) {
    using T = TensorType;
    using M = QuantMix;
    if (!ends_with(name, ".weight") || ends_with(name, "_norm.weight")) return T::F32;
    const T base = quant_mix_info(mix).base;
    const int n = int(s.n_layers), i = layer_of(name);
    // The KV heads the file states (llama-quantize reads them from it): an older DeepSeek file one per
    // query head.
    const uint32_t kv_heads = s.mla_kv_b ? s.n_heads : s.n_kv_heads;
    const uint32_t gqa = kv_heads ? s.n_heads / kv_heads : 1;
    // The layers whose attn_v / ffn_down get more bits in the _M mixes: the first and last eighth
    // and every third layer between (llama.cpp's use_more_bits).
    auto more_bits = [n](int layer) { return layer < n / 8 || layer >= 7 * n / 8 || (layer - n / 8) % 3 == 2; };
    // llama.cpp's rule for Mixtral-8x7B's class: exactly 8 experts give attn_k and attn_v Q8_0 and
    // most mixes' attn_output Q5_K ("trades just ~128MB").
    const bool eight_experts = s.n_expert == 8;
    T t = base;
    if (name == "output.weight" || (s.tied_embeddings && name == "token_embd.weight")) {
        t = row_len % type_traits(base).block_elems != 0 ? T::Q8_0 : T::Q6_K;
    } else if (name == "token_embd.weight") {
        t = base;
    } else if (ends_with(name, ".attn_v.weight") || ends_with(name, ".attn_kv_b.weight")) {
        // An older DeepSeek file's attn_kv_b gets attn_v's rules (llama.cpp counts it as one).
        switch (mix) {
            case M::Q2_K: t = gqa >= 4 ? T::Q4_K : T::Q3_K; break;
            case M::Q3_K_M: t = i < 2 ? T::Q5_K : T::Q4_K; break;
            case M::Q3_K_L: t = T::Q5_K; break;
            case M::IQ4_NL:
            case M::IQ4_XS: t = gqa >= 4 ? T::Q5_K : base; break;
            case M::Q4_K_M:
            case M::Q5_K_M: t = more_bits(i) ? T::Q6_K : base; break;
            case M::Q4_K_S: t = i < 4 ? T::Q5_K : base; break;
            default: break;
        }
        // llama.cpp's LLM_TYPE_70B: 80 layers with grouped-query attention.
        if (n == 80 && s.n_heads != kv_heads && (t == T::Q3_K || t == T::Q4_K)) t = T::Q5_K;
        if (eight_experts) t = T::Q8_0;
    } else if (ends_with(name, ".attn_k.weight")) {
        if (eight_experts) t = T::Q8_0;
    } else if (name.find("ffn_down") != std::string_view::npos) {
        // The dense ffn_down, and a mixture's ffn_down_exps and ffn_down_shexp alike (llama.cpp
        // matches the substring and takes a mixture's layer from the name).
        switch (mix) {
            case M::Q2_K: t = T::Q3_K; break;
            case M::Q3_K_M: t = i < n / 16 ? T::Q5_K : T::Q4_K; break;
            case M::Q3_K_L: t = T::Q5_K; break;
            case M::Q4_K_M:
            case M::Q5_K_M: t = more_bits(i) ? T::Q6_K : base; break;
            case M::IQ4_NL:
            case M::IQ4_XS:
            case M::Q4_K_S: t = i < n / 8 ? T::Q5_K : base; break;
            default: break;
        }
    } else if (ends_with(name, ".attn_output.weight")) {
        switch (mix) {
            case M::Q2_K: t = eight_experts ? T::Q5_K : T::Q3_K; break;
            case M::Q3_K_S:
            case M::Q4_K_S:
            case M::Q4_K_M:
            case M::IQ4_NL:
            case M::IQ4_XS: t = eight_experts ? T::Q5_K : base; break;
            case M::Q3_K_M: t = eight_experts ? T::Q5_K : T::Q4_K; break;
            case M::Q3_K_L: t = eight_experts ? base : T::Q5_K; break;
            default: break;
        }
    }
    return fallback_type(t, row_len);
}

TensorType llama_tensor_type(const ModelShape& s, std::string_view name, uint64_t row_len) {
    if (s.mix) return mix_tensor_type(*s.mix, s, name, row_len);
    return ends_with(name, "_norm.weight") || ends_with(name, ".bias") ? TensorType::F32 : s.weight_type;
}

}  // namespace vkllm
