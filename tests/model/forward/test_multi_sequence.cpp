// Several sequences in one ModelGpu (the server's slots): each sequence's logits after a batched
// decode step are bit-identical to what the same sequence gives alone (batch invariance), whatever
// the batch's size, order and company; truncation (prefix reuse) continues a sequence as if the
// kept prefix had been its whole history; sliding-window rings refuse a truncation they cannot serve;
// drafted tokens verified in one step get plain decoding's logits; eval_at evaluates tokens again
// inside the cache.
#include "support/test_context.h"

#include "model/forward/model_gpu.h"
#include "model/testgen/model_shape.h"
#include "runtime/quant/tensor_types.h"
#include "support/model_test_util.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <numeric>

using namespace vkllm;

namespace {

ModelShape batch_shape(const std::string& arch, TensorType type) {
    ModelShape s;
    s.arch = arch;
    s.dim = 256;
    s.ffn_dim = 256;
    s.n_heads = 4;
    s.n_kv_heads = 2;
    s.n_layers = arch == "gemma3" ? 6 : 2;
    s.n_vocab = 300;
    s.n_ctx = 256;
    s.weight_type = type;
    if (arch == "gemma3") s.window = 8;
    if (arch == "qwen2moe") {  // 8 experts of 256, top-2, beside a gated shared expert
        s.n_expert = 8;
        s.n_expert_used = 2;
    }
    if (arch == "gpt-oss") {  // sinks, a window of 8 on layer 0, 8 experts of 256 with biases, top-4
        s.window = 8;
        s.n_expert = 8;
        s.n_expert_used = 4;
    }
    if (arch == "deepseek2") {  // latent attention (one KV head of 96 + 32), a dense layer, 8 experts of 256 in groups
        s.n_layers = 3;
        s.head_dim = 96;
        s.rope_dim = 32;
        s.v_head_dim = 64;
        s.kv_lora = 96;
        s.q_lora = 64;
        s.n_dense_lead = 1;
        s.n_expert = 8;
        s.n_expert_used = 2;
        s.expert_groups = 4;
        s.groups_used = 2;
        s.sigmoid_gating = true;
    }
    s.name = "multi-seq-" + arch;
    return s;
}

// The batch shape of `arch` in `type`, written once per pair.
test::LoadedModel open_batch_model(const std::string& arch, TensorType type) {
    return test::open_model(
        test::write_model(fmt::format("multi-seq-{}-{}", arch, type_traits(type).name), batch_shape(arch, type)));
}

// The architectures the batch tests sweep, each in F16 and a quantized type (deepseek2's 64-wide
// k_b rows take no 256-element K-quant: Q8_0 there).
struct BatchCase {
    const char* arch;
    TensorType type;
};
std::vector<BatchCase> batch_cases() {
    std::vector<BatchCase> out;
    for (const char* arch : {"llama", "gemma3", "qwen2moe", "gpt-oss", "deepseek2"})
        for (TensorType type :
             {TensorType::F16, std::string_view(arch) == "deepseek2" ? TensorType::Q8_0 : TensorType::Q4_K})
            out.push_back({arch, type});
    return out;
}

std::vector<int32_t> tokens(uint32_t n, uint32_t seed, uint32_t n_vocab) {
    std::vector<int32_t> t(n);
    for (uint32_t i = 0; i < n; ++i) t[i] = int32_t(1 + (i * 37 + seed * 101 + 11) % (n_vocab - 1));
    return t;
}

std::vector<float> row(const ModelGpu& m, uint32_t rows, uint32_t r) {
    std::vector<float> all(size_t(rows) * m.config().n_vocab);
    m.read_logits(rows, all.data());
    return std::vector<float>(all.begin() + long(r) * m.config().n_vocab,
                              all.begin() + long(r + 1) * m.config().n_vocab);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

ModelOptions seq_options(uint32_t n_ctx, uint32_t ubatch, uint32_t n_seq) {
    ModelOptions o;
    o.n_ctx = n_ctx;
    o.ubatch = ubatch;
    o.n_seq = n_seq;
    return o;
}

// Sequence k alone: its prompt, then `steps` greedy tokens; the logits after each step.
std::vector<std::vector<float>> alone(Context& ctx, const test::LoadedModel& m, const std::vector<int32_t>& prompt,
                                      uint32_t steps) {
    ModelGpu g(ctx, m.file, m.cfg, seq_options(128, 8, 1));
    g.eval(prompt);
    std::vector<std::vector<float>> out{row(g, 1, 0)};
    for (uint32_t i = 0; i < steps; ++i) {
        const int32_t next = g.argmax();
        g.eval(std::span<const int32_t>(&next, 1));
        out.push_back(row(g, 1, 0));
    }
    return out;
}

}  // namespace

TEST_CASE("multi-sequence decode: every sequence's logits are bit-identical to the sequence alone") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    for (const auto& [arch, type] : batch_cases()) {
        CAPTURE(arch);
        CAPTURE(type_traits(type).name);
        const test::LoadedModel m = open_batch_model(arch, type);
        // 10 sequences: decode batches of up to 10 rows run as matvec groups of 8 + 2.
        const uint32_t n_seq = 10, steps = 5;
        std::vector<std::vector<int32_t>> prompts;
        std::vector<std::vector<std::vector<float>>> ref;
        for (uint32_t k = 0; k < n_seq; ++k) {
            prompts.push_back(tokens(5 + 3 * k, k, m.cfg.n_vocab));  // 5..32 tokens: 1..4 chunks of 8
            if (k < 3 || k == n_seq - 1)
                ref.push_back(alone(ctx, m, prompts[k], steps));
            else
                ref.push_back({});
        }
        ModelGpu g(ctx, m.file, m.cfg, seq_options(128, 8, n_seq));
        CHECK(g.memory_plan().kv_cache > 0);
        std::vector<int32_t> next(n_seq);
        for (uint32_t k = 0; k < n_seq; ++k) {
            g.eval(k, prompts[k]);
            std::vector<float> l = row(g, 1, 0);
            if (!ref[k].empty()) CHECK(same_bits(l, ref[k][0]));
            next[k] = g.argmax_rows(1)[0];
        }
        // Step i decodes a different company each time: all sequences in reverse order, then
        // subsets, then sequence 1 alone.
        for (uint32_t i = 0; i < steps; ++i) {
            std::vector<SeqToken> batch;
            for (uint32_t k = n_seq; k-- > 0;)
                if (i == 0 || i == 3 || (i == 1 && k % 2 == 1) || (i == 2 && k < 4) || (i == 4 && k == 1) || k == 1)
                    batch.push_back({k, next[k]});
            // Sequences left out of a step catch up alone, so every sequence makes `steps` steps.
            g.decode(batch);
            const uint32_t rows = uint32_t(batch.size());
            const std::vector<int32_t> am = g.argmax_rows(rows);
            for (uint32_t r = 0; r < rows; ++r) {
                const uint32_t k = batch[r].seq;
                CAPTURE(i);
                CAPTURE(k);
                CAPTURE(rows);
                if (!ref[k].empty()) CHECK(same_bits(row(g, rows, r), ref[k][i + 1]));
                next[k] = am[r];
            }
            for (uint32_t k = 0; k < n_seq; ++k) {
                if (std::any_of(batch.begin(), batch.end(), [&](const SeqToken& t) { return t.seq == k; })) continue;
                const SeqToken one{k, next[k]};
                g.decode(std::span<const SeqToken>(&one, 1));
                if (!ref[k].empty()) CHECK(same_bits(row(g, 1, 0), ref[k][i + 1]));
                next[k] = g.argmax_rows(1)[0];
            }
        }
        for (uint32_t k = 0; k < n_seq; ++k) CHECK(g.n_past(k) == prompts[k].size() + steps);
    }
}

TEST_CASE("multi-sequence: truncation continues a sequence as if the kept prefix were its whole history") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    const test::LoadedModel m =
        test::open_model(test::write_model("multi-seq-trunc-llama", batch_shape("llama", TensorType::F16)));
    ModelGpu g(ctx, m.file, m.cfg, seq_options(128, 8, 2));
    const std::vector<int32_t> first = tokens(40, 1, m.cfg.n_vocab);
    std::vector<int32_t> second(first.begin(), first.begin() + 21);
    for (int32_t t : tokens(9, 2, m.cfg.n_vocab)) second.push_back(t);
    // Sequence 0 reads `first`, keeps its 21 shared tokens and reads the rest of `second`;
    // sequence 1 reads `second` from scratch.
    g.eval(0, first);
    REQUIRE(g.truncate(0, 21));
    CHECK(g.n_past(0) == 21);
    g.eval(0, std::span<const int32_t>(second).subspan(21));
    const std::vector<float> reused = row(g, 1, 0);
    g.eval(1, second);
    const std::vector<float> fresh = row(g, 1, 0);
    // Chunk boundaries differ (21 + 9 against 8 + 8 + 8 + 6), so rounding may too: not bit-equal.
    test::validate_result("logits after truncation", reused, fresh, {1e-10, 1e-4, 1e-3});
    CHECK_THROWS_AS(g.truncate(0, 31), std::invalid_argument);
    CHECK_THROWS_AS(g.eval(2, second), std::out_of_range);
    const SeqToken twice[] = {{0, 1}, {0, 2}};
    CHECK_THROWS_AS(g.decode(twice), std::invalid_argument);
}

TEST_CASE("multi-sequence: sequences sharing a prefix's KV blocks continue bit for bit as if each had read it") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    // A q8_0 cache too: its blocks are copied and shared as they are stored.
    for (auto [arch, kv] : {std::pair{"llama", ops::KvType::F16}, std::pair{"llama", ops::KvType::Q8_0},
                            std::pair{"deepseek2", ops::KvType::F16}}) {
        CAPTURE(arch);
        CAPTURE(ops::kv_type_name(kv));
        const bool ds = std::string_view(arch) == "deepseek2";
        const test::LoadedModel m = test::open_model(test::write_model(
            fmt::format("multi-seq-share-{}", arch), batch_shape(arch, ds ? TensorType::Q8_0 : TensorType::F16)));
        // Chunk boundaries at multiples of 6, so that the references chunk alike.
        ModelOptions o = seq_options(128, 6, 4);
        o.kv_type = kv;
        ModelGpu g(ctx, m.file, m.cfg, o);
        const uint32_t B = g.kv_usage().block_rows;
        REQUIRE(B == 8);
        CHECK(g.kv_usage().blocks_total == 4 * 16);
        const std::vector<int32_t> P = tokens(37, 5, m.cfg.n_vocab);  // 4 whole blocks and 5 rows of a fifth
        const std::vector<int32_t> A = tokens(7, 6, m.cfg.n_vocab), Bt = tokens(6, 7, m.cfg.n_vocab),
                                   C = tokens(5, 8, m.cfg.n_vocab);
        // Sequence 3 is the reference: each history read from scratch with the same chunks.
        auto reference = [&](std::initializer_list<std::span<const int32_t>> parts, int32_t decoded = -1) {
            g.reset(3);
            for (auto part : parts) g.eval(3, part);
            if (decoded >= 0) g.eval(3, std::span<const int32_t>(&decoded, 1));
            return row(g, 1, 0);
        };
        auto used = [&] { return g.kv_usage().blocks_used; };
        g.eval(0, P);
        CHECK(used() == 5);
        REQUIRE(g.share_prefix(1, 0, 37));
        REQUIRE(g.share_prefix(2, 0, 30));  // inside block 3 (rows 24-31), at a chunk boundary
        CHECK(g.n_past(1) == 37);
        CHECK(g.n_past(2) == 30);
        CHECK(used() == 5);  // three sequences, one copy of the prefix
        // Sequence 1 decodes into the shared fifth block: it gets a copy first.
        const SeqToken one{1, 42};
        g.decode(std::span<const SeqToken>(&one, 1));
        const std::vector<float> s1 = row(g, 1, 0);
        CHECK(used() == 6);
        // Sequence 2 reads the rest of P and B (rows 30-42): a copy of block 3, then two of its own.
        std::vector<int32_t> rest(P.begin() + 30, P.end());
        rest.insert(rest.end(), Bt.begin(), Bt.end());
        g.eval(2, rest);
        const std::vector<float> s2 = row(g, 1, 0);
        CHECK(used() == 9);
        // Sequence 0 goes on in its fifth block, held by it alone by now (no copy), then a new one.
        g.eval(0, C);
        const std::vector<float> s0 = row(g, 1, 0);
        CHECK(used() == 10);
        // And all three decode together over their blocks.
        const SeqToken batch[] = {{2, 9}, {0, 7}, {1, 11}};
        g.decode(batch);
        const std::vector<float> b2 = row(g, 3, 0), b0 = row(g, 3, 1), b1 = row(g, 3, 2);
        const int32_t t42 = 42;
        CHECK(same_bits(s1, reference({P}, 42)));
        CHECK(same_bits(b1, reference({P, std::span<const int32_t>(&t42, 1)}, 11)));
        const std::span<const int32_t> P30(P.data(), 30);
        CHECK(same_bits(s2, reference({P30, rest})));
        CHECK(same_bits(b2, reference({P30, rest}, 9)));
        CHECK(same_bits(s0, reference({P, C})));
        CHECK(same_bits(b0, reference({P, C}, 7)));
        for (uint32_t k = 0; k < 4; ++k) g.reset(k);
        CHECK(used() == 0);
        CHECK_THROWS_AS(g.share_prefix(1, 0, 1), std::invalid_argument);  // sequence 0 holds nothing now
        CHECK_FALSE(g.share_prefix(0, 0, 0));
    }
    // Sliding-window rings are per sequence: a model with them shares nothing.
    const test::LoadedModel m =
        test::open_model(test::write_model("multi-seq-share-gemma3", batch_shape("gemma3", TensorType::F16)));
    ModelGpu g(ctx, m.file, m.cfg, seq_options(64, 8, 2));
    g.eval(0, tokens(20, 3, m.cfg.n_vocab));
    CHECK_FALSE(g.share_prefix(1, 0, 20));
    CHECK(g.n_past(1) == 0);
}

TEST_CASE("multi-sequence: a sliding-window ring refuses a truncation whose window it has overwritten") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    const test::LoadedModel m =
        test::open_model(test::write_model("multi-seq-trunc-gemma3", batch_shape("gemma3", TensorType::F16)));
    ModelGpu g(ctx, m.file, m.cfg, seq_options(128, 8, 2));  // window 8: local rings of 8 + 8 - 1 = 15 rows
    g.eval(0, tokens(40, 3, m.cfg.n_vocab));
    CHECK_FALSE(g.truncate(0, 10));  // positions 3..9 were overwritten by 18..24 and later
    CHECK(g.n_past(0) == 40);
    CHECK(g.truncate(0, 35));  // positions 28..34 still in the ring (40 - 15 = 25 <= 28)
    g.eval(0, tokens(5, 4, m.cfg.n_vocab));
    const std::vector<float> reused = row(g, 1, 0);
    std::vector<int32_t> whole = tokens(40, 3, m.cfg.n_vocab);
    whole.resize(35);
    for (int32_t t : tokens(5, 4, m.cfg.n_vocab)) whole.push_back(t);
    g.eval(1, whole);
    test::validate_result("windowed logits after truncation", reused, row(g, 1, 0), {1e-10, 1e-4, 1e-3});
}

TEST_CASE("multi-sequence: drafted tokens verified in one step get plain decoding's logits, bit for bit") {
    // Speculative decoding: a sequence's next token and its drafts are rows of one decode step, and
    // a rejected draft is rolled back with truncate. Every row whose context was right (the drafts
    // before the first wrong one) must equal a lone token's logits exactly, and the sequence must
    // continue after the rollback as if the wrong drafts had never been evaluated.
    test::ValidationGuard guard;
    Context& ctx = test::context();
    for (const auto& [arch, type] : batch_cases()) {
        CAPTURE(arch);
        CAPTURE(type_traits(type).name);
        const test::LoadedModel m = open_batch_model(arch, type);
        const uint32_t n_seq = 3, steps = 14;
        // Each sequence alone: its greedy tokens g[k][1..steps] and the logits after each.
        std::vector<std::vector<int32_t>> prompts, greedy(n_seq);
        std::vector<std::vector<std::vector<float>>> ref;
        for (uint32_t k = 0; k < n_seq; ++k) {
            prompts.push_back(tokens(6 + 5 * k, k + 3, m.cfg.n_vocab));
            ref.push_back(alone(ctx, m, prompts[k], steps));
            for (const std::vector<float>& l : ref[k])
                greedy[k].push_back(int32_t(std::max_element(l.begin(), l.end()) - l.begin()));
        }
        ModelOptions o = seq_options(128, 8, n_seq);
        o.draft_rows = 4;
        ModelGpu g(ctx, m.file, m.cfg, o);
        for (uint32_t k = 0; k < n_seq; ++k) g.eval(k, prompts[k]);
        // done[k]: generated tokens whose K/V the sequence holds; greedy[k][done] is its next token.
        std::vector<uint32_t> done(n_seq, 0);
        // Per round and sequence: how many of its drafts are right, then one wrong draft (or none
        // where -1): every draft right, a wrong first draft, no draft, a long run, ...
        const int rounds[][n_seq][2] = {
            {{3, 1}, {0, 1}, {0, 0}}, {{4, 0}, {2, 1}, {1, 1}}, {{0, 1}, {4, 0}, {2, 0}}, {{1, 0}, {0, 0}, {3, 1}}};
        for (size_t r = 0; r < std::size(rounds); ++r) {
            std::vector<SeqToken> batch;
            std::vector<uint32_t> first_row(n_seq), right(n_seq);
            for (uint32_t k = 0; k < n_seq; ++k) {
                first_row[k] = uint32_t(batch.size());
                right[k] = uint32_t(rounds[r][k][0]);
                batch.push_back({k, greedy[k][done[k]]});
                for (uint32_t j = 1; j <= right[k]; ++j) batch.push_back({k, greedy[k][done[k] + j]});
                if (rounds[r][k][1])  // a token the model did not choose
                    batch.push_back({k, (greedy[k][done[k] + right[k] + 1] + 1) % int32_t(m.cfg.n_vocab)});
            }
            const uint32_t rows = uint32_t(batch.size());
            std::vector<uint32_t> before(n_seq);
            for (uint32_t k = 0; k < n_seq; ++k) before[k] = g.n_past(k);
            g.decode(batch);
            const std::vector<int32_t> am = g.argmax_rows(rows);
            for (uint32_t k = 0; k < n_seq; ++k) {
                CAPTURE(r);
                CAPTURE(k);
                for (uint32_t j = 0; j <= right[k]; ++j) {
                    CAPTURE(j);
                    CHECK(same_bits(row(g, rows, first_row[k] + j), ref[k][done[k] + j + 1]));
                    CHECK(am[first_row[k] + j] == greedy[k][done[k] + j + 1]);
                }
                // Keep the next token and the right drafts; the wrong one is rolled back.
                REQUIRE(g.truncate(k, before[k] + right[k] + 1));
                done[k] += right[k] + 1;
            }
        }
        // Then plain decoding continues each sequence exactly.
        for (uint32_t k = 0; k < n_seq; ++k) {
            CAPTURE(k);
            REQUIRE(done[k] < steps);
            const SeqToken one{k, greedy[k][done[k]]};
            g.decode(std::span<const SeqToken>(&one, 1));
            CHECK(same_bits(row(g, 1, 0), ref[k][done[k] + 1]));
        }
        // A sequence's rows must be adjacent and at most 1 + draft_rows.
        const SeqToken split[] = {{0, 1}, {1, 1}, {0, 2}};
        CHECK_THROWS_AS(g.decode(split), std::invalid_argument);
        const SeqToken too_many[] = {{0, 1}, {0, 1}, {0, 1}, {0, 1}, {0, 1}, {0, 1}};
        CHECK_THROWS_AS(g.decode(too_many), std::invalid_argument);
    }
    // Drafts a ubatch cannot roll back within a sliding-window ring are refused at load.
    const test::LoadedModel m = open_batch_model("gemma3", TensorType::F16);
    ModelOptions o = seq_options(128, 8, 1);
    o.draft_rows = 8;
    CHECK_THROWS_AS(ModelGpu(ctx, m.file, m.cfg, o), std::invalid_argument);
}

TEST_CASE("multi-sequence: eval_at evaluates tokens again at positions inside the cache (selective recompute)") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    for (const char* arch : {"llama", "qwen2moe", "deepseek2"}) {
        const bool ds = std::string_view(arch) == "deepseek2";
        const TensorType type = ds ? TensorType::Q8_0 : TensorType::F16;
        CAPTURE(arch);
        const test::LoadedModel m = open_batch_model(arch, type);
        const std::vector<int32_t> right = tokens(32, 5, m.cfg.n_vocab);
        // The reference: every position's logits of one prefill of the right tokens.
        ModelOptions ro = seq_options(128, 8, 1);
        ro.all_logits = true;
        ModelGpu ref(ctx, m.file, m.cfg, ro);
        std::vector<float> want;
        ref.eval_all_logits(right,
                            [&](uint32_t, std::span<const float> r) { want.insert(want.end(), r.begin(), r.end()); });
        auto want_at = [&](uint32_t p) {
            return std::vector<float>(want.begin() + long(p) * m.cfg.n_vocab,
                                      want.begin() + long(p + 1) * m.cfg.n_vocab);
        };
        // Chunks of other shapes than the prefill's round differently: close, not bit-equal.
        const test::Tolerance tol{1e-10, 1e-4, 1e-3};

        ModelGpu g(ctx, m.file, m.cfg, seq_options(128, 8, 2));
        // 1. Tokens evaluated again where the cache already holds them: the same logits, and the
        // sequence continues as before (positions 3, 7, 8 and 20: apart, and two side by side).
        g.eval(0, right);
        const std::vector<uint32_t> some{3, 7, 8, 20};
        std::vector<int32_t> some_tokens;
        for (uint32_t p : some) some_tokens.push_back(right[p]);
        g.eval_at(0, some_tokens, some);
        CHECK(g.n_past(0) == 32);
        test::validate_result("eval_at, position 20", row(g, 1, 0), want_at(20), tol);

        // 2. A cache holding other tokens' K/V from position 10 on (a document cached apart): the
        // logits after it differ; evaluating positions 10.. again gives the prefill's.
        std::vector<int32_t> wrong = right;
        for (uint32_t p = 10; p < 14; ++p) wrong[p] = (wrong[p] + 7) % int32_t(m.cfg.n_vocab);
        g.eval(1, wrong);
        const std::vector<float> stale = row(g, 1, 0);
        std::vector<uint32_t> tail;
        std::vector<int32_t> tail_tokens;
        for (uint32_t p = 10; p < 32; ++p) {
            tail.push_back(p);
            tail_tokens.push_back(right[p]);
        }
        g.eval_at(1, tail_tokens, tail);  // 22 tokens: chunks of 8, 8 and 6
        test::validate_result("eval_at from position 10", row(g, 1, 0), want_at(31), tol);
        double diff = 0;
        const std::vector<float> w31 = want_at(31);
        for (size_t i = 0; i < stale.size(); ++i) diff = std::max(diff, double(std::abs(stale[i] - w31[i])));
        CHECK(diff > 1e-2);  // the stale cache's logits were not the prefill's
        // Then the sequence goes on as the prefill's would.
        ref.reset();
        std::vector<int32_t> longer = right;
        longer.push_back(17);
        std::vector<float> want_next;
        ref.eval_all_logits(longer, [&](uint32_t, std::span<const float> r) {
            want_next.assign(r.end() - long(m.cfg.n_vocab), r.end());
        });
        const int32_t next = 17;
        g.eval(1, std::span<const int32_t>(&next, 1));
        test::validate_result("the token after", row(g, 1, 0), want_next, tol);

        // 3. Copy on write: a sequence sharing the blocks evaluates again without touching the other's.
        REQUIRE(g.share_prefix(1, 0, 32));
        const std::vector<uint32_t> p5{5};
        const std::vector<int32_t> t5{(right[5] + 3) % int32_t(m.cfg.n_vocab)};
        g.eval_at(1, t5, p5);
        g.eval(0, std::span<const int32_t>(&next, 1));
        test::validate_result("the sharer's own cache is untouched", row(g, 1, 0), want_next, tol);

        // 4. Refusals.
        const std::vector<uint32_t> down{8, 3}, outside{40};
        const std::vector<int32_t> two{1, 2}, one{1};
        CHECK_THROWS_AS(g.eval_at(0, two, down), std::invalid_argument);
        CHECK_THROWS_AS(g.eval_at(0, one, outside), std::invalid_argument);
        CHECK_THROWS_AS(g.eval_at(0, two, p5), std::invalid_argument);
        CHECK_THROWS_AS(g.eval_at(0, one, {}), std::invalid_argument);  // not eval() in disguise
        CHECK(g.n_past(0) == 33);

        // 5. Positions inside and then past the end in one call (the recompute fused with the
        // question): the sequence grows by the latter, and its last logits are the next token's.
        const int32_t after = 29 % int32_t(m.cfg.n_vocab);
        const std::vector<uint32_t> grow{20, 33};
        const std::vector<int32_t> grow_tokens{right[20], after};
        g.eval_at(0, grow_tokens, grow);
        CHECK(g.n_past(0) == 34);
        longer.push_back(after);
        ref.reset();
        ref.eval_all_logits(longer, [&](uint32_t, std::span<const float> r) {
            want_next.assign(r.end() - long(m.cfg.n_vocab), r.end());
        });
        test::validate_result("eval_at growing the sequence", row(g, 1, 0), want_next, tol);
        const std::vector<uint32_t> hole{20, 35};
        CHECK_THROWS_AS(g.eval_at(0, grow_tokens, hole), std::invalid_argument);
        CHECK(g.n_past(0) == 34);

        // 6. eval_v: layer 1's V of tokens evaluated again, as a prefill's chunk computes it.
        std::vector<uint32_t> last8(8);
        std::iota(last8.begin(), last8.end(), 24u);
        if (ds) {  // latent attention keeps no per-token V
            CHECK_THROWS_AS(g.eval_v(0, std::span(right).subspan(24), last8, 1), std::invalid_argument);
            continue;
        }
        std::vector<float> probe_v;
        ref.reset();
        ref.eval(0, std::span(right).first(24));
        ref.eval(std::span(right).subspan(24), [&](uint32_t layer, const LayerTensors& t) {
            if (layer == 1) probe_v = t.at("v");
        });
        const std::vector<float> v = g.eval_v(0, std::span(right).subspan(24), last8, 1);
        test::validate_result("eval_v's layer 1 V", v, probe_v, tol);
        CHECK(g.n_past(0) == 34);
        CHECK_THROWS_AS(g.eval_v(0, one, std::vector<uint32_t>{34}, 1), std::invalid_argument);  // not inside
        CHECK_THROWS_AS(g.eval_v(0, one, std::vector<uint32_t>{3}, m.cfg.n_layers), std::invalid_argument);
    }
    // A model with sliding-window rings cannot: its ring no longer holds early positions.
    const test::LoadedModel gm = open_batch_model("gemma3", TensorType::F16);
    ModelGpu g(ctx, gm.file, gm.cfg, seq_options(128, 8, 1));
    g.eval(0, tokens(12, 1, gm.cfg.n_vocab));
    const std::vector<uint32_t> p2{2};
    const std::vector<int32_t> t2{3};
    CHECK_THROWS_WITH_AS(g.eval_at(0, t2, p2), doctest::Contains("sliding-window"), std::invalid_argument);
}

TEST_CASE(
    "multi-sequence: a document's K/V exported, imported after another prefix with K rotated, then evaluated again") {
    // CacheBlend's mechanics: a document's cache computed alone at position 0, put after an 11-token
    // prefix. Layer 0's K and V do not depend on what came before, so they must be the full
    // prefill's (K up to f16 rounding of the rotation); later layers differ until eval_at evaluates
    // the document again, which gives the full prefill's logits.
    test::ValidationGuard guard;
    Context& ctx = test::context();
    const test::LoadedModel m = open_batch_model("llama", TensorType::F16);
    ModelGpu g(ctx, m.file, m.cfg, seq_options(128, 8, 4));
    const std::vector<int32_t> prefix = tokens(11, 8, m.cfg.n_vocab), doc = tokens(20, 9, m.cfg.n_vocab);
    std::vector<int32_t> full = prefix;
    full.insert(full.end(), doc.begin(), doc.end());
    g.eval(0, full);  // the reference
    const std::vector<float> want = row(g, 1, 0);
    const KvRows ref = g.export_kv(0, 11, 20);
    g.eval(1, doc);  // the document alone
    const KvRows alone = g.export_kv(1, 0, 20);
    CHECK(alone.n == 20);
    CHECK(alone.k.size() == m.cfg.n_layers);
    CHECK(alone.bytes() == 2ull * m.cfg.n_layers * 20 * alone.row_bytes);

    g.eval(2, prefix);
    g.import_kv(2, alone);
    CHECK(g.n_past(2) == 31);
    const KvRows placed = g.export_kv(2, 11, 20);
    CHECK(placed.v[0] == ref.v[0]);  // layer 0's V: position-free, bit for bit
    auto f16s = [](const std::vector<uint8_t>& b) {
        std::vector<float> out(b.size() / 2);
        for (size_t i = 0; i < out.size(); ++i) out[i] = f16_to_f32(reinterpret_cast<const uint16_t*>(b.data())[i]);
        return out;
    };
    test::validate_result("layer 0's K rotated to positions 11..30", f16s(placed.k[0]), f16s(ref.k[0]),
                          {1e-6, 2e-3, 2e-3});
    CHECK(placed.k[0] != alone.k[0]);  // it did rotate
    // Without evaluating again, the last token's logits are not the prefill's; with it, they are.
    const std::vector<uint32_t> last{30};
    const std::vector<int32_t> last_token{doc.back()};
    g.eval_at(2, last_token, last);
    const std::vector<float> blended = row(g, 1, 0);
    double diff = 0;
    for (size_t i = 0; i < want.size(); ++i) diff = std::max(diff, double(std::abs(blended[i] - want[i])));
    CHECK(diff > 1e-3);
    std::vector<uint32_t> all;
    for (uint32_t p = 11; p < 31; ++p) all.push_back(p);
    g.eval_at(2, doc, all);
    test::validate_result("logits after the document evaluated again", row(g, 1, 0), want, {1e-6, 2e-3, 2e-3});

    // At the position it was computed at, an import is the rows themselves.
    g.import_kv(3, alone);
    const KvRows same = g.export_kv(3, 0, 20);
    CHECK(same.k == alone.k);
    CHECK(same.v == alone.v);
    // Refusals: rows of another model shape, past the context, sliding-window rings.
    KvRows cut = alone;
    cut.k.pop_back();
    CHECK_THROWS_AS(g.import_kv(3, cut), std::invalid_argument);
    CHECK_THROWS_AS(g.export_kv(3, 10, 30), std::invalid_argument);
    const test::LoadedModel gm = open_batch_model("gemma3", TensorType::F16);
    ModelGpu ring(ctx, gm.file, gm.cfg, seq_options(128, 8, 1));
    ring.eval(0, tokens(12, 1, gm.cfg.n_vocab));
    CHECK_THROWS_WITH_AS(ring.export_kv(0, 0, 4), doctest::Contains("sliding-window"), std::invalid_argument);
}
