#include "apps/vision_options.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

namespace vkllm::apps {

void VisionOptions::add_to(CLI::App* cmd, bool with_images) {
    cmd->add_option("--mmproj", mmproj,
                    "Vision encoder (llama.cpp's mmproj GGUF) for the model: lets prompts carry images");
    if (with_images)
        cmd->add_option("--image", images,
                        "Image file (PNG, JPEG, WebP, GIF, BMP) for the prompt, at its <__media__> markers or "
                        "before it; repeat for several (needs --mmproj)");
    cmd->add_option("--image-max-pixels", max_pixels,
                    "Largest image (width x height) accepted, checked before decoding")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
}

void VisionOptions::fit_ubatch(ModelOptions& mo) const {
    if (mmproj.empty()) return;
    check_model_path(mmproj);
    mo.ubatch = std::max(mo.ubatch, vision_ubatch(mmproj));
}

std::unique_ptr<VisionModel> load_vision(const LoadedModel& m, const VisionOptions& o, bool quiet) {
    if (o.mmproj.empty()) {
        if (!o.images.empty())
            throw std::invalid_argument(
                "--image needs a vision encoder for the model: give its mmproj file (--mmproj)");
        return nullptr;
    }
    check_model_path(o.mmproj);
    auto v = std::make_unique<VisionModel>(*m.ctx, o.mmproj, m.cfg.dim);
    if (!quiet)
        fmt::print(stderr, "vision: {} ({} projector, {}x{} tiles of {} patches)\n", o.mmproj, v->config().desc->name,
                   v->config().image_size, v->config().image_size, v->config().n_patches());
    return v;
}

RgbImage read_image(const std::string& path, const ImageLimits& limits, const char* option) {
    std::optional<std::string> bytes = read_whole_file(path);
    if (!bytes) throw std::invalid_argument(fmt::format("{} {}: cannot open the file", option, path));
    try {
        return decode_image({reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size()}, limits);
    } catch (const ImageError& e) {
        throw std::invalid_argument(fmt::format("{} {}: {}", option, path, e.what()));
    }
}

}  // namespace vkllm::apps
