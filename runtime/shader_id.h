// Shader variants named by identifiers the compiler checks. shaders/shaders.cmake declares every
// variant once; the build generates from that list an enumerator ShaderId::<name> per variant and,
// for the variants declared per weight or KV type, a family (ShaderFamily::matvec_u_subgroup holds
// matvec_u_<type>_subgroup for each type it is declared for). Code names a variant or a family and a
// TensorType, never a string: a misspelt one is a compile error, and a family's missing type is a
// lookup the planners rule out first (has_variant), or a static_assert where the type is a constant.
#pragma once

#include "shaders/shader_ids.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string_view>

namespace vkllm {

inline constexpr size_t kShaderCount = std::size(kShaderNames);
inline constexpr size_t kShaderFamilyCount = std::size(kShaderFamilyNames);

// The variant's name in shaders.cmake and the embedded table (logs, pipeline keys, errors).
constexpr std::string_view shader_name(ShaderId id) { return kShaderNames[size_t(id)]; }
constexpr std::string_view family_name(ShaderFamily f) { return kShaderFamilyNames[size_t(f)]; }

namespace detail {
// TensorType values are GGML type ids below 64: (family, type id) -> ShaderId + 1, 0 where absent.
inline constexpr uint32_t kMaxTypeId = 64;
inline constexpr auto kVariantTable = [] {
    std::array<std::array<uint16_t, kMaxTypeId>, kShaderFamilyCount> t{};
    for (const ShaderVariant& v : kShaderVariants) t[size_t(v.family)][uint32_t(v.type)] = uint16_t(uint32_t(v.id) + 1);
    return t;
}();
}  // namespace detail

// The family's variant for type t, or nothing where shaders.cmake declares none.
constexpr std::optional<ShaderId> find_variant(ShaderFamily f, TensorType t) {
    if (uint32_t(t) >= detail::kMaxTypeId || detail::kVariantTable[size_t(f)][uint32_t(t)] == 0) return std::nullopt;
    return ShaderId(detail::kVariantTable[size_t(f)][uint32_t(t)] - 1);
}
constexpr bool has_variant(ShaderFamily f, TensorType t) { return find_variant(f, t).has_value(); }
// As find_variant, for a type the caller has checked (has_variant): throws std::out_of_range naming
// the family and the type otherwise.
ShaderId variant(ShaderFamily f, TensorType t);

// A variant whose family and type are constants: one that is not declared fails the compile.
template <ShaderFamily F, TensorType T>
inline constexpr ShaderId kVariant = [] {
    static_assert(has_variant(F, T), "shaders/shaders.cmake declares no such variant");
    return *find_variant(F, T);
}();

}  // namespace vkllm
