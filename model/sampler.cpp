#include "model/sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace vkllm {

void SamplerParams::validate() const {
    auto bad = [](const char* what, auto v, const char* range) {
        throw std::invalid_argument(fmt::format("{} = {} is out of range ({})", what, v, range));
    };
    if (!std::isfinite(temperature) || temperature < 0) bad("--temp", temperature, ">= 0");
    if (!std::isfinite(top_p) || top_p <= 0 || top_p > 1) bad("--top-p", top_p, "(0, 1]");
    if (!std::isfinite(min_p) || min_p < 0 || min_p >= 1) bad("--min-p", min_p, "[0, 1)");
    if (!std::isfinite(repeat_penalty) || repeat_penalty <= 0) bad("--repeat-penalty", repeat_penalty, "> 0");
    if (repeat_last_n < 0) bad("--repeat-last-n", repeat_last_n, ">= 0");
    if (!std::isfinite(presence_penalty) || std::fabs(presence_penalty) > 2)
        bad("presence_penalty", presence_penalty, "[-2, 2]");
    if (!std::isfinite(frequency_penalty) || std::fabs(frequency_penalty) > 2)
        bad("frequency_penalty", frequency_penalty, "[-2, 2]");
    for (const auto& [token, bias] : logit_bias) {
        if (token < 0) bad("logit_bias token", token, ">= 0");
        if (!std::isfinite(bias) || std::fabs(bias) > 100) bad("logit_bias", bias, "[-100, 100]");
    }
}

Sampler::Sampler(const SamplerParams& p) : p_(p), rng_(p.seed) { p_.validate(); }

void Sampler::accept(int32_t token, bool generated) {
    if (generated && (p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f)) ++generated_[token];
    if (p_.repeat_penalty == 1.0f || p_.repeat_last_n <= 0) return;
    recent_.push_back(token);
    while (recent_.size() > size_t(p_.repeat_last_n)) recent_.pop_front();
}

int32_t Sampler::sample(std::span<float> logits, TokenFilter* filter) {
    const size_t n = logits.size();
    if (n == 0) throw std::invalid_argument("sample: empty logits");
    for (const auto& [t, bias] : p_.logit_bias)
        if (size_t(t) < n) logits[t] = bias <= -100.0f ? -1e30f : logits[t] + bias;
    // Repetition penalty as in CTRL / llama.cpp over the recent window: shrink positive logits,
    // grow negative ones. Then OpenAI's presence and frequency penalties over the generated tokens.
    if (!recent_.empty()) {
        std::vector<int32_t> seen(recent_.begin(), recent_.end());
        std::sort(seen.begin(), seen.end());
        seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
        for (int32_t t : seen)
            if (t >= 0 && size_t(t) < n)
                logits[t] = logits[t] > 0 ? logits[t] / p_.repeat_penalty : logits[t] * p_.repeat_penalty;
    }
    for (const auto& [t, count] : generated_)
        if (t >= 0 && size_t(t) < n) logits[t] -= p_.presence_penalty + p_.frequency_penalty * float(count);
    // Candidates in descending logit order (ties: the lower id), as many as the sampler needs: one
    // for greedy, top_k, or all. With a filter, the first that many allowed tokens, which is what
    // the unfiltered sampler would take with every refused logit at -inf.
    const size_t want = p_.greedy() ? 1 : p_.top_k > 0 ? std::min<size_t>(size_t(p_.top_k), n) : n;
    auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
    std::vector<int32_t> idx;
    if (!filter) {
        if (want == 1) return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
        idx.resize(n);
        std::iota(idx.begin(), idx.end(), 0);
        std::partial_sort(idx.begin(), idx.begin() + long(want), idx.end(), by_logit);
        idx.resize(want);
    } else {
        // The best tokens in order, asked in growing batches until enough are allowed (usually
        // the first batch: the model mostly likes what the grammar allows, and a question costs
        // the filter more than sorting). Once the filter has decided every token, the rest are
        // asked in one pass and the best of those kept.
        if (want == 1) {  // greedy: the best token is usually allowed
            const auto best = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
            if (filter->allowed(best)) return best;
        }
        std::vector<int32_t> order(n);
        std::iota(order.begin(), order.end(), 0);
        size_t done = 0, head = std::min(n, std::max<size_t>(64, 2 * want));
        for (;;) {
            std::partial_sort(order.begin() + long(done), order.begin() + long(head), order.end(), by_logit);
            for (size_t i = done; i < head && idx.size() < want; ++i)
                if (filter->allowed(order[i])) idx.push_back(order[i]);
            done = head;
            if (idx.size() >= want || done == n) break;
            if (const std::span<const uint8_t> mask = filter->decided(); mask.size() == n) {
                std::vector<int32_t> rest;
                for (size_t i = done; i < n; ++i)
                    if (mask[size_t(order[i])]) rest.push_back(order[i]);
                const size_t more = std::min(rest.size(), want - idx.size());
                std::partial_sort(rest.begin(), rest.begin() + long(more), rest.end(), by_logit);
                idx.insert(idx.end(), rest.begin(), rest.begin() + long(more));
                break;
            }
            head = std::min(n, head * 4);
        }
        if (idx.empty()) return -1;
        if (want == 1) return idx[0];
    }
    const size_t k = idx.size();

    // Softmax with temperature over the candidates (double: 32000 tiny terms).
    std::vector<double> prob(k);
    double max_l = logits[idx[0]], sum = 0;
    for (size_t i = 0; i < k; ++i) sum += prob[i] = std::exp((double(logits[idx[i]]) - max_l) / p_.temperature);
    for (auto& pr : prob) pr /= sum;

    // min-p: drop tokens less likely than min_p times the most likely one.
    size_t keep = k;
    if (p_.min_p > 0)
        while (keep > 1 && prob[keep - 1] < p_.min_p * prob[0]) --keep;
    // top-p: the smallest prefix whose mass reaches top_p.
    if (p_.top_p < 1) {
        double cum = 0;
        for (size_t i = 0; i < keep; ++i) {
            cum += prob[i];
            if (cum >= p_.top_p) {
                keep = i + 1;
                break;
            }
        }
    }
    double mass = std::accumulate(prob.begin(), prob.begin() + long(keep), 0.0);
    double r = std::uniform_real_distribution<double>(0.0, mass)(rng_);
    for (size_t i = 0; i < keep; ++i) {
        r -= prob[i];
        if (r <= 0) return idx[i];
    }
    return idx[keep - 1];
}

}  // namespace vkllm
