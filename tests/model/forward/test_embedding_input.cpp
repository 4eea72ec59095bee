// Embeddings in place of tokens (an image's encoder output, ModelGpu::eval_embeddings): rows equal to
// the tokens' own looked-up embeddings give eval()'s logits; a bidirectional chunk (Gemma 3's image
// tokens) matches the host reference, windows included, and differs from a causal one; bad calls
// are refused.
#include "support/test_context.h"

#include "support/model_test_util.h"

#include "model/forward/model_cpu.h"
#include "model/forward/model_gpu.h"
#include "model/forward/model_weights.h"
#include "model/testgen/model_shape.h"
#include "runtime/ops/get_rows.h"

#include <cmath>

using namespace vkllm;

namespace {

ModelShape input_shape(const std::string& arch) {
    ModelShape s;
    s.arch = arch;
    s.dim = 128;
    s.ffn_dim = 256;
    s.n_heads = 4;
    s.n_kv_heads = 2;
    s.n_layers = arch == "gemma3" ? 6 : 2;  // Gemma 3: five sliding-window layers of six
    s.n_vocab = 300;
    s.n_ctx = 256;
    s.weight_type = TensorType::Q8_0;
    if (arch == "gemma3") s.window = 8;
    s.name = "embedding-input-" + arch;
    return s;
}

std::vector<int32_t> tokens(uint32_t n, uint32_t seed) {
    std::vector<int32_t> t(n);
    for (uint32_t i = 0; i < n; ++i) t[i] = int32_t(1 + (i * 37 + seed * 101 + 11) % 299);
    return t;
}

ModelOptions options(uint32_t ubatch) {
    ModelOptions o;
    o.n_ctx = 128;
    o.ubatch = ubatch;
    return o;
}

// The tokens' embedding rows as the model looks them up: token_embd's rows decoded, times sqrt(dim)
// in f32 for the architectures that scale them (the device's scale op).
std::vector<float> embedding_rows(const test::LoadedModel& m, std::span<const int32_t> ids) {
    const GgufTensorInfo& t = m.file.tensor("token_embd.weight");
    std::vector<float> rows(ids.size() * m.cfg.dim);
    ref::get_rows(t.type, m.file.tensor_data(t).data(), m.cfg.n_vocab, m.cfg.dim, ids.data(), uint32_t(ids.size()),
                  rows.data());
    if (m.cfg.arch->norm.embed_scale)
        for (float& e : rows) e *= std::sqrt(float(m.cfg.dim));
    return rows;
}

}  // namespace

TEST_CASE("embedding input: rows equal to the tokens' own embeddings give eval()'s logits, in chunks") {
    test::ValidationGuard guard;
    Context& ctx = test::float_path_context();
    for (const std::string arch : {"llama", "gemma3", "qwen2", "gpt2"}) {
        CAPTURE(arch);
        const test::LoadedModel m = test::open_model(test::write_model("embin-" + arch, input_shape(arch)));
        const std::vector<int32_t> prefix = tokens(11, 1), middle = tokens(21, 2), tail = tokens(3, 3);
        ModelGpu by_tokens(ctx, m.file, m.cfg, options(8));
        std::vector<int32_t> all = prefix;
        all.insert(all.end(), middle.begin(), middle.end());
        by_tokens.eval(all);
        const std::vector<float> want_mid = by_tokens.logits();
        by_tokens.eval(tail);
        const std::vector<float> want_end = by_tokens.logits();

        ModelGpu by_rows(ctx, m.file, m.cfg, options(8));
        by_rows.eval(prefix);
        const std::vector<float> rows = embedding_rows(m, middle);
        by_rows.eval_embeddings(0, rows, false, {});  // 21 rows: chunks of 8, 8 and 5
        CHECK(by_rows.n_past() == prefix.size() + middle.size());
        test::validate_result("logits after the rows", by_rows.logits(), want_mid, {1e-10, 1e-4, 1e-4});
        by_rows.eval(tail);
        test::validate_result("logits after the tokens that follow", by_rows.logits(), want_end, {1e-10, 1e-4, 1e-4});
    }
}

TEST_CASE(
    "embedding input: a bidirectional chunk matches the host reference (windows, chunks around it) and differs from a "
    "causal one") {
    test::ValidationGuard guard;
    Context& ctx = test::float_path_context();
    for (const std::string arch : {"gemma3", "llama"}) {
        CAPTURE(arch);
        const test::LoadedModel m = test::open_model(test::write_model("embin-bidir-" + arch, input_shape(arch)));
        const std::vector<int32_t> prefix = tokens(13, 4), tail = tokens(5, 5);
        // Device and host differ by f32 summation order and the f16 cache's roundings (~3e-8 NMSE);
        // a wrong mask is ~1e-2.
        // 12 image-like rows: past gemma3's window of 8, so each row's window starts at its own position.
        const std::vector<float> rows = embedding_rows(m, tokens(12, 6));
        ModelGpu gpu(ctx, m.file, m.cfg, options(16));
        ModelCpu cpu(m.file, m.cfg, gpu.n_ctx(), ops::KvType::F16, 16);
        gpu.eval(prefix);
        cpu.eval(prefix);
        gpu.eval_embeddings(0, rows, true, {});
        const std::vector<float> bidir = gpu.logits();
        test::validate_result("bidirectional rows", bidir, cpu.eval_embeddings(rows, true), {1e-6, 1e-2, 1e-2});
        gpu.eval(tail);
        test::validate_result("tokens after them", gpu.logits(), cpu.eval(tail), {1e-6, 1e-2, 1e-2});

        // The same rows causally: the last row saw the same keys, the earlier rows did not, so the
        // next tokens' logits differ.
        ModelGpu causal(ctx, m.file, m.cfg, options(16));
        causal.eval(prefix);
        causal.eval_embeddings(0, rows, false, {});
        causal.eval(tail);
        const std::vector<float> c = causal.logits();
        gpu.reset();
        gpu.eval(prefix);
        gpu.eval_embeddings(0, rows, true, {});
        gpu.eval(tail);
        const std::vector<float> b = gpu.logits();
        double diff = 0;
        for (size_t i = 0; i < b.size(); ++i) diff = std::max(diff, double(std::fabs(b[i] - c[i])));
        CHECK(diff > 1e-3);
    }
}

TEST_CASE("embedding input: bad calls are refused by name") {
    test::ValidationGuard guard;
    Context& ctx = test::float_path_context();
    const test::LoadedModel m = test::open_model(test::write_model("embin-errors", input_shape("llama")));
    ModelGpu gpu(ctx, m.file, m.cfg, options(8));
    const std::vector<float> partial(m.cfg.dim + 1, 0.5f);
    VKLLM_CHECK_THROWS_WITH_SUBSTR(gpu.eval_embeddings(0, partial, false, {}), std::invalid_argument,
                                   "whole rows of 128");
    VKLLM_CHECK_THROWS_WITH_SUBSTR(gpu.eval_embeddings(0, {}, false, {}), std::invalid_argument, "no rows");
    const std::vector<float> nine(9 * m.cfg.dim, 0.5f);
    VKLLM_CHECK_THROWS_WITH_SUBSTR(gpu.eval_embeddings(0, nine, true, {}), ContextFullError, "raise --ubatch");
    CHECK(gpu.n_past() == 0);
    const std::vector<float> too_many(129 * m.cfg.dim, 0.5f);
    VKLLM_CHECK_THROWS_WITH_SUBSTR(gpu.eval_embeddings(0, too_many, false, {}), ContextFullError, "do not fit");
    VKLLM_CHECK_THROWS_WITH_SUBSTR(gpu.eval_embeddings(3, nine, false, {}), std::out_of_range, "sequence");
}
