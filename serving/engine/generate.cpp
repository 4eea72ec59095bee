#include "serving/engine/generate.h"

#include "serving/engine/engine.h"

#include <fmt/format.h>

namespace vkllm::engine {

GenerateStats generate(ModelGpu& model, const Tokenizer& tok, std::span<const int32_t> prompt, const GenerateParams& p,
                       const std::function<void(std::string_view)>& on_piece) {
    if (prompt.empty()) throw std::invalid_argument("generate: the prompt has no tokens (not even BOS)");
    if (p.n_predict < 0) throw std::invalid_argument(fmt::format("-n {}: must be >= 0", p.n_predict));
    // Refused before anything runs: a reply cut short by the context is not what was asked for.
    if (prompt.size() >= model.n_ctx())
        throw ContextFullError(
            fmt::format("the prompt has {} tokens but the context holds {} (and the first generated "
                        "token needs one more); raise --ctx or shorten the prompt",
                        prompt.size(), model.n_ctx()));
    if (prompt.size() + uint64_t(p.n_predict) > model.n_ctx())
        throw ContextFullError(
            fmt::format("prompt ({} tokens) + -n {} = {} tokens exceeds the context of {} tokens; "
                        "lower -n or raise --ctx",
                        prompt.size(), p.n_predict, prompt.size() + uint64_t(p.n_predict), model.n_ctx()));
    EngineOptions eo;
    eo.n_slots = 1;
    eo.queue_limit = 1;
    eo.drafter = p.drafter;
    eo.draft_max = p.draft_max;
    eo.draft_min = p.draft_min;
    Engine engine(model, tok, eo);
    CompletionRequest req;
    req.prompt.assign(prompt.begin(), prompt.end());
    req.images = p.images;
    req.max_tokens = p.n_predict;
    req.sampler = p.sampler;
    req.grammar = p.grammar;
    req.grammar_start = p.grammar_start;
    req.timeout = std::chrono::hours(24 * 365);  // a generation on the command line runs until it ends
    req.slot = 0;
    std::unique_ptr<Ticket> ticket = engine.submit(std::move(req));
    for (;;) {
        std::optional<Event> ev = ticket->next(std::chrono::hours(1));
        if (!ev) continue;
        if (ev->kind == Event::Kind::Text) {
            if (!ev->text.empty()) on_piece(ev->text);
            continue;
        }
        if (ev->finish == FinishReason::Error) {
            if (ev->exception) std::rethrow_exception(ev->exception);  // its own type: NonFiniteError, VulkanError, ...
            throw std::runtime_error(ev->error);
        }
        GenerateStats st;
        st.prompt_tokens = ev->prompt_tokens;
        st.generated_tokens = ev->completion_tokens;
        st.decode_steps = ev->decode_steps;
        st.draft_tokens = ev->draft_tokens;
        st.accepted_tokens = ev->accepted_tokens;
        st.prompt_ms = ev->prompt_ms;
        st.generate_ms = ev->generate_ms;
        st.sample_ms = ev->sample_ms;
        st.stopped_at_eos = ev->finish == FinishReason::Stop;
        return st;
    }
}

}  // namespace vkllm::engine
