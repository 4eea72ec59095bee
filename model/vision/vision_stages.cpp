#include "model/vision/vision_stages.h"

#include "runtime/quant/tensor_types.h"

#include <fmt/format.h>

#include <stdexcept>

namespace vkllm {

std::vector<float> tensor_f32(const GgufFile& f, const GgufTensorInfo& t) {
    std::vector<float> v(t.n_elements);
    const uint8_t* bytes = f.tensor_data(t).data();
    for (uint64_t r = 0; r < t.n_rows(); ++r)
        dequantize_row(t.type, bytes + r * row_bytes(t.type, t.ne[0]), v.data() + r * t.ne[0], t.ne[0]);
    return v;
}

ops::RopeParams vit_rope_params(const VisionConfig& cfg) {
    ops::RopeParams rp{cfg.n_head, cfg.head_dim, cfg.head_dim, cfg.rope_base, ops::RopeLayout::HalfSplit};
    rp.sections = {{cfg.head_dim / 4, cfg.head_dim / 4, 0, 0}, /*vision=*/true};
    return rp;
}

std::vector<int32_t> vit_rope_positions(std::span<const PatchPos> rows) {
    std::vector<int32_t> out;
    out.reserve(rows.size() * 4);
    for (const PatchPos& p : rows) out.insert(out.end(), {int32_t(p.y), int32_t(p.x), 0, 0});
    return out;
}

std::vector<PatchPos> patch_order(const VisionConfig& cfg, uint32_t gx, uint32_t gy) {
    std::vector<PatchPos> out;
    out.reserve(size_t(gx) * gy);
    if (cfg.desc->merge != TokenMerge::Blocks) {
        for (uint32_t y = 0; y < gy; ++y)
            for (uint32_t x = 0; x < gx; ++x) out.push_back({y, x});
        return out;
    }
    const uint32_t m = cfg.merge;
    if (gx % m || gy % m)
        throw std::invalid_argument(
            fmt::format("patch_order: a {} x {} grid is not whole {} x {} blocks", gx, gy, m, m));
    for (uint32_t by = 0; by < gy; by += m)
        for (uint32_t bx = 0; bx < gx; bx += m)
            for (uint32_t dy = 0; dy < m; ++dy)
                for (uint32_t dx = 0; dx < m; ++dx) out.push_back({by + dy, bx + dx});
    return out;
}

std::vector<float> unfold_patches(const ImageTile& t, uint32_t patch, bool round_f16, std::span<const PatchPos> order) {
    if (patch == 0 || t.nx % patch != 0 || t.ny % patch != 0 || t.chw.size() != size_t(3) * t.nx * t.ny)
        throw std::invalid_argument(fmt::format("unfold_patches: a {}x{} tile ({} values) is not whole patches of {}",
                                                t.nx, t.ny, t.chw.size(), patch));
    const uint32_t px = t.nx / patch, py = t.ny / patch, row = 3 * patch * patch;
    const size_t n = size_t(px) * py;
    if (!order.empty() && order.size() != n)
        throw std::invalid_argument(
            fmt::format("unfold_patches: an order of {} patches for a tile of {}", order.size(), n));
    std::vector<float> out(n * row);
    float* dst = out.data();
    for (size_t i = 0; i < n; ++i) {
        const PatchPos p = order.empty() ? PatchPos{uint32_t(i / px), uint32_t(i % px)} : order[i];
        if (p.x >= px || p.y >= py)
            throw std::invalid_argument(
                fmt::format("unfold_patches: patch ({}, {}) is outside the {} x {} grid", p.x, p.y, px, py));
        for (uint32_t c = 0; c < 3; ++c)
            for (uint32_t ky = 0; ky < patch; ++ky)
                for (uint32_t kx = 0; kx < patch; ++kx) {
                    const float v = t.chw[(size_t(c) * t.ny + p.y * patch + ky) * t.nx + p.x * patch + kx];
                    *dst++ = round_f16 ? f16_to_f32(f32_to_f16(v)) : v;
                }
    }
    return out;
}

uint32_t merged_width(const VisionConfig& cfg) {
    const bool wide = cfg.desc->merge == TokenMerge::PixelShuffle || cfg.desc->merge == TokenMerge::Blocks;
    return wide ? cfg.n_embd * cfg.merge * cfg.merge : cfg.n_embd;
}

std::vector<float> merge_tokens(const VisionConfig& cfg, std::span<const float> rows, uint32_t px, uint32_t py) {
    const uint32_t e = cfg.n_embd, m = cfg.merge;
    const size_t n_patches = size_t(px) * py;
    if (rows.size() < n_patches * e) throw std::invalid_argument("merge_tokens: fewer rows than patches");
    auto at = [&](uint32_t x, uint32_t y) { return rows.data() + (size_t(y) * px + x) * e; };
    switch (cfg.desc->merge) {
        case TokenMerge::None: {
            // llama.cpp's rows 1..n_patches: its class row comes after the patches, so this drops the
            // first patch and keeps the class row (model/vision/vision_cpu.h, ClassRow).
            const size_t first = cfg.has_class_embedding ? e : 0;
            if (rows.size() < first + n_patches * e) throw std::invalid_argument("merge_tokens: no class row");
            return {rows.begin() + long(first), rows.begin() + long(first + n_patches * e)};
        }
        case TokenMerge::AvgPool: {
            if (px % m || py % m) throw std::invalid_argument("merge_tokens: the grid is not whole pooling windows");
            const uint32_t ox = px / m, oy = py / m;
            std::vector<float> out(size_t(ox) * oy * e);
            for (uint32_t y = 0; y < oy; ++y)
                for (uint32_t x = 0; x < ox; ++x) {
                    float* dst = out.data() + (size_t(y) * ox + x) * e;
                    for (uint32_t i = 0; i < e; ++i) {
                        float sum = 0;  // f32 in window order, as ggml's pool_2d
                        for (uint32_t dy = 0; dy < m; ++dy)
                            for (uint32_t dx = 0; dx < m; ++dx) sum += at(x * m + dx, y * m + dy)[i];
                        dst[i] = sum / float(m * m);
                    }
                }
            return out;
        }
        case TokenMerge::PixelShuffle: {
            if (px % m || py % m) throw std::invalid_argument("merge_tokens: the grid is not whole shuffle blocks");
            const uint32_t ox = px / m, oy = py / m;
            std::vector<float> out(size_t(ox) * oy * e * m * m);
            float* dst = out.data();
            for (uint32_t y = 0; y < oy; ++y)
                for (uint32_t x = 0; x < ox; ++x)
                    for (uint32_t dy = 0; dy < m; ++dy)
                        for (uint32_t dx = 0; dx < m; ++dx) {
                            const float* src = at(x * m + dx, y * m + dy);
                            dst = std::copy(src, src + e, dst);
                        }
            return out;
        }
        case TokenMerge::Blocks:  // the ViT's rows are already block by block (vision_cpu.h)
            throw std::invalid_argument("merge_tokens: Qwen2-VL's blocks are not merged from a row-major grid");
    }
    throw std::logic_error("merge_tokens: unknown merge");
}

}  // namespace vkllm
