#include "model/forward/model_weights.h"

#include <fmt/format.h>

namespace vkllm {

DeviceTensor DeviceTensor::row_range(uint32_t first, uint32_t n) const {
    DeviceTensor t = *this;
    const uint64_t rb = row_bytes(type, row_elems);
    t.rows = n;
    t.view.offset += rb * first;
    t.view.size = rb * n;
    return t;
}

namespace {

// A vector (bias) stored as f32: elements [first, first + n) as a vector of its own.
DeviceTensor sub_vector(const DeviceTensor& v, uint32_t first, uint32_t n) {
    DeviceTensor t = v;
    t.row_elems = n;
    t.rows = 1;
    t.view.offset += 4ull * first;
    t.view.size = 4ull * n;
    return t;
}

const char* const kLayerTensors[] = {
    "attn_norm.weight", "attn_norm.bias", "attn_q.weight", "attn_q.bias", "attn_k.weight", "attn_k.bias",
    "attn_v.weight", "attn_v.bias", "attn_qkv.weight", "attn_qkv.bias", "attn_q_norm.weight", "attn_k_norm.weight",
    "attn_output.weight", "attn_output.bias", "post_attention_norm.weight", "ffn_norm.weight", "ffn_norm.bias",
    "ffn_gate.weight", "ffn_up.weight", "ffn_up.bias", "ffn_down.weight", "ffn_down.bias", "post_ffw_norm.weight",
};

}  // namespace

std::vector<std::string> model_tensor_names(const GgufFile& file, const ModelConfig& cfg) {
    std::vector<std::string> names;
    auto add = [&](std::string n) {
        if (file.find_tensor(n)) names.push_back(std::move(n));
    };
    for (const char* n : {"token_embd.weight", "position_embd.weight", "output_norm.weight", "output_norm.bias",
                          "output.weight"})
        add(n);
    for (uint32_t l = 0; l < cfg.n_layers; ++l)
        for (const char* t : kLayerTensors) add(fmt::format("blk.{}.{}", l, t));
    return names;
}

uint64_t ModelWeights::device_bytes(const GgufFile& file, const ModelConfig& cfg) {
    uint64_t total = 0;
    for (auto& name : model_tensor_names(file, cfg)) total += file.tensor(name).n_bytes;
    if (cfg.has_rope_freqs || cfg.has_rope_long_short) total += 4ull * cfg.rope_dim / 2;
    return total;
}

ModelWeights ModelWeights::upload(Context& ctx, const GgufFile& file, const ModelConfig& cfg, uint32_t n_ctx,
                                  const UploadProgress& progress) {
    ModelWeights w;
    w.tied = cfg.tied_embeddings;
    uint64_t total = device_bytes(file, cfg), done = 0;
    const ArchDesc& A = *cfg.arch;

    // Uploads the named tensors back to back into one buffer and returns a view of each. Norm
    // weights and biases are small and their kernels read f32: they are converted on the host.
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
    auto has = [&](const std::string& name) { return file.find_tensor(name) != nullptr; };
    auto load = [&](const std::string& name, bool as_f32 = false) { return load_group({name}, as_f32)[0]; };
    auto load_if = [&](const std::string& name, bool as_f32 = false) {
        return has(name) ? load(name, as_f32) : DeviceTensor{};
    };
    // The views of a fused group, and the view covering all of it.
    auto fuse = [](const std::vector<DeviceTensor>& parts) {
        DeviceTensor all = parts[0];
        all.rows = 0;
        for (auto& p : parts) all.rows += p.rows;
        all.view.size = parts.back().view.offset + parts.back().view.size - parts[0].view.offset;
        return all;
    };
    auto fuse_vectors = [](const std::vector<DeviceTensor>& parts) {
        DeviceTensor all = parts[0];
        all.row_elems = 0;
        for (auto& p : parts) all.row_elems += p.row_elems;
        all.view.size = 4ull * all.row_elems;
        return all;
    };

    w.token_embd = load("token_embd.weight");
    if (A.positions == PositionKind::Learned) w.position_embd = load("position_embd.weight");
    w.output_norm = load("output_norm.weight", true);
    w.output_norm_b = load_if("output_norm.bias", true);
    if (!w.tied) w.output = load("output.weight");
    switch (cfg.rope_factors_for(n_ctx)) {
        case RopeFactors::None: break;
        case RopeFactors::Freqs: w.rope_factors = load("rope_freqs.weight", true); break;
        case RopeFactors::Long: w.rope_factors = load("rope_factors_long.weight", true); break;
        case RopeFactors::Short: w.rope_factors = load("rope_factors_short.weight", true); break;
    }

    const uint32_t q = cfg.q_dim(), kv = cfg.kv_dim(), ff = cfg.ffn_dim;
    w.layers.resize(cfg.n_layers);
    for (uint32_t l = 0; l < cfg.n_layers; ++l) {
        auto name = [&](const char* t) { return fmt::format("blk.{}.{}", l, t); };
        auto same_type = [&](std::initializer_list<const char*> ts) {
            for (const char* t : ts)
                if (file.tensor(name(t)).type != file.tensor(name(*ts.begin())).type) return false;
            return true;
        };
        LayerWeights& L = w.layers[l];
        L.attn_norm = load(name("attn_norm.weight"), true);
        L.attn_norm_b = load_if(name("attn_norm.bias"), true);
        if (A.fused_qkv) {
            L.wqkv = load(name("attn_qkv.weight"));
            L.wq = L.wqkv.row_range(0, q), L.wk = L.wqkv.row_range(q, kv), L.wv = L.wqkv.row_range(q + kv, kv);
            if (has(name("attn_qkv.bias"))) {
                L.bqkv = load(name("attn_qkv.bias"), true);
                L.bq = sub_vector(L.bqkv, 0, q), L.bk = sub_vector(L.bqkv, q, kv), L.bv = sub_vector(L.bqkv, q + kv, kv);
            }
        } else {
            if (same_type({"attn_q.weight", "attn_k.weight", "attn_v.weight"})) {
                auto qkv = load_group({name("attn_q.weight"), name("attn_k.weight"), name("attn_v.weight")}, false);
                L.wq = qkv[0], L.wk = qkv[1], L.wv = qkv[2];
                L.wqkv = fuse(qkv);
            } else {
                L.wq = load(name("attn_q.weight"));
                L.wk = load(name("attn_k.weight"));
                L.wv = load(name("attn_v.weight"));
            }
            if (has(name("attn_q.bias")) && has(name("attn_k.bias")) && has(name("attn_v.bias"))) {
                auto b = load_group({name("attn_q.bias"), name("attn_k.bias"), name("attn_v.bias")}, true);
                L.bq = b[0], L.bk = b[1], L.bv = b[2];
                L.bqkv = fuse_vectors(b);
            } else {
                L.bq = load_if(name("attn_q.bias"), true);
                L.bk = load_if(name("attn_k.bias"), true);
                L.bv = load_if(name("attn_v.bias"), true);
            }
        }
        L.q_norm = load_if(name("attn_q_norm.weight"), true);
        L.k_norm = load_if(name("attn_k_norm.weight"), true);
        L.wo = load(name("attn_output.weight"));
        L.bo = load_if(name("attn_output.bias"), true);
        L.post_attn_norm = load_if(name("post_attention_norm.weight"), true);
        L.ffn_norm = load(name("ffn_norm.weight"), true);
        L.ffn_norm_b = load_if(name("ffn_norm.bias"), true);
        if (A.fused_gate_up) {
            L.w_gate_up = load(name("ffn_up.weight"));
            L.w_gate = L.w_gate_up.row_range(0, ff), L.w_up = L.w_gate_up.row_range(ff, ff);
        } else if (A.ffn == FfnKind::Gelu) {
            L.w_up = load(name("ffn_up.weight"));
        } else if (same_type({"ffn_gate.weight", "ffn_up.weight"})) {
            auto gu = load_group({name("ffn_gate.weight"), name("ffn_up.weight")}, false);
            L.w_gate = gu[0], L.w_up = gu[1];
            L.w_gate_up = fuse(gu);
        } else {
            L.w_gate = load(name("ffn_gate.weight"));
            L.w_up = load(name("ffn_up.weight"));
        }
        L.b_up = load_if(name("ffn_up.bias"), true);
        L.w_down = load(name("ffn_down.weight"));
        L.b_down = load_if(name("ffn_down.bias"), true);
        L.post_ffn_norm = load_if(name("post_ffw_norm.weight"), true);
    }
    return w;
}

}  // namespace vkllm
