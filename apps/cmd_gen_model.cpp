// `vkllm gen-model`: writes a GGUF with random weights of any architecture vkllm runs, so
// benchmarks and tests can use real model shapes (TinyLlama, Llama-2 7B layers, Gemma's 256-wide
// heads) without downloading weights.
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "apps/commands.h"
#include "model/arch/architecture.h"
#include "model/arch/model_config.h"
#include "model/gguf/gguf_writer.h"
#include "model/mmproj/image_prompt.h"
#include "model/testgen/random_mmproj.h"
#include "model/testgen/random_model.h"

namespace vkllm::apps {

namespace {

struct GenModelArgs {
    std::string output;
    std::string preset;
    std::string type;
    std::string arch = "llama";
    std::string variant;
    bool pure = false, rope_freqs = false, fim = false;
    std::string rope_scaling = "none";
    float rope_factor = 4.0f;
    int64_t head_dim = 0, window = 0;
    CLI::Option *head_dim_opt = nullptr, *window_opt = nullptr;
    int64_t dim = 0, layers = 0, heads = 0, kv_heads = 0, ffn = 0, vocab = 0, ctx = 0;
    std::string vocab_from;
    std::string pooling;
    float clamp_kqv = 0;
    bool biases = false;
    uint32_t experts = 0, experts_used = 2, expert_ffn = 0, shared_ffn = 0;
    bool split_experts = false;
    uint32_t kv_lora = 0, q_lora = 0, rope_dim = 0, v_head_dim = 0;
    uint32_t dense_layers = 0, shared_experts = 1, expert_groups = 1, groups_used = 1;
    bool sigmoid_gating = false, expert_norm = false, kv_b = false;
    float expert_scale = 1.0f;
    uint64_t seed = 1;
    std::string mmproj, mmproj_output;
    uint32_t image_size = 0, patch_size = 0;
    uint32_t vit_dim = 0, vit_layers = 0, vit_heads = 0, vit_ffn = 0;  // 0: MmprojShape's small defaults
    CLI::Option *dim_opt = nullptr, *layers_opt = nullptr, *heads_opt = nullptr, *kv_heads_opt = nullptr,
                *ffn_opt = nullptr, *vocab_opt = nullptr, *ctx_opt = nullptr;
};

ModelShape preset_shape(const std::string& name) {
    ModelShape s;
    s.name = "vkllm-random-" + name;
    if (name == "tinyllama") {  // TinyLlama 1.1B
        s.dim = 2048, s.n_layers = 22, s.n_heads = 32, s.n_kv_heads = 4, s.ffn_dim = 5632, s.n_vocab = 32000,
        s.n_ctx = 2048;
    } else if (name == "stories15m") {  // karpathy tinyllamas stories15M
        s.dim = 288, s.n_layers = 6, s.n_heads = 6, s.n_kv_heads = 6, s.ffn_dim = 768, s.n_vocab = 32000, s.n_ctx = 256;
    } else if (name == "llama2-7b-layer") {  // one layer of Llama-2 7B: the shapes that matter for kernels
        s.dim = 4096, s.n_layers = 1, s.n_heads = 32, s.n_kv_heads = 32, s.ffn_dim = 11008, s.n_vocab = 32000,
        s.n_ctx = 4096;
    } else if (name == "llama3-8b") {  // Llama 3 / 3.1 8B: 128K vocabulary, GQA 4:1
        s.dim = 4096, s.n_layers = 32, s.n_heads = 32, s.n_kv_heads = 8, s.ffn_dim = 14336, s.n_vocab = 128256,
        s.n_ctx = 8192;
    } else {
        throw std::invalid_argument("unknown preset '" + name + "'");
    }
    return s;
}

// --type: a llama.cpp mix name (q4_k_m, ..., and q2_k, q6_k, iq4_nl, iq4_xs, which name
// llama.cpp file types as well as tensor types, so they mean the mix as in llama-quantize) or a
// single type for every matrix; --pure makes any type name single.
void apply_type(const std::string& name, bool pure, ModelShape& s) {
    if (std::optional<QuantMix> mix = parse_quant_mix(name)) {
        if (!pure) {
            s.mix = mix;
            s.weight_type = quant_mix_info(*mix).base;
            return;
        }
        std::string lower = name;
        for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
        if (lower.find("_k_") != std::string::npos)
            throw std::invalid_argument("--pure needs a single type, and '" + name + "' is only a mix");
    }
    try {
        s.weight_type = parse_tensor_type(name);
    } catch (const std::invalid_argument&) {
        std::string singles, mixes;
        for (TensorType t : kAllTensorTypes)
            if (!parse_quant_mix(type_traits(t).lower))
                singles += (singles.empty() ? "" : ", ") + std::string(type_traits(t).lower);
        for (QuantMix m : kAllQuantMixes) mixes += (mixes.empty() ? "" : ", ") + std::string(quant_mix_info(m).name);
        throw std::invalid_argument(
            fmt::format("unknown --type '{}'; single types: {}; llama.cpp mixes: {} (with "
                        "--pure, q2_k, q6_k, iq4_nl and iq4_xs are single types)",
                        name, singles, mixes));
    }
}

std::string type_summary(const GgufWriter& w) {
    std::map<std::string_view, size_t> count;
    for (const GgufTensorInfo& t : w.tensors()) ++count[type_traits(t.type).name];
    std::string out;
    for (const auto& [name, n] : count) out += fmt::format("{}{} x{}", out.empty() ? "" : ", ", name, n);
    return out;
}

// Applies an option when given: must be a positive 32-bit value.
void apply(const CLI::Option* opt, int64_t value, uint32_t& field) {
    if (!opt || opt->count() == 0) return;
    if (value <= 0 || value > int64_t(std::numeric_limits<uint32_t>::max()))
        throw std::invalid_argument(fmt::format("{} must be a positive integer, got {}", opt->get_name(), value));
    field = uint32_t(value);
}

// --mmproj-output, or the text model's path with "-mmproj" before its extension.
std::string mmproj_path(const GenModelArgs& a) {
    if (!a.mmproj_output.empty()) return a.mmproj_output;
    const std::filesystem::path out(a.output);
    return (out.parent_path() / (out.stem().string() + "-mmproj" + out.extension().string())).string();
}

// The shape of --mmproj's random vision encoder, its projector as wide as the text model; checked
// before the text model is written.
MmprojShape mmproj_shape(const GenModelArgs& a, const ModelShape& text) {
    const ProjectorDesc* desc = find_projector(a.mmproj);
    if (!desc)
        throw std::invalid_argument(fmt::format("--mmproj: unknown projector type '{}' (supported: {})", a.mmproj,
                                                supported_projectors_list()));
    MmprojShape m;
    m.type = desc->type;
    m.text_dim = text.dim;
    m.image_size = a.image_size;
    m.patch_size = a.patch_size;
    if (a.vit_dim) m.dim = a.vit_dim;
    if (a.vit_layers) m.layers = a.vit_layers;
    if (a.vit_heads) m.heads = a.vit_heads;
    if (a.vit_ffn) m.ffn = a.vit_ffn;
    m.seed = text.seed;
    return resolve_mmproj_shape(m);
}

void write_mmproj(const GenModelArgs& a, const MmprojShape& m) {
    const std::string path = mmproj_path(a);
    write_random_mmproj(path, m);
    fmt::print(stderr,
               "gen-model: wrote {} ({} projector, ViT dim {}, {} layers, {} x {} px tiles of {} px patches, "
               "rows of {}; {} bytes)\n",
               path, projector_desc(m.type).name, m.dim, m.layers, m.image_size, m.image_size, m.patch_size, m.text_dim,
               std::filesystem::file_size(path));
}

void run_gen_model(const GenModelArgs& a) {
    if (a.mmproj.empty() && (a.image_size || a.patch_size || a.vit_dim || a.vit_layers || a.vit_heads || a.vit_ffn ||
                             !a.mmproj_output.empty()))
        throw std::invalid_argument("--image-size, --patch-size, --vit-* and --mmproj-output need --mmproj");
    ModelShape s;
    if (!a.preset.empty()) {
        s = preset_shape(a.preset);
    } else {
        std::string missing;
        for (const CLI::Option* o : {a.dim_opt, a.layers_opt, a.heads_opt, a.ffn_opt, a.vocab_opt})
            if (o->count() == 0 && !(o == a.vocab_opt && !a.vocab_from.empty()))
                missing += (missing.empty() ? "" : ", ") + o->get_name();
        if (!missing.empty()) throw std::invalid_argument("without --preset, these options are required: " + missing);
        s.n_ctx = 2048;
        s.name = "vkllm-random";
    }
    apply(a.dim_opt, a.dim, s.dim);
    apply(a.layers_opt, a.layers, s.n_layers);
    apply(a.heads_opt, a.heads, s.n_heads);
    if (a.preset.empty()) s.n_kv_heads = s.n_heads;  // plain multi-head attention unless told
    apply(a.kv_heads_opt, a.kv_heads, s.n_kv_heads);
    apply(a.ffn_opt, a.ffn, s.ffn_dim);
    apply(a.vocab_opt, a.vocab, s.n_vocab);
    // A real vocabulary: its size here, its tokenizer keys copied over the generated ones below.
    std::optional<GgufFile> vocab_file;
    if (!a.vocab_from.empty()) {
        if (a.vocab_opt->count() > 0) throw std::invalid_argument("--vocab and --vocab-from exclude each other");
        vocab_file.emplace(GgufFile::open(a.vocab_from));
        const GgufValue* tokens = vocab_file->find("tokenizer.ggml.tokens");
        if (!tokens || tokens->type != GgufType::ARRAY || tokens->array_type != GgufType::STRING)
            vocab_file->fail("key 'tokenizer.ggml.tokens'",
                             "--vocab-from needs a file with a vocabulary (an array of strings)");
        s.n_vocab = uint32_t(tokens->array_size);
        // Encoders: as many token types as the vocab names (XLM-RoBERTa has 1, BERT 2).
        if (auto types = vocab_file->find_u32("tokenizer.ggml.token_type_count"); types && *types > 0)
            s.n_token_types = *types;
    }
    apply(a.ctx_opt, a.ctx, s.n_ctx);
    apply(a.head_dim_opt, a.head_dim, s.head_dim);
    apply(a.window_opt, a.window, s.window);
    s.arch = a.arch;
    s.variant = a.variant;
    if (!a.pooling.empty()) {
        const auto pooling = parse_pooling(a.pooling);
        if (!pooling)
            throw std::invalid_argument("--pooling: expected none, mean, cls, last or rank, got '" + a.pooling + "'");
        s.pooling = uint32_t(*pooling);
    }
    s.clamp_kqv = a.clamp_kqv;
    s.optional_biases = a.biases;
    s.n_expert = a.experts;
    s.n_expert_used = a.experts ? a.experts_used : 0;
    s.split_experts = a.split_experts;
    s.expert_ffn = a.expert_ffn;
    s.shared_ffn = a.shared_ffn;
    s.kv_lora = a.kv_lora, s.q_lora = a.q_lora, s.rope_dim = a.rope_dim, s.v_head_dim = a.v_head_dim;
    s.n_dense_lead = a.dense_layers, s.n_shared_experts = a.shared_experts;
    s.expert_groups = a.expert_groups, s.groups_used = a.expert_groups > 1 ? a.groups_used : 1;
    s.sigmoid_gating = a.sigmoid_gating, s.expert_norm = a.expert_norm, s.expert_scale = a.expert_scale;
    s.mla_kv_b = a.kv_b;
    s.rope_freqs = a.rope_freqs;
    s.fim_tokens = a.fim;
    s.rope_scaling = a.rope_scaling;
    if (s.rope_scaling != "none") s.rope_factor = a.rope_factor;
    if (s.arch != "llama") s.name += "-" + s.arch;
    apply_type(a.type, a.pure, s);
    s.seed = a.seed;
    // The projector's layout tokens in the vocabulary, so that its images can be laid out (Idefics3).
    if (const ProjectorDesc* desc = a.mmproj.empty() ? nullptr : find_projector(a.mmproj))
        for (std::string_view t : image_layout_tokens(desc->type)) s.control_tokens.emplace_back(t);
    validate_model_shape(s);
    std::optional<MmprojShape> mmproj;
    if (!a.mmproj.empty()) mmproj = mmproj_shape(a, s);

    GgufWriter w = make_random_model(s);
    if (vocab_file) {
        w.remove_prefix("tokenizer.");
        for (const GgufKeyValue& kv : vocab_file->metadata())
            if (kv.key.substr(0, 10) == "tokenizer.") w.set_value(kv.key, kv.value);
    }
    uint64_t total = 0;
    for (const GgufTensorInfo& t : w.tensors()) total += t.n_bytes;
    const std::string weights = s.mix
                                    ? fmt::format("llama.cpp {} mix ({})", quant_mix_info(*s.mix).name, type_summary(w))
                                    : std::string(type_traits(s.weight_type).name);
    fmt::print(stderr,
               "gen-model: {}: {} dim {}, {} layers, {}/{} heads, ffn {}, vocab {}, ctx {}, {} weights, "
               "seed {}: {} tensors, {:.1f} MiB of data\n",
               a.output, s.arch, s.dim, s.n_layers, s.n_heads, s.n_kv_heads, s.ffn_dim, s.n_vocab, s.n_ctx, weights,
               s.seed, w.tensors().size(), double(total) / (1 << 20));

    const bool tty = isatty(fileno(stderr));
    const auto start = std::chrono::steady_clock::now();
    uint64_t done = 0;
    int last_decile = -1;
    w.write_file(a.output, [&](size_t i, size_t n, const GgufTensorInfo& t) {
        if (tty) {
            fmt::print(stderr, "\r  [{:>4}/{}] {:<28} {:>5.1f}%", i + 1, n, t.name,
                       total ? 100.0 * double(done) / double(total) : 100.0);
        } else if (int d = total ? int(10 * done / total) : 10; d != last_decile) {
            fmt::print(stderr, "  {:>3}% [{}/{}] {}\n", d * 10, i + 1, n, t.name);
            last_decile = d;
        }
        std::fflush(stderr);
        done += t.n_bytes;
    });
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    fmt::print(stderr, "{}gen-model: wrote {} ({} bytes) in {:.1f} s\n", tty ? "\n" : "", a.output,
               std::filesystem::file_size(a.output), secs);
    if (mmproj) write_mmproj(a, *mmproj);
}

}  // namespace

void register_gen_model(CLI::App& app) {
    auto args = std::make_shared<GenModelArgs>();
    CLI::App* cmd = app.add_subcommand("gen-model", "Write a GGUF model with random weights");
    cmd->add_option("--arch", args->arch, "Architecture: " + supported_arch_list())->capture_default_str();
    cmd->add_option("--variant", args->variant,
                    "A variant of the architecture: v1.0 for t5 and t5encoder (T5 v1.0's "
                    "ReLU feed-forward without ffn_gate; default: v1.1's gated GELU); "
                    "qk-post-norm, split-gate or qk-post-norm,split-gate for jina-bert-v2");
    cmd->add_option("-o,--output", args->output, "Output .gguf path")->required();
    cmd->add_option("--preset", args->preset, "Base shape: tinyllama, stories15m, llama2-7b-layer or llama3-8b")
        ->check(CLI::IsMember({"tinyllama", "stories15m", "llama2-7b-layer", "llama3-8b"}));
    args->dim_opt = cmd->add_option("--dim", args->dim, "Embedding length");
    args->layers_opt = cmd->add_option("--layers", args->layers, "Number of transformer blocks");
    args->heads_opt = cmd->add_option("--heads", args->heads, "Query heads (must divide dim)");
    args->kv_heads_opt = cmd->add_option("--kv-heads", args->kv_heads, "KV heads (must divide heads; default heads)");
    args->ffn_opt = cmd->add_option("--ffn", args->ffn, "Feed-forward hidden size");
    args->vocab_opt = cmd->add_option("--vocab", args->vocab, "Vocab size (>= 259)");
    cmd->add_option("--vocab-from", args->vocab_from,
                    "Take the vocabulary (every tokenizer.* key) from this GGUF file, e.g. "
                    "../shared/models/ggml-vocab-llama-bpe.gguf");
    args->ctx_opt = cmd->add_option("--ctx", args->ctx, "Training context length (default 2048)");
    args->head_dim_opt = cmd->add_option("--head-dim", args->head_dim,
                                         "Head size, when heads x head size differs from dim (default dim / heads)");
    args->window_opt =
        cmd->add_option("--window", args->window, "Sliding window of gemma2 / gemma3 local layers (default 32)");
    cmd->add_flag("--rope-freqs", args->rope_freqs, "llama: add Llama 3.x-style rope frequency factors");
    cmd->add_flag("--fim", args->fim,
                  "SentencePiece vocabs: fill-in-the-middle tokens as Qwen2.5-Coder's (<|fim_prefix|>, ..., "
                  "<|repo_name|>, <|file_sep|>), for /infill");
    cmd->add_option("--rope-scaling", args->rope_scaling,
                    "RoPE scaling: none, linear or yarn (original context = ctx / factor)")
        ->check(CLI::IsMember({"none", "linear", "yarn"}))
        ->capture_default_str();
    cmd->add_option("--rope-factor", args->rope_factor, "Factor of --rope-scaling")->capture_default_str();
    cmd->add_option("--type", args->type,
                    "Weights: one type for every matrix (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q3_k, q4_k, "
                    "q5_k) or a llama.cpp mix with llama-quantize's per-tensor rules (q2_k, q3_k_s, q3_k_m, q3_k_l, "
                    "q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k, iq4_nl, iq4_xs)")
        ->required();
    cmd->add_flag("--pure", args->pure, "Every matrix of the --type type, also for q2_k, q6_k, iq4_nl and iq4_xs");
    cmd->add_option("--seed", args->seed, "Random seed")->capture_default_str();
    cmd->add_option("--clamp-kqv", args->clamp_kqv, "mpt: clamp q, k and v to [-C, C] (<arch>.attention.clamp_kqv)");
    cmd->add_option("--pooling", args->pooling,
                    "<arch>.pooling_type: none, mean, cls, last or rank (a reranker: encoders only, written with a "
                    "classification head). Encoders default to mean; a decoder gets the key only when given, as "
                    "embedding decoders such as Qwen3-Embedding carry it");
    cmd->add_option("--experts", args->experts,
                    "Mixture of experts: experts per layer (required for qwen2moe and qwen3moe; a llama with "
                    "experts is written as Mixtral)");
    cmd->add_option("--experts-used", args->experts_used, "Experts each token runs")->capture_default_str();
    cmd->add_flag("--split-experts", args->split_experts,
                  "llama (Mixtral): each expert as its own tensor (ffn_gate.N, ffn_up.N, ffn_down.N), as the first "
                  "Mixtral conversions wrote them; the same weights as the stacked file");
    cmd->add_option("--expert-ffn", args->expert_ffn,
                    "Each expert's feed-forward size (default --ffn; qwen2moe, qwen3moe and gpt-oss only: the "
                    "experts of a llama mixture and of olmoe are --ffn wide, as their files say)");
    cmd->add_option("--shared-ffn", args->shared_ffn,
                    "qwen2moe: the shared expert's feed-forward size (default --ffn)");
    // deepseek2
    cmd->add_option("--kv-lora", args->kv_lora,
                    "deepseek2: the latent's size, kv_lora_rank (default 128; DeepSeek 512). --head-dim is the "
                    "per-head q/k size (key_length_mla: DeepSeek 192)");
    cmd->add_option("--q-lora", args->q_lora, "deepseek2: q_lora_rank (default 0: one wq, as V2-Lite; V2/V3 1536)");
    cmd->add_option("--rope-dim", args->rope_dim, "deepseek2: rotary dims of each head (default 32; DeepSeek 64)");
    cmd->add_option("--v-head-dim", args->v_head_dim,
                    "deepseek2: value dims per head (default head dim - rope dim; DeepSeek 128)");
    cmd->add_option("--dense-layers", args->dense_layers, "deepseek2: leading layers with a dense FFN (--ffn wide)");
    cmd->add_option("--shared-experts", args->shared_experts, "deepseek2: shared experts of --expert-ffn (default 1)");
    cmd->add_option("--expert-groups", args->expert_groups, "deepseek2: groups of the experts for the routing (V2: 8)");
    cmd->add_option("--groups-used", args->groups_used, "deepseek2: groups each token chooses from (V2: 3)");
    cmd->add_flag("--kv-b", args->kv_b,
                  "deepseek2: the layout of conversions before 2025 (one attn_kv_b per layer, no *_mla keys, the "
                  "uncompressed heads' key_length / value_length), which llama.cpp runs without absorbing");
    cmd->add_flag("--sigmoid-gating", args->sigmoid_gating,
                  "deepseek2: V3's sigmoid router with its selection bias (exp_probs_b); default V2's softmax");
    cmd->add_option("--expert-scale", args->expert_scale, "deepseek2: expert_weights_scale (V2 16, V3 2.5)");
    cmd->add_flag("--expert-norm", args->expert_norm, "deepseek2: renormalise the chosen experts' weights (V3)");
    cmd->add_flag("--biases", args->biases,
                  "Also write the optional biases (of q, k, v, the output and FFN projections and the norms) of "
                  "architectures that read them when present (mpt)");
    cmd->add_option("--mmproj", args->mmproj,
                    "Also write a llama.cpp mmproj file (a vision encoder and projector with random weights) of "
                    "this projector type (" +
                        supported_projectors_list() +
                        ") whose embeddings are the text model's width, beside the model (--mmproj-output); "
                        "the same --seed. Small: ViT dim 64, 2 layers, 4 heads, ffn 128, F16 matrices");
    cmd->add_option("--mmproj-output", args->mmproj_output,
                    "Path of the --mmproj file (default: the output's name with -mmproj before .gguf)");
    cmd->add_option("--image-size", args->image_size,
                    "--mmproj: tile size in pixels (default gemma3 64, idefics3 32, mlp 56)");
    cmd->add_option("--patch-size", args->patch_size, "--mmproj: patch size in pixels (default 8; mlp 14)");
    // Real encoders' sizes (SigLIP 1152 wide, 27 layers, 16 heads, ffn 4304) for speed measurements.
    cmd->add_option("--vit-dim", args->vit_dim, "--mmproj: the ViT's embedding length (default 64)")
        ->check(CLI::Range(1u, 16384u));
    cmd->add_option("--vit-layers", args->vit_layers, "--mmproj: the ViT's blocks (default 2)")
        ->check(CLI::Range(1u, 256u));
    cmd->add_option("--vit-heads", args->vit_heads,
                    "--mmproj: the ViT's attention heads (must divide --vit-dim; default 4)")
        ->check(CLI::Range(1u, 1024u));
    cmd->add_option("--vit-ffn", args->vit_ffn, "--mmproj: the ViT's feed-forward width (default 128)")
        ->check(CLI::Range(1u, 65536u));
    cmd->callback([args] {
        try {
            run_gen_model(*args);
        } catch (const std::invalid_argument& e) {
            throw std::runtime_error(std::string("gen-model: ") + e.what());
        }
    });
}

}  // namespace vkllm::apps
