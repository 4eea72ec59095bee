#include "model/forward/model_weights.h"

#include <fmt/format.h>

#include <cstring>
#include <map>
#include <stdexcept>

namespace vkllm {

namespace {

// The places of a group's parts inside the place of the whole: row ranges of a matrix, element
// ranges of a vector.
void split(const FusedGroup& g, const SchemaDims& dims, const TensorPlace& whole, LayerPlaces& L) {
    const bool vector = whole.rows == 1;
    uint64_t first = 0;  // rows (matrix) or elements (vector) before this part
    for (uint32_t i = 0; i < g.n_parts; ++i) {
        const uint32_t size = uint32_t(dims.get(g.sizes[i]));
        TensorPlace p = whole;
        if (vector) {
            p.row_elems = size;
            p.first = whole.first + first;
            p.offset = whole.offset + 4 * first;
        } else {
            p.rows = size;
            p.first = whole.first + first * whole.row_elems;
            p.offset = whole.offset + first * row_bytes(whole.type, whole.row_elems);
        }
        L[g.parts[i]] = p;
        first += size;
    }
}

// An older DeepSeek file's attn_kv_b (kv_lora -> H x [nope k rows | v rows]) as the device reads
// latent attention: attn_v_b, each head's v rows (a row gather, the file's type), and attn_k_b, each
// head's k rows transposed to [kv_lora][nope] (dequantized: F16; F32 from an F32 or BF16 file, whose
// range F16 may not hold).
void derive_kv_b(const ModelConfig& cfg, const GgufTensorInfo* kv_b, LayerPlaces& L,
                 const std::function<uint32_t(WeightLayout::Buffer)>& add) {
    const uint32_t H = cfg.n_heads, r = cfg.kv_lora_rank, nope = cfg.mla_qk - cfg.rope_dim, vm = cfg.mla_v;
    const uint64_t rb = row_bytes(kv_b->type, r);
    TensorPlace v;
    v.type = kv_b->type, v.row_elems = r, v.rows = H * vm;
    WeightLayout::Buffer vb;
    vb.label = kv_b->name + " (v rows)";
    vb.tensors = {kv_b};
    vb.bytes = v.bytes();
    vb.derive = [=](const GgufFile& file, std::span<uint8_t> out) {
        const uint8_t* src = file.tensor_data(*kv_b).data();
        for (uint32_t h = 0; h < H; ++h)
            std::memcpy(out.data() + uint64_t(h) * vm * rb, src + (uint64_t(h) * (nope + vm) + nope) * rb, vm * rb);
    };
    TensorPlace k;
    k.type = kv_b->type == TensorType::F32 || kv_b->type == TensorType::BF16 ? TensorType::F32 : TensorType::F16;
    k.row_elems = nope, k.rows = H * r;
    WeightLayout::Buffer kb;
    kb.label = kv_b->name + " (k rows, transposed)";
    kb.tensors = {kv_b};
    kb.bytes = k.bytes();
    const TensorType kt = k.type;
    kb.derive = [=](const GgufFile& file, std::span<uint8_t> out) {
        const uint8_t* src = file.tensor_data(*kv_b).data();
        std::vector<float> rows(size_t(nope) * r), t(size_t(r) * nope);
        for (uint32_t h = 0; h < H; ++h) {
            dequantize_row(kv_b->type, src + uint64_t(h) * (nope + vm) * rb, rows.data(), rows.size());  // (nope, r)
            for (uint32_t i = 0; i < nope; ++i)
                for (uint32_t a = 0; a < r; ++a) t[size_t(a) * nope + i] = rows[size_t(i) * r + a];
            quantize_row(kt, t.data(), out.data() + uint64_t(h) * r * row_bytes(kt, nope), t.size());
        }
    };
    v.buffer = add(std::move(vb));
    k.buffer = add(std::move(kb));
    L[Role::WvB] = v;
    L[Role::WkB] = k;
}

}  // namespace

LayerRange LayerRange::resolved(const ModelConfig& cfg) const {
    const uint32_t n = count ? count : (first < cfg.n_layers ? cfg.n_layers - first : 0);
    if (n == 0 || uint64_t(first) + n > cfg.n_layers)
        throw std::invalid_argument(fmt::format("layers [{}, {}) are not a range of the model's {} layers", first,
                                                uint64_t(first) + n, cfg.n_layers));
    return {first, n};
}

std::vector<float> read_place_f32(const GgufFile& file, const TensorPlace& p) {
    std::vector<float> v(p.present() ? size_t(p.rows) * p.row_elems : 0);
    if (!v.empty())
        dequantize_row(p.source->type, file.tensor_data(*p.source).data() + row_bytes(p.source->type, p.first),
                       v.data(), v.size());
    return v;
}

const uint8_t* expert_rows(const GgufFile& file, const WeightLayout& layout, const TensorPlace& stack,
                           uint32_t n_expert, uint32_t e) {
    if (e >= n_expert || stack.rows % n_expert != 0)
        throw std::logic_error(fmt::format("expert {} of a stack of {} rows in {} experts", e, stack.rows, n_expert));
    if (stack.source)
        return file.tensor_data(*stack.source).data() + row_bytes(stack.source->type, stack.first) +
               uint64_t(stack.rows / n_expert) * row_bytes(stack.type, stack.row_elems) * e;
    return file.tensor_data(*layout.buffers.at(stack.buffer).tensors.at(e)).data();
}

WeightLayout plan_weights(const GgufFile& file, const ModelConfig& cfg, uint32_t n_ctx, LayerRange layers,
                          bool shared_token_embd) {
    WeightLayout out;
    out.tied = cfg.tied_embeddings;
    out.range = layers.resolved(cfg);
    const bool embed = out.range.first == 0, head = out.range.end() == cfg.n_layers;
    // A device buffer holding `tensors` back to back; the place of each.
    auto add_buffer = [&](const std::vector<const GgufTensorInfo*>& tensors, bool as_f32) {
        WeightLayout::Buffer b;
        b.label = tensors.size() == 1 ? tensors[0]->name : tensors[0]->name + "+";
        b.tensors = tensors;
        b.as_f32 = as_f32;
        std::vector<TensorPlace> places;
        for (const GgufTensorInfo* t : tensors) {
            TensorPlace p;
            p.source = t;
            p.type = as_f32 ? TensorType::F32 : t->type;
            p.row_elems = uint32_t(t->ne[0]);
            p.rows = uint32_t(t->n_rows());
            p.buffer = uint32_t(out.buffers.size());
            p.offset = b.bytes;
            b.bytes += p.bytes();
            places.push_back(p);
        }
        out.bytes += b.bytes;
        out.buffers.push_back(std::move(b));
        return places;
    };
    // A buffer derived on the host (Buffer::derive): its index.
    auto add_derived = [&](WeightLayout::Buffer b) {
        out.bytes += b.bytes;
        out.buffers.push_back(std::move(b));
        return uint32_t(out.buffers.size() - 1);
    };
    auto place = [&](const TensorSpec& s, uint32_t layer) {
        const GgufTensorInfo* t = file.find_tensor(tensor_name(s, layer));
        return t ? add_buffer({t}, s.f32)[0] : TensorPlace{};
    };

    std::map<Role, TensorSpec> global;
    for (const TensorSpec& s : model_schema(*cfg.arch)) global.emplace(s.role, s);
    auto global_place = [&](Role r) { return global.count(r) ? place(global.at(r), 0) : TensorPlace{}; };
    // A tied head reads token_embd: it goes with the head too.
    if (head && out.tied && shared_token_embd)
        throw std::invalid_argument(
            "plan_weights: a tied output head reads its own token embedding (not a shared one)");
    if (shared_token_embd && embed) {
        if (const GgufTensorInfo* t = file.find_tensor(tensor_name(global.at(Role::TokenEmbd), 0))) {
            TensorPlace& p = out.token_embd;
            p.source = t, p.type = t->type, p.row_elems = uint32_t(t->ne[0]), p.rows = uint32_t(t->n_rows());
            p.buffer = TensorPlace::kHostOnly;
        }
    } else if (embed || (head && out.tied)) {
        out.token_embd = global_place(Role::TokenEmbd);
    }
    if (embed) {
        out.position_embd = global_place(Role::PositionEmbd);
        out.token_types = global_place(Role::TokenTypes);
        out.embd_norm = global_place(Role::TokenEmbdNorm);
        out.embd_norm_b = global_place(Role::TokenEmbdNormB);
    }
    if (head) {
        out.output_norm = global_place(Role::OutputNorm);
        out.output_norm_b = global_place(Role::OutputNormB);
        if (!out.tied) out.output = global_place(Role::Output);
    }
    switch (cfg.rope_factors_for(n_ctx)) {
        case RopeFactors::None: break;
        case RopeFactors::Freqs: out.rope_factors = global_place(Role::RopeFreqs); break;
        case RopeFactors::Long: out.rope_factors = global_place(Role::RopeFactorsLong); break;
        case RopeFactors::Short: out.rope_factors = global_place(Role::RopeFactorsShort); break;
    }

    const SchemaDims dims = schema_dims(cfg);
    const std::vector<TensorSpec> schema = layer_schema(*cfg.arch);
    auto spec_of = [&](Role r) -> const TensorSpec* {
        for (const TensorSpec& s : schema)
            if (s.role == r) return &s;
        return nullptr;
    };
    out.layers.resize(cfg.n_layers);
    for (uint32_t l = out.range.first; l < out.range.end(); ++l) {
        LayerPlaces& L = out.layers[l];
        std::array<bool, kLayerRoles> placed{};
        for (const TensorSpec& s : schema) {
            if (placed[size_t(s.role)]) continue;
            placed[size_t(s.role)] = true;
            // An expert stack stored one tensor per expert: the experts back to back in one buffer.
            if (s.per_expert_name && cfg.experts_split) {
                std::vector<const GgufTensorInfo*> experts;
                for (uint32_t e = 0; e < cfg.n_expert; ++e)
                    experts.push_back(&file.tensor(expert_tensor_name(s, l, e)));
                const std::vector<TensorPlace> p = add_buffer(experts, s.f32);
                out.buffers.back().label =  // "blk.3.ffn_gate.{0..7}.weight"
                    fmt::format(
                        "{}{}.{}", s.prefix, l,
                        fmt::format(fmt::runtime(s.per_expert_name), fmt::format("{{0..{}}}", cfg.n_expert - 1)));
                TensorPlace whole = p[0];
                whole.source = nullptr;  // no one file tensor holds it: expert_rows() finds each
                whole.rows = uint32_t(whole.rows * cfg.n_expert);
                L[s.role] = whole;
                continue;
            }
            // An older DeepSeek file's attn_kv_b: read by the host reference only; the device reads
            // the attn_k_b and attn_v_b derived from it.
            if (s.role == Role::WkvB) {
                // The schema lists WkB and WvB before it: they were placed empty and are replaced here.
                if (cfg.mla_joined_kv_b) {
                    const GgufTensorInfo* t = &file.tensor(tensor_name(s, l));
                    TensorPlace p;
                    p.source = t, p.type = t->type, p.row_elems = uint32_t(t->ne[0]), p.rows = uint32_t(t->n_rows());
                    p.buffer = TensorPlace::kHostOnly;
                    L[s.role] = p;
                    derive_kv_b(cfg, t, L, add_derived);
                }
                continue;
            }
            // A group the file stores whole (attn_qkv, Phi-3's ffn_up): its parts are row ranges.
            if (const FusedGroup* g = fused_group(s.role)) {
                L[s.role] = place(s, l);
                if (L[s.role].present()) split(*g, dims, L[s.role], L);
                continue;
            }
            // A group's parts that the file stores apart: back to back in one buffer when all are
            // present and, for matrices, of one type (one matvec then reads them all).
            const FusedGroup* g = fused_group_of_part(s.role);
            std::vector<const GgufTensorInfo*> parts;
            if (g) {
                for (uint32_t i = 0; i < g->n_parts; ++i) {
                    const TensorSpec* ps = spec_of(g->parts[i]);
                    const GgufTensorInfo* t = ps ? file.find_tensor(tensor_name(*ps, l)) : nullptr;
                    if (!t || (!s.f32 && t->type != file.tensor(tensor_name(s, l)).type)) {
                        parts.clear();
                        break;
                    }
                    parts.push_back(t);
                }
            }
            if (parts.empty()) {
                L[s.role] = place(s, l);
                continue;
            }
            const std::vector<TensorPlace> p = add_buffer(parts, s.f32);
            TensorPlace whole = p[0];
            whole.source = nullptr;  // no one file tensor holds it
            for (uint32_t i = 0; i < g->n_parts; ++i) {
                L[g->parts[i]] = p[i];
                placed[size_t(g->parts[i])] = true;
                if (i == 0) continue;
                if (s.f32)
                    whole.row_elems += p[i].row_elems;
                else
                    whole.rows += p[i].rows;
            }
            L[g->whole] = whole;
        }
    }
    return out;
}

ModelWeights ModelWeights::upload(Context& ctx, const GgufFile& file, const WeightLayout& layout,
                                  const UploadProgress& progress) {
    ModelWeights w;
    w.tied = layout.tied;
    w.bytes = layout.bytes;
    uint64_t total = 0, done = 0;
    for (const auto& b : layout.buffers)
        for (const GgufTensorInfo* t : b.tensors) total += t->n_bytes;
    // Norm weights and biases are small and their kernels read f32: they are converted on the host.
    for (const auto& b : layout.buffers) {
        Buffer buf = ctx.create_buffer(b.bytes, MemoryUsage::Device, b.label);
        if (b.derive) {
            std::vector<uint8_t> bytes(b.bytes);
            b.derive(file, bytes);
            ctx.upload(buf, bytes.data(), bytes.size(), 0);
            for (const GgufTensorInfo* t : b.tensors) done += t->n_bytes;
            if (progress) progress(done, total);
            w.buffers.push_back(std::move(buf));
            continue;
        }
        uint64_t offset = 0;
        for (const GgufTensorInfo* t : b.tensors) {
            auto data = file.tensor_data(*t);
            const uint64_t size = b.as_f32 ? t->n_elements * 4 : t->n_bytes;
            if (b.as_f32 && t->type != TensorType::F32) {
                std::vector<float> f(t->n_elements);
                dequantize_row(t->type, data.data(), f.data(), f.size());
                ctx.upload(buf, f.data(), size, offset);
            } else {
                ctx.upload(buf, data.data(), size, offset);
            }
            offset += size;
            done += t->n_bytes;
            if (progress) progress(done, total);
        }
        w.buffers.push_back(std::move(buf));
    }
    auto view = [&](const TensorPlace& p) {
        DeviceTensor t;
        if (!p.present() || p.buffer == TensorPlace::kHostOnly) return t;
        t.type = p.type;
        t.row_elems = p.row_elems;
        t.rows = p.rows;
        t.view = w.buffers[p.buffer].slice(p.offset, p.bytes());
        return t;
    };
    w.token_embd = view(layout.token_embd);
    w.position_embd = view(layout.position_embd);
    w.output_norm = view(layout.output_norm);
    w.output_norm_b = view(layout.output_norm_b);
    w.output = view(layout.output);
    w.rope_factors = view(layout.rope_factors);
    w.token_types = view(layout.token_types);
    w.embd_norm = view(layout.embd_norm);
    w.embd_norm_b = view(layout.embd_norm_b);
    w.layers.resize(layout.layers.size());
    for (size_t l = 0; l < layout.layers.size(); ++l)
        for (size_t r = 0; r < kLayerRoles; ++r) w.layers[l].t[r] = view(layout.layers[l].t[r]);
    return w;
}

}  // namespace vkllm
