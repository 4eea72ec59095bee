#include "runtime/shader_registry.h"

#include <stdexcept>
#include <string>

namespace vkllm {

const ShaderInfo& find_shader(std::string_view name) {
    for (const ShaderInfo& s : shader_table())
        if (name == s.name) return s;
    throw std::out_of_range("no shader variant named '" + std::string(name) + "' (see shaders/shaders.cmake)");
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
