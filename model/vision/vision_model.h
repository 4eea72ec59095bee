// An mmproj file opened beside a text model: its config, its encoder on the text model's device,
// and the images it has encoded, kept by content (a follow-up question about the same picture does
// not encode it again). Every front end (run, chat, serve, the C API) turns images into prompt rows
// through it.
#pragma once

#include "model/gguf/gguf.h"
#include "model/image/image_decode.h"
#include "model/mmproj/image_prompt.h"
#include "model/mmproj/mmproj_config.h"
#include "model/vision/vision_gpu.h"

#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace vkllm {

// One image as the prompt takes it: mtmd's pieces (text markers and tiles) and each tile's rows.
struct EncodedImage {
    uint64_t hash = 0;  // of the pixels and size: equal images, equal hashes
    uint32_t nx = 0, ny = 0;
    std::vector<uint8_t> rgb;  // the pixels, compared on a cache hit (a hash alone could collide)
    std::vector<ImagePiece> pieces;
    std::vector<std::shared_ptr<const std::vector<float>>> tiles;  // (tile_tokens, text_dim) each, in tile order
    double encode_ms = 0;  // preprocessing and encoding, when it was encoded
};

class VisionModel {
public:
    // Opens and validates the mmproj file (MmprojError, GgufError) and checks it against a text model
    // of width text_dim, then uploads its encoder to ctx (which must outlive this).
    VisionModel(Context& ctx, const std::string& path, uint32_t text_dim, size_t cache_images = 8);
    const VisionConfig& config() const { return cfg_; }
    // Whether the text model evaluates an image's rows in one chunk, seeing each other (Gemma 3).
    bool bidirectional() const;
    // The image preprocessed, encoded (or found in the cache: *cached true) and laid out as mtmd lays
    // it out. Thread-safe; encodes one image at a time.
    std::shared_ptr<const EncodedImage> encode(const RgbImage& img, bool* cached = nullptr);

private:
    std::unique_ptr<GgufFile> file_;
    VisionConfig cfg_;
    VisionGpu gpu_;
    size_t cache_images_;
    std::mutex m_;
    std::list<std::shared_ptr<const EncodedImage>> cache_;  // most recently used first
};

// A keyed hash of an image's size and pixels: equal images, equal hashes; the key is random per
// process, so a collision cannot be crafted from outside.
uint64_t image_hash(const RgbImage& img);

// The ubatch a text model needs for this encoder's images: the rows of its largest tile when they
// are evaluated as one chunk (bidirectional: Gemma 3's 256), else 0 (any chunking). Front ends raise
// their ubatch to it before loading the text model.
uint32_t vision_ubatch(const VisionConfig& cfg);
// vision_ubatch of the mmproj file at `path` (MmprojError, GgufError as VisionModel's).
uint32_t vision_ubatch(const std::string& path);

}  // namespace vkllm
