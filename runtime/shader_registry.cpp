#include "runtime/shader_registry.h"

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace vkllm {

const ShaderInfo& shader_info(ShaderId id) {
    const std::span<const ShaderInfo> table = shader_table();
    // The identifiers and the table come from one list in one order (shaders/shaders.cmake).
    if (size_t(id) >= table.size() || shader_name(id) != table[size_t(id)].name)
        throw std::logic_error(fmt::format("shader id {} does not match the embedded table", uint32_t(id)));
    return table[size_t(id)];
}

ShaderId find_shader_id(std::string_view name) {
    for (size_t i = 0; i < kShaderCount; ++i)
        if (kShaderNames[i] == name) return ShaderId(i);
    throw std::out_of_range("no shader variant named '" + std::string(name) + "' (see shaders/shaders.cmake)");
}

const ShaderInfo& find_shader(std::string_view name) { return shader_info(find_shader_id(name)); }

ShaderId variant(ShaderFamily f, TensorType t) {
    if (const std::optional<ShaderId> id = find_variant(f, t)) return *id;
    throw std::out_of_range(
        fmt::format("shaders/shaders.cmake declares no {} variant of type {}", family_name(f), uint32_t(t)));
}

uint64_t shader_table_hash() {
    uint64_t h = 1469598103934665603ull;
    for (const ShaderInfo& s : shader_table()) {
        h ^= s.hash;
        h *= 1099511628211ull;
    }
    return h;
}

}  // namespace vkllm
