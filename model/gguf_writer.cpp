#include "model/gguf_writer.h"

#include "model/arch/architecture.h"
#include "model/arch/model_config.h"
#include "model/arch/tensor_schema.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <future>
#include <stdexcept>
#include <thread>
#include <unordered_set>

#include <fmt/format.h>

namespace vkllm {

namespace {

template <class T>
void put(std::vector<uint8_t>& out, T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof(T));
}

void put_string(std::vector<uint8_t>& out, std::string_view s) {
    put<uint64_t>(out, s.size());
    out.insert(out.end(), s.begin(), s.end());
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

class MemorySink {
public:
    explicit MemorySink(std::vector<uint8_t>& out) : out_(out) {}
    void write(const void* p, size_t n) {
        const auto* b = static_cast<const uint8_t*>(p);
        out_.insert(out_.end(), b, b + n);
    }

private:
    std::vector<uint8_t>& out_;
};

class FileSink {
public:
    FileSink(std::string path) : path_(std::move(path)) {
        f_ = std::fopen(path_.c_str(), "wb");
        if (!f_) throw GgufError(fmt::format("{}: cannot create: {}", path_, std::strerror(errno)));
    }
    FileSink(const FileSink&) = delete;
    FileSink& operator=(const FileSink&) = delete;
    ~FileSink() {
        if (f_) std::fclose(f_);
    }
    void write(const void* p, size_t n) {
        if (n && std::fwrite(p, 1, n, f_) != n)
            throw GgufError(fmt::format("{}: write failed: {}", path_, std::strerror(errno)));
    }
    void close() {
        std::FILE* f = f_;
        f_ = nullptr;
        if (std::fclose(f) != 0) throw GgufError(fmt::format("{}: write failed: {}", path_, std::strerror(errno)));
    }

private:
    std::string path_;
    std::FILE* f_ = nullptr;
};

}  // namespace

// --- metadata ----------------------------------------------------------------------------------

void GgufWriter::set(std::string_view key, GgufType type, std::vector<uint8_t> payload) {
    for (Entry& e : kv_) {
        if (e.key == key) {
            e.type = type;
            e.payload = std::move(payload);
            return;
        }
    }
    kv_.push_back({std::string(key), type, std::move(payload)});
}

#define VKLLM_SCALAR_SETTER(fn, T, gtype)              \
    void GgufWriter::fn(std::string_view key, T v) {   \
        std::vector<uint8_t> p;                        \
        put<T>(p, v);                                  \
        set(key, GgufType::gtype, std::move(p));       \
    }
VKLLM_SCALAR_SETTER(set_u8, uint8_t, UINT8)
VKLLM_SCALAR_SETTER(set_u32, uint32_t, UINT32)
VKLLM_SCALAR_SETTER(set_i32, int32_t, INT32)
VKLLM_SCALAR_SETTER(set_u64, uint64_t, UINT64)
VKLLM_SCALAR_SETTER(set_f32, float, FLOAT32)
VKLLM_SCALAR_SETTER(set_f64, double, FLOAT64)
#undef VKLLM_SCALAR_SETTER

void GgufWriter::set_value(std::string_view key, const GgufValue& v) {
    std::vector<uint8_t> p;
    if (v.type == GgufType::STRING) {
        put<uint64_t>(p, v.raw.size());
    } else if (v.type == GgufType::ARRAY) {
        put<uint32_t>(p, uint32_t(v.array_type));
        put<uint64_t>(p, v.array_size);
    }
    p.insert(p.end(), v.raw.begin(), v.raw.end());
    set(key, v.type, std::move(p));
}

size_t GgufWriter::remove_prefix(std::string_view prefix) {
    const size_t before = kv_.size();
    std::erase_if(kv_, [&](const Entry& e) { return std::string_view(e.key).substr(0, prefix.size()) == prefix; });
    return before - kv_.size();
}

void GgufWriter::set_bool(std::string_view key, bool v) { set(key, GgufType::BOOL, {uint8_t(v ? 1 : 0)}); }

void GgufWriter::set_string(std::string_view key, std::string_view v) {
    std::vector<uint8_t> p;
    put_string(p, v);
    set(key, GgufType::STRING, std::move(p));
}

void GgufWriter::set_string_array(std::string_view key, const std::vector<std::string>& v) {
    std::vector<uint8_t> p;
    put<uint32_t>(p, uint32_t(GgufType::STRING));
    put<uint64_t>(p, v.size());
    for (const std::string& s : v) put_string(p, s);
    set(key, GgufType::ARRAY, std::move(p));
}

void GgufWriter::set_f32_array(std::string_view key, std::span<const float> v) {
    std::vector<uint8_t> p;
    put<uint32_t>(p, uint32_t(GgufType::FLOAT32));
    put<uint64_t>(p, v.size());
    for (float x : v) put<float>(p, x);
    set(key, GgufType::ARRAY, std::move(p));
}

void GgufWriter::set_i32_array(std::string_view key, std::span<const int32_t> v) {
    std::vector<uint8_t> p;
    put<uint32_t>(p, uint32_t(GgufType::INT32));
    put<uint64_t>(p, v.size());
    for (int32_t x : v) put<int32_t>(p, x);
    set(key, GgufType::ARRAY, std::move(p));
}

void GgufWriter::set_u8_array(std::string_view key, std::span<const uint8_t> v) {
    std::vector<uint8_t> p;
    put<uint32_t>(p, uint32_t(GgufType::UINT8));
    put<uint64_t>(p, v.size());
    p.insert(p.end(), v.begin(), v.end());
    set(key, GgufType::ARRAY, std::move(p));
}

bool GgufWriter::remove(std::string_view key) {
    auto it = std::find_if(kv_.begin(), kv_.end(), [&](const Entry& e) { return e.key == key; });
    if (it == kv_.end()) return false;
    kv_.erase(it);
    return true;
}

void GgufWriter::set_alignment(uint32_t alignment) {
    if (alignment == 0 || !std::has_single_bit(alignment))
        throw GgufError(fmt::format("gguf writer: alignment {} is not a power of two", alignment));
    alignment_ = alignment;
    set_u32("general.alignment", alignment);
    relayout();
}

// --- tensors -----------------------------------------------------------------------------------

void GgufWriter::add_tensor(std::string name, TensorType type, std::span<const uint64_t> ne, FillFn fill) {
    const std::string what = "gguf writer: tensor " + quote_name(name);
    if (name.empty()) throw GgufError("gguf writer: empty tensor name");
    if (std::any_of(tensors_.begin(), tensors_.end(), [&](const GgufTensorInfo& t) { return t.name == name; }))
        throw GgufError(what + ": duplicate tensor name");
    if (ne.empty() || ne.size() > kGgufMaxDims)
        throw GgufError(fmt::format("{}: {} dims; must be 1..{}", what, ne.size(), kGgufMaxDims));
    GgufTensorInfo t;
    t.name = std::move(name);
    t.type = type;
    t.n_dims = uint32_t(ne.size());
    uint64_t n = 1;
    for (size_t i = 0; i < ne.size(); ++i) {
        if (ne[i] == 0) throw GgufError(what + ": zero dimension");
        if (__builtin_mul_overflow(n, ne[i], &n)) throw GgufError(what + ": element count overflows");
        t.ne[i] = ne[i];
    }
    t.n_elements = n;
    const TypeTraits& tt = type_traits(type);
    if (t.ne[0] % tt.block_elems != 0)
        throw GgufError(fmt::format("{}: row length {} is not a multiple of the {} block size {}", what, t.ne[0],
                                    tt.name, tt.block_elems));
    t.n_bytes = n / tt.block_elems * tt.block_bytes;
    tensors_.push_back(std::move(t));
    fills_.push_back(std::move(fill));
    relayout();
}

void GgufWriter::add_tensor_data(std::string name, TensorType type, std::initializer_list<uint64_t> ne,
                                 std::span<const uint8_t> data) {
    auto copy = std::make_shared<std::vector<uint8_t>>(data.begin(), data.end());
    std::string n = name;
    add_tensor(std::move(name), type, ne, [copy, n](std::span<uint8_t> dst) {
        if (dst.size() != copy->size())
            throw GgufError(fmt::format("gguf writer: tensor {}: {} bytes given, {} needed", quote_name(n),
                                        copy->size(), dst.size()));
        std::memcpy(dst.data(), copy->data(), dst.size());
    });
}

bool GgufWriter::remove_tensor(std::string_view name) {
    for (size_t i = 0; i < tensors_.size(); ++i) {
        if (tensors_[i].name == name) {
            tensors_.erase(tensors_.begin() + ptrdiff_t(i));
            fills_.erase(fills_.begin() + ptrdiff_t(i));
            relayout();
            return true;
        }
    }
    return false;
}

void GgufWriter::relayout() {
    uint64_t off = 0;
    for (GgufTensorInfo& t : tensors_) {
        t.offset = off;
        off = align_up(off + t.n_bytes, alignment_);
    }
}

// --- output ------------------------------------------------------------------------------------

template <class Sink>
void GgufWriter::write_to(Sink& sink, const ProgressFn& progress) const {
    std::vector<uint8_t> head;
    head.insert(head.end(), {'G', 'G', 'U', 'F'});
    put<uint32_t>(head, 3);
    put<uint64_t>(head, tensors_.size());
    put<uint64_t>(head, kv_.size());
    for (const Entry& e : kv_) {
        put_string(head, e.key);
        put<uint32_t>(head, uint32_t(e.type));
        head.insert(head.end(), e.payload.begin(), e.payload.end());
    }
    for (const GgufTensorInfo& t : tensors_) {
        put_string(head, t.name);
        put<uint32_t>(head, t.n_dims);
        for (uint32_t d = 0; d < t.n_dims; ++d) put<uint64_t>(head, t.ne[d]);
        put<uint32_t>(head, uint32_t(t.type));
        put<uint64_t>(head, t.offset);
    }
    sink.write(head.data(), head.size());
    static constexpr uint8_t kZeros[4096] = {};
    auto pad_to_alignment = [&](uint64_t pos) {
        for (uint64_t n = align_up(pos, alignment_) - pos; n > 0;) {
            const size_t chunk = size_t(std::min<uint64_t>(n, sizeof(kZeros)));
            sink.write(kZeros, chunk);
            n -= chunk;
        }
    };
    pad_to_alignment(head.size());

    std::vector<uint8_t> buf;
    for (size_t i = 0; i < tensors_.size(); ++i) {
        const GgufTensorInfo& t = tensors_[i];
        if (progress) progress(i, tensors_.size(), t);
        buf.assign(size_t(t.n_bytes), 0);
        if (fills_[i]) fills_[i](buf);
        sink.write(buf.data(), buf.size());
        pad_to_alignment(t.offset + t.n_bytes);  // offsets are multiples of the alignment
    }
}

void GgufWriter::write_file(const std::string& path, const ProgressFn& progress) const {
    const std::string tmp = path + ".partial";
    try {
        FileSink sink(tmp);
        write_to(sink, progress);
        sink.close();
    } catch (...) {
        std::remove(tmp.c_str());
        throw;
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        int e = errno;
        std::remove(tmp.c_str());
        throw GgufError(fmt::format("{}: cannot rename {} into place: {}", path, tmp, std::strerror(e)));
    }
}

std::vector<uint8_t> GgufWriter::write_memory() const {
    std::vector<uint8_t> out;
    MemorySink sink(out);
    write_to(sink, {});
    return out;
}

// --- random LLaMA models -----------------------------------------------------------------------

namespace {

uint64_t splitmix64(uint64_t& state) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t fnv1a(std::string_view s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (char c : s) h = (h ^ uint8_t(c)) * 0x100000001b3ull;
    return h;
}

// Deterministic on every platform (no std:: distributions) and cheap enough for 1e9 weights:
// a sum of four 16-bit uniforms (Irwin-Hall) is close to normal and bounded at about 3.5 sigma.
class WeightRng {
public:
    WeightRng(uint64_t seed, std::string_view tensor) : state_(seed ^ fnv1a(tensor)) { splitmix64(state_); }
    // The state advances by a constant per value (splitmix64 is a counter), so a row range can
    // start where a sequential pass would be: the values do not depend on how the work is split.
    void skip(uint64_t values) { state_ += values * 0x9e3779b97f4a7c15ull; }
    float normal() {
        uint64_t x = splitmix64(state_);
        uint32_t sum = uint32_t(x & 0xffff) + uint32_t((x >> 16) & 0xffff) + uint32_t((x >> 32) & 0xffff) +
                       uint32_t(x >> 48);
        constexpr float kScale = 1.7320508f / 65536.0f;  // sqrt(12 / 4) / 65536: unit variance
        return (float(sum) - 131070.0f) * kScale;
    }

private:
    uint64_t state_;
};

// Rows from first_row on of the random matrix `name`: one expert of a stack written apart holds the
// rows the stacked tensor would.
GgufWriter::FillFn random_matrix(TensorType type, uint64_t row_len, uint64_t seed, std::string name,
                                 uint64_t first_row = 0) {
    return [=](std::span<uint8_t> dst) {
        const float sigma = 1.0f / std::sqrt(float(row_len));
        const size_t rb = row_bytes(type, size_t(row_len));
        const size_t rows = dst.size() / rb;
        auto fill_rows = [&](size_t first, size_t last) {
            WeightRng rng(seed, name);
            rng.skip((first_row + first) * row_len);
            std::vector<float> row(static_cast<size_t>(row_len));
            for (size_t r = first; r < last; ++r) {
                for (float& v : row) v = sigma * rng.normal();
                quantize_row(type, row.data(), dst.data() + r * rb, row.size());
            }
        };
        // Quantizing is most of gen-model's time (a Llama-3-8B-shaped Q4_K_M is 7.5e9 weights):
        // matrices of a million weights or more are split by rows over the hardware threads.
        const size_t threads = row_len * rows >= (1u << 20) ? std::max(1u, std::thread::hardware_concurrency()) : 1;
        std::vector<std::future<void>> parts;
        const size_t per = (rows + threads - 1) / threads;
        for (size_t first = per; first < rows; first += per)
            parts.push_back(std::async(std::launch::async, fill_rows, first, std::min(rows, first + per)));
        fill_rows(0, std::min(rows, per));
        for (auto& p : parts) p.get();
    };
}

// f32 values mean + sigma * N(0, 1): norms (1, 0.05), biases (0, 0.1), rope factors.
GgufWriter::FillFn random_vector(uint64_t seed, std::string name, float mean = 1.0f, float sigma = 0.05f,
                                 bool positive = false) {
    return [=](std::span<uint8_t> dst) {
        WeightRng rng(seed, name);
        for (size_t off = 0; off + 4 <= dst.size(); off += 4) {
            float v = mean + sigma * rng.normal();
            if (positive) v = std::max(std::fabs(v), 0.25f);
            std::memcpy(dst.data() + off, &v, 4);
        }
    };
}

}  // namespace

uint32_t llama_file_type(TensorType t) {
    // llama.cpp's LLAMA_FTYPE values; a single-type K model gets the ftype llama.cpp's loader
    // infers from its most common tensor type (Q4_K -> MOSTLY_Q4_K_M, ...).
    switch (t) {
    case TensorType::F32: return 0;
    case TensorType::F16: return 1;
    case TensorType::Q4_0: return 2;
    case TensorType::Q4_1: return 3;
    case TensorType::Q8_0: return 7;
    case TensorType::Q5_0: return 8;
    case TensorType::Q5_1: return 9;
    case TensorType::Q2_K: return 10;
    case TensorType::Q3_K: return 12;
    case TensorType::Q4_K: return 15;
    case TensorType::Q5_K: return 17;
    case TensorType::Q6_K: return 18;
    case TensorType::IQ4_NL: return 25;
    case TensorType::IQ4_XS: return 30;
    case TensorType::BF16: return 32;
    case TensorType::MXFP4: return 38;  // MOSTLY_MXFP4_MOE, the only MXFP4 file type llama.cpp names
    }
    return 0;
}

const QuantMixInfo& quant_mix_info(QuantMix m) {
    // llama.cpp's LLAMA_FTYPE_MOSTLY_* values and llama_ftype_get_default_type().
    static constexpr QuantMixInfo kInfo[] = {
        {"q2_k", 10, TensorType::Q2_K},   {"q3_k_s", 11, TensorType::Q3_K}, {"q3_k_m", 12, TensorType::Q3_K},
        {"q3_k_l", 13, TensorType::Q3_K}, {"q4_k_s", 14, TensorType::Q4_K}, {"q4_k_m", 15, TensorType::Q4_K},
        {"q5_k_s", 16, TensorType::Q5_K}, {"q5_k_m", 17, TensorType::Q5_K}, {"q6_k", 18, TensorType::Q6_K},
        {"iq4_nl", 25, TensorType::IQ4_NL}, {"iq4_xs", 30, TensorType::IQ4_XS},
    };
    const auto i = size_t(m);
    if (i >= std::size(kInfo)) throw std::invalid_argument(fmt::format("unknown quantization mix {}", i));
    return kInfo[i];
}

std::optional<QuantMix> parse_quant_mix(std::string_view name) {
    std::string lower(name);
    for (char& c : lower) c = char(std::tolower(uint8_t(c)));
    for (QuantMix m : kAllQuantMixes)
        if (quant_mix_info(m).name == lower) return m;
    return std::nullopt;
}

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// The layer of "blk.N.*", -1 for other names.
int layer_of(std::string_view name) {
    if (name.substr(0, 4) != "blk.") return -1;
    int layer = 0;
    size_t i = 4;
    for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) layer = layer * 10 + (name[i] - '0');
    return i > 4 && i < name.size() && name[i] == '.' ? layer : -1;
}

// llama.cpp's tensor_type_fallback(): a type whose block does not divide the row becomes a
// 32-element type of about the same size (F16 when not even 32 divides it). Q2_K and Q3_K go to
// Q4_0, as llama-quantize build 9749 does (the tests' expectations were checked against it).
TensorType fallback_type(TensorType t, uint64_t row_len) {
    if (row_len % type_traits(t).block_elems == 0) return t;
    TensorType f = t;
    switch (t) {
    case TensorType::IQ4_XS: f = TensorType::IQ4_NL; break;
    case TensorType::Q2_K:
    case TensorType::Q3_K: f = TensorType::Q4_0; break;
    case TensorType::Q4_K: f = TensorType::Q5_0; break;
    case TensorType::Q5_K: f = TensorType::Q5_1; break;
    case TensorType::Q6_K: f = TensorType::Q8_0; break;
    default: throw std::invalid_argument(fmt::format("no fallback type for {} rows of {} elements",
                                                     type_traits(t).name, row_len));
    }
    return row_len % type_traits(f).block_elems == 0 ? f : TensorType::F16;
}

}  // namespace

TensorType mix_tensor_type(QuantMix mix, const ModelShape& s, std::string_view name, uint64_t row_len) {
    using T = TensorType;
    using M = QuantMix;
    if (!ends_with(name, ".weight") || ends_with(name, "_norm.weight")) return T::F32;
    const T base = quant_mix_info(mix).base;
    const int n = int(s.n_layers), i = layer_of(name);
    // The KV heads the file states (llama-quantize reads them from it): an older DeepSeek file one per
    // query head.
    const uint32_t kv_heads = s.mla_kv_b ? s.n_heads : s.n_kv_heads;
    const uint32_t gqa = kv_heads ? s.n_heads / kv_heads : 1;
    // The layers whose attn_v / ffn_down get more bits in the _M mixes: the first and last eighth
    // and every third layer between (llama.cpp's use_more_bits).
    auto more_bits = [n](int layer) { return layer < n / 8 || layer >= 7 * n / 8 || (layer - n / 8) % 3 == 2; };
    // llama.cpp's rule for Mixtral-8x7B's class: exactly 8 experts give attn_k and attn_v Q8_0 and
    // most mixes' attn_output Q5_K ("trades just ~128MB").
    const bool eight_experts = s.n_expert == 8;
    T t = base;
    if (name == "output.weight" || (s.tied_embeddings && name == "token_embd.weight")) {
        t = row_len % type_traits(base).block_elems != 0 ? T::Q8_0 : T::Q6_K;
    } else if (name == "token_embd.weight") {
        t = base;
    } else if (ends_with(name, ".attn_v.weight") || ends_with(name, ".attn_kv_b.weight")) {
        // An older DeepSeek file's attn_kv_b gets attn_v's rules (llama.cpp counts it as one).
        switch (mix) {
        case M::Q2_K: t = gqa >= 4 ? T::Q4_K : T::Q3_K; break;
        case M::Q3_K_M: t = i < 2 ? T::Q5_K : T::Q4_K; break;
        case M::Q3_K_L: t = T::Q5_K; break;
        case M::IQ4_NL:
        case M::IQ4_XS: t = gqa >= 4 ? T::Q5_K : base; break;
        case M::Q4_K_M:
        case M::Q5_K_M: t = more_bits(i) ? T::Q6_K : base; break;
        case M::Q4_K_S: t = i < 4 ? T::Q5_K : base; break;
        default: break;
        }
        // llama.cpp's LLM_TYPE_70B: 80 layers with grouped-query attention.
        if (n == 80 && s.n_heads != kv_heads && (t == T::Q3_K || t == T::Q4_K)) t = T::Q5_K;
        if (eight_experts) t = T::Q8_0;
    } else if (ends_with(name, ".attn_k.weight")) {
        if (eight_experts) t = T::Q8_0;
    } else if (name.find("ffn_down") != std::string_view::npos) {
        // The dense ffn_down, and a mixture's ffn_down_exps and ffn_down_shexp alike (llama.cpp
        // matches the substring and takes a mixture's layer from the name).
        switch (mix) {
        case M::Q2_K: t = T::Q3_K; break;
        case M::Q3_K_M: t = i < n / 16 ? T::Q5_K : T::Q4_K; break;
        case M::Q3_K_L: t = T::Q5_K; break;
        case M::Q4_K_M:
        case M::Q5_K_M: t = more_bits(i) ? T::Q6_K : base; break;
        case M::IQ4_NL:
        case M::IQ4_XS:
        case M::Q4_K_S: t = i < n / 8 ? T::Q5_K : base; break;
        default: break;
        }
    } else if (ends_with(name, ".attn_output.weight")) {
        switch (mix) {
        case M::Q2_K: t = eight_experts ? T::Q5_K : T::Q3_K; break;
        case M::Q3_K_S:
        case M::Q4_K_S:
        case M::Q4_K_M:
        case M::IQ4_NL:
        case M::IQ4_XS: t = eight_experts ? T::Q5_K : base; break;
        case M::Q3_K_M: t = eight_experts ? T::Q5_K : T::Q4_K; break;
        case M::Q3_K_L: t = eight_experts ? base : T::Q5_K; break;
        default: break;
        }
    }
    return fallback_type(t, row_len);
}

TensorType llama_tensor_type(const ModelShape& s, std::string_view name, uint64_t row_len) {
    if (s.mix) return mix_tensor_type(*s.mix, s, name, row_len);
    return ends_with(name, "_norm.weight") || ends_with(name, ".bias") ? TensorType::F32 : s.weight_type;
}

MlaDims mla_dims(const ModelShape& s) {
    const uint32_t head_dim = s.head_dim ? s.head_dim : s.dim / s.n_heads;
    MlaDims m;
    m.rope = s.rope_dim ? s.rope_dim : 32;
    m.kv_lora = s.kv_lora ? s.kv_lora : 128;
    m.q_lora = s.q_lora;
    m.v = s.v_head_dim ? s.v_head_dim : (head_dim > m.rope ? head_dim - m.rope : 4);
    return m;
}

const ArchDesc& ModelShape::arch_desc() const {
    const ArchDesc* a = find_arch(arch, variant);
    if (!a) throw std::invalid_argument(fmt::format("unknown architecture '{}' (variant '{}'); supported: {}", arch, variant,
                                                    supported_arch_list()));
    if (n_expert > 0 && variant.empty() && !a->moe)
        if (const ArchDesc* moe = find_arch(arch, "moe")) return *moe;
    return *a;
}

void validate_model_shape(const ModelShape& s) {
    auto bad = [](const std::string& m) { throw std::invalid_argument(m); };
    auto positive = [&](uint32_t v, const char* field) {
        if (v == 0) bad(fmt::format("{} must be positive", field));
    };
    const ArchDesc* arch = find_arch(s.arch);
    if (!arch) bad(fmt::format("unknown architecture '{}'; supported: {}", s.arch, supported_arch_list()));
    if (!find_arch(s.arch, s.variant)) bad(fmt::format("architecture '{}' has no variant '{}'", s.arch, s.variant));
    positive(s.dim, "dim");
    positive(s.n_layers, "layers");
    positive(s.n_heads, "heads");
    positive(s.n_kv_heads, "kv-heads");
    positive(s.ffn_dim, "ffn");
    positive(s.n_ctx, "ctx");
    if (s.head_dim == 0 && s.dim % s.n_heads != 0) bad(fmt::format("heads ({}) must divide dim ({})", s.n_heads, s.dim));
    if (s.n_heads % s.n_kv_heads != 0)
        bad(fmt::format("kv-heads ({}) must divide heads ({})", s.n_kv_heads, s.n_heads));
    const uint32_t head_dim = s.head_dim ? s.head_dim : s.dim / s.n_heads;
    if (head_dim % 4 != 0 || head_dim > 256)
        bad(fmt::format("head dim {} must be a multiple of 4 and at most 256", head_dim));
    const bool mla = arch->mla;
    if (mla) {
        const MlaDims m = mla_dims(s);
        if (m.rope % 2 != 0 || m.rope >= head_dim || (head_dim - m.rope) % 4 != 0)
            bad(fmt::format("rope-dim {} must be even and leave a multiple of 4 of the head dim {}", m.rope, head_dim));
        if (m.kv_lora % 4 != 0 || m.kv_lora + m.rope > 576 || m.v % 4 != 0 || m.v == 0)
            bad(fmt::format("kv-lora {} (a multiple of 4, at most 576 - rope-dim) and v-head-dim {} (a multiple of 4)",
                            m.kv_lora, m.v));
        if (s.n_dense_lead > s.n_layers) bad(fmt::format("dense-layers {} of {} layers", s.n_dense_lead, s.n_layers));
        if (s.n_shared_experts == 0) bad("shared-experts must be positive (DeepSeek has 1 or 2)");
        if (s.expert_groups == 0 || (s.n_expert && s.n_expert % s.expert_groups != 0) || s.groups_used == 0 ||
            s.groups_used > s.expert_groups)
            bad(fmt::format("expert-groups {} must divide the experts, groups-used {} be 1..that", s.expert_groups,
                            s.groups_used));
        if (s.expert_groups > 1 && s.n_expert &&
            (s.n_expert / s.expert_groups < 2 || s.groups_used * (s.n_expert / s.expert_groups) < s.n_expert_used))
            bad(fmt::format("expert-groups {} of {} experts: each group needs 2 or more, and groups-used {} must hold "
                            "the {} experts per token", s.expert_groups, s.n_expert, s.groups_used, s.n_expert_used));
    }
    if (s.rope_freqs && s.arch != "llama") bad("rope factors (rope_freqs) are written for the llama architecture only");
    if (s.rope_scaling != "none" && s.rope_scaling != "linear" && s.rope_scaling != "yarn")
        bad(fmt::format("rope scaling '{}' must be none, linear or yarn", s.rope_scaling));
    if (s.rope_scaling != "none" && !(s.rope_factor >= 1.0f && s.rope_factor <= 1024.0f))
        bad(fmt::format("rope factor {} must be in [1, 1024]", s.rope_factor));
    if (s.rope_scaling != "none" && arch->positions != PositionKind::Rope)
        bad(fmt::format("{} has no RoPE to scale", s.arch));
    if (s.pooling == uint32_t(Pooling::Rank) && arch->lm_head)
        bad(fmt::format("pooling rank (a reranker's classification head) is written for encoders only, not {}", s.arch));
    if (s.n_expert > 0 && !s.arch_desc().moe) bad(fmt::format("{} has no mixture-of-experts form", s.arch));
    if (s.split_experts && s.n_expert == 0) bad("--split-experts needs --experts");
    if (s.mla_kv_b && !arch->mla) bad(fmt::format("--kv-b (an older DeepSeek file's attn_kv_b) is for deepseek2, not {}", s.arch));
    if (s.arch_desc().moe) {
        if (s.n_expert == 0 || s.n_expert > 1024) bad(fmt::format("experts ({}) must be in 1..1024", s.n_expert));
        // Mixtral's and OLMoE's files carry no expert_feed_forward_length: their experts are --ffn wide.
        if (!s.arch_desc().expert_ffn_per_used && !s.arch_desc().expert_ffn_required && s.expert_ffn &&
            s.expert_ffn != s.ffn_dim)
            bad(fmt::format("a {} mixture of experts has experts of the model's ffn ({}), not {}: its files carry no "
                            "expert_feed_forward_length", s.arch, s.ffn_dim, s.expert_ffn));
        if (s.n_expert_used == 0 || s.n_expert_used > std::min(s.n_expert, 64u))
            bad(fmt::format("experts-used ({}) must be in 1..min(experts, 64)", s.n_expert_used));
        if (s.split_experts && !s.arch_desc().per_expert_tensors)
            bad(fmt::format("experts one tensor each (--split-experts) are written for Mixtral (llama) only, not {}", s.arch));
        // A mix's 256-element types fall back per tensor, its 32-element ones have no fallback.
        const uint64_t b = s.mix ? 32 : type_traits(s.weight_type).block_elems;
        for (uint32_t f : {s.expert_ffn, s.shared_ffn})
            if (f % b != 0)
                bad(fmt::format("{} need expert and shared-expert ffn sizes of whole {}-element blocks, not {}",
                                s.mix ? fmt::format("the {} mix's weights", quant_mix_info(*s.mix).name)
                                      : fmt::format("{} weights", type_traits(s.weight_type).name),
                                b, f));
    }
    if (s.clamp_kqv != 0 && !arch->clamp_kqv) bad(fmt::format("{} has no clamp_kqv (mpt has)", s.arch));
    if (!(s.clamp_kqv >= 0) || !std::isfinite(s.clamp_kqv)) bad("clamp-kqv must be finite and >= 0");
    // Rows are dim long (token_embd, attn_*, ffn_gate, ffn_up, output) or ffn long (ffn_down). A
    // mix's 256-element types fall back per tensor, but its 32-element ones have no fallback.
    const std::string what = s.mix ? fmt::format("the {} mix needs", quant_mix_info(*s.mix).name)
                                   : fmt::format("{} weights need", type_traits(s.weight_type).name);
    const uint64_t block = s.mix ? 32 : type_traits(s.weight_type).block_elems;
    if (s.dim % block != 0)
        bad(fmt::format("{} rows that are whole {}-element blocks, but dim = {} is the row length of "
                        "token_embd.weight, blk.*.attn_q/k/v/output.weight, blk.*.ffn_gate/up.weight and "
                        "output.weight{}",
                        what, block, s.dim, block == 256 ? "; a llama.cpp mix such as q4_k_m falls back per tensor" : ""));
    if (mla) {
        const MlaDims m = mla_dims(s);
        // An older file's attn_kv_b holds rows of kv_lora; the k rows the loader transposes from it
        // are F16, whatever their length.
        const std::pair<uint64_t, const char*> rows[] = {
            {uint64_t(s.n_heads) * m.v, "blk.*.attn_output.weight"},
            {s.mla_kv_b ? block : head_dim - m.rope, "blk.*.attn_k_b.weight"},
            {m.kv_lora, s.mla_kv_b ? "blk.*.attn_kv_b.weight" : "blk.*.attn_v_b.weight"},
            {m.q_lora ? m.q_lora : block, "blk.*.attn_q_b.weight"},
            {s.expert_ffn ? s.expert_ffn : s.ffn_dim, "blk.*.ffn_down_exps.weight"}};
        for (const auto& [len, tensor] : rows)
            if (len % block != 0)
                bad(fmt::format("{} rows that are whole {}-element blocks, but {} is the row length of {}", what, block,
                                len, tensor));
    } else if (s.q_dim() % block != 0) {
        bad(fmt::format("{} rows that are whole {}-element blocks, but heads x head dim = {} is the row length of "
                        "blk.*.attn_output.weight", what, block, s.q_dim()));
    }
    if (s.ffn_dim % block != 0)
        bad(fmt::format("{} rows that are whole {}-element blocks, but ffn = {} is the row length of "
                        "blk.*.ffn_down.weight{}",
                        what, block, s.ffn_dim, block == 256 ? "; a llama.cpp mix such as q4_k_m falls back per tensor" : ""));
    if (s.n_vocab < 259)
        bad(fmt::format("vocab ({}) must be at least 259 (3 special tokens + 256 byte tokens)", s.n_vocab));
    if (s.n_vocab > (1u << 24)) bad(fmt::format("vocab ({}) must be at most {}", s.n_vocab, 1u << 24));
    if (!(s.rms_eps > 0) || !std::isfinite(s.rms_eps)) bad("rms eps must be positive");
    if (!(s.rope_base > 0) || !std::isfinite(s.rope_base)) bad("rope base must be positive");
}

RandomVocab make_random_vocab(uint32_t n_vocab) {
    RandomVocab v;
    v.tokens.reserve(n_vocab);
    auto add = [&](std::string text, float score, int32_t type) {
        v.tokens.push_back(std::move(text));
        v.scores.push_back(score);
        v.types.push_back(type);
    };
    add("<unk>", 0, 2);
    add("<s>", 0, 3);
    add("</s>", 0, 3);
    for (int b = 0; b < 256 && v.tokens.size() < n_vocab; ++b) add(fmt::format("<0x{:02X}>", b), 0, 6);

    // Normal pieces, most useful first; scores fall with rank as in SentencePiece vocabs.
    std::unordered_set<std::string> seen;
    float score = 0;
    auto piece = [&](std::string text) {
        if (v.tokens.size() >= n_vocab || !seen.insert(text).second) return;
        add(std::move(text), score, 1);
        score -= 1;
    };
    const std::string space = "\xe2\x96\x81";  // U+2581, SentencePiece's escaped space
    piece(space);
    const std::string letters = "etaoinshrdlcumwfgypbvkjxqz";
    for (char c : letters) piece(std::string(1, c));
    for (char c : letters) piece(space + c);
    for (char c = 'A'; c <= 'Z'; ++c) piece(std::string(1, c));
    for (char c = '0'; c <= '9'; ++c) piece(std::string(1, c));
    for (char c : std::string(".,!?'\"-:;()[]{}<>/\\_=+*&%$#@`~^|")) piece(std::string(1, c));
    for (char c = 'A'; c <= 'Z'; ++c) piece(space + c);
    // Letter strings of growing length in frequency order: "e", "t", ..., "ee", "et", ...; each
    // with and without the space prefix, so every longer piece is reachable by pairwise merges.
    for (size_t len = 2; v.tokens.size() < n_vocab; ++len) {
        std::vector<size_t> idx(len, 0);
        while (v.tokens.size() < n_vocab) {
            std::string s;
            for (size_t i : idx) s += letters[i];
            piece(space + s);
            piece(s);
            size_t k = len;  // odometer increment, last position fastest
            while (k > 0 && ++idx[k - 1] == letters.size()) idx[--k] = 0;
            if (k == 0) break;
        }
    }
    return v;
}

namespace {
// The SentencePiece vocab (tokenizer.ggml.*) of random decoders.
void write_spm_vocab(GgufWriter& w, const ArchDesc& A, uint32_t n_vocab);
}  // namespace

RandomVocab make_random_wordpiece_vocab(uint32_t n_vocab) {
    RandomVocab v;
    const char* specials[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    for (const char* t : specials) {
        v.tokens.push_back(t);
        v.scores.push_back(0);
        v.types.push_back(t == std::string_view("[UNK]") ? 2 : 3);
    }
    // The SentencePiece vocab's pieces after its <unk> <s> </s> and 256 byte tokens.
    const RandomVocab spm = make_random_vocab(n_vocab - uint32_t(std::size(specials)) + 259);
    for (size_t i = 259; i < spm.tokens.size(); ++i) {
        v.tokens.push_back(spm.tokens[i]);
        v.scores.push_back(0);
        v.types.push_back(1);
    }
    return v;
}

namespace {
constexpr uint32_t kT5Buckets = 32;  // T5's relative_attention_num_buckets
}  // namespace

GgufWriter make_random_model(const ModelShape& s) {
    validate_model_shape(s);
    const ArchDesc& A = s.arch_desc();
    const uint32_t head_dim = s.head_dim ? s.head_dim : s.dim / s.n_heads;
    const uint64_t q_dim = s.q_dim(), kv_dim = uint64_t(head_dim) * s.n_kv_heads;
    const std::string a = s.arch;
    auto key = [&](const char* k) { return a + "." + k; };
    GgufWriter w;
    w.set_string("general.architecture", a);
    w.set_string("general.name", s.name);
    w.set_u32("general.file_type", s.mix ? quant_mix_info(*s.mix).file_type : llama_file_type(s.weight_type));
    w.set_u32(key("context_length"), s.n_ctx);
    w.set_u32(key("embedding_length"), s.dim);
    w.set_u32(key("block_count"), s.n_layers);
    w.set_u32(key("feed_forward_length"), s.ffn_dim);
    w.set_u32(key("attention.head_count"), s.n_heads);
    const bool mla = A.mla;
    const MlaDims m = mla ? mla_dims(s) : MlaDims{};
    // Latent attention: one KV head (the latent); older files: one per query head, as they stated it.
    w.set_u32(key("attention.head_count_kv"), mla ? (s.mla_kv_b ? s.n_heads : 1) : s.n_kv_heads);
    if (mla && s.mla_kv_b) {  // as llama.cpp's converter wrote DeepSeek before 2025: the uncompressed heads
        w.set_u32(key("attention.key_length"), head_dim);
        w.set_u32(key("attention.value_length"), m.v);
    } else if (mla) {  // as llama.cpp's converter writes DeepSeek since 2025: one KV head of the latent and the rotary key
        w.set_u32(key("attention.key_length"), m.kv_lora + m.rope);
        w.set_u32(key("attention.value_length"), m.kv_lora);
        w.set_u32(key("attention.key_length_mla"), head_dim);
        w.set_u32(key("attention.value_length_mla"), m.v);
    }
    if (mla) {
        w.set_u32(key("attention.kv_lora_rank"), m.kv_lora);
        if (m.q_lora) w.set_u32(key("attention.q_lora_rank"), m.q_lora);
        w.set_u32(key("leading_dense_block_count"), s.n_dense_lead);
    } else if (s.head_dim) {
        w.set_u32(key("attention.key_length"), head_dim);
        w.set_u32(key("attention.value_length"), head_dim);
    }
    w.set_f32(key(A.norm == NormKind::Rms ? "attention.layer_norm_rms_epsilon" : "attention.layer_norm_epsilon"),
              s.rms_eps);
    if (A.positions == PositionKind::Rope) {
        w.set_u32(key("rope.dimension_count"), mla ? m.rope : head_dim);
        w.set_f32(key("rope.freq_base"), s.rope_base);
        if (s.rope_scaling != "none") {
            w.set_string(key("rope.scaling.type"), s.rope_scaling);
            w.set_f32(key("rope.scaling.factor"), s.rope_factor);
            w.set_u32(key("rope.scaling.original_context_length"), std::max(1u, uint32_t(s.n_ctx / s.rope_factor)));
            // DeepSeek-V2's 0.1 x mscale_all_dim (0.707)
            if (mla && s.rope_scaling == "yarn") w.set_f32(key("rope.scaling.yarn_log_multiplier"), 0.0707f);
        } else if (mla && s.mla_kv_b) {
            // Older converters always wrote it, and llama.cpp of that time (b4748) requires it; with
            // no scaling it changes nothing (ln of a factor of 1).
            w.set_f32(key("rope.scaling.yarn_log_multiplier"), 0.0707f);
        }
    }
    if (A.swa_period > 0) w.set_u32(key("attention.sliding_window"), s.window ? s.window : 32);
    // ALiBi: MPT files carry the max bias (8 in every released model); llama.cpp hard-codes BLOOM's
    // and jina-bert-v2's, so their files do not.
    if (A.positions == PositionKind::Alibi && A.default_max_alibi_bias == 0) w.set_f32(key("attention.max_alibi_bias"), 8.0f);
    if (s.clamp_kqv > 0) w.set_f32(key("attention.clamp_kqv"), s.clamp_kqv);
    if (A.positions == PositionKind::RelativeBias) w.set_u32(key("attention.relative_buckets_count"), kT5Buckets);
    if (A.cross_attention) {  // the encoder has as many layers as the decoder; generation starts at <pad> (0)
        w.set_u32(key("decoder_block_count"), s.n_layers);
        w.set_u32(key("decoder_start_token_id"), 0);
    }
    if (A.default_attn_softcap > 0) {
        w.set_f32(key("attn_logit_softcapping"), A.default_attn_softcap);
        w.set_f32(key("final_logit_softcapping"), A.default_final_softcap);
    }
    const uint32_t expert_ffn = s.expert_ffn ? s.expert_ffn : s.ffn_dim, shared_ffn = s.shared_ffn ? s.shared_ffn : s.ffn_dim;
    if (A.moe) {
        w.set_u32(key("expert_count"), s.n_expert);
        w.set_u32(key("expert_used_count"), s.n_expert_used);
        if (A.expert_ffn_per_used || A.expert_ffn_required)  // Mixtral's, OLMoE's have none
            w.set_u32(key("expert_feed_forward_length"), expert_ffn);
        if (A.shared_expert && !A.shared_ungated) w.set_u32(key("expert_shared_feed_forward_length"), shared_ffn);
        if (A.shared_ungated) {  // DeepSeek's router and shared experts
            w.set_u32(key("expert_shared_count"), s.n_shared_experts);
            w.set_f32(key("expert_weights_scale"), s.expert_scale);
            w.set_bool(key("expert_weights_norm"), s.expert_norm);
            w.set_u32(key("expert_gating_func"), s.sigmoid_gating ? 2 : 1);
            if (s.expert_groups > 1) {
                w.set_u32(key("expert_group_count"), s.expert_groups);
                w.set_u32(key("expert_group_used_count"), s.groups_used);
            }
        }
    }
    if (A.rope_factor_tensors && s.rope_scaling == "none") w.set_u32(key("rope.scaling.original_context_length"), s.n_ctx);
    w.set_u32(key("vocab_size"), s.n_vocab);
    if (!A.causal) w.set_bool(key("attention.causal"), false);  // llama.cpp's default is causal
    if (!A.lm_head || s.pooling) w.set_u32(key("pooling_type"), s.pooling.value_or(1));

    if (A.token_types) {  // BERT-family encoders: WordPiece
        const RandomVocab vocab = make_random_wordpiece_vocab(s.n_vocab);
        w.set_string("tokenizer.ggml.model", "bert");
        w.set_string_array("tokenizer.ggml.tokens", vocab.tokens);
        w.set_i32_array("tokenizer.ggml.token_type", vocab.types);
        w.set_u32("tokenizer.ggml.token_type_count", s.n_token_types);
        w.set_u32("tokenizer.ggml.padding_token_id", 0);
        w.set_u32("tokenizer.ggml.unknown_token_id", 1);
        w.set_u32("tokenizer.ggml.cls_token_id", 2);
        w.set_u32("tokenizer.ggml.seperator_token_id", 3);
        w.set_u32("tokenizer.ggml.mask_token_id", 4);
    } else {
        write_spm_vocab(w, A, s.n_vocab);
    }

    // ne: ggml dims, trailing ones dropped (a stack of experts has three).
    auto matrix = [&](const std::string& name, std::vector<uint64_t> ne, bool f32) {
        const TensorType t = f32 ? TensorType::F32 : llama_tensor_type(s, name, ne[0]);
        w.add_tensor(name, t, ne, random_matrix(t, ne[0], s.seed, name));
    };
    // ne: one dimension, or two for a row per expert (gpt-oss's expert biases)
    auto vector = [&](const std::string& name, std::vector<uint64_t> ne, float mean, float sigma, bool positive = false) {
        w.add_tensor(name, TensorType::F32, ne, random_vector(s.seed, name, mean, sigma, positive));
    };
    // Every tensor of the architecture's schema that a file of this shape holds: the required ones,
    // the frequency factors when asked for (Phi-3 always has its pair), the output matrix unless tied.
    // A reranker (pooling rank) gets its architecture's head: cls, tanh, cls.output with one label (the
    // RoBERTa style), or for jina-bert-v2 cls to one label, tanh.
    const bool reranker = s.pooling == uint32_t(Pooling::Rank);
    const uint32_t shared = A.shared_ungated ? expert_ffn * s.n_shared_experts : shared_ffn;
    const SchemaDims dims{s.dim,      mla ? uint64_t(s.n_heads) * (m.kv_lora + m.rope) : q_dim,
                          mla ? m.kv_lora + m.rope : kv_dim,
                          s.ffn_dim,  mla ? m.kv_lora + m.rope : head_dim,
                          s.n_vocab,  s.n_ctx,
                          mla ? m.rope : head_dim,
                          s.n_token_types, 1,
                          s.n_heads,  kT5Buckets,
                          s.n_expert, expert_ffn,
                          shared,     m.q_lora,
                          m.kv_lora,  mla ? head_dim : 0,
                          m.v};
    const bool tied = s.tied_embeddings || A.embed_scale;  // Gemma ties its embeddings
    auto write = [&](const TensorSpec& t, uint32_t layer) {
        bool wanted = t.required;
        if (t.role == Role::RopeFreqs) wanted = s.rope_freqs;
        if (t.role == Role::RopeFactorsLong || t.role == Role::RopeFactorsShort) wanted = true;
        if (t.role == Role::Output) wanted = !tied;
        if (t.role == Role::TokenTypes) wanted = true;  // optional when reading, as llama.cpp; written as BERT has it
        if (is_classifier_role(t.role)) wanted = reranker;
        if (s.optional_biases && is_bias_role(t.role)) wanted = true;
        if (t.role == Role::AttnRelB) wanted = layer == 0;  // T5: the other layers share layer 0's
        if (mla && t.role == Role::Wq) wanted = m.q_lora == 0;  // V2-Lite's wq, or the q_lora pair
        if (mla && (t.role == Role::WqA || t.role == Role::QANorm || t.role == Role::WqB)) wanted = m.q_lora > 0;
        if (t.role == Role::BExpProbs) wanted = s.sigmoid_gating;  // V3's selection bias
        if (mla && (t.role == Role::WkB || t.role == Role::WvB)) wanted = !s.mla_kv_b;
        if (mla && t.role == Role::WkvB) wanted = s.mla_kv_b;  // older files' joined form
        if (!in_layer(t, layer, s.n_dense_lead)) wanted = false;
        if (!wanted) return;
        const std::string name = tensor_name(t, layer);
        std::vector<uint64_t> ne{dims.get(t.ne[0])};
        if (t.ne[1] != Dim::One || t.ne[2] != Dim::One) ne.push_back(dims.get(t.ne[1]));
        if (t.ne[2] != Dim::One) ne.push_back(dims.get(t.ne[2]));
        if (s.split_experts && t.per_expert_name) {
            const TensorType type = llama_tensor_type(s, name, ne[0]);
            for (uint32_t e = 0; e < s.n_expert; ++e)
                w.add_tensor(expert_tensor_name(t, layer, e), type, {ne[0], ne[1]},
                             random_matrix(type, ne[0], s.seed, name, uint64_t(e) * ne[1]));
            return;
        }
        if (t.init.matrix)  // an f32 matrix (token_types, a router) stays f32, as llama.cpp's converter writes it
            matrix(name, ne, t.f32);
        else
            vector(name, ne, t.init.mean, t.init.sigma, t.init.positive);
    };
    const std::vector<TensorSpec> globals = model_schema(A), layer = layer_schema(A);
    for (const TensorSpec& t : globals)
        if (!is_head_role(t.role)) write(t, 0);
    if (!A.encoder_arch.empty()) {  // an encoder-decoder file: the encoder's layers and output norm first
        const ArchDesc& E = *find_arch(A.encoder_arch, A.variant);
        for (uint32_t l = 0; l < s.n_layers; ++l)
            for (const TensorSpec& t : layer_schema(E)) write(t, l);
        for (const TensorSpec& t : model_schema(E))
            if (t.role == Role::OutputNorm) write(t, 0);
    }
    for (uint32_t l = 0; l < s.n_layers; ++l)
        for (const TensorSpec& t : layer) write(t, l);
    for (const TensorSpec& t : globals)
        if (is_head_role(t.role)) write(t, 0);
    return w;
}

namespace {

void write_spm_vocab(GgufWriter& w, const ArchDesc& A, uint32_t n_vocab) {
    RandomVocab vocab = make_random_vocab(n_vocab);
    if (A.rope_factor_tensors) {
        // llama.cpp's loader looks Phi-3's chat tokens up by text: the last pieces become them.
        const char* chat[] = {"<|endoftext|>", "<|assistant|>", "<|end|>", "<|user|>", "<|system|>"};
        for (size_t i = 0; i < std::size(chat); ++i) {
            const size_t id = vocab.tokens.size() - std::size(chat) + i;
            vocab.tokens[id] = chat[i];
            vocab.types[id] = 3;  // control
            vocab.scores[id] = 0;
        }
    }
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_string_array("tokenizer.ggml.tokens", vocab.tokens);
    w.set_f32_array("tokenizer.ggml.scores", vocab.scores);
    w.set_i32_array("tokenizer.ggml.token_type", vocab.types);
    w.set_u32("tokenizer.ggml.bos_token_id", 1);
    w.set_u32("tokenizer.ggml.eos_token_id", 2);
    w.set_u32("tokenizer.ggml.unknown_token_id", 0);
    w.set_bool("tokenizer.ggml.add_bos_token", true);
    w.set_bool("tokenizer.ggml.add_eos_token", false);
}

}  // namespace

void write_random_model(const std::string& path, const ModelShape& shape, const GgufWriter::ProgressFn& progress) {
    make_random_model(shape).write_file(path, progress);
}

}  // namespace vkllm
