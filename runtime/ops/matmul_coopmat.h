// The cooperative-matrix (tensor core) form of matmul: how matmul_coopmat.comp tiles a prompt
// chunk's Y = X · W^T on the device's matrix units, decided once from the caps and the shape.
#pragma once

#include "runtime/caps.h"
#include "runtime/ops/linear.h"

#include <optional>

namespace vkllm::ops {

// Bytes of shared memory matmul_coopmat.comp declares: two f16 slices of X and W (k slices of bk
// columns, rows padded by 8 halves), a cm x cn f32 staging tile per subgroup, and (experts) a slot
// per tile row.
uint64_t matmul_coopmat_shared_bytes(uint32_t bm, uint32_t bn, uint32_t bk, uint32_t subgroups, uint32_t cm,
                                     uint32_t cn, bool experts);

// The cooperative-matrix plan for this shape (its kernel table rows, kernel_table.cpp, take it where
// caps.coopmat_kernels or `--caps kernel=` says), or nothing where the device has no f16 shape or no
// tile whose subgroups and shared memory fit. `experts`: the
// EXPERT_GROUPS form (its tile slots take shared memory too). w_aligned: W read as aligned words
// (weights.glsl W_ALIGNED), as plan_matmul decided for the slice.
std::optional<MatmulPlan> plan_matmul_coopmat(const DeviceCaps& caps, TensorType wtype, uint32_t m, bool w_aligned,
                                              bool experts);

}  // namespace vkllm::ops
