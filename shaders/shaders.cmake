# Included from the top-level CMakeLists.txt.
# The shader variant table: every compute pipeline vkllm can create is declared here, once.
# vkllm_shader(NAME SOURCE [DEFINE ...] [TYPE t]) compiles SOURCE with the defines into NAME.spv,
# validates it with spirv-val, and registers NAME in the embedded table (runtime/shader_registry.h).
# The same list generates shaders/shader_ids.h in the build tree (runtime/shader_id.h): an enumerator
# ShaderId::NAME per variant, so that code names a variant the compiler checks; TYPE t (a weight or
# KV type, lower case) makes the variant the t member of the family NAME without "_t"
# (matvec_u_q8_0_subgroup: family matvec_u_subgroup, type q8_0), which code looks up by TensorType.
# COOPMAT compiles with VKLLM_GLSLANG_COOPMAT (a glslang that knows GL_KHR_cooperative_matrix).
# Includes (shaders/include/*.glsl) are tracked through glslang's depfile, so editing one rebuilds
# exactly the variants that include it.

set(VKLLM_SHADER_SRC ${PROJECT_SOURCE_DIR}/shaders)
set(VKLLM_SHADER_BIN ${PROJECT_BINARY_DIR}/shaders)
set(VKLLM_SHADER_ARGS "")
set(VKLLM_SHADER_SPV "")
set(VKLLM_SHADER_IDS "")
set(VKLLM_SHADER_FAMILIES "")
set(VKLLM_SHADER_VARIANTS "")
set(VKLLM_SPIRV_ENV vulkan1.1)

function(vkllm_shader name source)
  cmake_parse_arguments(PARSE_ARGV 2 arg "COOPMAT" "TYPE" "")
  set(spv ${VKLLM_SHADER_BIN}/spv/${name}.spv)
  set(defs "")
  set(compiler ${GLSLANG_VALIDATOR})
  set(validate COMMAND ${SPIRV_VAL} --target-env ${VKLLM_SPIRV_ENV} ${spv})
  if(arg_COOPMAT)
    # Debian 12's spirv-val predates the capability: these modules are validated by the Khronos
    # validation layer instead, when the tests create them on Mesa 26 (scripts/mesa26.sh).
    set(compiler ${VKLLM_GLSLANG_COOPMAT})
    set(validate "")
  endif()
  foreach(d IN LISTS arg_UNPARSED_ARGUMENTS)
    list(APPEND defs "-D${d}")
  endforeach()
  if(arg_TYPE)
    string(REPLACE "_${arg_TYPE}" "" family ${name})
    if(family STREQUAL name)
      message(FATAL_ERROR "vkllm_shader(${name}): TYPE ${arg_TYPE} is not part of the name")
    endif()
    string(TOUPPER ${arg_TYPE} type)
    if(NOT family IN_LIST VKLLM_SHADER_FAMILIES)
      set(VKLLM_SHADER_FAMILIES ${VKLLM_SHADER_FAMILIES} ${family} PARENT_SCOPE)
    endif()
    set(VKLLM_SHADER_VARIANTS ${VKLLM_SHADER_VARIANTS}
        "    {ShaderFamily::${family}, TensorType::${type}, ShaderId::${name}},\n" PARENT_SCOPE)
  endif()
  add_custom_command(
    OUTPUT ${spv}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${VKLLM_SHADER_BIN}/spv
    COMMAND ${compiler} --quiet -V --target-env ${VKLLM_SPIRV_ENV}
            -I${VKLLM_SHADER_SRC}/include ${defs}
            --depfile ${spv}.d -o ${spv} ${VKLLM_SHADER_SRC}/${source}
    ${validate}
    DEPENDS ${VKLLM_SHADER_SRC}/${source}
    DEPFILE ${spv}.d
    COMMENT "GLSL ${source} -> ${name}.spv"
    VERBATIM)
  set(VKLLM_SHADER_ARGS ${VKLLM_SHADER_ARGS} "${name}=${spv}" PARENT_SCOPE)
  set(VKLLM_SHADER_SPV ${VKLLM_SHADER_SPV} ${spv} PARENT_SCOPE)
  set(VKLLM_SHADER_IDS ${VKLLM_SHADER_IDS} ${name} PARENT_SCOPE)
endfunction()

# --- test and probe kernels ---------------------------------------------------------------------
vkllm_shader(vec_add           vec_add.comp)
vkllm_shader(probe_bandwidth   probe_bandwidth.comp)
vkllm_shader(probe_bandwidth_sg probe_bandwidth.comp USE_SUBGROUP)
vkllm_shader(probe_fma         probe_fma.comp)
vkllm_shader(probe_int_dot     probe_int_dot.comp)

# --- elementwise and small ops ------------------------------------------------------------------
vkllm_shader(rms_norm          rms_norm.comp)
vkllm_shader(rms_norm_sg       rms_norm.comp USE_SUBGROUP)
vkllm_shader(layer_norm        layer_norm.comp)
vkllm_shader(layer_norm_sg     layer_norm.comp USE_SUBGROUP)
vkllm_shader(swiglu            glu.comp ACT_SILU)
vkllm_shader(geglu             glu.comp ACT_GELU)
vkllm_shader(gelu              unary.comp OP_GELU)
vkllm_shader(scale             unary.comp OP_SCALE)
vkllm_shader(softcap           unary.comp OP_SOFTCAP)
vkllm_shader(clamp             unary.comp OP_CLAMP)
vkllm_shader(relu              unary.comp OP_RELU)
vkllm_shader(gelu_quick        unary.comp OP_GELU_QUICK)
vkllm_shader(add               add.comp)
vkllm_shader(add_rows          add_rows.comp)
vkllm_shader(copy_cols         copy_cols.comp)
vkllm_shader(rope              rope.comp)
vkllm_shader(kv_store_f16      kv_store.comp F16 TYPE f16)
vkllm_shader(kv_store_f32      kv_store.comp TYPE f32)
vkllm_shader(kv_store_q8_0     kv_store.comp Q8_0 TYPE q8_0)
vkllm_shader(argmax            argmax.comp)
vkllm_shader(argmax_sg         argmax.comp USE_SUBGROUP)
vkllm_shader(softmax           softmax.comp)
vkllm_shader(softmax_sg        softmax.comp USE_SUBGROUP)
vkllm_shader(topk              topk.comp)
vkllm_shader(moe_route         moe_route.comp)
vkllm_shader(moe_combine       moe_combine.comp)
vkllm_shader(moe_group         moe_group.comp)
vkllm_shader(swiglu_oai        glu.comp ACT_SWIGLU_OAI)

# --- matmul / matvec (weight type x tile) --------------------------------------------------------
# Weight decoding lives in include/weights.glsl (word reads, no 16/8-bit storage needed).
# Tile sizes (matmul) and rows per workgroup / batch (matvec) are specialization constants chosen
# by runtime/ops/linear.cpp, so one variant per weight type x reduction covers every shape.
#
# One variant per weight type: matmul (shared-memory tiles; subgroup broadcasts for CPU drivers),
# matvec (shared-memory and subgroup reduction; lanes owning rows for CPU drivers) and get_rows.
# The matvec_u_* / matvec_rows_u_* variants read X as a uniform buffer (CPU drivers).
# The type list is runtime/quant/tensor_types.h's kAllTensorTypes; ops look a variant up by family and
# TensorType (runtime/shader_id.h), never by a name assembled at run time.
set(VKLLM_WEIGHT_TYPES f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl q2_k q3_k q4_k q5_k q6_k iq4_xs mxfp4)
foreach(t IN LISTS VKLLM_WEIGHT_TYPES)
  string(TOUPPER "W_${t}" wdef)
  vkllm_shader(matmul_${t} matmul.comp    ${wdef} TYPE ${t})
  vkllm_shader(matmul_broadcast_${t} matmul_broadcast.comp ${wdef} TYPE ${t})
  vkllm_shader(matvec_${t} matvec.comp    ${wdef} TYPE ${t})
  vkllm_shader(matvec_${t}_subgroup matvec.comp    ${wdef} USE_SUBGROUP TYPE ${t})
  vkllm_shader(matvec_u_${t} matvec.comp    ${wdef} X_UNIFORM TYPE ${t})
  vkllm_shader(matvec_u_${t}_subgroup matvec.comp  ${wdef} USE_SUBGROUP X_UNIFORM TYPE ${t})
  vkllm_shader(matvec_rows_${t} matvec_rows.comp ${wdef} TYPE ${t})
  vkllm_shader(matvec_rows_u_${t} matvec_rows.comp ${wdef} X_UNIFORM TYPE ${t})
  vkllm_shader(get_rows_${t} get_rows.comp  ${wdef} TYPE ${t})
  # Mixture-of-experts layers: the expert of each workgroup read from an id buffer (EXPERT_IDS).
  vkllm_shader(matvec_id_${t} matvec.comp    ${wdef} EXPERT_IDS TYPE ${t})
  vkllm_shader(matvec_id_${t}_subgroup matvec.comp ${wdef} EXPERT_IDS USE_SUBGROUP TYPE ${t})
  vkllm_shader(matvec_id_u_${t} matvec.comp    ${wdef} EXPERT_IDS X_UNIFORM TYPE ${t})
  vkllm_shader(matvec_id_u_${t}_subgroup matvec.comp ${wdef} EXPERT_IDS USE_SUBGROUP X_UNIFORM TYPE ${t})
  # Their prefill: the slots grouped per expert (moe_group.comp), matmul tiles per expert.
  vkllm_shader(matmul_id_${t} matmul.comp    ${wdef} EXPERT_GROUPS TYPE ${t})
  vkllm_shader(matmul_broadcast_id_${t} matmul_broadcast.comp ${wdef} EXPERT_GROUPS TYPE ${t})
endforeach()
# Q8_0 / Q4_0 on CPU drivers with shaderInt64: the uniform-X variants reading weights as 8-byte
# words (weights.glsl W_LOAD64; runtime/ops/linear.cpp says when).
foreach(t q8_0 q4_0)
  string(TOUPPER "W_${t}" wdef)
  vkllm_shader(matvec_rows_u64_${t} matvec_rows.comp ${wdef} X_UNIFORM W_LOAD64 TYPE ${t})
  vkllm_shader(matvec_u64_${t}_subgroup matvec.comp ${wdef} USE_SUBGROUP X_UNIFORM W_LOAD64 TYPE ${t})
  vkllm_shader(matvec_id_u64_${t}_subgroup matvec.comp ${wdef} EXPERT_IDS USE_SUBGROUP X_UNIFORM W_LOAD64 TYPE ${t})
endforeach()

# Integer-dot matvec and matmul (devices whose 4x8-bit packed dot is accelerated, or --caps int-dot): X
# quantized to Q8_1 by quantize_q8_1, weights multiplied as integers (include/weights_dot.glsl). The
# block types with an integer form; the rest (F32, F16, BF16, Q2_K, Q3_K) keep the float matvec.
set(VKLLM_DOT_WEIGHT_TYPES q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl q4_k q5_k q6_k iq4_xs mxfp4)
vkllm_shader(quantize_q8_1 quantize_q8_1.comp)
foreach(t IN LISTS VKLLM_DOT_WEIGHT_TYPES)
  string(TOUPPER "W_${t}" wdef)
  vkllm_shader(matvec_dot_${t} matvec_dot.comp ${wdef} TYPE ${t})
  vkllm_shader(matvec_dot_${t}_subgroup matvec_dot.comp ${wdef} USE_SUBGROUP TYPE ${t})
  vkllm_shader(matmul_dot_${t} matmul_dot.comp ${wdef} TYPE ${t})
  vkllm_shader(matmul_dot_id_${t} matmul_dot.comp ${wdef} EXPERT_GROUPS TYPE ${t})
  vkllm_shader(matvec_dot_id_${t}_subgroup matvec_dot.comp ${wdef} EXPERT_IDS USE_SUBGROUP TYPE ${t})
  vkllm_shader(matvec_dot_id_${t} matvec_dot.comp ${wdef} EXPERT_IDS TYPE ${t})
endforeach()

# Cooperative-matrix (tensor core) matmul for prompt chunks, dense and experts, every weight type:
# weights dequantized into shared memory as f16, f32 accumulators (caps.coopmat_kernels).
foreach(t IN LISTS VKLLM_WEIGHT_TYPES)
  string(TOUPPER "W_${t}" wdef)
  vkllm_shader(matmul_coopmat_${t} matmul_coopmat.comp ${wdef} COOPMAT TYPE ${t})
  vkllm_shader(matmul_coopmat_id_${t} matmul_coopmat.comp ${wdef} EXPERT_GROUPS COOPMAT TYPE ${t})
endforeach()

# --- attention and KV cache ----------------------------------------------------------------------
# KV element type x kernel. f16 K/V are read as packed words (unpack_half2, half.glsl) and q8_0
# blocks as words too: no 8/16-bit storage or fp16 feature is needed, so these run on every device.
# Tile sizes are specialization constants.
vkllm_shader(attention_prefill_f16 attention_prefill.comp KV_F16 TYPE f16)
vkllm_shader(attention_prefill_f32 attention_prefill.comp KV_F32 TYPE f32)
vkllm_shader(attention_decode_f16  attention_decode.comp  KV_F16 TYPE f16)
vkllm_shader(attention_decode_f32  attention_decode.comp  KV_F32 TYPE f32)
vkllm_shader(attention_prefill_q8_0 attention_prefill.comp KV_Q8_0 TYPE q8_0)
# The same with its two products on the matrix units (caps.coopmat_kernels; ops/attention.cpp says when).
vkllm_shader(attention_prefill_coopmat_f16 attention_prefill_coopmat.comp KV_F16 COOPMAT TYPE f16)
vkllm_shader(attention_prefill_coopmat_f32 attention_prefill_coopmat.comp KV_F32 COOPMAT TYPE f32)
vkllm_shader(attention_prefill_coopmat_q8_0 attention_prefill_coopmat.comp KV_Q8_0 COOPMAT TYPE q8_0)
vkllm_shader(attention_decode_q8_0  attention_decode.comp  KV_Q8_0 TYPE q8_0)
vkllm_shader(attention_decode_store_f16  attention_decode.comp KV_F16 STORE TYPE f16)
vkllm_shader(attention_decode_store_f32  attention_decode.comp KV_F32 STORE TYPE f32)
vkllm_shader(attention_decode_store_q8_0 attention_decode.comp KV_Q8_0 STORE TYPE q8_0)
vkllm_shader(attention_merge       attention_merge.comp)

# The identifiers, in the embedded table's order (shader_embed writes the variants in argument order):
# written at configure time, and only when the list changes, so that editing a shader recompiles no
# C++ but the embedded table.
list(JOIN VKLLM_SHADER_IDS ",\n    " ids)
list(JOIN VKLLM_SHADER_FAMILIES ",\n    " families)
list(JOIN VKLLM_SHADER_IDS "\",\n    \"" names)
list(JOIN VKLLM_SHADER_FAMILIES "\",\n    \"" family_names)
string(REPLACE "\\n" "\n" variants "${VKLLM_SHADER_VARIANTS}")
string(REPLACE ";" "" variants "${variants}")
file(CONFIGURE OUTPUT ${VKLLM_SHADER_BIN}/include/shaders/shader_ids.h @ONLY CONTENT
"// Generated from shaders/shaders.cmake at configure time. Do not edit, do not commit.
// Included through runtime/shader_id.h, which says what these are.
#pragma once

#include \"runtime/quant/tensor_types.h\"

#include <cstdint>
#include <string_view>

namespace vkllm {

enum class ShaderId : uint16_t {
    ${ids}
};
inline constexpr std::string_view kShaderNames[] = {
    \"${names}\"};

enum class ShaderFamily : uint8_t {
    ${families}
};
inline constexpr std::string_view kShaderFamilyNames[] = {
    \"${family_names}\"};

struct ShaderVariant {
    ShaderFamily family;
    TensorType type;
    ShaderId id;
};
inline constexpr ShaderVariant kShaderVariants[] = {
${variants}};

}  // namespace vkllm
")
set(VKLLM_SHADERS_CPP ${VKLLM_SHADER_BIN}/vkllm_shaders.cpp)
add_custom_command(
  OUTPUT ${VKLLM_SHADERS_CPP}
  COMMAND shader_embed ${VKLLM_SHADERS_CPP} ${VKLLM_SHADER_ARGS}
  DEPENDS shader_embed ${VKLLM_SHADER_SPV}
  COMMENT "Embedding SPIR-V table"
  VERBATIM)
# Every variant compiled and validated, nothing else built (scripts/glslang15.sh check).
add_custom_target(vkllm_shaders DEPENDS ${VKLLM_SHADER_SPV})
