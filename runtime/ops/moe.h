// The mixture-of-experts pieces of a feed-forward layer (Mixtral, Qwen-MoE, DeepSeek, gpt-oss): the
// router (which experts each token runs, and their weights), the expert projections that read only
// the chosen experts' rows (llama.cpp's mul_mat_id), and the weighted residual add. Expert ids and
// weights never leave the device.
//
//   logits (n, E)      = router · x                      (an ordinary linear layer)
//   ids, w (n, K)      = moe_route(logits)               (top-K, gating, normalisation, scale)
//   gate|up (n*K, F)   = moe_matvec(W_gate|up[ids], x)   (slot t*K + j: token t's j-th expert)
//   out (n*K, dim)     = moe_matvec(W_down[ids], act(gate, up))
//   x (n, dim)        += moe_combine(out, w) (+ the shared expert)
//
// Every token is computed the same way whatever else the step holds (one workgroup per slot), so
// decode batches stay batch invariant. GPU functions record into a CommandStream and never submit.
#pragma once

#include "runtime/ops/linear.h"

#include "runtime/context.h"
#include "runtime/quant/tensor_types.h"

#include <cstdint>
#include <vector>

namespace vkllm::ops {

// How router logits become expert weights (llama.cpp's expert_gating_func and its gpt-oss form).
enum class MoeGating : uint32_t {
    Softmax = 0,  // softmax over all experts, then the chosen ones' probabilities
    Sigmoid = 1,  // sigmoid of each chosen logit (DeepSeek-V3)
    SoftmaxTopK = 2,  // softmax over the chosen logits only (gpt-oss)
};

struct MoeRouteParams {
    uint32_t n_expert = 0;  // E, 1..1024
    uint32_t k = 0;  // experts per token, 1..min(E, 64)
    MoeGating gating = MoeGating::Softmax;
    bool norm = false;  // divide the K weights by their sum (at least 2^-14)
    float scale = 1.0f;  // then multiply them by this
    // DeepSeek-V3's selection bias (exp_probs_b): experts are chosen by probability + bias[e], an f32
    // [E] vector passed to moe_route, while their weights stay the probabilities.
    bool bias = false;
    // Group-limited routing (DeepSeek-V2/V3): the E experts form n_group groups of E / n_group; each
    // group scores the sum of its two best selection values, and only the experts of the group_used
    // best groups may be chosen. n_group 1: no groups.
    uint32_t n_group = 1, group_used = 1;
};
// Throws std::invalid_argument for sizes outside the ranges above, a non-finite scale, groups that
// do not divide E, hold fewer than 2 experts, or leave fewer than K experts to choose from.
void check_route(const MoeRouteParams& p);

// ids (u32 [n][K]) and weights (f32 [n][K]) of the n tokens' logits (f32 [n][E]): experts ranked by
// logit, best first, ties to the lower index; with a bias or groups, by probability (+ bias), within
// the chosen groups (shaders/moe_route.comp has the math). bias: f32 [E], read when p.bias.
void moe_route(Context& ctx, CommandStream& s, const MoeRouteParams& p, const BufferSlice& logits,
               const BufferSlice& ids, const BufferSlice& weights, uint32_t n, const BufferSlice* bias = nullptr);

// moe_matvec and moe_matmul bind whole experts: throws DeviceLimitError, naming `what` (the
// tensor), when one expert of n rows of k elements of `wtype` does not fit one binding of this device.
// The loader checks every expert stack with it, so the error comes at load, not at the first pass.
void check_expert_binding(const DeviceCaps& caps, const std::string& what, TensorType wtype, uint32_t n, uint32_t k);

// How moe_matvec runs: matvec.comp's strided kernel (matvec_id_* variants) over one slot per
// workgroup row, decided once from the caps and the shape like plan_matvec (the expert-matvec rows of
// runtime/ops/kernel_table.h); or, where the device takes the integer-dot kernels, quantize_q8_1 (the
// GLU applied) and matvec_dot_id_*.
struct MoeMatvecPlan {
    bool dot = false;  // the integer-dot form: X's rows quantized to Q8_1 in MatvecInput::q8
    TensorType wtype = TensorType::F32;
    ShaderFamily family{};  // the variant's family
    uint32_t wg = 0, rows = 0;  // invocations and W rows per workgroup
    uint32_t x_rows = 0;  // rows of X (and of the GLU's up rows) a call reads: slots / x_div
    // Rows of X one dispatch reads: all of them, or on CPU drivers as many as one uniform binding
    // holds (a decode batch's down projection: slots x expert_ffn floats exceed 64 KiB).
    uint32_t x_rows_per_dispatch = 0;
    bool w_aligned = false, subgroup = false;
    bool uniform_x = false;  // X (and G) bound as uniform buffers (CPU drivers, as MatvecPlan)
    bool wide_loads = false;  // W read as 8-byte words (CPU drivers with shaderInt64, Q8_0 / Q4_0)
    MatvecInput::Kind input = MatvecInput::Kind::Plain;  // Plain, SwiGlu, GeGlu or SwiGluOai
    PipelineDesc pipeline() const;
    std::vector<PipelineDesc> pipelines() const;  // with the integer-dot form's activation quantizer
    bool int_dot() const { return dot; }
};
// x_rows: the rows of X the call will read (tokens for gate / up, slots for down). On CPU drivers X
// goes through uniform bindings whenever one row fits, in dispatches of as many rows as fit: that
// picks the load instructions and the dispatch count only, never the math (batch invariance holds).
// allow_dot: the caller can give the Q8_1 scratch (MatvecInput::q8, x_rows rows) the integer-dot form needs.
MoeMatvecPlan plan_moe_matvec(const DeviceCaps& caps, TensorType wtype, uint32_t n, uint32_t k, uint32_t x_rows,
                              MatvecInput::Kind input = MatvecInput::Kind::Plain, bool allow_dot = false);

// Y[s] (n floats, rows of `y`) = W[ids[s]] · input(X[s / x_div]) for s < slots (slots / x_div must be
// the plan's x_rows). W: n_expert experts
// back to back, each n rows of k elements of the plan's type (w must start 4-byte aligned when the
// plan says w_aligned). X f32 [slots / x_div][k]; input SwiGlu / GeGlu: X holds gate rows and
// input.up the up rows, indexed as X. ids u32 [slots], each < n_expert (moe_route's). A stack larger
// than maxStorageBufferRange is dispatched once per window of whole experts. bias (gpt-oss): f32
// [n_expert][n], row ids[s] added to Y[s]; null: none.
void moe_matvec(Context& ctx, CommandStream& s, const MoeMatvecPlan& plan, const BufferSlice& w, uint32_t n_expert,
                const BufferSlice& x, uint32_t x_div, const BufferSlice& ids, const BufferSlice& y, uint32_t slots,
                uint32_t n, uint32_t k, const MatvecInput& input = {}, const BufferSlice* bias = nullptr);

// Prefill (a chunk of tokens): the slots sorted per expert once per layer, then each expert's
// projection as matmul tiles over its slots, so that each expert's rows are read once per tile of
// its tokens instead of once per slot:
//   G                    = moe_group(ids)                   (offsets per expert, the sorted slots)
//   Y[s] (slots, n)      = moe_matmul(W[e], X[s / x_div]) for every slot s of every expert e
//
// groups (u32, moe_group_words(slots, n_expert) of them): offsets[n_expert + 1], then the slots of
// expert 0 in slot order, then expert 1's, ...: a counting sort of ids (u32 [slots], each <
// n_expert), stable, on the device.
uint64_t moe_group_words(uint32_t slots, uint32_t n_expert);
void moe_group(Context& ctx, CommandStream& s, const BufferSlice& ids, const BufferSlice& groups, uint32_t slots,
               uint32_t n_expert);

// How moe_matmul runs: the matmul kernel the expert-matmul rows of runtime/ops/kernel_table.h pick
// for this device (shared-memory tiles, subgroup broadcasts on CPU drivers, or integer dot products
// where the device takes them), in its matmul_id_* / matmul_broadcast_id_* / matmul_dot_id_* form.
struct MoeMatmulPlan {
    MatmulPlan mm;
    PipelineDesc pipeline() const;
    std::vector<PipelineDesc> pipelines() const;  // the integer-dot form's activation quantizer too
    bool int_dot() const { return mm.kernel == MatmulPlan::Kernel::Dot; }
};
// rows: the slots an expert is expected to get (a chunk's slots over its experts, at most its
// tokens), which sizes the tiles: a tile's rows beyond its expert's slots are computed for nothing,
// while moe_matmul's grid covers any expert's count whatever the tile. allow_dot: the caller can give
// the Q8_1 scratch of X's rows (moe_matmul's q8) that the integer-dot form needs.
MoeMatmulPlan plan_moe_matmul(const DeviceCaps& caps, TensorType wtype, uint32_t n, uint32_t k, uint32_t rows,
                              bool allow_dot = false);

// Y[s] (n floats) = W[e] · X[s / x_div] (+ bias[e]) for every slot s that groups (moe_group's, of
// `slots` slots over n_expert experts) gives expert e. W, X, Y and bias as moe_matvec takes them;
// every expert gets at most `tokens` slots. Stacks larger than one binding run per window of experts.
// An integer-dot plan reads X's rows quantized in q8.q8 (slots / x_div rows of q8_1_row_bytes(k)),
// quantized there by this call unless q8.q8_ready (gate and up share one); q8.kind must be Plain.
void moe_matmul(Context& ctx, CommandStream& s, const MoeMatmulPlan& plan, const BufferSlice& w, uint32_t n_expert,
                const BufferSlice& x, uint32_t x_div, const BufferSlice& groups, const BufferSlice& y, uint32_t tokens,
                uint32_t slots, uint32_t n, uint32_t k, const BufferSlice* bias = nullptr, const MatvecInput& q8 = {});

// X[t] += sum_j weights[t][j] * Y[t*K + j] (j in order), then + shared_gate ? sigmoid(G[t]) * S[t] :
// S[t] where a shared expert's output S (f32 [n][dim]) is given. X f32 [n][dim] in place.
void moe_combine(Context& ctx, CommandStream& s, const BufferSlice& y, const BufferSlice& weights, const BufferSlice& x,
                 uint32_t n, uint32_t k, uint32_t dim, const BufferSlice* shared = nullptr,
                 const BufferSlice* shared_gate = nullptr);

// The router's, the grouping's and the combine's pipelines on this device (the warm-up's list).
std::vector<PipelineDesc> moe_small_pipelines(const DeviceCaps& caps);

}  // namespace vkllm::ops

namespace vkllm::ref {

// The router from its definition (llama.cpp's build_moe_ffn), double arithmetic for the weights.
// bias: f32 [E] where p.bias (else unread).
void moe_route(const float* logits, uint32_t n, const ops::MoeRouteParams& p, uint32_t* ids, float* weights,
               const float* bias = nullptr);
// x[t] += sum_j w[t][j] * y[t*k + j] (+ gate(g[t]) * shared[t]); shared and shared_gate may be null.
void moe_combine(const float* y, const float* w, float* x, uint32_t n, uint32_t k, uint32_t dim,
                 const float* shared = nullptr, const float* shared_gate = nullptr);
// groups (moe_group_words entries): offsets per expert, then the slots of each expert in slot order.
void moe_group(const uint32_t* ids, uint32_t slots, uint32_t n_expert, uint32_t* groups);

}  // namespace vkllm::ref
