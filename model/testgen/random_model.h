// Models with random weights for every architecture vkllm runs (`vkllm gen-model`, tests,
// fuzzers): the metadata, vocab and tensors of a shape, with weights made while the file is written.
#pragma once

#include <string>

#include "model/gguf/gguf_writer.h"
#include "model/testgen/model_shape.h"

namespace vkllm {

// Declares the metadata and tensors of a random model; tests adjust the result before writing.
GgufWriter make_random_model(const ModelShape& shape);
void write_random_model(const std::string& path, const ModelShape& shape, const GgufWriter::ProgressFn& progress = {});

}  // namespace vkllm
