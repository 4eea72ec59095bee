#include "model/testgen/random_mmproj.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <stdexcept>

#include "model/testgen/weight_rng.h"

namespace vkllm {

namespace {

// Per-type values real files carry: SigLIP's and CLIP's normalisation constants.
constexpr std::array<float, 3> kSiglipMean{0.5f, 0.5f, 0.5f}, kSiglipStd{0.5f, 0.5f, 0.5f};
constexpr std::array<float, 3> kClipMean{0.48145466f, 0.4578275f, 0.40821073f};
constexpr std::array<float, 3> kClipStd{0.26862954f, 0.26130258f, 0.27577711f};

// A weight matrix of fan-in `fan_in` (not always ne0: the patch kernel's is 3 p^2, Gemma 3's input
// projection's is its ne1), values N(0, 1 / fan_in) so activations keep their scale.
GgufWriter::FillFn random_weights(TensorType type, uint64_t row_len, uint64_t fan_in, uint64_t seed, std::string name) {
    return [=](std::span<uint8_t> dst) {
        const float sigma = 1.0f / std::sqrt(float(fan_in));
        const size_t rb = row_bytes(type, size_t(row_len));
        WeightRng rng(seed, name);
        std::vector<float> row(static_cast<size_t>(row_len));
        for (size_t off = 0; off + rb <= dst.size(); off += rb) {
            for (float& v : row) v = sigma * rng.normal();
            quantize_row(type, row.data(), dst.data() + off, row.size());
        }
    };
}

GgufWriter::FillFn random_f32(uint64_t seed, std::string name, float mean, float sigma) {
    return [=](std::span<uint8_t> dst) {
        WeightRng rng(seed, name);
        for (size_t off = 0; off + 4 <= dst.size(); off += 4) {
            const float v = mean + sigma * rng.normal();
            std::memcpy(dst.data() + off, &v, 4);
        }
    };
}

bool ends_with(std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

MmprojShape resolve_mmproj_shape(MmprojShape s) {
    const ProjectorDesc& d = projector_desc(s.type);
    const uint32_t image = s.type == ProjectorType::Idefics3 ? 32 : s.type == ProjectorType::Mlp ? 56 : 64;
    const uint32_t patch = s.type == ProjectorType::Mlp ? 14 : 8;
    if (s.image_size == 0) s.image_size = image;
    if (s.patch_size == 0) s.patch_size = patch;
    if (s.patch_size == 0 || s.image_size == 0 || s.image_size % s.patch_size)
        throw std::invalid_argument(
            fmt::format("mmproj: image size {} is not a whole number of {}-pixel patches", s.image_size, s.patch_size));
    if (s.dim == 0 || s.heads == 0 || s.dim % s.heads || s.layers == 0 || s.ffn == 0 || s.text_dim == 0)
        throw std::invalid_argument(fmt::format("mmproj: dim {} / heads {} / layers {} / ffn {} / text dim {}", s.dim,
                                                s.heads, s.layers, s.ffn, s.text_dim));
    if (s.merge == 0) s.merge = d.merge == TokenMerge::None ? 1 : d.default_merge ? d.default_merge : 2;
    const uint32_t side = s.image_size / s.patch_size;
    if (d.merge != TokenMerge::None && (s.merge < 2 || side % s.merge))
        throw std::invalid_argument(
            fmt::format("mmproj: merge {} does not divide the {} x {} patch grid", s.merge, side, side));
    if (s.feature_layer > int32_t(s.layers))
        throw std::invalid_argument(fmt::format("mmproj: feature layer {} past {} layers", s.feature_layer, s.layers));
    return s;
}

GgufWriter make_random_mmproj(const MmprojShape& shape) {
    const MmprojShape s = resolve_mmproj_shape(shape);
    const ProjectorDesc& d = projector_desc(s.type);
    const bool siglip = d.type == ProjectorType::Gemma3 || d.type == ProjectorType::Idefics3;

    // The config the file will read back as, for the tensor list.
    VisionConfig cfg;
    cfg.type = s.type;
    cfg.desc = &d;
    cfg.image_size = s.image_size, cfg.patch_size = s.patch_size;
    cfg.n_embd = s.dim, cfg.n_ff = s.ffn, cfg.n_layer = s.layers, cfg.n_head = s.heads;
    cfg.merge = s.merge;
    cfg.text_dim = s.text_dim;
    cfg.has_class_embedding = d.class_embedding;
    // What real files hold: SigLIP's patch convolution has a bias, CLIP's and Qwen2-VL's none; CLIP's
    // pre-layernorm; no post-layernorm in LLaVA's files (its features precede it), Qwen2-VL's merger
    // norm as v.post_ln.
    cfg.has_patch_bias = d.patch_bias == Presence::Required;
    cfg.has_pre_ln = d.pre_ln == Presence::Required;
    cfg.has_post_ln = d.post_ln == Presence::Required;

    GgufWriter w;
    w.set_string("general.architecture", "clip");
    w.set_string("general.name", fmt::format("vkllm-random-mmproj-{}", d.name));
    w.set_u32("general.file_type", s.weight_type == TensorType::F32 ? 0 : 1);
    w.set_bool("clip.has_vision_encoder", true);
    w.set_bool("clip.has_text_encoder", false);
    w.set_string("clip.projector_type", d.name);
    w.set_bool("clip.use_gelu", d.file_activation == VisionActivation::Gelu);
    w.set_bool("clip.use_silu", d.file_activation == VisionActivation::Silu);
    w.set_u32("clip.vision.image_size", s.image_size);
    w.set_u32("clip.vision.patch_size", s.patch_size);
    w.set_u32("clip.vision.embedding_length", s.dim);
    w.set_u32("clip.vision.feed_forward_length", s.ffn);
    w.set_u32("clip.vision.block_count", s.layers);
    w.set_u32("clip.vision.attention.head_count", s.heads);
    w.set_f32("clip.vision.attention.layer_norm_epsilon", d.type == ProjectorType::Mlp ? 1e-5f : 1e-6f);
    w.set_u32("clip.vision.projection_dim", s.text_dim);
    w.set_f32_array("clip.vision.image_mean", siglip ? kSiglipMean : kClipMean);
    w.set_f32_array("clip.vision.image_std", siglip ? kSiglipStd : kClipStd);
    if (d.type == ProjectorType::Idefics3) {
        w.set_u32("clip.vision.projector.scale_factor", s.merge);
        // The longest edge mtmd resizes to before slicing: one tile's size keeps a tile-sized image whole.
        w.set_u32("clip.vision.preproc_image_size", s.image_size);
    } else if (d.type == ProjectorType::Gemma3 && s.merge != d.default_merge) {
        w.set_u32("clip.vision.projector.scale_factor", s.merge);  // as llama.cpp's tiny test Gemma 3 has it
    } else if (d.type == ProjectorType::Qwen2Vl || d.type == ProjectorType::Qwen25Vl) {
        w.set_u32("clip.vision.spatial_merge_size", s.merge);
    }
    if (d.window_attention) w.set_u32("clip.vision.n_wa_pattern", s.window_pattern);
    if (d.type == ProjectorType::Mlp && s.feature_layer >= 0) {
        const int32_t layer = s.feature_layer;
        w.set_i32_array("clip.vision.feature_layer", std::span<const int32_t>(&layer, 1));
    }

    const uint64_t p = s.patch_size;
    for (const VisionTensor& t : vision_tensors(cfg)) {
        if (t.matrix) {
            // Fan-in: the kernel's 3 p^2 inputs; Gemma 3's projection is used transposed (ne1 inputs).
            const uint64_t fan_in = t.name.starts_with("v.patch_embd.weight") ? 3 * p * p
                                    : t.name == "mm.input_projection.weight"  ? t.ne[1]
                                                                              : t.ne[0];
            // The patch kernel (4-D) stays F16 in a quantized file, as llama.cpp's mmproj quantizer leaves it.
            const TensorType type =
                t.ne.size() > 2 && s.weight_type != TensorType::F32 ? TensorType::F16 : s.weight_type;
            w.add_tensor(t.name, type, t.ne, random_weights(type, t.ne[0], fan_in, s.seed, t.name));
        } else if (t.name == "v.position_embd.weight" || t.name == "v.class_embd") {
            w.add_tensor(t.name, TensorType::F32, t.ne, random_f32(s.seed, t.name, 0.0f, 0.5f));
        } else if (ends_with(t.name, ".bias")) {
            w.add_tensor(t.name, TensorType::F32, t.ne, random_f32(s.seed, t.name, 0.0f, 0.1f));
        } else {  // norm weights
            w.add_tensor(t.name, TensorType::F32, t.ne, random_f32(s.seed, t.name, 1.0f, 0.1f));
        }
    }
    return w;
}

void write_random_mmproj(const std::string& path, const MmprojShape& shape) {
    make_random_mmproj(shape).write_file(path);
}

}  // namespace vkllm
