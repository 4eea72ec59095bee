#include "apps/bench_speculation.h"

#include "apps/bench_stats.h"

#include "serving/engine/generate.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

namespace vkllm::apps {

namespace {

using clock_type = std::chrono::steady_clock;

// Median ms of one decode step of 1 + k rows of sequence 0 after a 64-token context, rolled back
// after each.
double step_ms(ModelGpu& g, uint32_t k, int reps) {
    const uint32_t vocab = g.config().n_vocab;
    std::vector<int32_t> ctx(64);
    for (uint32_t i = 0; i < ctx.size(); ++i) ctx[i] = int32_t(1 + (i * 7919) % (vocab - 1));
    g.reset();
    g.eval(ctx);
    std::vector<SeqToken> rows;
    for (uint32_t j = 0; j <= k; ++j) rows.push_back({0, int32_t(1 + (j * 104729) % (vocab - 1))});
    std::vector<double> ms;
    for (int r = -1; r < std::max(reps, 3) * 4; ++r) {  // r = -1: warm-up (recording, first compile)
        const auto t0 = clock_type::now();
        g.decode(rows);
        (void)g.argmax_rows(uint32_t(rows.size()));
        if (r >= 0) ms.push_back(std::chrono::duration<double, std::milli>(clock_type::now() - t0).count());
        g.truncate(0, uint32_t(ctx.size()));
    }
    return median(ms);
}

}  // namespace

nlohmann::json bench_speculation(LoadedModel& m, const SpeculationOptions& o, const DeviceOptions& dev,
                                 const std::string& prompt_text, uint32_t n_gen, int reps) {
    nlohmann::json j;
    const engine::SpeculationParams& sp = o.params;
    j["mode"] = sp.lookup ? "lookup" : "draft";
    if (!sp.draft_model.empty()) j["draft"] = sp.draft_model;
    if (sp.lookup) j["lookup_ngram"] = sp.lookup;
    j["draft_max"] = sp.draft_max;
    ModelGpu& g = *m.model;
    // --- the cost of verifying k drafts, against a lone token
    const double one = step_ms(g, 0, reps);
    nlohmann::json verify = nlohmann::json::array();
    for (uint32_t k = 1; k <= sp.draft_max; k *= 2) verify.push_back({{"drafts", k}, {"step_ms", step_ms(g, k, reps)}});
    if (sp.draft_max & (sp.draft_max - 1))
        verify.push_back({{"drafts", sp.draft_max}, {"step_ms", step_ms(g, sp.draft_max, reps)}});
    for (auto& v : verify) v["vs_decode"] = v["step_ms"].get<double>() / one;
    j["decode_step_ms"] = one;
    j["verify"] = verify;

    // --- generation without and with the drafter
    std::vector<int32_t> prompt = m.tokenizer->encode(prompt_text, true);
    if (prompt.empty()) prompt.push_back(m.tokenizer->bos_id() >= 0 ? m.tokenizer->bos_id() : 1);
    const engine::Speculation spec = make_speculation(o, m, dev, 1, true);
    std::vector<double> plain_tps, spec_tps;
    uint64_t drafted = 0, accepted = 0, steps = 0, tokens = 0;
    bool same = true;
    for (int r = -1; r < reps; ++r) {
        std::string texts[2];
        for (int with = 0; with < 2; ++with) {
            engine::GenerateParams gp;
            gp.n_predict = int32_t(n_gen);
            gp.sampler.temperature = 0;
            if (with) {
                gp.drafter = spec.drafter;
                gp.draft_max = sp.draft_max;
                gp.draft_min = sp.draft_min;
            }
            g.reset();
            const engine::GenerateStats st =
                engine::generate(g, *m.tokenizer, prompt, gp, [&](std::string_view p) { texts[with] += p; });
            if (r < 0) continue;
            (with ? spec_tps : plain_tps).push_back(st.generate_tps());
            if (with) {
                drafted += st.draft_tokens;
                accepted += st.accepted_tokens;
                steps += st.decode_steps;
                tokens += st.decode_steps + st.accepted_tokens;
            }
        }
        same = same && texts[0] == texts[1];
    }
    j["prompt_tokens"] = prompt.size();
    j["tg_tokens"] = n_gen;
    j["tg_tps_plain"] = median(plain_tps);
    j["tg_tps_speculative"] = median(spec_tps);
    j["speedup"] = j["tg_tps_plain"].get<double>() > 0 ? median(spec_tps) / median(plain_tps) : 0.0;
    j["drafted"] = drafted;
    j["accepted"] = accepted;
    j["acceptance"] = drafted ? double(accepted) / double(drafted) : 0.0;
    j["tokens_per_step"] = steps ? double(tokens) / double(steps) : 0.0;
    j["same_text"] = same;
    return j;
}

void print_speculation_markdown(const nlohmann::json& results) {
    for (const auto& r : results) {
        if (!r.contains("speculation")) continue;
        const auto& s = r["speculation"];
        const std::string how =
            s["mode"] == "lookup" ? fmt::format("prompt lookup (n-grams up to {})", s["lookup_ngram"].get<uint32_t>())
                                  : "draft " + std::filesystem::path(s["draft"].get<std::string>()).filename().string();
        fmt::print(
            "\nspeculative decoding, {} with {}, up to {} drafts: {:.1f} t/s plain, {:.1f} t/s speculative "
            "({:.2f}x); {} of {} drafts kept ({:.0f}%), {:.2f} tokens per step; same text: {}\n",
            std::filesystem::path(r["model"].get<std::string>()).filename().string(), how,
            s["draft_max"].get<uint32_t>(), s["tg_tps_plain"].get<double>(), s["tg_tps_speculative"].get<double>(),
            s["speedup"].get<double>(), s["accepted"].get<uint64_t>(), s["drafted"].get<uint64_t>(),
            100.0 * s["acceptance"].get<double>(), s["tokens_per_step"].get<double>(),
            s["same_text"].get<bool>() ? "yes" : "NO");
        fmt::print("verifying k drafts (one step of 1 + k rows) against decoding one token ({:.3f} ms):",
                   s["decode_step_ms"].get<double>());
        for (const auto& v : s["verify"])
            fmt::print(" k={} {:.3f} ms ({:.2f}x)", v["drafts"].get<uint32_t>(), v["step_ms"].get<double>(),
                       v["vs_decode"].get<double>());
        fmt::print("\n");
    }
}

}  // namespace vkllm::apps
