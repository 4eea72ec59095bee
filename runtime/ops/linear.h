// The weight-streaming linear layers of the decoder: Y = X · W^T (+ bias) (+ R) with W in any GGUF weight
// type vkllm reads (runtime/quant/tensor_types.h), as matvec (decode, m <= 8: one pass over W
// shared by all rows of X) and as matmul (prefill: shared-memory tiles on GPUs, register tiles fed by
// subgroup broadcasts on CPU drivers).
//
// GPU functions record into a CommandStream and never submit. X, Y, R are f32 row-major, the bias
// f32 [n] (broadcast over the m rows; GPT-2's and Qwen2's biased projections), added in the epilogue.
// W: n rows of k elements of `wtype`, rows contiguous (k a multiple of the type's block: 32, or 256
// for the K-quants and IQ4_XS).
// Alignment: W's slice must start 4-byte aligned for F32 and 2-byte aligned otherwise, X / Y / R
// 4-byte aligned; none needs the storage-buffer offset alignment (each binding is an aligned
// window with the start inside it passed as a push constant); the bias 4-byte aligned. Kernels read whole words of W and
// whole vec4s of X: the buffers must extend to W's slice end rounded up to 4 bytes and X's to 16
// bytes past its 16-byte-aligned start (always true for vkllm Buffers, whose allocations are
// rounded up to 256 bytes).
// Sizes: a W, X or Y larger than caps().max_storage_buffer_range is split over several dispatches
// (row ranges of W; row ranges of X / Y for matmul), so any size that fits in memory works.
#pragma once

#include "runtime/ops/window.h"

#include "runtime/context.h"
#include "runtime/quant/tensor_types.h"
#include "runtime/shader_id.h"

#include <cstdint>
#include <vector>

namespace vkllm::ops {

// An element-wise op that matvec applies to X as it loads it, saving the op's own dispatch (decode
// steps of small models are bound by dispatch count; the op costs the matvec little, as each X
// element is loaded once per workgroup anyway).
struct MatvecInput {
    enum class Kind {
        Plain,  // X as given
        RmsNorm,  // rms_norm(X, norm_weight, eps) (ops::rms_norm's math, row by row)
        SwiGlu,  // X holds the gate rows [m][k]; input = silu(X) * up (ops::swiglu)
        GeGlu,  // as SwiGlu with tanh-GELU (ops::geglu)
        SwiGluOai,  // gpt-oss's clamped form: g * sigmoid(1.702 g) * (u + 1), g = min(X, 7), u = clamp(up, -7, 7)
    };
    // The kinds that read the up rows; act_id: the ACT specialization constant of each (0: none).
    static constexpr bool glu(Kind k) { return k == Kind::SwiGlu || k == Kind::GeGlu || k == Kind::SwiGluOai; }
    static constexpr uint32_t act_id(Kind k) {
        return k == Kind::SwiGlu ? 1 : k == Kind::GeGlu ? 2 : k == Kind::SwiGluOai ? 3 : 0;
    }
    Kind kind = Kind::Plain;
    BufferSlice norm_weight{};  // RmsNorm: f32 [k], 4-byte aligned
    float eps = 0;  // RmsNorm
    BufferSlice up{};  // SwiGlu / GeGlu / SwiGluOai: f32 [m][k], 4-byte aligned
    // The integer-dot kernels (MatvecPlan / MatmulPlan::Kernel::Dot) read X as Q8_1 blocks from q8 (m rows of
    // q8_1_row_bytes(k), 4-byte aligned), quantized there (after the op above) by the same call,
    // or by an earlier one with the same X and op where q8_ready says so (Q, K and V share one).
    BufferSlice q8{};
    bool q8_ready = false;
};

// Bytes of one row of k elements quantized to Q8_1 for the integer-dot matvec: k int8 quants, then
// four floats per block of 32 (d, s = d * sum(q), ss, 0; quantize_q8_1.comp).
inline uint64_t q8_1_row_bytes(uint32_t k) { return uint64_t(k) + uint64_t(k) / 32 * 16; }

// Whether the weight type has an integer-dot matvec (shaders/include/weights_dot.glsl; the variants
// shaders/shaders.cmake declares).
bool int_dot_type(TensorType wtype);

// xq (m rows of q8_1_row_bytes(k)) = Q8_1 blocks of the matvec input of x (f32 [m][k], k a multiple
// of 32; `input`'s fused op applied first, as matvec's), for the integer-dot matvec. RmsNorm leaves
// the row's 1 / rms out (X * G is quantized; each block's ss holds its raw sum of X^2, from which
// the matvec scales its sums), so that every block is quantized in parallel.
void quantize_q8_1(Context& ctx, CommandStream& s, const BufferSlice& x, const BufferSlice& xq, uint32_t m, uint32_t k,
                   const MatvecInput& input = {});
// The pipeline quantize_q8_1 records for `input`'s fused op (the warm-up's entry for it).
PipelineDesc quantize_q8_1_pipeline(MatvecInput::Kind input);

// Y[m, n] = X[m, k] · W[n, k]^T (+ bias[n] broadcast over rows, if bias) (+ R[m, n] if residual).
// residual may be the same slice as y (in-place residual add). m <= 8 uses matvec, else matmul.
// These three plan for the float kernels (they have no Q8_1 scratch for the integer-dot one; record a
// plan_linear / plan_matvec / plan_matmul plan to get it where the device takes it).
void linear(Context& ctx, CommandStream& s, TensorType wtype, const BufferSlice& w, const BufferSlice& x,
            const BufferSlice& y, uint32_t m, uint32_t n, uint32_t k, const BufferSlice* residual = nullptr,
            const BufferSlice* bias = nullptr);
void matmul(Context& ctx, CommandStream& s, TensorType wtype, const BufferSlice& w, const BufferSlice& x,
            const BufferSlice& y, uint32_t m, uint32_t n, uint32_t k, const BufferSlice* residual = nullptr,
            const BufferSlice* bias = nullptr);
void matvec(Context& ctx, CommandStream& s, TensorType wtype, const BufferSlice& w, const BufferSlice& x,
            const BufferSlice& y, uint32_t m /* 1..8 */, uint32_t n, uint32_t k, const BufferSlice* residual = nullptr,
            const BufferSlice* bias = nullptr, const MatvecInput& input = {});

// The pipelines linear() would use for this shape on this device (plan_linear(...).pipelines(),
// with word-aligned weights); `input` as matvec's (m <= 8 only).
std::vector<PipelineDesc> linear_pipelines(const Context& ctx, TensorType wtype, uint32_t m, uint32_t n, uint32_t k,
                                           MatvecInput::Kind input = MatvecInput::Kind::Plain);

// Bytes one linear() call must move at least: W once, X once, Y once (and R once if residual).
// For GB/s reports: bytes / time.
uint64_t linear_bytes_read(TensorType wtype, uint32_t m, uint32_t n, uint32_t k);

// How a matvec call runs, decided once by plan_matvec() from the device's capabilities and the
// shape (the first row of runtime/ops/kernel_table.h that fits); matvec() records it and
// LinearPlan::pipelines() (the start-up warm-up) lists its pipeline.
struct MatvecPlan {
    enum class Kernel {
        Rows,  // matvec_rows.comp: each lane owns `rows` whole rows (CPU drivers, rows <= 1 KiB)
        Strided,  // matvec.comp: a row's units strided over the workgroup, `rows` rows per workgroup
        Dot,  // quantize_q8_1.comp (with the input op), then matvec_dot.comp: integer dot
        // products, units strided over the workgroup as Strided (caps.int_dot_kernels)
    };
    Kernel kernel = Kernel::Strided;
    TensorType wtype = TensorType::F32;
    ShaderFamily family{};  // the variant's family (its member of type wtype is the shader)
    uint32_t wg = 0;  // invocations per workgroup
    uint32_t rows = 0;  // Rows: rows per lane; Strided: rows per workgroup
    uint32_t batch = 1;  // x vectors (m)
    bool w_aligned = false;  // every weight read 4-byte aligned (weights.glsl W_ALIGNED)
    bool subgroup = false;  // Strided: subgroup reduction (else a shared-memory tree)
    bool uniform_x = false;  // X (and G) bound as uniform buffers (CPU drivers)
    bool wide_loads = false;  // W read as 8-byte words (CPU drivers with shaderInt64, Q8_0 / Q4_0)
    MatvecInput::Kind input = MatvecInput::Kind::Plain;

    uint32_t rows_per_workgroup() const;
    PipelineDesc pipeline() const;  // the variant's name in the shader table and its constants
    PipelineDesc quantize_pipeline() const;  // Dot: the activation quantizer's
    std::vector<PipelineDesc> pipelines() const;  // every pipeline the plan records
};
// w_offset_aligned: W's slice starts on 4 bytes (as uploaded weights do); with rows and fields of
// the type on 4 bytes too, the variant reads weights without realignment.
// allow_dot: the caller can give the Q8_1 scratch (MatvecInput::q8) the integer-dot kernel needs.
MatvecPlan plan_matvec(const DeviceCaps& caps, TensorType wtype, uint32_t m, uint32_t n, uint32_t k,
                       bool w_offset_aligned = true, MatvecInput::Kind input = MatvecInput::Kind::Plain,
                       bool allow_dot = true);

// How a matmul call runs (plan_matmul), as MatvecPlan for matvec.
struct MatmulPlan {
    enum class Kernel {
        Broadcast,  // matmul_broadcast.comp: one subgroup per workgroup, weights in registers (CPU drivers)
        Tiled,  // matmul.comp: shared-memory tiles
        Dot,  // quantize_q8_1.comp, then matmul_dot.comp: shared-memory tiles of int8 levels and
        // integer dot products (caps.int_dot_kernels; X as Q8_1 in MatvecInput::q8)
        Coopmat,  // matmul_coopmat.comp: f16 tiles multiplied by the device's matrix units, f32
        // accumulators (caps.coopmat_kernels; tiles from plan_matmul_coopmat, matmul_coopmat.h)
    };
    Kernel kernel = Kernel::Tiled;
    TensorType wtype = TensorType::F32;
    ShaderFamily family{};  // the variant's family (the expert form's for moe_matmul)
    // Broadcast: subgroup lanes, weight rows per lane, tokens per lane; the subgroup size required
    // of the pipeline (0: the driver's).
    uint32_t lanes = 0, rows_per_lane = 0, tokens_per_lane = 0, required_subgroup_size = 0;
    bool w_aligned = false;
    // Tiled / Dot: a BM x BN tile of Y per workgroup, k in slices of BK columns (Dot: BK / 32 whole
    // Q8_1 blocks), TM x TN per invocation.
    uint32_t bm = 0, bn = 0, bk = 0, tm = 0, tn = 0;
    // Coopmat: sgm x sgn subgroups of sg invocations per workgroup, each a (bm / sgm) x (bn / sgn)
    // block of cm x cn accumulators; cm x cn x ck is the device's f16 shape.
    uint32_t sgm = 0, sgn = 0, cm = 0, cn = 0, ck = 0, sg = 0;

    uint32_t tile_m() const;  // rows of X (tokens) per workgroup
    uint32_t tile_n() const;  // rows of W per workgroup
    PipelineDesc pipeline() const;
    std::vector<PipelineDesc> pipelines() const;  // Dot: the activation quantizer's too
};
// Bytes of shared memory matmul_dot.comp declares for a bm x bn tile and k slices of bk columns (its
// EXPERT_GROUPS form adds 4 bm for the tile's slots).
uint64_t matmul_dot_shared_bytes(uint32_t bm, uint32_t bn, uint32_t bk);
// allow_dot: the caller can give the Q8_1 scratch (MatvecInput::q8, m rows) the integer-dot kernel needs.
MatmulPlan plan_matmul(const DeviceCaps& caps, TensorType wtype, uint32_t m, uint32_t n, uint32_t k,
                       bool w_offset_aligned = true, bool allow_dot = false);

// How one linear() call over m rows of X runs: one matvec (m <= 8), one matmul, or (batch
// invariant) matvec over groups of at most 8 rows whatever m, so that every row is computed as a
// lone token's would be (a decode batch of several sequences). Decided once by plan_linear(); the
// recording and the warm-up both read it.
struct LinearPlan {
    enum class Kernel { Matvec, Matmul };
    Kernel kernel = Kernel::Matvec;
    uint32_t m = 0, n = 0, k = 0;
    uint32_t group = 0;  // Matvec: rows per dispatch group (the last may be shorter: `tail`)
    MatvecPlan matvec, tail;  // tail: the plan of the last group when m % group != 0
    MatmulPlan matmul;
    std::vector<PipelineDesc> pipelines() const;
    bool int_dot() const {
        return kernel == Kernel::Matvec ? matvec.kernel == MatvecPlan::Kernel::Dot
                                        : matmul.kernel == MatmulPlan::Kernel::Dot;
    }
};
LinearPlan plan_linear(const DeviceCaps& caps, TensorType wtype, uint32_t m, uint32_t n, uint32_t k,
                       bool w_offset_aligned = true, MatvecInput::Kind input = MatvecInput::Kind::Plain,
                       bool batch_invariant = false, bool allow_dot = true);
// Records `plan` (from plan_linear for these shapes); input as matvec's, its `up` rows [m][k]; an
// integer-dot plan (int_dot()) reads X quantized in input.q8 (m rows of q8_1_row_bytes(k)).
void linear(Context& ctx, CommandStream& s, const LinearPlan& plan, const BufferSlice& w, const BufferSlice& x,
            const BufferSlice& y, const BufferSlice* residual = nullptr, const BufferSlice* bias = nullptr,
            const MatvecInput& input = {});
// matvec() and matmul() with a plan made beforehand (plan_matvec / plan_matmul for these shapes).
void matvec(Context& ctx, CommandStream& s, const MatvecPlan& plan, const BufferSlice& w, const BufferSlice& x,
            const BufferSlice& y, uint32_t n, uint32_t k, const BufferSlice* residual, const BufferSlice* bias,
            const MatvecInput& input);
void matmul(Context& ctx, CommandStream& s, const MatmulPlan& plan, const BufferSlice& w, const BufferSlice& x,
            const BufferSlice& y, uint32_t m, uint32_t n, uint32_t k, const BufferSlice* residual,
            const BufferSlice* bias, const MatvecInput& input = {});

}  // namespace vkllm::ops

namespace vkllm::ref {

// CPU references, same shapes as the GPU ops, W given as raw GGUF bytes (dequantized row by row
// with dequantize_row, so they see exactly the values the GPU decodes), double accumulation.
// bias [n] or nullptr; residual [m][n] or nullptr, may alias y.
void linear(TensorType wtype, const void* w, const float* x, float* y, uint32_t m, uint32_t n, uint32_t k,
            const float* residual = nullptr, const float* bias = nullptr);

// The cooperative-matrix matmul's math (matmul_coopmat.comp): X and W's decoded values rounded to
// IEEE half (round to nearest even, as f32_to_f16) before the products, then as ref::linear.
void linear_f16(TensorType wtype, const void* w, const float* x, float* y, uint32_t m, uint32_t n, uint32_t k,
                const float* residual = nullptr, const float* bias = nullptr);

// X as the integer-dot matvec sees it: each block of 32 quantized to Q8_1 from its definition
// (ggml's quantize_row_q8_1: d = max |x| / 127, q = round(x / d) half away from zero; a block
// holding NaN or Inf gets d = NaN) and turned back into d * q. ref::linear of W and these values is that kernel's exact math (its integer sums
// are exact). q and d, when given, receive the quants [k] and scales [k / 32].
void quantize_q8_1(const float* x, float* xq, uint32_t k, int8_t* q = nullptr, float* d = nullptr);

}  // namespace vkllm::ref
