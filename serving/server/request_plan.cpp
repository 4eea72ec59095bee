#include "serving/server/request_plan.h"

namespace vkllm::server {

namespace {

using chat_template::Reasoning;

// Template variables, most specific first: what the request set itself stays, a later source
// only fills what is still unset.
void set_template_variables(ParsedRequest& req, const ServedModel& m, const std::string& reasoning_param) {
    try {
        if (req.reasoning != Reasoning::Auto || !req.reasoning_effort.empty())
            chat_template::apply_reasoning(req.template_kwargs, m.reasoning_switch, req.reasoning, req.reasoning_effort,
                                           reasoning_param);
    } catch (const chat_template::ReasoningError& e) {
        throw invalid_field(e.param(), e.what());
    }
    if (m.template_kwargs.is_object()) {
        if (!req.template_kwargs.is_object()) req.template_kwargs = json::object();
        for (const auto& [k, v] : m.template_kwargs.items())
            if (!req.template_kwargs.contains(k)) req.template_kwargs[k] = v;
    }
    if (req.reasoning == Reasoning::Auto && req.reasoning_effort.empty())
        chat_template::apply_reasoning(req.template_kwargs, m.reasoning_switch, m.reasoning_default, "", "--reasoning");
}

}  // namespace

void check_reasoning_default(const ServedModel& m) {
    json kwargs;
    try {
        chat_template::apply_reasoning(kwargs, m.reasoning_switch, m.reasoning_default, "", "--reasoning");
    } catch (const chat_template::ReasoningError& e) {
        throw std::invalid_argument(e.what());
    }
}

std::vector<std::vector<int32_t>> prepare_generation(ParsedRequest& req, const ServedModel& m, uint32_t limit,
                                                     const std::string& reasoning_param) {
    const bool chat = req.endpoint == Endpoint::Chat;
    if (chat) set_template_variables(req, m, reasoning_param);
    apply_tool_format(req, *m.tool_format, m.template_renders_tools);
    req.harmony = chat && m.harmony;
    // Harmony's markers are the structure of every answer, not only of calls: always shown to its parser.
    if (req.tool_plan.parse_as || req.harmony) req.engine.shown_control_tokens = m.tool_control_tokens;
    std::string rendered;
    // Completions may bring a batch of prompts: every one is checked before any is submitted.
    std::vector<std::vector<int32_t>> prompts;
    const size_t n_prompts = chat ? 1 : req.prompts.size();
    req.prompt_documents.assign(n_prompts, {});
    if (chat && !req.images.empty()) {
        // The images go where the template put their markers, through the model's vision encoder.
        rendered = chat_prompt_text(*m.tokenizer, m.render_chat, req);
        const ImagePromptInput in{&rendered, &req.images, m.chat_template_name};
        prompts.push_back(image_prompt_tokens(in, m.image_prompt, m.image_input, limit, req.engine.images));
    } else {
        for (size_t p = 0; p < n_prompts; ++p)
            prompts.push_back(prompt_tokens(*m.tokenizer, m.render_chat, req, limit, p == 0 ? &rendered : nullptr, p,
                                            {m.blend_separator, &req.prompt_documents[p]}));
    }
    // A forced call is the whole reply: no reasoning block (forced_prompt closes one the template opened).
    const bool split = chat && m.reasoning && req.reasoning_format != "none" && !req.tool_plan.forced && !req.harmony;
    req.split_reasoning = split ? m.reasoning : nullptr;
    req.reply_in_reasoning = split && answer::prompt_opens_reasoning(rendered, *m.reasoning);
    if (req.engine.grammar_start.lazy() && m.reasoning)
        answer::skip_reasoning(req.engine.grammar_start, answer::prompt_opens_reasoning(rendered, *m.reasoning),
                               *m.reasoning);
    return prompts;
}

}  // namespace vkllm::server
