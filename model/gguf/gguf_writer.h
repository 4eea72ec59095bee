// GGUF v3 writer (models with random weights are model/testgen/'s: random_model.h).
//
// Tensors are declared with a fill callback and their bytes are produced only while the file is
// written, one tensor at a time: writing a multi-GB model needs memory for one tensor, not the
// whole model.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/gguf/gguf.h"
#include "runtime/quant/tensor_types.h"

namespace vkllm {

class GgufWriter {
public:
    // Fills `dst` (exactly the tensor's byte size) with the tensor's encoded data.
    using FillFn = std::function<void(std::span<uint8_t> dst)>;
    // Called before each tensor is produced: (index, count, tensor).
    using ProgressFn = std::function<void(size_t, size_t, const GgufTensorInfo&)>;

    // Setting an existing key replaces its value in place (file order is first-set order).
    void set_u8(std::string_view key, uint8_t v);
    void set_u32(std::string_view key, uint32_t v);
    void set_i32(std::string_view key, int32_t v);
    void set_u64(std::string_view key, uint64_t v);
    void set_f32(std::string_view key, float v);
    void set_f64(std::string_view key, double v);
    void set_bool(std::string_view key, bool v);
    void set_string(std::string_view key, std::string_view v);
    void set_string_array(std::string_view key, const std::vector<std::string>& v);
    void set_f32_array(std::string_view key, std::span<const float> v);
    void set_i32_array(std::string_view key, std::span<const int32_t> v);
    void set_u8_array(std::string_view key, std::span<const uint8_t> v);
    bool remove(std::string_view key);  // false when absent
    size_t remove_prefix(std::string_view prefix);  // every key starting with it; how many
    // A value read from another file, copied as it is (any type, arrays of strings included).
    void set_value(std::string_view key, const GgufValue& v);

    // Writes general.alignment too; must be a power of two. Default 32 (no key written).
    void set_alignment(uint32_t alignment);

    // Declares a tensor (ggml dim order, ne[0] = row length). Throws GgufError for an empty or
    // duplicate name, 0 or > 4 dims, a zero dim, or a row length that is not a whole number of
    // blocks.
    void add_tensor(std::string name, TensorType type, std::span<const uint64_t> ne, FillFn fill);
    void add_tensor(std::string name, TensorType type, std::initializer_list<uint64_t> ne, FillFn fill) {
        add_tensor(std::move(name), type, std::span<const uint64_t>(ne.begin(), ne.size()), std::move(fill));
    }
    // Same, for data already in memory (copied).
    void add_tensor_data(std::string name, TensorType type, std::initializer_list<uint64_t> ne,
                         std::span<const uint8_t> data);
    bool remove_tensor(std::string_view name);
    // Declared tensors with their offsets as they will be written (offsets change on add/remove).
    const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }

    // Writes the file through a temporary name and renames it into place, so a failure never
    // leaves a truncated file at `path`. Throws GgufError naming the path on I/O errors.
    void write_file(const std::string& path, const ProgressFn& progress = {}) const;
    std::vector<uint8_t> write_memory() const;

private:
    struct Entry {
        std::string key;
        GgufType type;
        std::vector<uint8_t> payload;  // encoded value, without key and type
    };
    void set(std::string_view key, GgufType type, std::vector<uint8_t> payload);
    template <class Sink>
    void write_to(Sink& sink, const ProgressFn& progress) const;
    void relayout();

    std::vector<Entry> kv_;
    std::vector<GgufTensorInfo> tensors_;
    std::vector<FillFn> fills_;
    uint32_t alignment_ = kGgufDefaultAlignment;
};

}  // namespace vkllm
