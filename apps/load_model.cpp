#include "apps/load_model.h"

#include "model/forward/device_split.h"
#include "runtime/kernel_tuning.h"

#include <fmt/format.h>

#include <filesystem>
#include <unistd.h>

namespace vkllm::apps {

namespace fs = std::filesystem;

std::string default_model_path() {
    std::vector<fs::path> candidates = {fs::path("../shared/models/stories260K.gguf")};
    std::error_code ec;
    fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec)  // build/vkllm -> <repo>/../shared
        for (fs::path dir = exe.parent_path(); !dir.empty() && dir != dir.root_path(); dir = dir.parent_path())
            candidates.push_back(dir.parent_path() / "shared/models/stories260K.gguf");
    for (auto& c : candidates)
        if (fs::is_regular_file(c, ec)) return c.lexically_normal().string();
    return {};
}

std::string resolve_model_path(const std::string& arg) {
    if (arg.empty()) {
        std::string d = default_model_path();
        if (d.empty())
            throw std::invalid_argument(
                "no model given (-m) and the default ../shared/models/stories260K.gguf was not found");
        return d;
    }
    check_model_path(arg);
    return arg;
}

LoadedModel load_model(const std::string& path, const DeviceOptions& dev, const ModelOptions& opts, bool quiet,
                       ModelUse use) {
    LoadOptions lo;
    lo.context = dev.context_options();
    lo.devices = dev.split_devices();
    if (!dev.split.empty()) lo.split_ratios = parse_split(dev.split);
    lo.model = opts;
    lo.encoder_decoder = use == ModelUse::GenerateAny;
    lo.on_ready = [&](const LoadedModel& m) {
        // A request the device cannot honour is said, not silently dropped.
        if (lo.context.caps.coopmat && !lo.context.caps.no_coopmat && m.ctx && !m.ctx->caps().coopmat_kernels)
            fmt::print(stderr,
                       "vkllm: warning: --caps coopmat: {} cannot run the cooperative-matrix kernels (they need "
                       "VK_KHR_cooperative_matrix with an f16 shape, shaderFloat16, the Vulkan memory model and "
                       "subgroup size control, and a validation layer that knows the extension); using the others\n",
                       m.ctx->caps().name);
        if (use != ModelUse::Any && !m.cfg.arch->stack.lm_head)
            throw std::invalid_argument(fmt::format(
                "{}: a {} model is an embedding model (an encoder without a language-model head): it generates no "
                "text; use `vkllm embed`, or `vkllm serve` for /v1/embeddings",
                path, m.cfg.arch->name));
        if (!quiet)
            fmt::print(stderr, "vkllm: {} ({}, {} layers, dim {}, {} heads / {} kv of {}, ffn {}, vocab {}) on {}\n",
                       path, m.cfg.arch->name, m.cfg.n_layers, m.cfg.dim, m.cfg.n_heads, m.cfg.n_kv_heads,
                       m.cfg.head_dim, m.cfg.ffn_dim, m.cfg.n_vocab, device_names(m));
    };
    const bool tty = isatty(STDERR_FILENO);
    int last_pct = -1;
    lo.progress = [&](uint64_t done, uint64_t total) {
        if (quiet || total == 0) return;
        const int pct = int(done * 100 / total);
        if (pct == last_pct || (!tty && pct % 25 != 0 && done != total)) return;
        last_pct = pct;
        fmt::print(stderr, "{}uploading weights: {:3d}% of {:.1f} MiB{}", tty ? "\r" : "", pct, total / 1048576.0,
                   tty && done != total ? "" : "\n");
    };
    LoadedModel m = vkllm::load_model(path, lo);
    if (!quiet) {
        if (const auto& t = m.ctx->caps().tuning)
            fmt::print(stderr, "vkllm: kernel tuning from {} ({} entries; --no-tune ignores it)\n", t->file.string(),
                       t->entries.size());
        const MemoryPlan& p = m.model->memory_plan();
        const auto stages = m.model->stages();
        if (lo.devices.size() > stages.size())
            fmt::print(stderr, "vkllm: {} of the {} devices got no layer (--split {})\n",
                       lo.devices.size() - stages.size(), lo.devices.size(),
                       dev.split.empty() ? "layer: by device-local memory" : dev.split);
        // Several sequences share one paged KV pool: say how many tokens it holds for all of them.
        const std::string pool =
            p.n_seq > 1 ? fmt::format(" (a pool of {} tokens for {} sequences)", p.kv_budget, p.n_seq) : std::string();
        if (lo.devices.size() <= 1)
            fmt::print(
                stderr,
                "vkllm: context {} tokens; device memory: weights {:.1f} MiB + KV {:.1f} MiB{} + scratch {:.1f} MiB\n",
                p.n_ctx, p.weights / 1048576.0, p.kv_cache / 1048576.0, pool, p.scratch / 1048576.0);
        else if (p.n_seq > 1)
            fmt::print(stderr, "vkllm: KV pool of {} tokens for {} sequences on every device\n", p.kv_budget, p.n_seq);
        if (lo.devices.size() > 1)
            for (const ModelGpu::StageInfo& st : stages)
                fmt::print(stderr,
                           "vkllm: layers {} on {}: weights {:.1f} MiB + KV {:.1f} MiB + scratch {:.1f} MiB (context "
                           "{} tokens)\n",
                           layer_span(st.layers), st.caps->name, st.memory->weights / 1048576.0,
                           st.memory->kv_cache / 1048576.0, st.memory->scratch / 1048576.0, st.memory->n_ctx);
        uint64_t kv = 0, kv_full = 0;  // over every part of a split
        for (const ModelGpu::StageInfo& st : stages) {
            kv += st.memory->kv_cache;
            kv_full += st.memory->kv_cache_full;
        }
        if (kv < kv_full)
            fmt::print(stderr,
                       "vkllm: sliding-window layers keep a ring of {} rows: KV {:.1f} MiB instead of {:.1f} MiB\n",
                       kv_cache_rows(m.cfg, 0, p.n_ctx, opts.ubatch), kv / 1048576.0, kv_full / 1048576.0);
    }
    return m;
}

chat_template::ChatTemplate chat_template_for(const LoadedModel& m, const std::string& option) {
    const std::string from_model(m.file->find_string("tokenizer.chat_template").value_or(""));
    return chat_template::resolve_chat_template(option, from_model);
}

}  // namespace vkllm::apps
