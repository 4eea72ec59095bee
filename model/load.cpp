#include "model/load.h"

#include "model/forward/device_split.h"

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
    if (!fs::is_regular_file(path, ec))
        throw ModelFileError(fmt::format("model path '{}' is not a regular file", path));
    if (!std::ifstream(path, std::ios::binary))
        throw ModelFileError(fmt::format("model file '{}' cannot be opened: {}", path, std::strerror(errno)));
}

LoadedModel load_model(const std::string& path, const LoadOptions& opts) {
    const auto t0 = std::chrono::steady_clock::now();
    check_model_path(path);
    LoadedModel m;
    m.file = std::make_unique<GgufFile>(GgufFile::open(path));
    m.cfg = ModelConfig::from_gguf(*m.file);
    if (!m.cfg.arch->stack.encoder_arch.empty()) {
        if (!opts.encoder_decoder)
            throw ModelConfigError(
                fmt::format("{}: a {} model is an encoder-decoder: `vkllm run` generates with it; "
                            "chat, serve, bench, perplexity, embed and the C API take decoder-only "
                            "models (and t5encoder files for embeddings)",
                            path, m.cfg.arch->name));
        m.encoder_cfg = ModelConfig::encoder_from_gguf(*m.file);
    }
    m.tokenizer = make_tokenizer(*m.file);
    if (opts.devices.size() > 1) check_splittable(m.cfg, opts.devices.size());
    if (!opts.split_ratios.empty() && opts.devices.empty())
        throw std::invalid_argument("split ratios are given but no devices to split over");
    if (!opts.split_ratios.empty() && opts.split_ratios.size() != opts.devices.size())
        throw std::invalid_argument(
            fmt::format("--split gives {} ratios for {} devices", opts.split_ratios.size(), opts.devices.size()));
    // Every device the split names, each once; one context per device that gets layers.
    std::vector<std::unique_ptr<Context>> contexts;
    std::vector<SplitDevice> split_devices;
    try {
        if (opts.devices.size() <= 1) {
            ContextOptions co = opts.context;
            if (!opts.devices.empty()) co.device = opts.devices.front();
            m.ctx = std::make_unique<Context>(co);
        } else {
            Instance instance;
            const std::vector<PhysicalDeviceEntry> all = enumerate_devices(instance);
            for (const PhysicalDeviceEntry* d : select_devices(all, opts.devices)) {
                ContextOptions co = opts.context;
                co.device = DeviceSelector{d->index, {}};
                contexts.push_back(std::make_unique<Context>(co));
                split_devices.push_back({d->index, contexts.back()->caps()});
            }
        }
    } catch (const DeviceLimitError& e) {
        throw NoDeviceError(e.what());
    }
    if (contexts.empty()) {
        if (opts.on_ready) opts.on_ready(m);
        m.model = std::make_unique<ModelGpu>(*m.ctx, *m.file, m.cfg, opts.model, opts.progress);
    } else {
        const SplitPlan plan = plan_split(split_devices, *m.file, m.cfg, opts.model, opts.split_ratios);
        std::vector<ModelStage> stages;
        for (const SplitPart& part : plan.parts) {
            std::unique_ptr<Context>& c = contexts[part.device];
            Context* ctx = c.get();
            if (!m.ctx)
                m.ctx = std::move(c);
            else
                m.split_ctx.push_back(std::move(c));
            stages.push_back({ctx, part.layers});
        }
        contexts.clear();  // the devices that got no layer
        if (opts.on_ready) opts.on_ready(m);
        ModelOptions mo = opts.model;
        mo.n_ctx = plan.n_ctx;
        m.model = std::make_unique<ModelGpu>(stages, *m.file, m.cfg, mo, opts.progress);
    }
    if (m.encoder_cfg.arch) {
        // The encoder attends over its whole input at once: one ubatch of the decoder's context.
        ModelOptions eo = opts.model;
        eo.n_ctx = eo.ubatch = m.model->n_ctx();
        eo.all_logits = false;
        eo.n_seq = 1;
        // One copy of the token embedding both halves read (T5 ties them), the decoder's.
        if (m.model->token_embedding().present()) eo.shared_token_embd = &m.model->token_embedding();
        m.encoder = std::make_unique<ModelGpu>(*m.ctx, *m.file, m.encoder_cfg, eo);
    }
    m.load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return m;
}

std::string device_names(const LoadedModel& m) {
    std::string names = m.ctx ? m.ctx->caps().name : std::string();
    for (const auto& c : m.split_ctx) names += " + " + c->caps().name;
    return names;
}

int32_t encode_for_decoder(LoadedModel& m, std::span<const int32_t> input) {
    if (!m.encoder) throw std::logic_error("encode_for_decoder: the model has no encoder");
    if (input.empty()) throw std::invalid_argument("an encoder-decoder model needs a non-empty input");
    int32_t start = m.cfg.decoder_start_token;
    if (start < 0) start = m.tokenizer->bos_id();
    if (start < 0)
        throw std::invalid_argument(
            fmt::format("{}: the file names no {}.decoder_start_token_id and the vocab has no BOS", m.file->name(),
                        m.cfg.arch->name));
    if (uint32_t(start) >= m.cfg.n_vocab)
        throw std::invalid_argument(
            fmt::format("{}: decoder start token {} is outside the vocab", m.file->name(), start));
    if (input.size() > m.encoder->n_ctx())
        throw ContextFullError(fmt::format("the input has {} tokens; the encoder reads at most {} (the context: -c)",
                                           input.size(), m.encoder->n_ctx()));
    m.encoder->reset();
    m.encoder->eval(input);
    const std::vector<float> states = m.encoder->hidden_states();
    m.model->set_encoder_output(states, uint32_t(input.size()));
    return start;
}

}  // namespace vkllm
