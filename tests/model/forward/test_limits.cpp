// Failures in the middle of real work surface as exceptions from the library, leave nothing
// allocated behind and never abort: an allocation the device refuses while the weights upload,
// and logits that are not finite (NaN weights) instead of a garbage token (generation's handling of
// them: tests/serving/engine/test_generate.cpp).
#include "support/test_context.h"

#include "model/gguf/gguf_writer.h"
#include "model/testgen/random_model.h"
#include "model/forward/model_gpu.h"
#include "runtime/vk_check.h"

#include <cmath>
#include <cstring>

using namespace vkllm;

namespace {

ModelShape small_shape() {
    ModelShape s;
    s.dim = 32;
    s.n_layers = 2;
    s.n_heads = 4;
    s.n_kv_heads = 4;
    s.ffn_dim = 1024;  // the FFN matrices (128 KiB each in f32) are the tensors a 64 KiB cap refuses
    s.n_vocab = 300;   // token_embd: 37.5 KiB, uploaded before them
    s.n_ctx = 64;
    return s;
}

void fill_nan(std::span<uint8_t> dst) {
    const float nan = std::nanf("");
    for (size_t i = 0; i + 4 <= dst.size(); i += 4) std::memcpy(dst.data() + i, &nan, 4);
}

}  // namespace

TEST_CASE("limits: an allocation refused in the middle of loading propagates and releases everything") {
    test::ValidationGuard guard;
    Context& ctx = test::context_for("max-alloc=64k");
    GgufFile file = GgufFile::from_memory(make_random_model(small_shape()).write_memory(), "small.gguf");
    ModelConfig cfg = ModelConfig::from_gguf(file);
    {
        // The staging buffer belongs to the context and lives as long as it (allocated by its first
        // copy through staging: a discrete GPU's device memory is not mapped), not to the model.
        Buffer warm = ctx.create_buffer(16, MemoryUsage::Device, "warm-up");
        const uint32_t zeros[4] = {};
        ctx.upload(warm, zeros, sizeof zeros);
    }
    const uint64_t used_before = ctx.allocator().stats().used_bytes;
    uint64_t progress_calls = 0;
    ModelOptions opts;
    opts.n_ctx = 32;
    CHECK_THROWS_WITH_AS(ModelGpu(ctx, file, cfg, opts, [&](uint64_t, uint64_t) { ++progress_calls; }),
                         doctest::Contains("per allocation"), DeviceLimitError);
    CHECK(progress_calls > 0);  // it failed part-way through the upload, not before it
    CHECK(ctx.allocator().stats().used_bytes == used_before);
    // The context is still good for work that fits.
    Buffer b = ctx.create_buffer(4096, MemoryUsage::Device, "after");
    std::vector<uint8_t> in(4096, 7), out(4096, 0);
    ctx.upload(b, in.data(), in.size());
    ctx.download(b, out.data(), out.size());
    CHECK(in == out);
}

TEST_CASE("limits: NaN weights give NonFiniteError from argmax, not a token") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    ModelShape shape = small_shape();
    shape.ffn_dim = 64;
    GgufWriter w = make_random_model(shape);
    w.remove_tensor("blk.1.ffn_down.weight");
    w.add_tensor("blk.1.ffn_down.weight", TensorType::F32, {shape.ffn_dim, shape.dim}, fill_nan);
    GgufFile file = GgufFile::from_memory(w.write_memory(), "nan.gguf");
    ModelConfig cfg = ModelConfig::from_gguf(file);
    ModelOptions opts;
    opts.n_ctx = 32;
    ModelGpu gpu(ctx, file, cfg, opts);
    const std::vector<int32_t> prompt = {1, 40, 41, 42};

    gpu.eval(prompt);
    CHECK_THROWS_WITH_AS(gpu.argmax(), doctest::Contains("non-finite logits"), NonFiniteError);

    CHECK(gpu.argmax_rows(1) == std::vector<int32_t>{-1});  // the batch form marks the row instead

    // The same shapes with finite weights give a token: the check does not misfire.
    GgufFile good = GgufFile::from_memory(make_random_model(shape).write_memory(), "good.gguf");
    ModelGpu ok(ctx, good, ModelConfig::from_gguf(good), opts);
    ok.eval(prompt);
    CHECK(ok.argmax() >= 0);
    CHECK(ok.argmax_rows(1) == std::vector<int32_t>{ok.argmax()});
}
