// The embedded shader table, generated at build time by tools/shader_embed.cpp from the variants
// declared in shaders/shaders.cmake.
#pragma once

#include "runtime/shader_id.h"

#include <cstdint>
#include <span>
#include <string_view>

namespace vkllm {

struct ShaderInfo {
    const char* name;
    const uint32_t* code;
    uint32_t code_words;
    uint32_t local_size[3];  // default workgroup size
    int32_t local_size_spec_id[3];  // specialization id of each workgroup dimension, -1 if fixed
    uint32_t push_constant_bytes;
    uint32_t binding_count;  // buffers at set 0, bindings 0..n-1
    uint32_t written_mask;  // bit b set: binding b is written (not readonly)
    uint32_t uniform_mask;  // bit b set: binding b is a uniform buffer, else a storage buffer
    uint64_t hash;  // FNV-1a of the SPIR-V
};

std::span<const ShaderInfo> shader_table();
// The variant's entry (the table holds every ShaderId, in their order).
const ShaderInfo& shader_info(ShaderId id);
// A name given at run time (tests, tools): throws std::out_of_range naming the variant when it is
// not in the table.
const ShaderInfo& find_shader(std::string_view name);
ShaderId find_shader_id(std::string_view name);
// One hash over every embedded module: part of the pipeline-cache key.
uint64_t shader_table_hash();

}  // namespace vkllm
