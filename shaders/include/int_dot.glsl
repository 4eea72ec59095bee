// The signed 4x8-bit packed dot product (SPV_KHR_integer_dot_product's OpSDot, 4450, with
// PackedVectorFormat4x8Bit), declared through GL_EXT_spirv_intrinsics: Debian 12's glslang 12 has no
// GL_EXT_integer_dot_product. dot_s8x4(a, b) = sum over bytes i of int8(a_i) * int8(b_i).
#extension GL_EXT_spirv_intrinsics : require

spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int dot_s8x4_op(uint a, uint b, spirv_literal int packed_format);
int dot_s8x4(uint a, uint b) { return dot_s8x4_op(a, b, 0); }
