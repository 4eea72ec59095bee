// What `vkllm serve` tells Ollama's clients about its model file (/api/tags, /api/show, /api/ps):
// size, time, an identifying digest, architecture, parameter count, quantization and the GGUF
// metadata, read once from the loaded file.
#pragma once

#include "model/load.h"
#include "serving/server/http_server.h"

#include <string>

namespace vkllm::apps {

// `path`: the model file; `chat_template`: the template the server renders ("" for none).
server::ModelCard model_card(const LoadedModel& m, const std::string& path, const std::string& chat_template);

// llama.cpp's name of a general.file_type value ("Q4_K_M" for 15); "" for one it does not define.
std::string file_type_name(uint32_t file_type);

}  // namespace vkllm::apps
