// GGUF (v2 / v3) reader. The file is memory-mapped and parsed once, up front: every count, length,
// offset and tensor extent is checked against the file size before it is used, so a malformed or
// truncated file yields a GgufError naming the file, the key or tensor, and the reason -- never an
// out-of-bounds read. Strings and tensor data are views into the mapping, which lives as long as
// the GgufFile (move-only; moving keeps every view valid).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runtime/quant/tensor_types.h"

namespace vkllm {

class GgufError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Metadata value types, numbered as in the GGUF spec.
enum class GgufType : uint32_t {
    UINT8 = 0,
    INT8 = 1,
    UINT16 = 2,
    INT16 = 3,
    UINT32 = 4,
    INT32 = 5,
    FLOAT32 = 6,
    BOOL = 7,
    STRING = 8,
    ARRAY = 9,
    UINT64 = 10,
    INT64 = 11,
    FLOAT64 = 12,
};
std::string_view gguf_type_name(GgufType t);  // "UINT32", ...; "UNKNOWN" outside the spec

inline constexpr uint32_t kGgufDefaultAlignment = 32;
inline constexpr size_t kGgufMaxDims = 4;

struct GgufValue {
    GgufType type{};
    GgufType array_type{};  // element type, when type == ARRAY
    uint64_t array_size = 0;  // element count, when type == ARRAY
    std::span<const uint8_t> raw;  // little-endian payload: a scalar, string bytes, or packed
        // numeric array elements (for arrays of strings / arrays:
        // the whole encoded element sequence)
    std::vector<std::string_view> strings;  // elements of an array of strings

    bool is_integer() const;  // any of the 8 integer types (scalar)
    // Value conversions; nullopt when the type does not match or the value does not fit.
    std::optional<uint64_t> as_u64() const;
    std::optional<int64_t> as_i64() const;
    std::optional<double> as_f64() const;  // FLOAT32 / FLOAT64
    std::optional<bool> as_bool() const;
    std::optional<std::string_view> as_string() const;
    std::string describe_type() const;  // "UINT32", "ARRAY[STRING]"
};

struct GgufKeyValue {
    std::string_view key;
    GgufValue value;
};

struct GgufTensorInfo {
    std::string name;
    TensorType type{};
    uint32_t n_dims = 0;
    uint64_t ne[kGgufMaxDims] = {1, 1, 1, 1};  // ggml order: ne[0] is the row length; unused dims 1
    uint64_t n_elements = 0;
    uint64_t offset = 0;  // relative to the data section
    uint64_t n_bytes = 0;

    uint64_t n_rows() const { return n_elements / ne[0]; }
    std::string shape_string() const;  // "[4096, 32000]"
};

class GgufFile {
public:
    static GgufFile open(const std::string& path);
    // Parses bytes held in memory (tests, fuzzers); `name` stands in for the path in messages.
    static GgufFile from_memory(std::vector<uint8_t> bytes, std::string name = "<memory>");

    GgufFile(GgufFile&&) noexcept;
    GgufFile& operator=(GgufFile&&) noexcept;
    GgufFile(const GgufFile&) = delete;
    GgufFile& operator=(const GgufFile&) = delete;
    ~GgufFile();

    const std::string& name() const { return name_; }
    uint32_t version() const { return version_; }
    uint64_t alignment() const { return alignment_; }
    // Start of the tensor data section; may lie past the end of a file that has no tensors.
    uint64_t data_offset() const { return data_offset_; }
    std::span<const uint8_t> bytes() const { return bytes_; }

    // --- metadata ------------------------------------------------------------------------------
    const std::vector<GgufKeyValue>& metadata() const { return kv_; }  // file order
    const GgufValue* find(std::string_view key) const;
    bool has(std::string_view key) const { return find(key) != nullptr; }

    // Typed getters throw GgufError naming the key when it is missing, has the wrong type, or
    // (for integers) does not fit. The find_* variants return nullopt only when the key is absent.
    uint32_t get_u32(std::string_view key) const;
    uint64_t get_u64(std::string_view key) const;
    int32_t get_i32(std::string_view key) const;
    float get_f32(std::string_view key) const;
    bool get_bool(std::string_view key) const;
    std::string_view get_string(std::string_view key) const;
    std::optional<uint32_t> find_u32(std::string_view key) const;
    std::optional<int32_t> find_i32(std::string_view key) const;
    std::optional<float> find_f32(std::string_view key) const;
    std::optional<bool> find_bool(std::string_view key) const;
    std::optional<std::string_view> find_string(std::string_view key) const;

    const std::vector<std::string_view>& get_string_array(std::string_view key) const;
    // Copies (array payloads are not necessarily aligned in the file). The i32 getter accepts
    // INT32 and UINT32 elements that fit.
    std::vector<float> get_f32_array(std::string_view key) const;
    std::vector<int32_t> get_i32_array(std::string_view key) const;
    uint64_t get_array_size(std::string_view key) const;

    // --- tensors -------------------------------------------------------------------------------
    const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }  // file order
    const GgufTensorInfo* find_tensor(std::string_view name) const;
    const GgufTensorInfo& tensor(std::string_view name) const;  // throws GgufError when absent
    std::span<const uint8_t> tensor_data(const GgufTensorInfo& t) const;

    // "<file>: <what>: <reason>", the format of every error this file raises.
    [[noreturn]] void fail(std::string_view what, std::string_view reason) const;

private:
    struct Mapping;
    GgufFile() = default;
    void parse();
    const GgufValue& require(std::string_view key) const;

    std::string name_;
    std::unique_ptr<Mapping> mapping_;
    std::vector<uint8_t> owned_;
    std::span<const uint8_t> bytes_;
    uint32_t version_ = 0;
    uint64_t alignment_ = kGgufDefaultAlignment;
    uint64_t data_offset_ = 0;
    std::vector<GgufKeyValue> kv_;
    std::unordered_map<std::string_view, size_t> kv_index_;
    std::vector<GgufTensorInfo> tensors_;
    std::unordered_map<std::string_view, size_t> tensor_index_;  // keys view the file bytes
};

// Quotes a key or tensor name for an error message: printable ASCII kept, other bytes escaped,
// long names shortened, so hostile files cannot fill a terminal with garbage.
std::string quote_name(std::string_view s);

}  // namespace vkllm
