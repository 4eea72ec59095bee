// Small enums and types shared by several ops (RoPE layout, KV-cache element type, paged caches), kept apart from the op
// headers so that attention and the model layer can name them without pulling in the small ops.
#pragma once

#include "runtime/memory.h"

#include <bit>
#include <cstdint>
#include <optional>
#include <string_view>

namespace vkllm::ops {

// How RoPE pairs the elements of a head.
enum class RopeLayout {
    Adjacent,  // GGUF llama: pairs (2i, 2i + 1)
    HalfSplit,  // NeoX: pairs (i, i + rot_dim / 2)
};

// Element type of a KV cache row.
//   F16, F32: one value per element.
//   Q8_0: blocks of 32 consecutive elements of a row, each 9 words: word 0 the f32 scale
//         d = max|x| / 127, words 1..8 the 32 values q = x * (1 / d) rounded half away from zero,
//         as int8, four per word, little-endian; x ~ d * q (d = 0 where it would be subnormal). llama.cpp's q8_0 keeps d as f16 in 34 bytes; these 36 bytes keep
//         every read an aligned 32-bit word (no 8/16-bit storage needed) and the scale exact.
enum class KvType { F16, F32, Q8_0 };

inline constexpr uint32_t kKvQ8Block = 32;  // elements per Q8_0 block
inline constexpr uint32_t kKvQ8BlockWords = 9;

// Row lengths each type can store: a multiple of this many elements (F16 rows are written as
// 32-bit words holding two values; Q8_0 rows are whole blocks).
inline constexpr uint32_t kv_row_multiple(KvType t) {
    return t == KvType::F16 ? 2u : t == KvType::Q8_0 ? kKvQ8Block : 1u;
}

// Bytes of one cache row of `elems` elements (a multiple of kv_row_multiple(t)).
inline constexpr uint64_t kv_row_bytes(KvType t, uint64_t elems) {
    return t == KvType::F16 ? 2 * elems : t == KvType::F32 ? 4 * elems : elems / kKvQ8Block * kKvQ8BlockWords * 4;
}

inline constexpr const char* kv_type_name(KvType t) {
    return t == KvType::F16 ? "f16" : t == KvType::F32 ? "f32" : "q8_0";
}

inline constexpr KvType kAllKvTypes[] = {KvType::F16, KvType::F32, KvType::Q8_0};

// "f16", "f32", "q8_0", or nothing.
inline std::optional<KvType> parse_kv_type(std::string_view s) {
    for (KvType t : kAllKvTypes)
        if (s == kv_type_name(t)) return t;
    return std::nullopt;
}

// A paged KV cache: one pool of blocks per layer shared by every sequence, each sequence's rows
// found through its block table. Logical row r of a sequence (position j's ring row j % n_ctx) is
// physical row table[r / block_rows] * block_rows + r % block_rows of the pool. An op given
// default-constructed KvPages reads and writes one sequence's cache of n_ctx rows as before.
struct KvPages {
    BufferSlice table;  // uint32 block numbers, rows of table_stride() entries, 4-byte aligned
    uint32_t block_rows = 0;  // rows per block, a power of two >= 2; 0: not paged
    uint32_t pool_rows = 0;  // rows of the K and V bindings, a multiple of block_rows
    // kv_store: token t's table is row t (a decode batch, one sequence per token); else every token
    // uses row 0. attention takes this from AttentionParams::batch instead.
    bool per_token = false;
    bool paged() const { return block_rows != 0; }
    uint32_t table_stride(uint32_t n_ctx) const { return paged() ? (n_ctx + block_rows - 1) / block_rows : 0; }
    // log2(block_rows), the kernels' block_shift; 0 when not paged.
    uint32_t block_shift() const { return paged() ? uint32_t(std::countr_zero(block_rows)) : 0u; }
};

}  // namespace vkllm::ops
