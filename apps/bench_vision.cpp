#include "apps/bench_stats.h"
#include "apps/bench_vision.h"

#include "model/gguf/gguf.h"
#include "model/image/image_preprocess.h"
#include "model/load.h"
#include "model/mmproj/image_prompt.h"
#include "model/mmproj/mmproj_config.h"
#include "model/vision/vision_gpu.h"
#include "runtime/quant/tensor_types.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>

namespace vkllm::apps {

namespace {

using clock_type = std::chrono::steady_clock;
double ms_since(clock_type::time_point t) {
    return std::chrono::duration<double, std::milli>(clock_type::now() - t).count();
}

// Multiply-adds of one tile through the ViT (2 FLOP each): the patch embedding, each layer's four
// attention projections, two FFN matrices and the attention itself (scores and the weighted sum over
// the tile's positions). The projector is left out: a few percent, and it differs per type.
double tile_flops(const VisionConfig& c, uint32_t nx, uint32_t ny) {
    const double patches = double(nx / c.patch_size) * (ny / c.patch_size);
    const double pos = patches + (c.has_class_embedding ? 1 : 0);
    const double e = c.n_embd, ff = c.n_ff;
    const double patch = 2.0 * patches * 3.0 * c.patch_size * c.patch_size * e;
    const double layer = 2.0 * pos * (4.0 * e * e + 2.0 * e * ff) + 4.0 * pos * pos * e;
    return patch + c.n_layer_used * layer;
}

// GPU time per kernel (pipeline name without its specialization), largest first.
nlohmann::json profile_rows(const std::vector<DispatchTiming>& timings) {
    std::map<std::string, std::pair<int, double>> by_kernel;
    for (const DispatchTiming& d : timings) {
        auto& [calls, ms] = by_kernel[d.pipeline.substr(0, d.pipeline.find(':'))];
        ++calls;
        ms += d.ns * 1e-6;
    }
    std::vector<std::pair<std::string, std::pair<int, double>>> rows(by_kernel.begin(), by_kernel.end());
    std::sort(rows.begin(), rows.end(), [](auto& a, auto& b) { return a.second.second > b.second.second; });
    double total = 0;
    for (auto& r : rows) total += r.second.second;
    nlohmann::json out = nlohmann::json::array();
    for (auto& [kernel, v] : rows)
        out.push_back({{"kernel", kernel},
                       {"calls", v.first},
                       {"ms", v.second},
                       {"share_pct", total > 0 ? 100.0 * v.second / total : 0.0}});
    return out;
}

nlohmann::json bench_image(VisionGpu& gpu, const std::string& path, const ImageLimits& limits, int reps, bool profile) {
    const VisionConfig& cfg = gpu.config();
    nlohmann::json j;
    j["image"] = path;
    auto t0 = clock_type::now();
    const RgbImage img = read_image(path, limits);
    j["decode_ms"] = ms_since(t0);
    j["width"] = img.nx;
    j["height"] = img.ny;

    const PreprocessSpec spec = preprocess_spec(cfg);
    std::vector<double> pre_ms, enc_ms;
    PreprocessedImage pre;
    for (int r = -1; r < reps; ++r) {  // r = -1: warm-up (the batch's pipelines and buffers)
        t0 = clock_type::now();
        pre = preprocess_image(img, spec);
        const double p = ms_since(t0);
        t0 = clock_type::now();
        const std::vector<std::vector<float>> rows = gpu.encode(pre.tiles);
        const double e = ms_since(t0);
        if (r < 0) {
            j["encode_warmup_ms"] = e;
            continue;
        }
        pre_ms.push_back(p);
        enc_ms.push_back(e);
    }
    const std::vector<ImagePiece> pieces = image_prompt(cfg, pre);
    uint32_t tokens = 0;
    double patches = 0, flops = 0;
    for (const ImagePiece& p : pieces)
        if (p.kind == ImagePiece::Kind::Tile) tokens += p.n_tokens;
    for (const ImageTile& t : pre.tiles) {
        patches += double(t.nx / cfg.patch_size) * (t.ny / cfg.patch_size);
        flops += tile_flops(cfg, t.nx, t.ny);
    }
    const double ms = median(enc_ms);
    j["tiles"] = pre.tiles.size();
    j["tile_size"] = {pre.tiles.front().nx, pre.tiles.front().ny};
    j["image_tokens"] = tokens;
    j["patches"] = patches;
    j["preprocess_ms"] = median(pre_ms);
    j["encode_ms"] = ms;
    j["encode_ms_min"] = *std::min_element(enc_ms.begin(), enc_ms.end());
    j["encode_ms_max"] = *std::max_element(enc_ms.begin(), enc_ms.end());
    j["image_tokens_per_s"] = ms > 0 ? tokens * 1000.0 / ms : 0.0;
    j["patches_per_s"] = ms > 0 ? patches * 1000.0 / ms : 0.0;
    j["vit_gflop"] = flops * 1e-9;
    j["vit_gflop_per_s"] = ms > 0 ? flops * 1e-6 / ms : 0.0;

    if (profile) {
        gpu.set_profiling(true);
        gpu.encode(pre.tiles);  // records the batches with timestamps
        t0 = clock_type::now();
        gpu.encode(pre.tiles);
        const double wall = ms_since(t0);
        nlohmann::json rows = profile_rows(gpu.last_timings());
        double gpu_ms = 0;
        for (auto& r : rows) gpu_ms += r["ms"].get<double>();
        j["profile"] = {{"wall_ms", wall}, {"gpu_ms", gpu_ms}, {"kernels", rows}};
        gpu.set_profiling(false);
    }
    return j;
}

}  // namespace

nlohmann::json bench_vision(Context& ctx, uint32_t text_dim, const VisionOptions& o, int reps, bool profile) {
    if (o.images.empty()) throw std::invalid_argument("bench: --mmproj needs --image (the pictures to encode)");
    check_model_path(o.mmproj);
    const GgufFile file = GgufFile::open(o.mmproj);
    const VisionConfig cfg = VisionConfig::from_gguf(file);
    check_text_dim(cfg, text_dim);
    VisionGpu gpu(ctx, file, cfg);
    nlohmann::json j;
    j["mmproj"] = o.mmproj;
    j["projector"] = std::string(cfg.desc->name);
    j["vit"] = {{"dim", cfg.n_embd},
                {"layers", cfg.n_layer_used},
                {"heads", cfg.n_head},
                {"ffn", cfg.n_ff},
                {"image_size", cfg.image_size},
                {"patch_size", cfg.patch_size},
                {"weight_type", std::string(type_traits(file.tensor(vit_tensor_name(0, "attn_q.weight")).type).name)}};
    for (const std::string& path : o.images) j["images"].push_back(bench_image(gpu, path, o.limits(), reps, profile));
    return j;
}

void print_vision_markdown(const nlohmann::json& results) {
    bool header = false;
    for (const auto& r : results) {
        if (!r.contains("vision")) continue;
        const auto& v = r["vision"];
        const auto& vit = v["vit"];
        if (!header) {
            fmt::print(
                "\n| mmproj | ViT | image | tiles | image tokens | preprocess ms | encode ms (median) | warm-up ms | "
                "image tokens/s | ViT GFLOP/s |\n|---|---|---|---|---|---|---|---|---|---|\n");
            header = true;
        }
        const std::string shape = fmt::format(
            "{} {} d{} L{} h{} ff{} {}px/{}", v["projector"].get<std::string>(), vit["weight_type"].get<std::string>(),
            vit["dim"].get<uint32_t>(), vit["layers"].get<uint32_t>(), vit["heads"].get<uint32_t>(),
            vit["ffn"].get<uint32_t>(), vit["image_size"].get<uint32_t>(), vit["patch_size"].get<uint32_t>());
        for (const auto& im : v["images"])
            fmt::print("| {} | {} | {} ({}x{}) | {} | {} | {:.2f} | {:.2f} | {:.2f} | {:.1f} | {:.1f} |\n",
                       std::filesystem::path(v["mmproj"].get<std::string>()).filename().string(), shape,
                       std::filesystem::path(im["image"].get<std::string>()).filename().string(),
                       im["width"].get<uint32_t>(), im["height"].get<uint32_t>(), im["tiles"].get<size_t>(),
                       im["image_tokens"].get<uint32_t>(), im["preprocess_ms"].get<double>(),
                       im["encode_ms"].get<double>(), im["encode_warmup_ms"].get<double>(),
                       im["image_tokens_per_s"].get<double>(), im["vit_gflop_per_s"].get<double>());
    }
    for (const auto& r : results) {
        if (!r.contains("vision")) continue;
        for (const auto& im : r["vision"]["images"]) {
            if (!im.contains("profile")) continue;
            const auto& p = im["profile"];
            fmt::print(
                "\nvision profile: {} on {} (GPU {:.2f} ms, wall {:.2f} ms)\n\n| kernel | calls | GPU ms | share "
                "|\n|---|---|---|---|\n",
                std::filesystem::path(r["vision"]["mmproj"].get<std::string>()).filename().string(),
                std::filesystem::path(im["image"].get<std::string>()).filename().string(), p["gpu_ms"].get<double>(),
                p["wall_ms"].get<double>());
            for (const auto& k : p["kernels"])
                fmt::print("| {} | {} | {:.3f} | {:.1f}% |\n", k["kernel"].get<std::string>(), k["calls"].get<int>(),
                           k["ms"].get<double>(), k["share_pct"].get<double>());
        }
    }
}

}  // namespace vkllm::apps
