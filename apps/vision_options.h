// The image options of the commands that take pictures (run, chat, serve, bench): --mmproj, --image,
// --image-max-pixels; opening the vision encoder beside the loaded text model, and reading images.
#pragma once

#include "apps/app_options.h"
#include "model/image/image_decode.h"
#include "model/load.h"
#include "model/vision/vision_model.h"

#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <vector>

namespace vkllm::apps {

struct VisionOptions {
    std::string mmproj;
    std::vector<std::string> images;
    uint64_t max_pixels = ImageLimits{}.max_pixels;

    // --mmproj and --image-max-pixels; with_images adds --image too.
    void add_to(CLI::App* cmd, bool with_images);
    ImageLimits limits() const { return {max_pixels}; }
    // Raises mo.ubatch to what the encoder's images need (vision_ubatch: a Gemma 3 image's 256 rows
    // are one chunk), before the text model is loaded; nothing without --mmproj.
    void fit_ubatch(ModelOptions& mo) const;
};

// The vision encoder of --mmproj on the text model's device (null without --mmproj); its errors
// name the file.
std::unique_ptr<VisionModel> load_vision(const LoadedModel& m, const VisionOptions& o, bool quiet);

// Reads and decodes an image file; std::invalid_argument naming `option` (how it was given), the
// file and what is wrong.
RgbImage read_image(const std::string& path, const ImageLimits& limits, const char* option = "--image");

}  // namespace vkllm::apps
