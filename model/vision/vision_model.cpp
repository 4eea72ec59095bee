#include "model/vision/vision_model.h"

#include "model/image/image_preprocess.h"

#include <chrono>
#include <random>

namespace vkllm {

namespace {

std::unique_ptr<GgufFile> open_mmproj(const std::string& path) {
    return std::make_unique<GgufFile>(GgufFile::open(path));
}

VisionConfig checked_config(const GgufFile& file, uint32_t text_dim) {
    VisionConfig cfg = VisionConfig::from_gguf(file);
    check_text_dim(cfg, text_dim);
    return cfg;
}

}  // namespace

uint64_t image_hash(const RgbImage& img) {
    // FNV-1a over the bytes, started from a random key and finished with splitmix64's mixer: a
    // placeholder id an outsider cannot aim at another picture's.
    static const uint64_t key = std::random_device{}() * 0x9E3779B97F4A7C15ull ^ std::random_device{}();
    uint64_t h = 1469598103934665603ull ^ key;
    auto mix = [&](uint8_t b) { h = (h ^ b) * 1099511628211ull; };
    for (uint32_t v : {img.nx, img.ny})
        for (int i = 0; i < 4; ++i) mix(uint8_t(v >> (8 * i)));
    for (uint8_t b : img.rgb) mix(b);
    h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
    h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
    return h ^ (h >> 31);
}

uint32_t vision_ubatch(const VisionConfig& cfg) {
    if (!cfg.desc->bidirectional || !cfg.desc->fixed_size) return 0;
    return tile_tokens(cfg, cfg.image_size, cfg.image_size);
}

uint32_t vision_ubatch(const std::string& path) {
    const GgufFile f = GgufFile::open(path);
    return vision_ubatch(VisionConfig::from_gguf(f));
}

VisionModel::VisionModel(Context& ctx, const std::string& path, uint32_t text_dim, size_t cache_images)
    : file_(open_mmproj(path)),
      cfg_(checked_config(*file_, text_dim)),
      gpu_(ctx, *file_, cfg_),
      cache_images_(cache_images) {}

bool VisionModel::bidirectional() const { return cfg_.desc->bidirectional; }

std::shared_ptr<const EncodedImage> VisionModel::encode(const RgbImage& img, bool* cached) {
    const uint64_t hash = image_hash(img);
    std::lock_guard lock(m_);
    for (auto it = cache_.begin(); it != cache_.end(); ++it)
        if ((*it)->hash == hash && (*it)->nx == img.nx && (*it)->ny == img.ny && (*it)->rgb == img.rgb) {
            auto hit = *it;
            cache_.erase(it);
            cache_.push_front(hit);
            if (cached) *cached = true;
            return hit;
        }
    if (cached) *cached = false;
    const auto t0 = std::chrono::steady_clock::now();
    const PreprocessedImage pre = preprocess_image(img, preprocess_spec(cfg_));
    auto out = std::make_shared<EncodedImage>();
    out->hash = hash;
    out->nx = img.nx;
    out->ny = img.ny;
    out->rgb = img.rgb;
    out->pieces = image_prompt(cfg_, pre);
    for (std::vector<float>& rows : gpu_.encode(pre.tiles))
        out->tiles.push_back(std::make_shared<const std::vector<float>>(std::move(rows)));
    out->encode_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    cache_.push_front(out);
    if (cache_.size() > cache_images_) cache_.pop_back();
    return out;
}

}  // namespace vkllm
