// CacheBlend (model/forward/blend.h) on the real stories260K: documents cached apart, put after a
// prefix and in another order, with a share of their tokens evaluated again. Evaluating all of them
// again gives the full prefill's logits; evaluating 15% brings the question's next-token
// distributions closer to the full prefill's than importing alone does.
#include "support/test_context.h"

#include "model/forward/blend.h"
#include "model/tokenizer/tokenizer.h"
#include "runtime/quant/tensor_types.h"
#include "support/model_test_util.h"

#include <algorithm>
#include <cmath>

using namespace vkllm;

namespace {

// Mean over rows of KL(p || q), p and q the softmax of the rows of a and b.
double mean_kl(const std::vector<float>& a, const std::vector<float>& b, uint32_t n_vocab) {
    const size_t rows = a.size() / n_vocab;
    double sum = 0;
    for (size_t r = 0; r < rows; ++r) {
        const float* x = a.data() + r * n_vocab;
        const float* y = b.data() + r * n_vocab;
        double mx = -1e30, my = -1e30;
        for (uint32_t i = 0; i < n_vocab; ++i) mx = std::max(mx, double(x[i])), my = std::max(my, double(y[i]));
        double zx = 0, zy = 0;
        for (uint32_t i = 0; i < n_vocab; ++i) zx += std::exp(x[i] - mx), zy += std::exp(y[i] - my);
        double kl = 0;
        for (uint32_t i = 0; i < n_vocab; ++i) {
            const double lp = x[i] - mx - std::log(zx), lq = y[i] - my - std::log(zy);
            kl += std::exp(lp) * (lp - lq);
        }
        sum += kl;
    }
    return sum / double(rows);
}

}  // namespace

TEST_CASE("blend: documents cached apart, blended after a prefix; more recomputation, closer to the prefill") {
    VKLLM_REQUIRE_MODEL(path, "stories260K.gguf");
    test::ValidationGuard guard;
    Context& ctx = test::context();
    const test::LoadedModel m = test::open_model(path);
    const std::unique_ptr<Tokenizer> tok = make_tokenizer(m.file);
    const std::vector<std::string> texts = {
        " Lily had a red ball. She liked to throw it high in the sky and catch it with her hands.",
        " Tom was a little dog who lived in a big house. He liked to run in the garden every day.",
        " The sun was hot, so Ben went to the lake. He saw a fish jump out of the water and laugh.",
    };
    std::vector<std::vector<int32_t>> docs;
    for (const std::string& t : texts) docs.push_back(tok->encode(t, false));
    const std::vector<int32_t> prefix = tok->encode("Here are three stories.", true);
    const std::vector<int32_t> question = tok->encode(" Who had a red ball? Lily had a red ball and Tom had", false);
    // The documents in another order than they were cached in.
    const std::vector<size_t> order{2, 0, 1};
    std::vector<int32_t> full = prefix;
    for (size_t d : order) full.insert(full.end(), docs[d].begin(), docs[d].end());
    full.insert(full.end(), question.begin(), question.end());
    const uint32_t n_vocab = m.cfg.n_vocab;

    ModelOptions o;
    o.n_ctx = 256;
    o.ubatch = 16;
    o.n_seq = 2;
    o.all_logits = true;
    ModelGpu g(ctx, m.file, m.cfg, o);
    // The full prefill's logits over the question.
    std::vector<float> want;
    g.eval_all_logits(full, [&](uint32_t first, std::span<const float> rows) {
        const size_t q0 = full.size() - question.size();
        for (size_t i = 0; i < rows.size() / n_vocab; ++i)
            if (first + i >= q0) want.insert(want.end(), rows.begin() + long(i * n_vocab), rows.begin() + long((i + 1) * n_vocab));
    });
    // Each document cached alone, from position 0, on sequence 1.
    std::vector<KvRows> cached;
    for (const auto& d : docs) {
        g.reset(1);
        g.eval(1, d);
        cached.push_back(g.export_kv(1, 0, uint32_t(d.size())));
    }
    auto blended = [&](float ratio, bool import_only) {
        g.reset(0);
        g.eval(0, prefix);
        std::vector<BlendDoc> bd;
        for (size_t d : order) bd.push_back({docs[d], &cached[d]});
        if (import_only) {
            for (const BlendDoc& b : bd) g.import_kv(0, *b.kv);
        } else {
            const BlendResult r = blend_documents(g, 0, bd, ratio);
            CHECK(r.tokens == full.size() - prefix.size() - question.size());
            CHECK(std::is_sorted(r.recomputed.begin(), r.recomputed.end()));
        }
        std::vector<float> got;
        g.eval_all_logits(question, [&](uint32_t, std::span<const float> rows) { got.insert(got.end(), rows.begin(), rows.end()); });
        REQUIRE(got.size() == want.size());
        return got;
    };
    const double kl_import = mean_kl(want, blended(0, true), n_vocab);
    const double kl_0 = mean_kl(want, blended(0.0f, false), n_vocab);
    const std::vector<float> at_15 = blended(0.15f, false);
    const double kl_15 = mean_kl(want, at_15, n_vocab);
    const std::vector<float> all = blended(1.0f, false);
    const double kl_all = mean_kl(want, all, n_vocab);
    MESSAGE("mean KL over the question: import only " << kl_import << ", ratio 0 (layer 0 again) " << kl_0 << ", 15% again "
                                                      << kl_15 << ", all again " << kl_all);
    CHECK(kl_import > kl_15);
    CHECK(kl_0 >= kl_15);
    CHECK(kl_all < 1e-6);
    test::validate_result("every token evaluated again", all, want, {1e-8, 1e-3, 1e-2});
    // The selection as blend.h defines it, computed here: per document the ceil(15%) tokens whose
    // layer-1 V, evaluated again after the import, moved most from the cached one. blend_documents
    // must choose those; recomputing the tokens that moved least instead must help less.
    {
        const uint32_t width = m.cfg.kv_dim();
        g.reset(0);
        g.eval(0, prefix);
        std::vector<int32_t> doc_tokens;
        std::vector<uint32_t> at;
        std::vector<float> cached_v;
        for (size_t d : order) {
            g.import_kv(0, cached[d]);
            for (size_t i = 0; i < docs[d].size(); ++i) at.push_back(g.n_past(0) - uint32_t(docs[d].size() - i));
            doc_tokens.insert(doc_tokens.end(), docs[d].begin(), docs[d].end());
            REQUIRE(cached[d].type == ops::KvType::F16);
            const auto* h = reinterpret_cast<const uint16_t*>(cached[d].v.at(1).data());
            for (size_t i = 0; i < docs[d].size() * width; ++i) cached_v.push_back(f16_to_f32(h[i]));
        }
        const std::vector<float> new_v = g.eval_v(0, doc_tokens, at, 1);
        std::vector<uint32_t> top, bottom;
        size_t first = 0;
        for (size_t d : order) {
            const size_t n = docs[d].size(), k = size_t(std::ceil(0.15 * double(n) - 1e-9));
            std::vector<std::pair<double, size_t>> dev;  // (deviation, index in the document)
            for (size_t i = 0; i < n; ++i) {
                double diff = 0, norm = 0;
                for (uint32_t j = 0; j < width; ++j) {
                    const double o = cached_v[(first + i) * width + j], e = new_v[(first + i) * width + j];
                    diff += (e - o) * (e - o);
                    norm += o * o;
                }
                dev.emplace_back(diff / norm, i);
            }
            std::sort(dev.begin(), dev.end(), [](const auto& a, const auto& b) {
                return a.first > b.first || (a.first == b.first && a.second < b.second);
            });
            for (size_t i = 0; i < k; ++i) {
                top.push_back(at[first + dev[i].second]);
                bottom.push_back(at[first + dev[n - 1 - i].second]);
            }
            first += n;
        }
        std::sort(top.begin(), top.end());
        std::sort(bottom.begin(), bottom.end());
        g.reset(0);
        g.eval(0, prefix);
        std::vector<BlendDoc> bd;
        for (size_t d : order) bd.push_back({docs[d], &cached[d]});
        CHECK(blend_documents(g, 0, bd, 0.15f).recomputed == top);
        // The bottom share recomputed (after layer 0 again, as blend does) against the top share.
        g.reset(0);
        g.eval(0, prefix);
        for (size_t d : order) g.import_kv(0, cached[d]);
        (void)g.eval_v(0, doc_tokens, at, 1);
        std::vector<int32_t> bottom_tokens;
        for (uint32_t pos : bottom) bottom_tokens.push_back(full[pos]);
        g.eval_at(0, bottom_tokens, bottom);
        std::vector<float> got;
        g.eval_all_logits(question, [&](uint32_t, std::span<const float> rows) { got.insert(got.end(), rows.begin(), rows.end()); });
        const double kl_bottom = mean_kl(want, got, n_vocab);
        MESSAGE("mean KL with the 15% that moved least recomputed: " << kl_bottom);
        CHECK(kl_bottom > 2 * kl_15);
    }
    // The question fused with the recompute (one evaluation): its last token's logits as when it follows.
    {
        g.reset(0);
        g.eval(0, prefix);
        std::vector<BlendDoc> bd;
        for (size_t d : order) bd.push_back({docs[d], &cached[d]});
        const BlendResult r = blend_documents(g, 0, bd, 0.15f, question);
        CHECK(g.n_past(0) == full.size());
        CHECK(r.recomputed.size() < r.tokens);
        const std::vector<float> last(at_15.end() - long(n_vocab), at_15.end());
        test::validate_result("the question fused with the recompute", g.logits(), last, {1e-8, 1e-3, 1e-2});
    }
    // Refusals.
    std::vector<BlendDoc> bad{{std::span<const int32_t>(docs[0]).first(3), &cached[0]}};  // 3 tokens, more rows
    CHECK_THROWS_AS(blend_documents(g, 0, bad, 0.15f), std::invalid_argument);
    std::vector<BlendDoc> ok{{docs[0], &cached[0]}};
    CHECK_THROWS_AS(blend_documents(g, 0, ok, 1.5f), std::invalid_argument);
    // A document that fails to import after one that did: the sequence holds what it held before.
    KvRows other_type = cached[1];
    other_type.type = ops::KvType::F32;
    const uint32_t before = g.n_past(0);
    std::vector<BlendDoc> half{{docs[0], &cached[0]}, {docs[1], &other_type}};
    CHECK_THROWS_AS(blend_documents(g, 0, half, 0.15f), std::invalid_argument);
    CHECK(g.n_past(0) == before);
}
