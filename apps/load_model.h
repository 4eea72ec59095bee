// Opening a model for a subcommand: resolve the path, then vkllm::load_model (model/load.h, the
// path the C API takes too) with a banner and upload progress on stderr.
#pragma once

#include "apps/app_options.h"
#include "model/load.h"
#include "serving/chat_template/chat_template.h"

#include <memory>
#include <string>

namespace vkllm::apps {

// The model used when -m is not given: ../shared/models/stories260K.gguf, looked for relative to
// the working directory and to the executable. Empty when absent.
std::string default_model_path();
// -m value -> an existing regular file, or ModelFileError saying what is wrong.
std::string resolve_model_path(const std::string& arg);

// What a command does with the model: Generate refuses an embedding model (an encoder without an LM
// head) before anything is uploaded, naming the commands that take it; GenerateAny (vkllm run) also
// takes encoder-decoder models (T5), which the others refuse.
enum class ModelUse { Generate, GenerateAny, Any };

// quiet: no banner, no progress.
LoadedModel load_model(const std::string& path, const DeviceOptions& dev, const ModelOptions& opts, bool quiet,
                       ModelUse use = ModelUse::Generate);

// The chat template of a loaded model: --chat-template `option` (a built-in name or a file) when
// given, else the file's tokenizer.chat_template, else a built-in for its architecture.
chat_template::ChatTemplate chat_template_for(const LoadedModel& m, const std::string& option);

}  // namespace vkllm::apps
