#include "model/vision/vision_cpu.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <stdexcept>

#include "model/vision/vision_stages.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/linear.h"
#include "runtime/ops/norm.h"
#include "runtime/ops/rope.h"

namespace vkllm {

namespace {

// A tensor's values as f32 by name (VisionConfig checked it exists).
std::vector<float> read_f32(const GgufFile& f, const std::string& name) { return tensor_f32(f, f.tensor(name)); }

// y[m][n] = x[m][k] W^T (+ bias), W the file's matrix `name` as n rows of k: k its row length, or
// (the patch kernel) the product of all dims but the last.
void linear(const GgufFile& f, const std::string& name, const float* x, float* y, uint32_t m,
            const float* bias = nullptr, uint32_t k = 0) {
    const GgufTensorInfo& t = f.tensor(name);
    if (k == 0) k = uint32_t(t.ne[0]);
    ref::linear(t.type, f.tensor_data(t).data(), x, y, m, uint32_t(t.n_elements / k), k, nullptr, bias);
}

// The ViT feed-forward's activation, in place (tanh GELU and quick GELU as runtime/ops' references).
void activate(VisionActivation a, std::vector<float>& x) {
    const uint32_t n = uint32_t(x.size());
    switch (a) {
        case VisionActivation::Gelu: ref::gelu(x.data(), x.data(), n); return;
        case VisionActivation::GeluQuick: ref::gelu_quick(x.data(), x.data(), n); return;
        case VisionActivation::Silu:
            for (float& v : x) v = float(double(v) / (1.0 + std::exp(-double(v))));
            return;
    }
}

void check_tile(const VisionConfig& cfg, const ImageTile& tile) {
    tile_tokens(cfg, tile.nx, tile.ny);  // throws for a size the encoder does not take
    if (tile.chw.size() != size_t(3) * tile.nx * tile.ny)
        throw std::invalid_argument(fmt::format("vision: a {} x {} tile holds {} values, 3 planes need {}", tile.nx,
                                                tile.ny, tile.chw.size(), size_t(3) * tile.nx * tile.ny));
}

// Bidirectional multi-head attention; q, k, v, out [rows][width]. With window ids, row i sees the
// rows of its own window only.
void attention(const float* q, const float* k, const float* v, float* out, uint32_t rows, uint32_t heads,
               uint32_t head_dim, const std::vector<uint32_t>* window = nullptr) {
    const uint32_t width = heads * head_dim;
    const double scale = 1.0 / std::sqrt(double(head_dim));
    std::vector<double> s(rows);
    for (uint32_t h = 0; h < heads; ++h) {
        for (uint32_t i = 0; i < rows; ++i) {
            const float* qi = q + size_t(i) * width + h * head_dim;
            double mx = -INFINITY;
            for (uint32_t j = 0; j < rows; ++j) {
                if (window && (*window)[j] != (*window)[i]) {
                    s[j] = -INFINITY;
                    continue;
                }
                const float* kj = k + size_t(j) * width + h * head_dim;
                double dot = 0;
                for (uint32_t d = 0; d < head_dim; ++d) dot += double(qi[d]) * kj[d];
                s[j] = dot * scale;
                mx = std::max(mx, s[j]);
            }
            double sum = 0;
            for (uint32_t j = 0; j < rows; ++j) sum += (s[j] = s[j] == -INFINITY ? 0.0 : std::exp(s[j] - mx));
            float* oi = out + size_t(i) * width + h * head_dim;
            for (uint32_t d = 0; d < head_dim; ++d) {
                double acc = 0;
                for (uint32_t j = 0; j < rows; ++j) acc += s[j] * v[size_t(j) * width + h * head_dim + d];
                oi[d] = float(acc / sum);
            }
        }
    }
}

// VisionPositions::Rope2d on q or k [rows][width], in place: in each head of d values the pair
// (j, j + d/2) turns by y * base^(-4j/d) for j < d/4 and by x * base^(-4(j - d/4)/d) above: RoPE's
// vision mode with two sections of d/4 pairs (ref::rope, checked against this definition).
void rope_2d(std::vector<float>& v, const std::vector<PatchPos>& order, const VisionConfig& cfg) {
    ref::rope(v.data(), vit_rope_positions(order).data(), uint32_t(order.size()), vit_rope_params(cfg));
}

// One of the ViT's norms (VisionNorm) of rows [rows][width] in place, tensor `prefix`.weight (and
// .bias for a LayerNorm).
void vit_norm(const VisionConfig& cfg, const GgufFile& f, const std::string& prefix, const float* x, float* y,
              uint32_t rows) {
    const std::vector<float> w = read_f32(f, prefix + ".weight");
    if (cfg.desc->norm == VisionNorm::Rms) {
        ref::rms_norm(x, w.data(), y, rows, cfg.n_embd, cfg.eps);
        return;
    }
    const std::vector<float> b = read_f32(f, prefix + ".bias");
    ref::layer_norm(x, w.data(), b.data(), y, rows, cfg.n_embd, cfg.eps);
}

// The attention window of each row (ProjectorDesc::window_attention): windows of window_px / (2 p)
// blocks a side from the top left, as llama.cpp groups them.
std::vector<uint32_t> window_ids(const VisionConfig& cfg, const std::vector<PatchPos>& order, uint32_t gx) {
    const uint32_t blocks = cfg.window_px / (cfg.patch_size * cfg.merge);
    const uint32_t bx = gx / cfg.merge, per_row = (bx + blocks - 1) / blocks;
    std::vector<uint32_t> ids;
    ids.reserve(order.size());
    for (const PatchPos& p : order) ids.push_back((p.y / cfg.merge / blocks) * per_row + p.x / cfg.merge / blocks);
    return ids;
}

}  // namespace

std::vector<float> encode_vit_cpu(const VisionConfig& cfg, const GgufFile& f, const ImageTile& tile,
                                  ClassRow class_row) {
    check_tile(cfg, tile);
    const uint32_t e = cfg.n_embd, p = cfg.patch_size;
    const uint32_t gx = tile.nx / p, gy = tile.ny / p, n_patches = gx * gy;
    const uint32_t rows = n_patches + (cfg.has_class_embedding ? 1 : 0);
    const uint32_t first_patch = cfg.has_class_embedding && class_row == ClassRow::First ? 1 : 0;

    // Patch embedding: the unfolded patches times the kernel as a (3 p^2 -> e) matrix.
    // The patches in the encoder's row order (Blocks: merge x merge blocks, row-major, one after the other).
    const std::vector<PatchPos> order = patch_order(cfg, gx, gy);
    const uint32_t k = 3 * p * p;
    const std::vector<float> unfolded = unfold_patches(tile, p, false, order);
    std::vector<float> xs(size_t(rows) * e);
    std::vector<float> patch_bias;
    if (cfg.has_patch_bias) patch_bias = read_f32(f, "v.patch_embd.bias");
    float* patch_rows = xs.data() + size_t(first_patch) * e;
    linear(f, "v.patch_embd.weight", unfolded.data(), patch_rows, n_patches,
           cfg.has_patch_bias ? patch_bias.data() : nullptr, k);
    if (cfg.desc->two_patch_kernels) {  // a still image through both kernels, the results added
        const GgufTensorInfo& t = f.tensor("v.patch_embd.weight.1");
        ref::linear(t.type, f.tensor_data(t).data(), unfolded.data(), patch_rows, n_patches, e, k, patch_rows);
    }
    if (cfg.has_class_embedding) {
        const std::vector<float> cls = read_f32(f, "v.class_embd");
        const uint32_t row = class_row == ClassRow::First ? 0 : n_patches;
        std::memcpy(xs.data() + size_t(row) * e, cls.data(), e * sizeof(float));
    }
    if (cfg.desc->positions == VisionPositions::Learned) {
        const std::vector<float> pos = read_f32(f, "v.position_embd.weight");
        for (size_t i = 0; i < xs.size(); ++i) xs[i] += pos[i];
    }
    if (cfg.has_pre_ln) vit_norm(cfg, f, "v.pre_ln", xs.data(), xs.data(), rows);
    std::vector<uint32_t> windows;
    if (cfg.desc->window_attention) windows = window_ids(cfg, order, gx);

    std::vector<float> h(xs.size()), q(xs.size()), kk(xs.size()), v(xs.size()), att(xs.size());
    std::vector<float> up(size_t(rows) * cfg.n_ff), gate(cfg.desc->gated_ffn ? up.size() : 0);
    for (uint32_t l = 0; l < cfg.n_layer_used; ++l) {
        auto name = [&](const char* s) { return vit_tensor_name(l, s); };
        auto vec = [&](const char* s) { return read_f32(f, name(s)); };
        vit_norm(cfg, f, name("ln1"), xs.data(), h.data(), rows);
        linear(f, name("attn_q.weight"), h.data(), q.data(), rows, vec("attn_q.bias").data());
        linear(f, name("attn_k.weight"), h.data(), kk.data(), rows, vec("attn_k.bias").data());
        linear(f, name("attn_v.weight"), h.data(), v.data(), rows, vec("attn_v.bias").data());
        if (cfg.desc->positions == VisionPositions::Rope2d) {
            rope_2d(q, order, cfg);
            rope_2d(kk, order, cfg);
        }
        attention(q.data(), kk.data(), v.data(), att.data(), rows, cfg.n_head, cfg.head_dim,
                  cfg.windowed(l) ? &windows : nullptr);
        linear(f, name("attn_out.weight"), att.data(), h.data(), rows, vec("attn_out.bias").data());
        for (size_t i = 0; i < xs.size(); ++i) xs[i] += h[i];
        vit_norm(cfg, f, name("ln2"), xs.data(), h.data(), rows);
        linear(f, name("ffn_up.weight"), h.data(), up.data(), rows, vec("ffn_up.bias").data());
        if (cfg.desc->gated_ffn) {  // act(gate(x)) * up(x)
            linear(f, name("ffn_gate.weight"), h.data(), gate.data(), rows, vec("ffn_gate.bias").data());
            activate(cfg.activation, gate);
            for (size_t i = 0; i < up.size(); ++i) up[i] = gate[i] * up[i];
        } else {
            activate(cfg.activation, up);
        }
        linear(f, name("ffn_down.weight"), up.data(), h.data(), rows, vec("ffn_down.bias").data());
        for (size_t i = 0; i < xs.size(); ++i) xs[i] += h[i];
    }
    if (cfg.has_post_ln) vit_norm(cfg, f, "v.post_ln", xs.data(), xs.data(), rows);
    return xs;
}

std::vector<float> project_cpu(const VisionConfig& cfg, const GgufFile& f, const std::vector<float>& vit) {
    const uint32_t e = cfg.n_embd, t = cfg.text_dim, side = cfg.patches_per_side(), m = cfg.merge;
    if (cfg.desc->merge == TokenMerge::Blocks) {  // qwen2vl_merger: each block's m^2 rows are one row
        const size_t wide = size_t(e) * m * m;
        if (vit.empty() || vit.size() % wide)
            throw std::invalid_argument(fmt::format(
                "vision: the merger takes whole blocks of {} rows of {}, got {} values", m * m, e, vit.size()));
        const uint32_t n = uint32_t(vit.size() / wide);
        std::vector<float> hidden(n * wide), out(size_t(n) * t);
        linear(f, "mm.0.weight", vit.data(), hidden.data(), n, read_f32(f, "mm.0.bias").data());
        ref::gelu(hidden.data(), hidden.data(), uint32_t(hidden.size()));
        linear(f, "mm.2.weight", hidden.data(), out.data(), n, read_f32(f, "mm.2.bias").data());
        return out;
    }
    if (vit.size() != size_t(cfg.n_positions()) * e)
        throw std::invalid_argument(
            fmt::format("vision: the projector takes {} x {} values, got {}", cfg.n_positions(), e, vit.size()));
    const uint32_t out_side = side / m, n_out = out_side * out_side;
    std::vector<float> out;
    switch (cfg.desc->merge) {
        case TokenMerge::AvgPool: {  // gemma3
            std::vector<float> pooled(size_t(n_out) * e);
            for (uint32_t oy = 0; oy < out_side; ++oy)
                for (uint32_t ox = 0; ox < out_side; ++ox)
                    for (uint32_t c = 0; c < e; ++c) {
                        double sum = 0;
                        for (uint32_t dy = 0; dy < m; ++dy)
                            for (uint32_t dx = 0; dx < m; ++dx)
                                sum += vit[(size_t(oy * m + dy) * side + ox * m + dx) * e + c];
                        pooled[(size_t(oy) * out_side + ox) * e + c] = float(sum / (m * m));
                    }
            const std::vector<float> norm = read_f32(f, "mm.soft_emb_norm.weight");
            ref::rms_norm(pooled.data(), norm.data(), pooled.data(), n_out, e, cfg.eps);
            // mm.input_projection holds a row of text_dim values per vision channel: transposed first.
            const std::vector<float> w = read_f32(f, "mm.input_projection.weight");
            std::vector<float> wt(size_t(t) * e);
            for (uint32_t c = 0; c < e; ++c)
                for (uint32_t j = 0; j < t; ++j) wt[size_t(j) * e + c] = w[size_t(c) * t + j];
            out.resize(size_t(n_out) * t);
            ref::linear(TensorType::F32, wt.data(), pooled.data(), out.data(), n_out, t, e);
            break;
        }
        case TokenMerge::PixelShuffle: {  // idefics3
            const size_t wide = size_t(e) * m * m;
            std::vector<float> shuffled(n_out * wide);
            for (uint32_t oy = 0; oy < out_side; ++oy)
                for (uint32_t ox = 0; ox < out_side; ++ox) {
                    float* dst = shuffled.data() + (size_t(oy) * out_side + ox) * wide;
                    for (uint32_t dy = 0; dy < m; ++dy)
                        for (uint32_t dx = 0; dx < m; ++dx, dst += e)
                            std::memcpy(dst, vit.data() + (size_t(oy * m + dy) * side + ox * m + dx) * e,
                                        e * sizeof(float));
                }
            out.resize(size_t(n_out) * t);
            linear(f, "mm.model.fc.weight", shuffled.data(), out.data(), n_out);
            break;
        }
        case TokenMerge::Blocks: break;  // above
        case TokenMerge::None: {  // mlp: rows 1..n_patches (see ClassRow)
            const uint32_t n = cfg.n_patches(), first = cfg.has_class_embedding ? 1 : 0;
            std::vector<float> hidden(size_t(n) * t);
            linear(f, "mm.0.weight", vit.data() + size_t(first) * e, hidden.data(), n, read_f32(f, "mm.0.bias").data());
            ref::gelu(hidden.data(), hidden.data(), uint32_t(hidden.size()));
            out.resize(size_t(n) * t);
            linear(f, "mm.2.weight", hidden.data(), out.data(), n, read_f32(f, "mm.2.bias").data());
            break;
        }
    }
    return out;
}

std::vector<float> encode_tile_cpu(const VisionConfig& cfg, const GgufFile& f, const ImageTile& tile) {
    return project_cpu(cfg, f, encode_vit_cpu(cfg, f, tile));
}

}  // namespace vkllm
