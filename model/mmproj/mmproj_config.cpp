#include "model/mmproj/mmproj_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace vkllm {

namespace {

constexpr ProjTensorDesc kGemma3Proj[] = {
    // rows of the vision width, each as long as the text width: llama.cpp multiplies by its transpose
    {"mm.input_projection.weight", ProjDim::Text, ProjDim::Vision, true, true},
    {"mm.soft_emb_norm.weight", ProjDim::Vision, ProjDim::None, false},
};
constexpr ProjTensorDesc kIdefics3Proj[] = {
    {"mm.model.fc.weight", ProjDim::Merged, ProjDim::Text, true},
};
constexpr ProjTensorDesc kMlpProj[] = {
    {"mm.0.weight", ProjDim::Vision, ProjDim::Text, true},
    {"mm.0.bias", ProjDim::Text, ProjDim::None, false},
    {"mm.2.weight", ProjDim::Text, ProjDim::Text, true},
    {"mm.2.bias", ProjDim::Text, ProjDim::None, false},
};

constexpr ProjTensorDesc kQwen2VlProj[] = {
    {"mm.0.weight", ProjDim::Merged, ProjDim::Merged, true},
    {"mm.0.bias", ProjDim::Merged, ProjDim::None, false},
    {"mm.2.weight", ProjDim::Merged, ProjDim::Text, true},
    {"mm.2.bias", ProjDim::Text, ProjDim::None, false},
};

constexpr std::string_view kScaleFactor = "clip.vision.projector.scale_factor";
constexpr std::string_view kSpatialMerge = "clip.vision.spatial_merge_size";

constexpr ProjectorDesc kProjectors[] = {
    {.type = ProjectorType::Gemma3,
     .name = "gemma3",
     .preprocess = PreprocessKind::Square,
     .file_activation = VisionActivation::Gelu,
     .class_embedding = false,
     .patch_bias = Presence::Required,
     .pre_ln = Presence::Optional,
     .post_ln = Presence::Required,
     .merge = TokenMerge::AvgPool,
     .merge_key = kScaleFactor,
     .default_merge = 4,
     .feature_layer = false,
     .fixed_size = true,
     .positions = VisionPositions::Learned,
     .two_patch_kernels = false,
     .norm = VisionNorm::Layer,
     .gated_ffn = false,
     .window_attention = false,
     .projector = kGemma3Proj,
     .bidirectional = true},
    {.type = ProjectorType::Idefics3,
     .name = "idefics3",
     .preprocess = PreprocessKind::Idefics3,
     .file_activation = VisionActivation::Gelu,
     .class_embedding = false,
     .patch_bias = Presence::Required,
     .pre_ln = Presence::Optional,
     .post_ln = Presence::Required,
     .merge = TokenMerge::PixelShuffle,
     .merge_key = kScaleFactor,
     .default_merge = 0,
     .feature_layer = false,
     .fixed_size = true,
     .positions = VisionPositions::Learned,
     .two_patch_kernels = false,
     .norm = VisionNorm::Layer,
     .gated_ffn = false,
     .window_attention = false,
     .projector = kIdefics3Proj},
    {.type = ProjectorType::Mlp,
     .name = "mlp",
     .preprocess = PreprocessKind::PadSquare,
     .file_activation = VisionActivation::GeluQuick,
     .class_embedding = true,
     .patch_bias = Presence::Optional,
     .pre_ln = Presence::Required,
     .post_ln = Presence::Optional,
     .merge = TokenMerge::None,
     .merge_key = {},
     .default_merge = 1,
     .feature_layer = true,
     .fixed_size = true,
     .positions = VisionPositions::Learned,
     .two_patch_kernels = false,
     .norm = VisionNorm::Layer,
     .gated_ffn = false,
     .window_attention = false,
     .projector = kMlpProj},
    // llama.cpp's graph asserts no patch bias and builds 2 x 2 blocks whatever the merge key says.
    {.type = ProjectorType::Qwen2Vl,
     .name = "qwen2vl_merger",
     .preprocess = PreprocessKind::SmartResize,
     .file_activation = VisionActivation::GeluQuick,
     .class_embedding = false,
     .patch_bias = Presence::Absent,
     .pre_ln = Presence::Optional,
     .post_ln = Presence::Required,
     .merge = TokenMerge::Blocks,
     .merge_key = kSpatialMerge,
     .default_merge = 2,
     .feature_layer = false,
     .fixed_size = false,
     .positions = VisionPositions::Rope2d,
     .two_patch_kernels = true,
     .norm = VisionNorm::Layer,
     .gated_ffn = false,
     .window_attention = false,
     .projector = kQwen2VlProj},
    {.type = ProjectorType::Qwen25Vl,
     .name = "qwen2.5vl_merger",
     .preprocess = PreprocessKind::SmartResize,
     .file_activation = VisionActivation::Silu,
     .class_embedding = false,
     .patch_bias = Presence::Absent,
     .pre_ln = Presence::Optional,
     .post_ln = Presence::Required,
     .merge = TokenMerge::Blocks,
     .merge_key = kSpatialMerge,
     .default_merge = 2,
     .feature_layer = false,
     .fixed_size = false,
     .positions = VisionPositions::Rope2d,
     .two_patch_kernels = true,
     .norm = VisionNorm::Rms,
     .gated_ffn = true,
     .window_attention = true,
     .projector = kQwen2VlProj},
};

// Sizes past these are not a vision encoder but a corrupt or hostile file; they also keep every
// product below (positions x width, merge^2 x width) far from overflowing 32 bits.
constexpr uint32_t kMaxWidth = 1u << 16;
constexpr uint32_t kMaxLayers = 1024;
constexpr uint32_t kMaxImageSize = 1u << 14;

uint64_t proj_dim(ProjDim d, const VisionConfig& cfg) {
    switch (d) {
        case ProjDim::None: return 1;
        case ProjDim::Vision: return cfg.n_embd;
        case ProjDim::Merged: return uint64_t(cfg.n_embd) * cfg.merge * cfg.merge;
        case ProjDim::Text: return cfg.text_dim;
    }
    return 0;
}

std::string dims_string(const std::vector<uint64_t>& ne) {
    std::string s = "[";
    for (size_t i = 0; i < ne.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", ne[i]);
    return s + "]";
}

uint32_t require_u32(const GgufFile& f, std::string_view key, uint32_t max) {
    const uint32_t v = f.get_u32(key);
    if (v == 0 || v > max) f.fail(key, fmt::format("{} is outside 1..{}", v, max));
    return v;
}

std::array<float, 3> require_rgb(const GgufFile& f, std::string_view key) {
    const std::vector<float> v = f.get_f32_array(key);
    if (v.size() != 3) f.fail(key, fmt::format("has {} values, an RGB triple needs 3", v.size()));
    for (float x : v)
        if (!std::isfinite(x)) f.fail(key, "holds a value that is not finite");
    return {v[0], v[1], v[2]};
}

// The projector type's name: clip.projector_type, or clip.vision.projector_type in files that hold
// encoders of several modalities (as llama.cpp reads them).
std::string_view projector_name(const GgufFile& f) {
    if (auto s = f.find_string("clip.projector_type")) return *s;
    if (auto s = f.find_string("clip.vision.projector_type")) return *s;
    f.fail("clip.projector_type", "missing (not an mmproj file?)");
}

// LLaVA's feature layer, as llama.cpp's llava graph picks it: the deepest of clip.vision.feature_layer
// when the file has it (the features are then that layer's output), else all layers but the last.
uint32_t llava_layers_used(const GgufFile& f, uint32_t n_layer) {
    constexpr std::string_view key = "clip.vision.feature_layer";
    if (!f.has(key)) return n_layer - 1;
    const std::vector<int32_t> layers = f.get_i32_array(key);
    int32_t deepest = -1;
    for (int32_t l : layers) deepest = std::max(deepest, l);
    if (deepest < 0) return n_layer - 1;  // llama.cpp: negative values mean "unset"
    if (uint32_t(deepest) > n_layer)
        f.fail(key, fmt::format("layer {} is past the encoder's {} layers", deepest, n_layer));
    for (int32_t l : layers)
        if (l >= 0 && l != deepest)
            f.fail(key, "several feature layers (stacked features, Granite Vision's) are not supported");
    return uint32_t(deepest);
}

void check_tensor(const GgufFile& f, const GgufTensorInfo& t, const VisionTensor& want) {
    bool same = true;
    for (size_t i = 0; same && i < kGgufMaxDims; ++i) same = t.ne[i] == (i < want.ne.size() ? want.ne[i] : 1);
    if (!same) f.fail(want.name, fmt::format("shape {}, expected {}", t.shape_string(), dims_string(want.ne)));
    if (want.matrix) return;  // any type the reader knows: ref::linear and the device decode them
    if (t.type != TensorType::F32 && t.type != TensorType::F16)
        f.fail(want.name,
               fmt::format("type {} where F32 (or F16) is expected", ggml_type_name(static_cast<uint32_t>(t.type))));
}

}  // namespace

std::span<const ProjectorDesc> projector_table() { return kProjectors; }

const ProjectorDesc& projector_desc(ProjectorType t) {
    for (const auto& d : kProjectors)
        if (d.type == t) return d;
    throw std::logic_error("projector_desc: a ProjectorType without its table row");
}

std::string supported_projectors_list() {
    std::string s;
    for (const auto& d : kProjectors) s += fmt::format("{}{}", s.empty() ? "" : ", ", d.name);
    return s;
}

const ProjectorDesc* find_projector(std::string_view name) {
    for (const auto& d : kProjectors)
        if (d.name == name) return &d;
    return nullptr;
}

std::string vit_tensor_name(uint32_t layer, std::string_view suffix) {
    return fmt::format("v.blk.{}.{}", layer, suffix);
}

std::vector<VisionTensor> vision_tensors(const VisionConfig& cfg, bool include_optional) {
    const ProjectorDesc& d = *cfg.desc;
    const uint64_t e = cfg.n_embd, p = cfg.patch_size;
    std::vector<VisionTensor> out;
    auto add = [&](std::string name, std::vector<uint64_t> ne, bool matrix, Presence presence, bool present) {
        if (presence == Presence::Absent) return;
        if (presence == Presence::Optional && !present && !include_optional) return;
        out.push_back({std::move(name), std::move(ne), matrix, presence == Presence::Required});
    };
    // The patch embedding is a convolution kernel: ggml dims (kx, ky, channel, output).
    add("v.patch_embd.weight", {p, p, 3, e}, true, Presence::Required, true);
    if (d.two_patch_kernels) add("v.patch_embd.weight.1", {p, p, 3, e}, true, Presence::Required, true);
    add("v.patch_embd.bias", {e}, false, d.patch_bias, cfg.has_patch_bias);
    if (d.class_embedding) add("v.class_embd", {e}, false, Presence::Required, true);
    if (d.positions == VisionPositions::Learned)
        add("v.position_embd.weight", {e, cfg.n_positions()}, false, Presence::Required, true);
    // RMSNorms have no bias.
    const Presence norm_bias = d.norm == VisionNorm::Layer ? Presence::Required : Presence::Absent;
    auto bias_of = [&](Presence p) { return norm_bias == Presence::Absent ? Presence::Absent : p; };
    add("v.pre_ln.weight", {e}, false, d.pre_ln, cfg.has_pre_ln);
    add("v.pre_ln.bias", {e}, false, bias_of(d.pre_ln), cfg.has_pre_ln);
    const uint64_t f = cfg.n_ff;
    for (uint32_t l = 0; l < cfg.n_layer; ++l) {
        auto n = [&](std::string_view s) { return vit_tensor_name(l, s); };
        add(n("ln1.weight"), {e}, false, Presence::Required, true);
        add(n("ln1.bias"), {e}, false, norm_bias, true);
        for (std::string_view m : {"attn_q", "attn_k", "attn_v", "attn_out"}) {
            add(n(fmt::format("{}.weight", m)), {e, e}, true, Presence::Required, true);
            add(n(fmt::format("{}.bias", m)), {e}, false, Presence::Required, true);
        }
        add(n("ln2.weight"), {e}, false, Presence::Required, true);
        add(n("ln2.bias"), {e}, false, norm_bias, true);
        if (d.gated_ffn) {
            add(n("ffn_gate.weight"), {e, f}, true, Presence::Required, true);
            add(n("ffn_gate.bias"), {f}, false, Presence::Required, true);
        }
        add(n("ffn_up.weight"), {e, f}, true, Presence::Required, true);
        add(n("ffn_up.bias"), {f}, false, Presence::Required, true);
        add(n("ffn_down.weight"), {f, e}, true, Presence::Required, true);
        add(n("ffn_down.bias"), {e}, false, Presence::Required, true);
    }
    add("v.post_ln.weight", {e}, false, d.post_ln, cfg.has_post_ln);
    add("v.post_ln.bias", {e}, false, bias_of(d.post_ln), cfg.has_post_ln);
    for (const ProjTensorDesc& t : d.projector) {
        std::vector<uint64_t> ne{proj_dim(t.ne0, cfg)};
        if (t.ne1 != ProjDim::None) ne.push_back(proj_dim(t.ne1, cfg));
        add(std::string(t.name), std::move(ne), t.matrix, Presence::Required, true);
    }
    return out;
}

namespace {

VisionConfig read_config(const GgufFile& f) {
    VisionConfig cfg;
    cfg.file = f.name();

    const std::optional<bool> has_vision = f.find_bool("clip.has_vision_encoder");
    const std::string_view name = projector_name(f);
    if (!has_vision.value_or(false)) {
        const bool audio = f.find_bool("clip.has_audio_encoder").value_or(false);
        f.fail("clip.has_vision_encoder", audio ? fmt::format("the file holds an audio encoder only (projector {}); "
                                                              "vkllm reads vision encoders",
                                                              quote_name(name))
                                                : std::string("missing or false: the file has no vision encoder"));
    }
    cfg.desc = find_projector(name);
    if (!cfg.desc)
        f.fail("clip.projector_type", fmt::format("projector type {} is not supported (supported: {})",
                                                  quote_name(name), supported_projectors_list()));
    const ProjectorDesc& d = *cfg.desc;
    cfg.type = d.type;

    cfg.n_embd = require_u32(f, "clip.vision.embedding_length", kMaxWidth);
    cfg.n_ff = require_u32(f, "clip.vision.feed_forward_length", kMaxWidth * 4);
    cfg.n_layer = require_u32(f, "clip.vision.block_count", kMaxLayers);
    cfg.n_head = require_u32(f, "clip.vision.attention.head_count", kMaxWidth);
    if (cfg.n_embd % cfg.n_head)
        f.fail("clip.vision.attention.head_count",
               fmt::format("{} heads do not divide the width {}", cfg.n_head, cfg.n_embd));
    cfg.head_dim = cfg.n_embd / cfg.n_head;
    cfg.eps = f.get_f32("clip.vision.attention.layer_norm_epsilon");
    if (!(cfg.eps > 0 && cfg.eps < 1))
        f.fail("clip.vision.attention.layer_norm_epsilon", fmt::format("{} is outside (0, 1)", cfg.eps));
    cfg.projection_dim = f.get_u32("clip.vision.projection_dim");
    cfg.image_size = require_u32(f, "clip.vision.image_size", kMaxImageSize);
    cfg.patch_size = require_u32(f, "clip.vision.patch_size", cfg.image_size);
    if (cfg.image_size % cfg.patch_size)
        f.fail("clip.vision.patch_size",
               fmt::format("{} does not divide the image size {}", cfg.patch_size, cfg.image_size));
    cfg.image_mean = require_rgb(f, "clip.vision.image_mean");
    cfg.image_std = require_rgb(f, "clip.vision.image_std");
    for (float s : cfg.image_std)
        if (s == 0) f.fail("clip.vision.image_std", "holds a zero (normalisation divides by it)");

    const bool gelu = f.find_bool("clip.use_gelu").value_or(false);
    const bool silu = f.find_bool("clip.use_silu").value_or(false);
    if (gelu && silu) f.fail("clip.use_gelu", "and clip.use_silu are both true");
    cfg.activation = gelu ? VisionActivation::Gelu : silu ? VisionActivation::Silu : VisionActivation::GeluQuick;

    cfg.n_layer_used = d.feature_layer ? llava_layers_used(f, cfg.n_layer) : cfg.n_layer;
    if (d.merge == TokenMerge::None) {
        cfg.merge = 1;
    } else {
        const std::string_view key = d.merge_key;
        const std::optional<uint32_t> sf = f.find_u32(key);
        if (!sf && d.default_merge == 0) f.fail(key, fmt::format("missing (projector '{}' needs it)", d.name));
        cfg.merge = sf.value_or(d.default_merge);
        const uint32_t side = cfg.patches_per_side();
        if (cfg.merge < 2 || cfg.merge > side || side % cfg.merge)
            f.fail(key,
                   fmt::format("{} does not divide the {} x {} patch grid into merged tokens", cfg.merge, side, side));
        if (d.merge == TokenMerge::Blocks && cfg.merge != 2)
            f.fail(key, fmt::format("{}: llama.cpp merges 2 x 2 blocks only", cfg.merge));
    }
    if (d.window_attention) {
        // Required, as llama.cpp reads it for Qwen2.5-VL; 0 turns the windows off. The window's
        // size is llama.cpp's fixed 112 pixels.
        cfg.wa_pattern = f.get_u32("clip.vision.n_wa_pattern");
        cfg.window_px = 112;
        if (cfg.wa_pattern && cfg.window_px / (cfg.patch_size * 2) == 0)
            f.fail(
                "clip.vision.patch_size",
                fmt::format("{}: a 112-pixel attention window holds no 2 x 2 block of these patches", cfg.patch_size));
    }
    if (d.positions == VisionPositions::Rope2d) {
        cfg.rope_base = 10000.0f;
        if (cfg.head_dim % 4)
            f.fail("clip.vision.attention.head_count",
                   fmt::format("heads of {} values: the 2D rotary embedding needs a multiple of 4", cfg.head_dim));
    }
    cfg.preproc_image_size = f.find_u32("clip.vision.preproc_image_size").value_or(0);
    if (cfg.preproc_image_size > kMaxImageSize * 4)
        f.fail("clip.vision.preproc_image_size",
               fmt::format("{} is past {}", cfg.preproc_image_size, kMaxImageSize * 4));

    cfg.has_patch_bias = d.patch_bias != Presence::Absent && f.find_tensor("v.patch_embd.bias") != nullptr;
    cfg.has_pre_ln = f.find_tensor("v.pre_ln.weight") != nullptr;
    cfg.has_post_ln = f.find_tensor("v.post_ln.weight") != nullptr;
    cfg.has_class_embedding = d.class_embedding;

    // The output width: the Text dim of the first projector tensor that has one.
    for (const ProjTensorDesc& t : d.projector) {
        const GgufTensorInfo* info = f.find_tensor(t.name);
        if (!info) f.fail(t.name, "missing");
        if (t.ne0 == ProjDim::Text)
            cfg.text_dim = uint32_t(std::min<uint64_t>(info->ne[0], kMaxWidth * 4 + 1));
        else if (t.ne1 == ProjDim::Text)
            cfg.text_dim = uint32_t(std::min<uint64_t>(info->ne[1], kMaxWidth * 4 + 1));
        if (cfg.text_dim) break;
    }
    if (cfg.text_dim == 0 || cfg.text_dim > kMaxWidth * 4)
        f.fail(d.projector.front().name, fmt::format("output width {} is outside 1..{}", cfg.text_dim, kMaxWidth * 4));

    for (const VisionTensor& want : vision_tensors(cfg)) {
        const GgufTensorInfo* t = f.find_tensor(want.name);
        if (!t) f.fail(want.name, "missing");
        check_tensor(f, *t, want);
    }
    return cfg;
}

}  // namespace

VisionConfig VisionConfig::from_gguf(const GgufFile& f) {
    // The reader's errors (a missing key, a wrong type) are the file's errors as an mmproj too.
    try {
        return read_config(f);
    } catch (const MmprojError&) {
        throw;
    } catch (const GgufError& e) {
        throw MmprojError(e.what());
    }
}

void check_text_dim(const VisionConfig& cfg, uint32_t n_embd) {
    if (cfg.text_dim != n_embd)
        throw MmprojError(
            fmt::format("{}: {}: the projector yields rows of {} values but the text model's embedding "
                        "length is {} (an mmproj made for another model?)",
                        cfg.file, cfg.desc->projector.front().name, cfg.text_dim, n_embd));
}

PreprocessSpec preprocess_spec(const VisionConfig& cfg) {
    PreprocessSpec s{};
    s.kind = cfg.desc->preprocess;
    s.image_size = cfg.image_size;
    s.patch_size = cfg.patch_size;
    s.mean = cfg.image_mean;
    s.std = cfg.image_std;
    s.preproc_image_size = cfg.preproc_image_size;
    if (cfg.desc->preprocess == PreprocessKind::SmartResize) {
        // mtmd's limits for Qwen-VL: 8 to 4096 tokens of (patch x merge)^2 pixels each.
        const uint64_t area = uint64_t(cfg.patch_size) * cfg.merge * cfg.patch_size * cfg.merge;
        s.merge = cfg.merge;
        s.min_pixels = uint32_t(std::min<uint64_t>(kSmartResizeMinTokens * area, UINT32_MAX));
        s.max_pixels = uint32_t(std::min<uint64_t>(kSmartResizeMaxTokens * area, UINT32_MAX));
    }
    return s;
}

TileGrid tile_grid(const VisionConfig& cfg, uint32_t nx, uint32_t ny) {
    if (cfg.desc->fixed_size && (nx != cfg.image_size || ny != cfg.image_size))
        throw std::invalid_argument(fmt::format("tile_tokens: a {} x {} tile, projector '{}' takes {} x {} only", nx,
                                                ny, cfg.desc->name, cfg.image_size, cfg.image_size));
    const uint32_t unit = cfg.patch_size * (cfg.desc->merge == TokenMerge::Blocks ? cfg.merge : 1);
    if (nx == 0 || ny == 0 || nx % unit || ny % unit)
        throw std::invalid_argument(
            fmt::format("tile_tokens: a {} x {} tile is not a whole number of {}-pixel blocks", nx, ny, unit));
    const uint32_t px = nx / cfg.patch_size, py = ny / cfg.patch_size;
    return {px / cfg.merge, py / cfg.merge};
}

uint32_t tile_tokens(const VisionConfig& cfg, uint32_t nx, uint32_t ny) { return tile_grid(cfg, nx, ny).tokens(); }

}  // namespace vkllm
