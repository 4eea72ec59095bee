// `vkllm tune`'s measurements: for one linear shape, the kernel table row the planner picks, a small
// set of candidate configurations of that row (tiles, rows per workgroup, workgroup sizes), each
// planned through the planner with the candidate as a tuned entry, checked against the row's own
// configuration and timed (median of a few runs); the fastest is kept where it beats the row's own
// by more than 3%. The file they go to: runtime/kernel_tuning.h; what is tuned: docs/tuning.md.
#pragma once

#include "runtime/ops/linear.h"

#include "runtime/context.h"
#include "runtime/kernel_tuning.h"
#include "runtime/quant/tensor_types.h"

#include <functional>
#include <string>
#include <vector>

namespace vkllm::ops {

// A dense projection as a model plans it: matvec for m <= 8, matmul (a prompt chunk) above.
struct TuneShape {
    TensorType wtype = TensorType::F32;
    uint32_t m = 1, n = 0, k = 0;
};

struct TuneOptions {
    int reps = 5;  // timed runs per configuration (the median counts), after one checked run
    double nmse_limit = 1e-6;  // a candidate's output against the row's own configuration's
    double min_gain = 0.03;  // a candidate must be this much faster than the row's own to be kept
};

struct TuneResult {
    TuneShape shape;
    std::string row;  // the kernel table row the planner picks
    TunedConfig base, best;  // the row's own configuration; the fastest that passed (base if none beat it)
    double base_ms = 0, best_ms = 0;
    bool improved = false;  // best went into the table
    int tried = 0;  // candidates that fit and ran
    std::vector<std::string> notes;  // candidates discarded (their output disagreed) and why
};

// The configurations tune_shape tries besides the plan's own, for the plan's bucket: the decode
// bucket (m = 1) tunes a matvec's workgroup size and rows, the others only its rows (the workgroup
// size is the decode one's whatever m: batch invariance, kernel_table.cpp); matmul tiles per bucket.
std::vector<TunedConfig> matvec_candidates(const DeviceCaps& caps, const MatvecPlan& plan, uint32_t m);
std::vector<TunedConfig> matmul_candidates(const DeviceCaps& caps, const MatmulPlan& plan);

// Measures `shape` on ctx with `table` applied (entries tuned earlier: a batch bucket keeps the
// decode bucket's workgroup size) and adds the winner, if any, to `table`.
TuneResult tune_shape(Context& ctx, const TuneShape& shape, KernelTuning& table, const TuneOptions& opts = {});

}  // namespace vkllm::ops
