#include "model/generate.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

namespace vkllm {

GenerateStats generate(ModelGpu& model, const Tokenizer& tok, std::span<const int32_t> prompt, const GenerateParams& p,
                       const std::function<void(std::string_view)>& on_piece) {
    using clock = std::chrono::steady_clock;
    auto ms = [](clock::time_point a, clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
    if (prompt.empty()) throw std::invalid_argument("generate: the prompt has no tokens (not even BOS)");
    if (p.n_predict < 0) throw std::invalid_argument(fmt::format("-n {}: must be >= 0", p.n_predict));
    uint64_t need = uint64_t(model.n_past()) + prompt.size() + uint64_t(p.n_predict);
    if (prompt.size() > model.n_ctx() - model.n_past())
        throw ContextFullError(fmt::format("the prompt has {} tokens but the context holds {} ({} already used); "
                                           "raise --ctx or shorten the prompt", prompt.size(), model.n_ctx(), model.n_past()));
    if (need > model.n_ctx())
        throw ContextFullError(fmt::format("prompt ({} tokens) + -n {} = {} tokens exceeds the context of {} tokens; "
                                           "lower -n or raise --ctx", prompt.size(), p.n_predict, need - model.n_past(),
                                           model.n_ctx()));
    Sampler sampler(p.sampler);
    for (int32_t t : prompt) sampler.accept(t);

    GenerateStats st;
    st.prompt_tokens = uint32_t(prompt.size());
    auto t0 = clock::now();
    model.eval(prompt);
    auto t1 = clock::now();
    st.prompt_ms = ms(t0, t1);

    // Greedy without a penalty needs only the argmax computed on the device; anything else reads
    // the logits back.
    bool device_argmax = p.sampler.greedy() && !p.sampler.penalized();
    int32_t prev = prompt.back();
    for (int32_t i = 0; i < p.n_predict; ++i) {
        int32_t next;
        if (device_argmax) {
            next = model.argmax();
        } else {
            std::vector<float> logits = model.logits();
            if (auto bad = std::find_if(logits.begin(), logits.end(), [](float v) { return !std::isfinite(v); });
                bad != logits.end())
                throw NonFiniteError(fmt::format("the model produced non-finite logits ({} for token {}) at position "
                                                 "{}: its weights hold NaN or Inf values, or the computation overflowed",
                                                 *bad, bad - logits.begin(), model.n_past()));
            next = sampler.sample(logits);
        }
        if (tok.is_eog(next) || next == tok.bos_id()) {
            st.stopped_at_eos = true;
            break;
        }
        sampler.accept(next, /*generated=*/true);
        on_piece(tok.decode_piece(next, prev));
        ++st.generated_tokens;
        prev = next;
        if (i + 1 < p.n_predict) {
            model.eval(std::span<const int32_t>(&next, 1));
            ++st.decode_steps;
        }
    }
    st.decode_ms = st.decode_steps ? ms(t1, clock::now()) : 0;
    return st;
}

}  // namespace vkllm
