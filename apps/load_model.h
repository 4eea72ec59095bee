// Opening a model for a subcommand: resolve the path, parse and validate the GGUF, pick the
// device, check the fit, upload with progress on stderr.
#pragma once

#include "apps/app_options.h"
#include "model/gguf.h"
#include "model/arch/model_config.h"
#include "model/forward/model_gpu.h"
#include "model/tokenizer/tokenizer.h"
#include "serving/template/chat_template.h"

#include <memory>
#include <string>

namespace vkllm::app {

// The model used when -m is not given: ../shared/models/stories260K.gguf, looked for relative to
// the working directory and to the executable. Empty when absent.
std::string default_model_path();
// -m value -> an existing regular file, or std::invalid_argument saying what is wrong.
std::string resolve_model_path(const std::string& arg);

struct LoadedModel {
    std::unique_ptr<GgufFile> file;
    ModelConfig cfg;
    std::unique_ptr<Tokenizer> tokenizer;
    std::unique_ptr<Context> ctx;
    std::unique_ptr<ModelGpu> model;
    double load_ms = 0;
};

LoadedModel load_model(const std::string& path, const DeviceOptions& dev, const ModelOptions& opts, bool quiet);

// The chat template of a loaded model: --chat-template `option` (a built-in name or a file) when
// given, else the file's tokenizer.chat_template, else a built-in for its architecture.
chat::ChatTemplate chat_template_for(const LoadedModel& m, const std::string& option);

}  // namespace vkllm::app
