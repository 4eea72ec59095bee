# Included from the top-level CMakeLists.txt.
# The shader variant table: every compute pipeline vkllm can create is declared here, once.
# vkllm_shader(NAME SOURCE [DEFINE ...]) compiles SOURCE with the defines into NAME.spv,
# validates it with spirv-val, and registers NAME in the embedded table (runtime/shader_registry.h).
# Includes (shaders/include/*.glsl) are tracked through glslang's depfile, so editing one rebuilds
# exactly the variants that include it.

set(VKLLM_SHADER_SRC ${PROJECT_SOURCE_DIR}/shaders)
set(VKLLM_SHADER_BIN ${PROJECT_BINARY_DIR}/shaders)
set(VKLLM_SHADER_ARGS "")
set(VKLLM_SHADER_SPV "")
set(VKLLM_SPIRV_ENV vulkan1.1)

function(vkllm_shader name source)
  set(spv ${VKLLM_SHADER_BIN}/spv/${name}.spv)
  set(defs "")
  foreach(d IN LISTS ARGN)
    list(APPEND defs "-D${d}")
  endforeach()
  add_custom_command(
    OUTPUT ${spv}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${VKLLM_SHADER_BIN}/spv
    COMMAND ${GLSLANG_VALIDATOR} --quiet -V --target-env ${VKLLM_SPIRV_ENV}
            -I${VKLLM_SHADER_SRC}/include ${defs}
            --depfile ${spv}.d -o ${spv} ${VKLLM_SHADER_SRC}/${source}
    COMMAND ${SPIRV_VAL} --target-env ${VKLLM_SPIRV_ENV} ${spv}
    DEPENDS ${VKLLM_SHADER_SRC}/${source}
    DEPFILE ${spv}.d
    COMMENT "GLSL ${source} -> ${name}.spv"
    VERBATIM)
  set(VKLLM_SHADER_ARGS ${VKLLM_SHADER_ARGS} "${name}=${spv}" PARENT_SCOPE)
  set(VKLLM_SHADER_SPV ${VKLLM_SHADER_SPV} ${spv} PARENT_SCOPE)
endfunction()

# --- test and probe kernels ---------------------------------------------------------------------
vkllm_shader(vec_add           vec_add.comp)

# --- elementwise and small ops ------------------------------------------------------------------

# --- matmul / matvec (weight type x tile) --------------------------------------------------------

# --- attention and KV cache ----------------------------------------------------------------------

set(VKLLM_SHADERS_CPP ${VKLLM_SHADER_BIN}/vkllm_shaders.cpp)
add_custom_command(
  OUTPUT ${VKLLM_SHADERS_CPP}
  COMMAND shader_embed ${VKLLM_SHADERS_CPP} ${VKLLM_SHADER_ARGS}
  DEPENDS shader_embed ${VKLLM_SHADER_SPV}
  COMMENT "Embedding SPIR-V table"
  VERBATIM)
