// Small enums shared by several ops (RoPE layout, KV-cache element type), kept apart from the op
// headers so that attention and the model layer can name them without pulling in the small ops.
#pragma once

#include <cstdint>

namespace vkllm::ops {

// How RoPE pairs the elements of a head.
enum class RopeLayout {
    Adjacent,   // GGUF llama: pairs (2i, 2i + 1)
    HalfSplit,  // NeoX: pairs (i, i + rot_dim / 2)
};

// Element type of a KV cache row.
enum class KvType { F16, F32 };

inline constexpr uint32_t kv_type_bytes(KvType t) { return t == KvType::F16 ? 2u : 4u; }

}  // namespace vkllm::ops
