#include "model/gguf/gguf_writer.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include <fmt/format.h>

namespace vkllm {

namespace {

// resize and copy rather than insert(end, p, p + n): GCC 12 warns (-Wstringop-overflow) about the
// insert once write_to is inlined into write_file.
template <class T>
void put(std::vector<uint8_t>& out, T v) {
    const size_t at = out.size();
    out.resize(at + sizeof(T));
    std::memcpy(out.data() + at, &v, sizeof(T));
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

#define VKLLM_SCALAR_SETTER(fn, T, gtype)            \
    void GgufWriter::fn(std::string_view key, T v) { \
        std::vector<uint8_t> p;                      \
        put<T>(p, v);                                \
        set(key, GgufType::gtype, std::move(p));     \
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

}  // namespace vkllm
