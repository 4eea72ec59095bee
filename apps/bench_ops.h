// `vkllm bench-ops` internals: the LLaMA shape sets, the benchmark configuration, one result row,
// and the runner that checks each kernel against its C++ reference before timing it.
#pragma once

#include "runtime/context.h"
#include "runtime/ops/op_types.h"
#include "runtime/probes.h"
#include "runtime/quant/tensor_types.h"

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace vkllm::apps::bench_ops {

// The model dimensions the kernels are benchmarked at.
struct ModelShapes {
    std::string name;
    uint32_t dim, n_heads, n_kv_heads, head_dim, ffn, vocab;
    float rope_base;
    uint32_t default_prompt, default_ctx;  // used when --prompt / --ctx are not given
    uint32_t kv_dim() const { return n_kv_heads * head_dim; }
};

const std::vector<ModelShapes>& shape_sets();
const ModelShapes& find_shapes(std::string_view name);  // throws std::invalid_argument
// Every op name, in the order the benchmark runs (and prints) them.
const std::vector<std::string>& op_names();
// "q4_k" (any type of kAllTensorTypes) <-> TensorType; throws std::invalid_argument for other names.
TensorType parse_type(std::string_view name);
std::string type_name(TensorType t);

struct Config {
    ModelShapes shapes;
    std::vector<TensorType> types;  // weight types (matvec, matmul, get_rows)
    std::vector<ops::KvType> kv_types;  // KV cache types (kv_store, attention): f16/f32 of --types, else f16
    std::vector<std::string> ops;  // in op_names() order
    int reps = 5;
    uint32_t prompt = 512, ctx = 2048;
    double row_budget_s = 2.0;  // timed repetitions stop early once a row has used this much time
    // matvec / matmul: every row of the linear-kernel table the device runs and that serves the shape
    // (each forced in turn), instead of the one the planner picks.
    bool all_kernels = false;
};

enum class Status { Ok, Failed, Skipped };

struct Row {
    std::string op, shape, type;
    Status status = Status::Ok;
    std::string note;  // why a row failed or was skipped
    double nmse = 0, nmse_limit = 0;
    std::string checked = "all";  // which outputs the reference covered
    bool subset = false;  // the reference covered only part of the outputs
    int reps = 0;
    double best_ns = 0, mean_ns = 0;
    bool host_timer = false;  // no timestamps: host time around the submission
    bool timed_check = false;  // one run longer than the row budget: the checked run is the timing
    uint64_t bytes = 0;  // weights + activations read + outputs written
    double flops = 0;  // 0: not a compute op (no GFLOP/s shown)
    bool int_dot = false;  // the integer-dot kernel ran: its arithmetic peak is the int8 packed dot's

    double gbs() const { return best_ns > 0 ? double(bytes) / best_ns : 0; }
    double gflops() const { return best_ns > 0 ? flops / best_ns : 0; }
};

// Result of comparing one device run with the reference.
struct CheckResult {
    double nmse = 0;
    size_t non_finite = 0;
    std::string detail;  // set when the comparison failed for a reason other than the nmse
};

// sum (gpu - ref)^2 / sum ref^2 (absolute when the reference is all zeros), NaN/Inf counted.
CheckResult compare(const float* gpu, const float* ref, size_t n);

class Bench {
public:
    using Progress = std::function<void(const Row&, size_t index)>;
    Bench(Context& ctx, Config cfg, Progress progress)
        : ctx_(ctx), cfg_(std::move(cfg)), progress_(std::move(progress)) {}

    // Runs every selected op at every shape and type; a failing check marks its row, never throws.
    void run();
    const std::vector<Row>& rows() const { return rows_; }

private:
    void matvec();
    void matmul();
    void get_rows();
    void rms_norm();
    void rope();
    void kv_store();
    void attention_decode();
    void attention_prefill();
    void swiglu();
    void add();
    void argmax();
    void softmax();

    // The linear kernel at this shape, the planner's choice or (kernel) that row of the table forced.
    void linear_case(Row row, TensorType t, uint32_t m, uint32_t n, uint32_t k, bool as_matmul,
                     std::string_view kernel = {});
    // linear_case for the planner's choice, or (--kernels all) for every table row of the problem
    // that runs on the device and serves the shape.
    void linear_rows(const Row& row, TensorType t, uint32_t m, uint32_t n, uint32_t k, bool as_matmul);
    void attention_case(Row row, uint32_t n_tokens, uint32_t kv_len, ops::KvType kv_type);
    // Submits `s` once, checks the result with `check`, then (if it passed) times warm-up + reps
    // submissions; appends the row. `check` runs after the first submission only.
    void measure(Row row, CommandStream& s, double nmse_limit, const std::function<CheckResult()>& check);
    // Runs `body`; a DeviceLimitError becomes a skipped row, any other exception a failed one.
    void guarded(const Row& row, const std::function<void()>& body);
    void push(Row row);

    Context& ctx_;
    Config cfg_;
    Progress progress_;
    std::vector<Row> rows_;
};

}  // namespace vkllm::apps::bench_ops
