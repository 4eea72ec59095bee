#include "model/load.h"

#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace vkllm {

void check_model_path(const std::string& path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::exists(path, ec)) throw ModelFileError(fmt::format("model file '{}' does not exist", path));
    if (fs::is_directory(path, ec))
        throw ModelFileError(fmt::format("model path '{}' is a directory, not a GGUF file", path));
    if (!fs::is_regular_file(path, ec)) throw ModelFileError(fmt::format("model path '{}' is not a regular file", path));
    if (!std::ifstream(path, std::ios::binary))
        throw ModelFileError(fmt::format("model file '{}' cannot be opened: {}", path, std::strerror(errno)));
}

LoadedModel load_model(const std::string& path, const LoadOptions& opts) {
    const auto t0 = std::chrono::steady_clock::now();
    check_model_path(path);
    LoadedModel m;
    m.file = std::make_unique<GgufFile>(GgufFile::open(path));
    m.cfg = ModelConfig::from_gguf(*m.file);
    m.tokenizer = make_tokenizer(*m.file);
    try {
        m.ctx = std::make_unique<Context>(opts.context);
    } catch (const DeviceLimitError& e) {
        throw NoDeviceError(e.what());
    }
    if (opts.on_ready) opts.on_ready(m);
    m.model = std::make_unique<ModelGpu>(*m.ctx, *m.file, m.cfg, opts.model, opts.progress);
    m.load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return m;
}

}  // namespace vkllm
