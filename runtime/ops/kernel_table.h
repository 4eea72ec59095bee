// The linear kernels (dense matvec and matmul, their expert forms) as one table in priority order.
// Each row says which problem it serves, when it fits (the device's features, the shape, the
// tuning choice), how it configures the plan (tiles, rows, workgroup: the numbers behind each
// choice and why, in kernel_table.cpp) and so which shader variant and which recording it takes.
// The planners (plan_matvec, plan_matmul, plan_moe_matvec, plan_moe_matmul) walk it and take the
// first row that fits, or the row `--caps kernel=<name>` forces (DeviceCaps::forced_kernels) where
// it serves the shape. Adding a kernel is a row, its configure function and its plan's recording.
#pragma once

#include "runtime/ops/moe.h"

#include "runtime/caps.h"
#include "runtime/quant/tensor_types.h"

#include <cstdint>
#include <span>
#include <string_view>

namespace vkllm::ops {

// What a linear kernel computes: Y = X · W^T as matvec (m <= 8 rows, or batch-invariant groups of
// them) or matmul, over one weight matrix (dense) or each slot's expert (experts).
enum class LinearProblem : uint8_t { DenseMatvec, DenseMatmul, ExpertMatvec, ExpertMatmul };
std::string_view problem_name(LinearProblem p);

// What the planner knows of a call. m: rows of X (expert matvec: the rows of X a call reads; expert
// matmul: the slots an expert is expected to get). w_offset_aligned: W's slice starts on 4 bytes.
// allow_dot: the caller gives the Q8_1 scratch the integer-dot kernels read.
struct LinearShape {
    TensorType wtype = TensorType::F32;
    uint32_t m = 0, n = 0, k = 0;
    bool w_offset_aligned = true;
    MatvecInput::Kind input = MatvecInput::Kind::Plain;
    bool allow_dot = false;
};

struct KernelRow {
    std::string_view name;  // `--caps kernel=<name>`, bench-ops and the tests name the row
    LinearProblem problem;
    // The device features the kernel needs at all (an extension, subgroup operations): a forced row
    // whose device lacks them is an error rather than a silent fallback.
    bool (*runs_on)(const DeviceCaps& caps);
    // Whether the kernel can serve this shape here (its variant exists for the type, its tiles fit
    // the shared memory), forced or not.
    bool (*serves)(const DeviceCaps& caps, const LinearShape& shape);
    // The tuning choice: whether the planner takes the row unforced (CPU drivers, accelerated
    // integer dot products, row length).
    bool (*preferred)(const DeviceCaps& caps, const LinearShape& shape);
    // Fills the plan of the row's problem (one of these is set): the kernel (its recording), the
    // shader family and every constant.
    void (*matvec)(const DeviceCaps& caps, const LinearShape& shape, MatvecPlan& plan) = nullptr;
    void (*matmul)(const DeviceCaps& caps, const LinearShape& shape, MatmulPlan& plan) = nullptr;
    void (*moe_matvec)(const DeviceCaps& caps, const LinearShape& shape, MoeMatvecPlan& plan) = nullptr;
};

// Every row, in priority order within each problem.
std::span<const KernelRow> kernel_table();
// The row named `name`, or null.
const KernelRow* find_kernel_row(std::string_view name);

// The row the planner takes for this problem and shape: the forced one where it serves the shape,
// else the first that serves and is preferred (the last row of each problem always is).
// Throws std::invalid_argument for a forced name that is no row, or two forced rows of one problem,
// and DeviceLimitError for a forced row the device cannot run (check_forced_kernels says the same
// up front).
const KernelRow& pick_kernel(const DeviceCaps& caps, LinearProblem problem, const LinearShape& shape);
// The row's configuration of the plan for this shape (its configure function), then the numbers
// caps.tuning holds for the row and the shape's class (runtime/kernel_tuning.h) where they still fit
// the device and the kernel's tile rules, else the row's own. The planners call these and nothing
// else applies tuned numbers, so recording, warm-up and benchmarks see the same plan.
void configure(const DeviceCaps& caps, const KernelRow& row, const LinearShape& shape, MatvecPlan& plan);
void configure(const DeviceCaps& caps, const KernelRow& row, const LinearShape& shape, MatmulPlan& plan);
void configure(const DeviceCaps& caps, const KernelRow& row, const LinearShape& shape, MoeMatvecPlan& plan);

// Checks caps.forced_kernels as pick_kernel does, once (at start-up, before any planning).
void check_forced_kernels(const DeviceCaps& caps);

}  // namespace vkllm::ops
