// Opening a model: the one path every front end takes (the CLI's subcommands, the C API and,
// through it, JNI): check the path, map and validate the GGUF, build its tokenizer, create the
// device context, check the fit and upload the weights with progress.
#pragma once

#include "model/arch/model_config.h"
#include "model/forward/model_gpu.h"
#include "model/gguf/gguf.h"
#include "model/tokenizer/tokenizer.h"
#include "runtime/context.h"
#include "runtime/vk_check.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace vkllm {

// The path does not name a file that can be opened (missing, a directory, unreadable).
class ModelFileError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// No device could be opened: none usable, none matching the selection, a loader too old. (A
// DeviceLimitError that is not one of these: the model does not fit the device.)
class NoDeviceError : public DeviceLimitError {
public:
    using DeviceLimitError::DeviceLimitError;
};

// ModelFileError unless `path` names a regular file that can be opened for reading.
void check_model_path(const std::string& path);

struct LoadedModel {
    // In construction order; destroyed in reverse (the model before its context and file).
    std::unique_ptr<GgufFile> file;
    ModelConfig cfg;
    std::unique_ptr<Tokenizer> tokenizer;
    std::unique_ptr<Context> ctx;  // the device (a split model's first stage's)
    // A model split over devices (LoadOptions::devices): the later stages' devices, in layer order.
    std::vector<std::unique_ptr<Context>> split_ctx;
    std::unique_ptr<ModelGpu> model;
    // Encoder-decoder files (T5): `model` is the decoder, this the encoder (LoadOptions::encoder_decoder).
    ModelConfig encoder_cfg;
    std::unique_ptr<ModelGpu> encoder;
    double load_ms = 0;  // from the call to the end of the upload
};

struct LoadOptions {
    ContextOptions context;  // every device's options; its `device` when `devices` is empty
    // Two or more: the model's layers split over these devices (model/forward/device_split.h), by
    // `split_ratios` (one per device) or, when those are empty, by each device's device-local
    // memory. The split's context: model.n_ctx, or the largest every part holds.
    std::vector<DeviceSelector> devices;
    std::vector<double> split_ratios;
    ModelOptions model;
    UploadProgress progress;  // (bytes uploaded, total) during the upload; may throw to stop it
    // Called when the file, its config, its tokenizer and the device context are ready, before the
    // fit check and the upload (a banner, the tokenizer's warnings, a chat template to resolve).
    std::function<void(const LoadedModel&)> on_ready;
    // Accept an encoder-decoder file (T5) and load its encoder too (vkllm run); otherwise such a file
    // is refused with ModelConfigError before the device is opened (every other front end runs
    // decoder-only or encoder-only models).
    bool encoder_decoder = false;
};

// Throws ModelFileError, GgufError (ModelConfigError: not a model vkllm runs, or not one that is
// split), NoDeviceError, DeviceLimitError (does not fit), std::invalid_argument (a device named
// twice, ratios that do not match the devices), or whatever `progress` and `on_ready` throw;
// nothing stays allocated after a throw.
LoadedModel load_model(const std::string& path, const LoadOptions& opts);

// The device's name, or "A + B" for a model split over devices (in layer order).
std::string device_names(const LoadedModel& m);

// An encoder-decoder's first half: runs the encoder over `input` (the whole tokenized prompt, one
// pass from position 0) and hands its output to the decoder's cross-attention. Returns the token
// the decoder starts from (<arch>.decoder_start_token_id, else BOS). Throws ContextFullError when
// the input exceeds the encoder's context, std::invalid_argument for an empty input or a file that
// names no start token and has no BOS.
int32_t encode_for_decoder(LoadedModel& m, std::span<const int32_t> input);

}  // namespace vkllm
