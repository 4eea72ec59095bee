#include "apps/blend_options.h"

#include <fmt/format.h>

#include <cstdio>

namespace vkllm::apps {

CLI::Option* add_blend_ratio_option(CLI::App* cmd, float& ratio) {
    return cmd
        ->add_option("--blend-ratio", ratio, "Share of each blended document's tokens evaluated again in every layer")
        ->check(CLI::Range(0.0, 1.0))
        ->capture_default_str();
}

void BlendFlags::add_to(CLI::App* cmd) {
    auto* s = cmd->add_option("--blend-separator", separator,
                              "CacheBlend: text that splits a prompt into prefix, documents and question "
                              "(\"prefix SEP doc SEP doc SEP question\"); documents are reused from the document "
                              "store at any position");
    add_blend_ratio_option(cmd, ratio)->needs(s);
    cmd->add_option("--kv-store", store_dir,
                    "Directory where the document store spills what leaves host memory (and finds it again)")
        ->needs(s);
    cmd->add_option("--kv-store-mib", host_mib,
                    "The document store's host-memory budget, MiB (0 with --kv-store: straight to disk)")
        ->check(CLI::Range(uint64_t(0), uint64_t(1) << 24))
        ->capture_default_str()
        ->needs(s);
    cmd->add_option("--kv-store-disk-mib", disk_mib, "The document store's disk budget, MiB (with --kv-store)")
        ->check(CLI::Range(uint64_t(1), uint64_t(1) << 30))
        ->capture_default_str()
        ->needs(s);
}

void BlendFlags::fit_model(ModelOptions& mo) const {
    if (!on()) return;
    ++mo.n_seq;  // the scratch borrows blocks from the slots' pool: no memory of its own
    ++mo.spare_seqs;
}

std::shared_ptr<engine::Blender> make_blender(const BlendFlags& f, ModelGpu& model, uint32_t n_slots) {
    if (!f.on()) return nullptr;
    if (const std::string why = engine::blend_refusal(model); !why.empty()) {
        fmt::print(stderr,
                   "vkllm: warning: --blend-separator: CacheBlend cannot serve this {} model ({}); documents "
                   "are evaluated as the rest of the prompt\n",
                   model.config().arch->name, why);
        return nullptr;
    }
    engine::BlendOptions o;
    o.ratio = f.ratio;
    o.store.host_bytes = f.host_mib << 20;
    o.store.disk_dir = f.store_dir;
    o.store.disk_bytes = f.disk_mib << 20;
    auto b = std::make_shared<engine::Blender>(model, n_slots, o);
    fmt::print(stderr,
               "CacheBlend: documents between \"{}\" separators, {:.0f}% of their tokens evaluated again, "
               "store {} MiB in memory{}\n",
               f.separator, 100 * f.ratio, f.host_mib,
               f.store_dir.empty() ? "" : fmt::format(" and {} MiB in {}", f.disk_mib, f.store_dir));
    return b;
}

}  // namespace vkllm::apps
