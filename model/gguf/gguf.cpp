#include "model/gguf/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>

#include <fmt/format.h>

namespace vkllm {

static_assert(std::endian::native == std::endian::little,
              "GGUF payloads are read in place; a big-endian host would need byte swapping");

namespace {

// Smallest possible encodings, used to reject counts that could not fit in the file before
// anything is reserved for them: a key-value needs key length, key, type and a 1-byte value;
// a tensor info needs name length, n_dims, one dim, type and offset.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;
constexpr uint64_t kHeaderBytes = 4 + 4 + 8 + 8;
// Nested arrays are legal but never used by models; the cap keeps recursion depth bounded on
// hostile input (each level costs only 12 bytes of file).
constexpr int kMaxArrayDepth = 8;
// Counts from the file only bound memory loosely (a corrupted count can still be a fraction of a
// multi-GB file), so containers are pre-sized at most this much and grow with what actually parses.
constexpr uint64_t kMaxReserve = 1 << 16;

size_t reserve_hint(uint64_t count) { return size_t(std::min(count, kMaxReserve)); }

size_t scalar_size(GgufType t) {
    switch (t) {
        case GgufType::UINT8:
        case GgufType::INT8:
        case GgufType::BOOL: return 1;
        case GgufType::UINT16:
        case GgufType::INT16: return 2;
        case GgufType::UINT32:
        case GgufType::INT32:
        case GgufType::FLOAT32: return 4;
        case GgufType::UINT64:
        case GgufType::INT64:
        case GgufType::FLOAT64: return 8;
        case GgufType::STRING:
        case GgufType::ARRAY: return 0;
    }
    return 0;
}

bool valid_type(uint32_t t) { return t <= uint32_t(GgufType::FLOAT64); }

bool is_integer_type(GgufType t) {
    switch (t) {
        case GgufType::UINT8:
        case GgufType::INT8:
        case GgufType::UINT16:
        case GgufType::INT16:
        case GgufType::UINT32:
        case GgufType::INT32:
        case GgufType::UINT64:
        case GgufType::INT64: return true;
        default: return false;
    }
}

template <class T>
T load(const uint8_t* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
}

// Decodes one scalar element of an integer type; false for non-integer types.
bool load_integer(GgufType t, const uint8_t* p, int64_t& s, uint64_t& u, bool& is_signed) {
    is_signed = false;
    switch (t) {
        case GgufType::UINT8: u = load<uint8_t>(p); return true;
        case GgufType::UINT16: u = load<uint16_t>(p); return true;
        case GgufType::UINT32: u = load<uint32_t>(p); return true;
        case GgufType::UINT64: u = load<uint64_t>(p); return true;
        case GgufType::INT8: s = load<int8_t>(p); break;
        case GgufType::INT16: s = load<int16_t>(p); break;
        case GgufType::INT32: s = load<int32_t>(p); break;
        case GgufType::INT64: s = load<int64_t>(p); break;
        default: return false;
    }
    is_signed = true;
    return true;
}

std::string shape_of(const uint64_t* ne, uint32_t n) {
    std::string s = "[";
    for (uint32_t i = 0; i < n; ++i) s += fmt::format("{}{}", i ? ", " : "", ne[i]);
    return s + "]";
}

// Bounds-checked little-endian cursor over the file bytes. Every read names what it is reading
// so that a truncation error says where the file ended.
class Reader {
public:
    Reader(const GgufFile& file, std::span<const uint8_t> bytes) : file_(file), bytes_(bytes) {}

    uint64_t pos() const { return pos_; }
    uint64_t remaining() const { return bytes_.size() - pos_; }

    std::span<const uint8_t> take(uint64_t n, std::string_view what, std::string_view field) {
        if (n > remaining())
            file_.fail(what, fmt::format("truncated: {} needs {} bytes at offset {}, file is {} bytes", field, n, pos_,
                                         bytes_.size()));
        auto s = bytes_.subspan(size_t(pos_), size_t(n));
        pos_ += n;
        return s;
    }
    template <class T>
    T read(std::string_view what, std::string_view field) {
        return load<T>(take(sizeof(T), what, field).data());
    }
    std::string_view string(std::string_view what, std::string_view field) {
        uint64_t len = read<uint64_t>(what, field);
        if (len > remaining())
            file_.fail(what, fmt::format("{}: string length {} at offset {} extends past end of file ({} bytes)", field,
                                         len, pos_ - 8, bytes_.size()));
        auto s = take(len, what, field);
        return {reinterpret_cast<const char*>(s.data()), s.size()};
    }
    // Element `i` of an array of strings; the field name is only formatted on error, as vocab
    // arrays hold tens of thousands of strings.
    std::string_view string_element(std::string_view what, uint64_t i) {
        if (remaining() < 8 || load<uint64_t>(bytes_.data() + pos_) > remaining() - 8)
            return string(what, fmt::format("array element {}", i));  // raises the error
        return string(what, {});
    }

private:
    const GgufFile& file_;
    std::span<const uint8_t> bytes_;
    uint64_t pos_ = 0;
};

void read_value(Reader& r, GgufValue& v, GgufType type, const std::string& what, int depth, const GgufFile& file,
                uint64_t file_size) {
    v.type = type;
    const uint64_t start = r.pos();
    if (type == GgufType::STRING) {
        std::string_view s = r.string(what, "string value");
        v.raw = {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
        return;
    }
    if (type != GgufType::ARRAY) {
        v.raw = r.take(scalar_size(type), what, "value");
        return;
    }
    uint32_t et = r.read<uint32_t>(what, "array element type");
    if (!valid_type(et)) file.fail(what, fmt::format("array element type {} is not a GGUF value type", et));
    uint64_t count = r.read<uint64_t>(what, "array length");
    const uint64_t elems_start = r.pos();
    v.array_type = GgufType(et);
    v.array_size = count;
    const size_t es = scalar_size(v.array_type);
    // Minimum bytes per element: the scalar size, a string's length field, or a nested array's
    // type + length fields.
    const uint64_t min_elem = es ? es : (v.array_type == GgufType::STRING ? 8 : 12);
    if (count > r.remaining() / min_elem)
        file.fail(what, fmt::format("array of {} {} elements at offset {} extends past end of file ({} bytes)", count,
                                    gguf_type_name(v.array_type), start, file_size));
    if (es) {
        v.raw = r.take(count * es, what, "array data");
        return;
    }
    if (v.array_type == GgufType::STRING) {
        v.strings.reserve(reserve_hint(count));
        for (uint64_t i = 0; i < count; ++i) v.strings.push_back(r.string_element(what, i));
    } else {
        if (depth >= kMaxArrayDepth)
            file.fail(what, fmt::format("arrays nested deeper than {} levels", kMaxArrayDepth));
        // Validated and skipped: the elements stay reachable only through `raw`.
        for (uint64_t i = 0; i < count; ++i) {
            GgufValue elem;
            read_value(r, elem, GgufType::ARRAY, what, depth + 1, file, file_size);
        }
    }
    v.raw = file.bytes().subspan(size_t(elems_start), size_t(r.pos() - elems_start));
}

}  // namespace

std::string_view gguf_type_name(GgufType t) {
    static constexpr std::string_view names[] = {"UINT8", "INT8",   "UINT16", "INT16",  "UINT32", "INT32",  "FLOAT32",
                                                 "BOOL",  "STRING", "ARRAY",  "UINT64", "INT64",  "FLOAT64"};
    return uint32_t(t) < std::size(names) ? names[uint32_t(t)] : std::string_view("UNKNOWN");
}

std::string quote_name(std::string_view s) {
    constexpr size_t kMax = 96;
    std::string out = "'";
    for (size_t i = 0; i < s.size() && i < kMax; ++i) {
        auto c = static_cast<unsigned char>(s[i]);
        if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\')
            out += char(c);
        else
            out += fmt::format("\\x{:02x}", c);
    }
    if (s.size() > kMax) out += fmt::format("...({} bytes)", s.size());
    return out + "'";
}

// --- GgufValue -------------------------------------------------------------------------------

bool GgufValue::is_integer() const { return is_integer_type(type) && raw.size() == scalar_size(type); }

std::optional<uint64_t> GgufValue::as_u64() const {
    if (!is_integer()) return std::nullopt;
    int64_t s = 0;
    uint64_t u = 0;
    bool sg = false;
    load_integer(type, raw.data(), s, u, sg);
    if (!sg) return u;
    if (s < 0) return std::nullopt;
    return uint64_t(s);
}

std::optional<int64_t> GgufValue::as_i64() const {
    if (!is_integer()) return std::nullopt;
    int64_t s = 0;
    uint64_t u = 0;
    bool sg = false;
    load_integer(type, raw.data(), s, u, sg);
    if (sg) return s;
    if (u > uint64_t(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return int64_t(u);
}

std::optional<double> GgufValue::as_f64() const {
    if (type == GgufType::FLOAT32 && raw.size() == 4) return double(load<float>(raw.data()));
    if (type == GgufType::FLOAT64 && raw.size() == 8) return load<double>(raw.data());
    return std::nullopt;
}

std::optional<bool> GgufValue::as_bool() const {
    if (type != GgufType::BOOL || raw.size() != 1) return std::nullopt;
    return raw[0] != 0;
}

std::optional<std::string_view> GgufValue::as_string() const {
    if (type != GgufType::STRING) return std::nullopt;
    return std::string_view(reinterpret_cast<const char*>(raw.data()), raw.size());
}

std::string GgufValue::describe_type() const {
    if (type != GgufType::ARRAY) return std::string(gguf_type_name(type));
    return fmt::format("ARRAY[{}]", gguf_type_name(array_type));
}

std::string GgufTensorInfo::shape_string() const { return shape_of(ne, n_dims); }

// --- GgufFile: opening -------------------------------------------------------------------------

struct GgufFile::Mapping {
    void* addr = nullptr;
    size_t size = 0;
    Mapping(void* a, size_t s) : addr(a), size(s) {}
    Mapping(const Mapping&) = delete;
    Mapping& operator=(const Mapping&) = delete;
    ~Mapping() {
        if (addr) munmap(addr, size);
    }
};

GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

void GgufFile::fail(std::string_view what, std::string_view reason) const {
    if (what.empty()) throw GgufError(fmt::format("{}: {}", name_, reason));
    throw GgufError(fmt::format("{}: {}: {}", name_, what, reason));
}

GgufFile GgufFile::open(const std::string& path) {
    GgufFile f;
    f.name_ = path;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) f.fail("", fmt::format("cannot open: {}", std::strerror(errno)));
    struct stat st {};
    if (fstat(fd, &st) != 0) {
        int e = errno;
        ::close(fd);
        f.fail("", fmt::format("cannot stat: {}", std::strerror(e)));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        f.fail("", "not a regular file");
    }
    const auto size = static_cast<uint64_t>(st.st_size);
    if (size > 0) {
        void* addr = mmap(nullptr, size_t(size), PROT_READ, MAP_PRIVATE, fd, 0);
        if (addr == MAP_FAILED) {
            int e = errno;
            ::close(fd);
            f.fail("", fmt::format("cannot mmap {} bytes: {}", size, std::strerror(e)));
        }
        f.mapping_ = std::make_unique<Mapping>(addr, size_t(size));
        f.bytes_ = {static_cast<const uint8_t*>(addr), size_t(size)};
    }
    ::close(fd);  // the mapping keeps the file contents reachable
    f.parse();
    return f;
}

GgufFile GgufFile::from_memory(std::vector<uint8_t> bytes, std::string name) {
    GgufFile f;
    f.name_ = std::move(name);
    f.owned_ = std::move(bytes);
    f.bytes_ = f.owned_;
    f.parse();
    return f;
}

// --- GgufFile: parsing -------------------------------------------------------------------------

void GgufFile::parse() {
    const uint64_t size = bytes_.size();
    Reader r(*this, bytes_);

    auto magic = r.take(4, "header", "magic");
    if (std::memcmp(magic.data(), "GGUF", 4) != 0)
        fail("header", fmt::format("bad magic {} (expected 'GGUF'): not a GGUF file",
                                   quote_name({reinterpret_cast<const char*>(magic.data()), 4})));
    version_ = r.read<uint32_t>("header", "version");
    if (version_ != 2 && version_ != 3) {
        std::string hint = version_ == 1 ? " (version 1 used 32-bit counts and is obsolete)"
                           : (version_ == 0x02000000u || version_ == 0x03000000u) ? " (a big-endian file?)"
                                                                                  : "";
        fail("header", fmt::format("unsupported GGUF version {}{}; supported: 2, 3", version_, hint));
    }
    const uint64_t n_tensors = r.read<uint64_t>("header", "tensor count");
    const uint64_t n_kv = r.read<uint64_t>("header", "metadata count");
    const uint64_t body = size - kHeaderBytes;
    if (n_kv > body / kMinKvBytes)
        fail("header", fmt::format("metadata count {} is impossible for a file of {} bytes", n_kv, size));
    if (n_tensors > body / kMinTensorInfoBytes)
        fail("header", fmt::format("tensor count {} is impossible for a file of {} bytes", n_tensors, size));

    // --- metadata
    kv_.reserve(reserve_hint(n_kv));
    kv_index_.reserve(reserve_hint(n_kv));
    for (uint64_t i = 0; i < n_kv; ++i) {
        const std::string item = fmt::format("metadata entry {}", i);
        std::string_view key = r.string(item, "key");
        const std::string what = "key " + quote_name(key);
        if (kv_index_.count(key)) fail(what, "duplicate key");
        uint32_t type = r.read<uint32_t>(what, "value type");
        if (!valid_type(type)) fail(what, fmt::format("value type {} is not a GGUF value type", type));
        GgufKeyValue kv;
        kv.key = key;
        read_value(r, kv.value, GgufType(type), what, 0, *this, size);
        kv_index_.emplace(key, kv_.size());
        kv_.push_back(std::move(kv));
    }

    if (const GgufValue* a = find("general.alignment")) {
        auto v = a->as_u64();
        if (!v) fail("key 'general.alignment'", fmt::format("has type {}, expected UINT32", a->describe_type()));
        if (*v == 0 || !std::has_single_bit(*v) || *v > std::numeric_limits<uint32_t>::max())
            fail("key 'general.alignment'", fmt::format("alignment {} is not a power of two that fits in 32 bits", *v));
        alignment_ = *v;
    }

    // --- tensor infos
    tensors_.reserve(reserve_hint(n_tensors));
    tensor_index_.reserve(reserve_hint(n_tensors));
    for (uint64_t i = 0; i < n_tensors; ++i) {
        const std::string item = fmt::format("tensor info {}", i);
        std::string_view name = r.string(item, "name");
        const std::string what = "tensor " + quote_name(name);
        if (tensor_index_.count(name)) fail(what, "duplicate tensor name");
        GgufTensorInfo t;
        t.name = std::string(name);
        t.n_dims = r.read<uint32_t>(what, "n_dims");
        if (t.n_dims == 0 || t.n_dims > kGgufMaxDims)
            fail(what, fmt::format("n_dims {} is not in 1..{}", t.n_dims, kGgufMaxDims));
        uint64_t n = 1;
        for (uint32_t d = 0; d < t.n_dims; ++d) {
            t.ne[d] = r.read<uint64_t>(what, fmt::format("dim {}", d));
        }
        for (uint32_t d = 0; d < t.n_dims; ++d) {
            if (t.ne[d] == 0) fail(what, fmt::format("dimension {} of {} is zero", d, shape_of(t.ne, t.n_dims)));
            if (__builtin_mul_overflow(n, t.ne[d], &n))
                fail(what, fmt::format("element count of {} overflows 64 bits", shape_of(t.ne, t.n_dims)));
        }
        t.n_elements = n;
        const uint32_t type = r.read<uint32_t>(what, "type");
        if (!is_supported_type(type))
            fail(what, fmt::format("type {} ({}) is not supported; supported: {}", ggml_type_name(type), type,
                                   supported_types_list()));
        t.type = TensorType(type);
        const TypeTraits& tt = type_traits(t.type);
        if (t.ne[0] % tt.block_elems != 0)
            fail(what, fmt::format("row length {} of {} is not a multiple of the {} block size {}", t.ne[0],
                                   shape_of(t.ne, t.n_dims), tt.name, tt.block_elems));
        const uint64_t blocks = n / tt.block_elems;
        if (__builtin_mul_overflow(blocks, uint64_t(tt.block_bytes), &t.n_bytes))
            fail(what, fmt::format("byte size of {} {} overflows 64 bits", tt.name, shape_of(t.ne, t.n_dims)));
        if (t.n_bytes > size)
            fail(what, fmt::format("{} {} needs {} bytes, more than the file's {} bytes", tt.name,
                                   shape_of(t.ne, t.n_dims), t.n_bytes, size));
        t.offset = r.read<uint64_t>(what, "data offset");
        tensor_index_.emplace(name, tensors_.size());
        tensors_.push_back(std::move(t));
    }

    // --- data section
    const uint64_t header_end = r.pos();
    const uint64_t pad = (alignment_ - header_end % alignment_) % alignment_;
    data_offset_ = header_end + pad;  // header_end <= size and alignment_ < 2^32: cannot overflow

    for (const GgufTensorInfo& t : tensors_) {
        const std::string what = "tensor " + quote_name(t.name);
        if (t.offset % alignment_ != 0)
            fail(what, fmt::format("data offset {} is not a multiple of the alignment {}", t.offset, alignment_));
        uint64_t begin = 0, end = 0;
        if (__builtin_add_overflow(data_offset_, t.offset, &begin) || __builtin_add_overflow(begin, t.n_bytes, &end) ||
            end > size)
            fail(what, fmt::format("data [offset {}, {} bytes) extends past end of file ({} bytes)",
                                   t.offset > size ? t.offset : begin, t.n_bytes, size));
    }
    std::vector<const GgufTensorInfo*> by_offset;
    by_offset.reserve(tensors_.size());
    for (const GgufTensorInfo& t : tensors_) by_offset.push_back(&t);
    std::sort(by_offset.begin(), by_offset.end(),
              [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < by_offset.size(); ++i) {
        const GgufTensorInfo& a = *by_offset[i - 1];
        const GgufTensorInfo& b = *by_offset[i];
        if (a.offset + a.n_bytes > b.offset)
            fail("tensor " + quote_name(b.name),
                 fmt::format("data [offset {}, {} bytes) overlaps tensor {} [offset {}, {} bytes)", b.offset, b.n_bytes,
                             quote_name(a.name), a.offset, a.n_bytes));
    }
}

// --- GgufFile: lookups -------------------------------------------------------------------------

const GgufValue* GgufFile::find(std::string_view key) const {
    auto it = kv_index_.find(key);
    return it == kv_index_.end() ? nullptr : &kv_[it->second].value;
}

const GgufValue& GgufFile::require(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) fail("key " + quote_name(key), "required key is missing");
    return *v;
}

namespace {
template <class T>
T checked_integer(const GgufFile& f, std::string_view key, const GgufValue& v, std::string_view expected) {
    if (!v.is_integer())
        f.fail("key " + quote_name(key), fmt::format("has type {}, expected {}", v.describe_type(), expected));
    if constexpr (std::is_signed_v<T>) {
        auto x = v.as_i64();
        if (!x || *x < std::numeric_limits<T>::min() || *x > std::numeric_limits<T>::max())
            f.fail("key " + quote_name(key),
                   fmt::format("value {} does not fit in {}", x ? fmt::format("{}", *x) : "(>= 2^63)", expected));
        return T(*x);
    } else {
        auto x = v.as_u64();
        if (!x || *x > std::numeric_limits<T>::max())
            f.fail("key " + quote_name(key),
                   fmt::format("value {} does not fit in {}",
                               x ? fmt::format("{}", *x) : fmt::format("{}", *v.as_i64()), expected));
        return T(*x);
    }
}
}  // namespace

uint32_t GgufFile::get_u32(std::string_view key) const {
    return checked_integer<uint32_t>(*this, key, require(key), "UINT32");
}
uint64_t GgufFile::get_u64(std::string_view key) const {
    return checked_integer<uint64_t>(*this, key, require(key), "UINT64");
}
int32_t GgufFile::get_i32(std::string_view key) const {
    return checked_integer<int32_t>(*this, key, require(key), "INT32");
}

float GgufFile::get_f32(std::string_view key) const {
    const GgufValue& v = require(key);
    auto x = v.as_f64();
    if (!x) fail("key " + quote_name(key), fmt::format("has type {}, expected FLOAT32", v.describe_type()));
    return float(*x);
}

bool GgufFile::get_bool(std::string_view key) const {
    const GgufValue& v = require(key);
    auto x = v.as_bool();
    if (!x) fail("key " + quote_name(key), fmt::format("has type {}, expected BOOL", v.describe_type()));
    return *x;
}

std::string_view GgufFile::get_string(std::string_view key) const {
    const GgufValue& v = require(key);
    auto x = v.as_string();
    if (!x) fail("key " + quote_name(key), fmt::format("has type {}, expected STRING", v.describe_type()));
    return *x;
}

std::optional<uint32_t> GgufFile::find_u32(std::string_view key) const {
    if (!has(key)) return std::nullopt;
    return get_u32(key);
}
std::optional<int32_t> GgufFile::find_i32(std::string_view key) const {
    if (!has(key)) return std::nullopt;
    return get_i32(key);
}
std::optional<float> GgufFile::find_f32(std::string_view key) const {
    if (!has(key)) return std::nullopt;
    return get_f32(key);
}
std::optional<bool> GgufFile::find_bool(std::string_view key) const {
    if (!has(key)) return std::nullopt;
    return get_bool(key);
}
std::optional<std::string_view> GgufFile::find_string(std::string_view key) const {
    if (!has(key)) return std::nullopt;
    return get_string(key);
}

const std::vector<std::string_view>& GgufFile::get_string_array(std::string_view key) const {
    const GgufValue& v = require(key);
    if (v.type != GgufType::ARRAY || v.array_type != GgufType::STRING)
        fail("key " + quote_name(key), fmt::format("has type {}, expected ARRAY[STRING]", v.describe_type()));
    return v.strings;
}

uint64_t GgufFile::get_array_size(std::string_view key) const {
    const GgufValue& v = require(key);
    if (v.type != GgufType::ARRAY)
        fail("key " + quote_name(key), fmt::format("has type {}, expected an ARRAY", v.describe_type()));
    return v.array_size;
}

std::vector<float> GgufFile::get_f32_array(std::string_view key) const {
    const GgufValue& v = require(key);
    const bool f32 = v.array_type == GgufType::FLOAT32, f64 = v.array_type == GgufType::FLOAT64;
    if (v.type != GgufType::ARRAY || !(f32 || f64))
        fail("key " + quote_name(key), fmt::format("has type {}, expected ARRAY[FLOAT32]", v.describe_type()));
    std::vector<float> out(size_t(v.array_size));
    for (size_t i = 0; i < out.size(); ++i)
        out[i] = f32 ? load<float>(v.raw.data() + 4 * i) : float(load<double>(v.raw.data() + 8 * i));
    return out;
}

std::vector<int32_t> GgufFile::get_i32_array(std::string_view key) const {
    const GgufValue& v = require(key);
    if (v.type != GgufType::ARRAY || !is_integer_type(v.array_type))
        fail("key " + quote_name(key), fmt::format("has type {}, expected ARRAY[INT32]", v.describe_type()));
    const size_t es = scalar_size(v.array_type);
    std::vector<int32_t> out(size_t(v.array_size));
    for (size_t i = 0; i < out.size(); ++i) {
        int64_t s = 0;
        uint64_t u = 0;
        bool sg = false;
        load_integer(v.array_type, v.raw.data() + es * i, s, u, sg);
        const bool fits = sg ? (s >= std::numeric_limits<int32_t>::min() && s <= std::numeric_limits<int32_t>::max())
                             : u <= uint64_t(std::numeric_limits<int32_t>::max());
        if (!fits) fail("key " + quote_name(key), fmt::format("element {} does not fit in INT32", i));
        out[i] = sg ? int32_t(s) : int32_t(u);
    }
    return out;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
    auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensorInfo& GgufFile::tensor(std::string_view name) const {
    const GgufTensorInfo* t = find_tensor(name);
    if (!t) fail("tensor " + quote_name(name), "required tensor is missing");
    return *t;
}

std::span<const uint8_t> GgufFile::tensor_data(const GgufTensorInfo& t) const {
    // Offsets were range-checked at parse time; this guards against infos from another file.
    uint64_t end = 0;
    if (__builtin_add_overflow(data_offset_, t.offset, &end) || __builtin_add_overflow(end, t.n_bytes, &end) ||
        end > bytes_.size())
        fail("tensor " + quote_name(t.name), "tensor info does not belong to this file");
    return bytes_.subspan(size_t(data_offset_ + t.offset), size_t(t.n_bytes));
}

}  // namespace vkllm
