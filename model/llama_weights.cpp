#include "model/llama_weights.h"

#include <fmt/format.h>

namespace vkllm {

namespace {

std::vector<std::string> tensor_names(const LlamaConfig& cfg, bool with_output) {
    std::vector<std::string> names = {"token_embd.weight", "output_norm.weight"};
    if (with_output) names.push_back("output.weight");
    for (uint32_t l = 0; l < cfg.n_layers; ++l)
        for (const char* t : {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate",
                              "ffn_up", "ffn_down"})
            names.push_back(fmt::format("blk.{}.{}.weight", l, t));
    return names;
}

}  // namespace

uint64_t LlamaWeights::device_bytes(const GgufFile& file, const LlamaConfig& cfg) {
    uint64_t total = 0;
    for (auto& name : tensor_names(cfg, !cfg.tied_embeddings)) total += file.tensor(name).n_bytes;
    return total;
}

LlamaWeights LlamaWeights::upload(Context& ctx, const GgufFile& file, const LlamaConfig& cfg,
                                  const UploadProgress& progress) {
    LlamaWeights w;
    w.tied = cfg.tied_embeddings;
    uint64_t total = device_bytes(file, cfg), done = 0;
    // Norm weights are small and the norm kernel reads f32: convert them on the host.
    auto load = [&](const std::string& name, bool as_f32 = false) {
        const GgufTensorInfo& info = file.tensor(name);
        DeviceTensor t;
        t.type = as_f32 ? TensorType::F32 : info.type;
        t.row_elems = uint32_t(info.ne[0]);
        t.rows = uint32_t(info.n_rows());
        auto data = file.tensor_data(info);
        if (as_f32 && info.type != TensorType::F32) {
            std::vector<float> f(info.n_elements);
            dequantize_row(info.type, data.data(), f.data(), f.size());
            t.buffer = ctx.create_buffer(f.size() * 4, MemoryUsage::Device, name);
            ctx.upload(t.buffer, f.data(), f.size() * 4);
        } else {
            t.buffer = ctx.create_buffer(info.n_bytes, MemoryUsage::Device, name);
            ctx.upload(t.buffer, data.data(), data.size());
        }
        done += info.n_bytes;
        w.bytes += info.n_bytes;
        if (progress) progress(done, total);
        return t;
    };
    w.token_embd = load("token_embd.weight");
    w.output_norm = load("output_norm.weight", true);
    if (!w.tied) w.output = load("output.weight");
    w.layers.resize(cfg.n_layers);
    for (uint32_t l = 0; l < cfg.n_layers; ++l) {
        auto name = [&](const char* t) { return fmt::format("blk.{}.{}.weight", l, t); };
        LayerWeights& L = w.layers[l];
        L.attn_norm = load(name("attn_norm"), true);
        L.wq = load(name("attn_q"));
        L.wk = load(name("attn_k"));
        L.wv = load(name("attn_v"));
        L.wo = load(name("attn_output"));
        L.ffn_norm = load(name("ffn_norm"), true);
        L.w_gate = load(name("ffn_gate"));
        L.w_up = load(name("ffn_up"));
        L.w_down = load(name("ffn_down"));
    }
    return w;
}

}  // namespace vkllm
