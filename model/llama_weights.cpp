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

    // Uploads the named tensors back to back into one buffer and returns a view of each. Norm
    // weights are small and the norm kernel reads f32: they are converted on the host.
    auto load_group = [&](const std::vector<std::string>& names, bool as_f32) {
        std::vector<const GgufTensorInfo*> infos;
        uint64_t bytes = 0;
        for (auto& n : names) {
            infos.push_back(&file.tensor(n));
            bytes += as_f32 ? infos.back()->n_elements * 4 : infos.back()->n_bytes;
        }
        Buffer buf = ctx.create_buffer(bytes, MemoryUsage::Device, names.size() == 1 ? names[0] : names[0] + "+");
        std::vector<DeviceTensor> views;
        uint64_t offset = 0;
        for (const GgufTensorInfo* info : infos) {
            DeviceTensor t;
            t.type = as_f32 ? TensorType::F32 : info->type;
            t.row_elems = uint32_t(info->ne[0]);
            t.rows = uint32_t(info->n_rows());
            auto data = file.tensor_data(*info);
            uint64_t size = as_f32 ? info->n_elements * 4 : info->n_bytes;
            if (as_f32 && info->type != TensorType::F32) {
                std::vector<float> f(info->n_elements);
                dequantize_row(info->type, data.data(), f.data(), f.size());
                ctx.upload(buf, f.data(), size, offset);
            } else {
                ctx.upload(buf, data.data(), size, offset);
            }
            t.view = buf.slice(offset, size);
            views.push_back(t);
            offset += size;
            done += info->n_bytes;
            if (progress) progress(done, total);
        }
        w.bytes += bytes;
        w.buffers.push_back(std::move(buf));
        return views;
    };
    auto load = [&](const std::string& name, bool as_f32 = false) { return load_group({name}, as_f32)[0]; };
    // The views of a fused group, and the view covering all of it.
    auto fuse = [](const std::vector<DeviceTensor>& parts) {
        DeviceTensor all = parts[0];
        all.rows = 0;
        for (auto& p : parts) all.rows += p.rows;
        all.view.size = parts.back().view.offset + parts.back().view.size - parts[0].view.offset;
        return all;
    };

    w.token_embd = load("token_embd.weight");
    w.output_norm = load("output_norm.weight", true);
    if (!w.tied) w.output = load("output.weight");
    w.layers.resize(cfg.n_layers);
    for (uint32_t l = 0; l < cfg.n_layers; ++l) {
        auto name = [&](const char* t) { return fmt::format("blk.{}.{}.weight", l, t); };
        auto same_type = [&](std::initializer_list<const char*> ts) {
            for (const char* t : ts)
                if (file.tensor(name(t)).type != file.tensor(name(*ts.begin())).type) return false;
            return true;
        };
        LayerWeights& L = w.layers[l];
        L.attn_norm = load(name("attn_norm"), true);
        if (same_type({"attn_q", "attn_k", "attn_v"})) {
            auto qkv = load_group({name("attn_q"), name("attn_k"), name("attn_v")}, false);
            L.wq = qkv[0], L.wk = qkv[1], L.wv = qkv[2];
            L.wqkv = fuse(qkv);
        } else {
            L.wq = load(name("attn_q"));
            L.wk = load(name("attn_k"));
            L.wv = load(name("attn_v"));
        }
        L.wo = load(name("attn_output"));
        L.ffn_norm = load(name("ffn_norm"), true);
        if (same_type({"ffn_gate", "ffn_up"})) {
            auto gu = load_group({name("ffn_gate"), name("ffn_up")}, false);
            L.w_gate = gu[0], L.w_up = gu[1];
            L.w_gate_up = fuse(gu);
        } else {
            L.w_gate = load(name("ffn_gate"));
            L.w_up = load(name("ffn_up"));
        }
        L.w_down = load(name("ffn_down"));
    }
    return w;
}

}  // namespace vkllm
