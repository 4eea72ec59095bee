// `vkllm tune`: measures candidate kernel configurations for every dense linear shape a model uses
// (decode, a decode batch, a prompt chunk of --ubatch) on this device and writes the winners to
// the tuning file beside the pipeline cache, which run, chat, serve and bench read (docs/tuning.md).
#include "apps/app_options.h"
#include "apps/commands.h"
#include "apps/load_model.h"
#include "model/forward/memory_plan.h"
#include "model/gguf/gguf.h"
#include "runtime/kernel_tuning.h"
#include "runtime/ops/tuning.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <set>
#include <tuple>

namespace vkllm::apps {

namespace {

struct TuneCmdOptions {
    std::string model;
    bool json = false;
    uint32_t ubatch = ModelOptions{}.ubatch;
    int reps = 5;
    DeviceOptions device;
};

// A weight the model multiplies activations by: layers' 2-D ".weight" tensors but the norms, and the
// output head (the token table when the head is tied). Expert stacks (3-D) are listed apart.
struct ModelShapes {
    std::set<std::tuple<uint32_t, uint32_t, uint32_t>> dense;  // (type, n, k)
    size_t expert_stacks = 0;
};

ModelShapes model_shapes(const GgufFile& f) {
    ModelShapes s;
    const bool has_output = f.find_tensor("output.weight") != nullptr;
    for (const GgufTensorInfo& t : f.tensors()) {
        const std::string& name = t.name;
        const bool layer =
            name.starts_with("blk.") && name.ends_with(".weight") && name.find("norm") == std::string::npos;
        const bool head = name == "output.weight" || (!has_output && name == "token_embd.weight");
        if (layer && t.n_dims == 3 && name.find("_exps.") != std::string::npos) ++s.expert_stacks;
        if ((layer || head) && t.n_dims == 2) s.dense.insert({uint32_t(t.type), uint32_t(t.ne[1]), uint32_t(t.ne[0])});
    }
    return s;
}

std::string m_label(uint32_t m) { return m == 1 ? "decode" : m <= 8 ? "batch" : fmt::format("prefill {}", m); }

void tune(const TuneCmdOptions& o) {
    const std::string path = resolve_model_path(o.model);
    const GgufFile file = GgufFile::open(path);
    const ModelShapes shapes = model_shapes(file);
    ContextOptions co = o.device.context_options();
    co.kernel_tuning = false;  // measured from the rows' own configurations, never an older file's
    Context ctx(co);
    const auto out_path = ctx.kernel_tuning_path();
    if (!out_path) throw std::invalid_argument("tune: no cache directory (set HOME or XDG_CACHE_HOME, or --cache-dir)");

    KernelTuning table;
    table.header = KernelTuning::header_for(ctx.caps());
    ops::TuneOptions to;
    to.reps = o.reps;
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<ops::TuneResult> results;
    nlohmann::json skipped = nlohmann::json::array();
    // Decode first: a batch keeps the decode bucket's workgroup size (batch invariance).
    std::vector<uint32_t> ms = {1, 8};
    if (o.ubatch > 8) ms.push_back(o.ubatch);  // shorter chunks run as decode batches do
    for (uint32_t m : ms)
        for (const auto& [type, n, k] : shapes.dense) {
            const ops::TuneShape s{TensorType(type), m, n, k};
            const std::string what = fmt::format("{} {}x{} {}", type_traits(s.wtype).name, n, k, m_label(m));
            fmt::print(stderr, "tune: {}...\n", what);
            try {
                results.push_back(ops::tune_shape(ctx, s, table, to));
                for (const std::string& note : results.back().notes) fmt::print(stderr, "tune: {}: {}\n", what, note);
            } catch (const std::exception& e) {  // a type or size this device's kernels refuse
                fmt::print(stderr, "tune: {}: skipped ({})\n", what, e.what());
                skipped.push_back({{"shape", what}, {"why", e.what()}});
            }
        }
    table.save(*out_path);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fmt::print(stderr, "tune: {} entries in {:.1f} s, written to {}\n", table.entries.size(), secs, out_path->string());
    if (shapes.expert_stacks)
        fmt::print(stderr, "tune: {} expert stacks keep the rows' own configurations (not tuned yet)\n",
                   shapes.expert_stacks);

    if (o.json) {
        nlohmann::json j;
        j["file"] = out_path->string();
        j["device"] = ctx.caps().name;
        j["seconds"] = secs;
        j["entries"] = table.entries.size();
        j["skipped"] = std::move(skipped);
        for (const ops::TuneResult& r : results)
            j["shapes"].push_back({{"type", type_traits(r.shape.wtype).name},
                                   {"m", r.shape.m},
                                   {"n", r.shape.n},
                                   {"k", r.shape.k},
                                   {"row", r.row},
                                   {"default_ms", r.base_ms},
                                   {"best_ms", r.best_ms},
                                   {"improved", r.improved},
                                   {"tried", r.tried},
                                   {"default", describe(r.base)},
                                   {"config", describe(r.best)}});
        fmt::print("{}\n", j.dump(2));
        return;
    }
    fmt::print("| shape | row | default ms | best ms | config |\n|---|---|---:|---:|---|\n");
    for (const ops::TuneResult& r : results)
        fmt::print("| {} {}x{} {} | {} | {:.4f} | {:.4f} | {}{} |\n", type_traits(r.shape.wtype).name, r.shape.n,
                   r.shape.k, m_label(r.shape.m), r.row, r.base_ms, r.best_ms, describe(r.best),
                   r.improved ? "" : " (default kept)");
}

}  // namespace

void register_tune(CLI::App& app) {
    auto o = std::make_shared<TuneCmdOptions>();
    auto* cmd = app.add_subcommand("tune",
                                   "Measure kernel configurations for a model's shapes on this device and "
                                   "store the fastest beside the pipeline cache");
    cmd->add_option("-m,--model", o->model, "GGUF model whose linear shapes to tune (default: stories260K)");
    cmd->add_flag("--json", o->json, "Print JSON instead of a Markdown table");
    cmd->add_option("--ubatch", o->ubatch, "Prompt tokens per forward chunk the prefill shapes are tuned for")
        ->check(CLI::Range(1, 4096))
        ->capture_default_str();
    cmd->add_option("-r,--reps", o->reps, "Timed runs per configuration (the median counts)")
        ->check(CLI::Range(1, 100))
        ->capture_default_str();
    o->device.add_to(cmd);
    cmd->callback([o] { tune(*o); });
}

}  // namespace vkllm::apps
