// C API: sessions and generation (include/vkllm/vkllm.h). A session is a conversation: its tokens
// live here, its KV cache in one of the model's engine slots. Every generation is a request to
// the model's engine (serving/engine): the engine reuses the slot whose cache shares the longest
// start with the prompt, so a conversation that goes on evaluates only its new tokens, and
// sessions generating on different threads share decode batches.
#include "embed/c_api/api_guard.h"
#include "embed/c_api/handles.h"

#include "serving/answer/answer_stream.h"
#include "serving/chat_template/chat_prompt.h"
#include "serving/answer/tool_calls.h"

#include "model/grammar/json_schema.h"
#include "model/vision/multimodal_prompt.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <limits>
#include <random>

using namespace vkllm;
using vkllm::c_api::ApiFailure;
using vkllm::c_api::guarded;
using vkllm::c_api::require;

namespace vkllm::c_api {
std::string render_chat(const vkllm_model& m, const vkllm_chat_message* messages, size_t n, bool add_generation_prompt);
}

namespace {

// Marks the session as generating for the life of one call; a second concurrent call is BUSY.
class GeneratingScope {
public:
    explicit GeneratingScope(vkllm_session& s) : s_(s) {
        std::lock_guard lock(s_.mutex);
        if (s_.generating)
            throw ApiFailure(VKLLM_ERR_BUSY,
                             "the session is already generating (one generation at a time per session)");
        s_.generating = true;
        s_.cancel_requested = false;
    }
    ~GeneratingScope() {
        std::lock_guard lock(s_.mutex);
        s_.generating = false;
    }
    GeneratingScope(const GeneratingScope&) = delete;
    GeneratingScope& operator=(const GeneratingScope&) = delete;

private:
    vkllm_session& s_;
};

// Publishes the running request to vkllm_cancel for as long as the ticket lives: declared after
// the ticket, it unpublishes it (under the lock vkllm_cancel takes) before the ticket is destroyed.
class TicketBinding {
public:
    TicketBinding(vkllm_session& s, engine::Ticket& t) : s_(s) {
        std::lock_guard lock(s_.mutex);
        s_.ticket = &t;
        if (s_.cancel_requested) t.cancel();  // vkllm_cancel came before the ticket existed
    }
    ~TicketBinding() {
        std::lock_guard lock(s_.mutex);
        s_.ticket = nullptr;
    }
    TicketBinding(const TicketBinding&) = delete;
    TicketBinding& operator=(const TicketBinding&) = delete;

private:
    vkllm_session& s_;
};

engine::CompletionRequest request_from(const vkllm_sampling& p) {
    require(p.n_predict >= -1, fmt::format("n_predict {} must be -1 (no limit) or >= 0", p.n_predict));
    require(p.stop != nullptr || p.n_stop == 0, "stop is NULL but n_stop is " + std::to_string(p.n_stop));
    engine::CompletionRequest req;
    req.max_tokens = p.n_predict;
    req.sampler.temperature = p.temperature;
    req.sampler.top_k = p.top_k;
    req.sampler.top_p = p.top_p;
    req.sampler.min_p = p.min_p;
    req.sampler.repeat_penalty = p.repeat_penalty;
    req.sampler.repeat_last_n = p.repeat_last_n;
    req.sampler.seed = p.seed == VKLLM_SEED_RANDOM ? std::random_device{}() : p.seed;
    req.sampler.presence_penalty = p.presence_penalty;
    req.sampler.frequency_penalty = p.frequency_penalty;
    req.ignore_eos = p.ignore_eos;
    for (size_t i = 0; i < p.n_stop; ++i) {
        require(p.stop[i] != nullptr, fmt::format("stop[{}] is NULL", i));
        require(*p.stop[i] != '\0', fmt::format("stop[{}] is empty", i));
        req.stop.emplace_back(p.stop[i]);
    }
    require(!(p.grammar && p.json_schema), "give at most one of grammar and json_schema");
    // GrammarError and SchemaError are invalid arguments: their messages name the place.
    if (p.grammar) req.grammar = std::make_shared<const grammar::Grammar>(grammar::Grammar::parse(p.grammar));
    if (p.json_schema)
        req.grammar = std::make_shared<const grammar::Grammar>(grammar::json_schema_grammar(p.json_schema));
    return req;
}

vkllm_finish_reason finish_of(engine::FinishReason r) {
    switch (r) {
        case engine::FinishReason::Stop: return VKLLM_FINISH_STOP;
        case engine::FinishReason::Length: return VKLLM_FINISH_LENGTH;
        case engine::FinishReason::Cancelled: return VKLLM_FINISH_CANCELLED;
        default: return VKLLM_FINISH_ERROR;
    }
}

// Runs `prompt` (the whole conversation) through the engine, streaming the generated text to
// on_piece. The session's history becomes the prompt plus what was generated. The caller holds a
// GeneratingScope on the session.
// `split`: a vkllm_chat_json answer, split into reasoning (kept for vkllm_session_get_reasoning),
// content (on_piece) and tool calls (kept for vkllm_session_get_tool_calls).
vkllm_status run_generation(vkllm_session& s, std::vector<int32_t> prompt, engine::CompletionRequest req,
                            vkllm_piece_fn on_piece, void* user_data, answer::AnswerStream* split = nullptr) {
    vkllm_model& m = *s.model;
    {
        std::lock_guard lock(s.mutex);
        s.tool_calls = "[]";
        s.reasoning.clear();
    }
    std::string thought;
    if (prompt.empty())
        throw ApiFailure(VKLLM_ERR_INVALID_ARGUMENT,
                         "the prompt encodes to no tokens and the vocabulary has no BOS token");
    const uint32_t n_ctx = m.engine->n_ctx_per_slot();
    if (prompt.size() + 1 > n_ctx)
        throw ApiFailure(VKLLM_ERR_CONTEXT_FULL,
                         fmt::format("the prompt is {} tokens (with the conversation so far) but the context holds {}, "
                                     "with room for at least one generated token: reset the session, or load the model "
                                     "with a larger n_ctx",
                                     prompt.size(), n_ctx));
    req.prompt = prompt;
    req.slot = int32_t(s.slot);
    const std::vector<PromptEmbeddings> req_images = req.images;  // the history's pictures, for vkllm_generate
    const std::unique_ptr<engine::Ticket> ticket = m.engine->submit(std::move(req));
    const TicketBinding binding(s, *ticket);
    s.history = std::move(prompt);
    s.images = req_images;
    bool stopped_by_callback = false;
    auto stopped = [&] {
        if (stopped_by_callback) return true;
        std::lock_guard lock(s.mutex);
        return s.cancel_requested;
    };
    for (;;) {
        std::optional<engine::Event> ev = ticket->next(std::chrono::milliseconds(200));
        if (!ev) continue;
        if (ev->kind == engine::Event::Kind::Text) {
            // The engine runs ahead of a slow callback. Once stopped, what it queued meanwhile is
            // neither passed on nor kept in the conversation: after vkllm_cancel returns, no more
            // pieces arrive, and the conversation is what the caller saw.
            if (stopped()) continue;
            s.history.insert(s.history.end(), ev->tokens.begin(), ev->tokens.end());
            std::string text = ev->text;
            if (split) {
                answer::AnswerStream::Piece piece = split->push(ev->text);
                thought += piece.reasoning;
                text = std::move(piece.content);
            }
            if (on_piece && !text.empty() && on_piece(text.c_str(), text.size(), user_data) != 0) {
                stopped_by_callback = true;
                ticket->cancel();
            }
            continue;
        }
        if (split && !stopped() &&
            (ev->finish == engine::FinishReason::Stop || ev->finish == engine::FinishReason::Length)) {
            answer::AnswerStream::Rest rest = split->finish(engine::cut_short(ev->finish));
            thought += rest.reasoning;
            if (on_piece && !rest.content.empty() &&
                on_piece(rest.content.c_str(), rest.content.size(), user_data) != 0)
                stopped_by_callback = true;
            const std::string calls_json = answer::tool_calls_json(rest.calls, split->family(), false).dump();
            std::lock_guard lock(s.mutex);
            s.tool_calls = calls_json;
        }
        if (split) {
            std::lock_guard lock(s.mutex);
            s.reasoning = thought;
        }
        vkllm_generation_stats st{};
        st.struct_size = sizeof(st);
        st.prompt_tokens = ev->prompt_tokens;
        st.cached_tokens = ev->cached_tokens;
        st.generated_tokens = ev->completion_tokens;
        st.n_past = uint32_t(s.history.size());
        st.prompt_ms = ev->prompt_ms;
        st.generate_ms = ev->generate_ms;
        const uint32_t evaluated = ev->prompt_tokens - std::min(ev->prompt_tokens, ev->cached_tokens);
        st.prompt_tokens_per_s = ev->prompt_ms > 0 ? evaluated * 1000.0 / ev->prompt_ms : 0;
        st.generate_tokens_per_s = ev->generate_ms > 0 && ev->completion_tokens > 1
                                       ? (ev->completion_tokens - 1) * 1000.0 / ev->generate_ms
                                       : 0;
        st.finish = finish_of(ev->finish);
        st.draft_tokens = ev->draft_tokens;
        st.accepted_tokens = ev->accepted_tokens;
        st.blended_documents = ev->blended_documents;
        st.stored_documents = ev->stored_documents;
        st.blended_tokens = ev->blended_tokens;
        st.recomputed_tokens = ev->recomputed_tokens;
        {
            std::lock_guard lock(s.mutex);  // vkllm_session_get_stats may run on another thread
            s.stats = st;
        }
        switch (ev->finish) {
            case engine::FinishReason::Stop:
            case engine::FinishReason::Length:
                if (stopped_by_callback) {
                    c_api::set_last_error("stopped by on_piece");
                    return VKLLM_CANCELLED;
                }
                return VKLLM_OK;
            case engine::FinishReason::Cancelled:
                c_api::set_last_error(stopped_by_callback ? "stopped by on_piece" : "cancelled by vkllm_cancel");
                return VKLLM_CANCELLED;
            default: throw ApiFailure(VKLLM_ERR_INTERNAL, ev->error.empty() ? "the generation failed" : ev->error);
        }
    }
}

// A text the session keeps of its last answer (guarded by its mutex), by vkllm_detokenize's buffer rules.
vkllm_status write_session_text(const vkllm_session* session, std::string vkllm_session::*text, char* buf,
                                size_t capacity, size_t* len) {
    return guarded([&] {
        vkllm_session& s = *c_api::live_session(session);
        require(len != nullptr, "len is NULL");
        require(buf != nullptr || capacity == 0, "buf is NULL but capacity is " + std::to_string(capacity));
        std::string copy;
        {
            std::lock_guard lock(s.mutex);
            copy = s.*text;
        }
        return c_api::write_string(copy, buf, capacity, len);
    });
}

}  // namespace

extern "C" {

vkllm_session_params vkllm_session_default_params(void) {
    vkllm_session_params p{};
    p.struct_size = sizeof(p);
    return p;
}

vkllm_sampling vkllm_sampling_default(void) {
    const SamplerParams d;
    vkllm_sampling p{};
    p.struct_size = sizeof(p);
    p.temperature = d.temperature;
    p.top_k = d.top_k;
    p.top_p = d.top_p;
    p.min_p = d.min_p;
    p.repeat_penalty = d.repeat_penalty;
    p.repeat_last_n = d.repeat_last_n;
    p.presence_penalty = d.presence_penalty;
    p.frequency_penalty = d.frequency_penalty;
    p.n_predict = 128;
    p.seed = VKLLM_SEED_RANDOM;
    return p;
}

vkllm_status vkllm_session_new(vkllm_model* model, const vkllm_session_params* params, vkllm_session** out) {
    return guarded([&] {
        require(out != nullptr, "out is NULL");
        *out = nullptr;
        vkllm_model& m = *c_api::live_model(model);
        require(m.engine != nullptr,
                fmt::format("a {} model is an embedding model: it has no sessions (use vkllm_embed)",
                            m.loaded.cfg.arch->name));
        auto s = std::make_unique<vkllm_session>();
        s->model = &m;
        s->params = c_api::read_params(params, vkllm_session_default_params(), "vkllm_session_params");
        s->stats.struct_size = sizeof(s->stats);
        std::lock_guard lock(m.sessions_mutex);
        if (m.sessions.size() >= m.max_sessions)
            throw ApiFailure(VKLLM_ERR_BUSY,
                             fmt::format("the model already has {} open sessions, its max_sessions; free "
                                         "one, or load the model with a larger max_sessions",
                                         m.sessions.size()));
        // The lowest slot no open session owns.
        std::vector<bool> taken(m.max_sessions, false);
        for (const vkllm_session* o : m.sessions) taken[o->slot] = true;
        s->slot = uint32_t(std::find(taken.begin(), taken.end(), false) - taken.begin());
        m.sessions.reserve(m.max_sessions);  // push_back below cannot throw after the registration
        c_api::register_session(s.get());
        m.sessions.push_back(s.get());
        *out = s.release();
        return VKLLM_OK;
    });
}

void vkllm_session_free(vkllm_session* session) {
    (void)guarded([&] {
        if (!session || !c_api::is_live_session(session)) return VKLLM_OK;
        if (c_api::session_generating(*session))
            throw ApiFailure(VKLLM_ERR_BUSY,
                             "vkllm_session_free: the session is generating; it was not freed (cancel "
                             "it and free it after vkllm_generate returned)");
        c_api::unregister_session(session);
        {
            std::lock_guard lock(session->model->sessions_mutex);
            auto& v = session->model->sessions;
            v.erase(std::remove(v.begin(), v.end(), session), v.end());
        }
        delete session;
        return VKLLM_OK;
    });
}

vkllm_status vkllm_session_reset(vkllm_session* session) {
    return guarded([&] {
        vkllm_session& s = *c_api::live_session(session);
        GeneratingScope scope(s);  // BUSY while a generation runs
        s.history.clear();
        s.images.clear();
        return VKLLM_OK;
    });
}

vkllm_status vkllm_generate(vkllm_session* session, const char* prompt, const vkllm_sampling* sampling,
                            vkllm_piece_fn on_piece, void* user_data) {
    return guarded([&] {
        vkllm_session& s = *c_api::live_session(session);
        require(prompt != nullptr, "prompt is NULL (\"\" means BOS only)");
        const GeneratingScope scope(s);  // before reading the history another call may be writing
        const Tokenizer& tok = *s.model->loaded.tokenizer;
        std::vector<int32_t> tokens = s.history;
        if (tokens.empty()) {
            tokens = tok.encode(prompt, true, s.params.parse_special);
            if (tokens.empty() && tok.bos_id() >= 0) tokens.push_back(tok.bos_id());  // "" means BOS only
        } else {
            const std::vector<int32_t> more = tok.encode(prompt, false, s.params.parse_special);
            tokens.insert(tokens.end(), more.begin(), more.end());
        }
        engine::CompletionRequest req =
            request_from(c_api::read_params(sampling, vkllm_sampling_default(), "vkllm_sampling"));
        req.images = s.images;  // the pictures of a conversation vkllm_chat_images began
        return run_generation(s, std::move(tokens), std::move(req), on_piece, user_data);
    });
}

vkllm_status vkllm_generate_documents(vkllm_session* session, const char* prefix, const char* const* documents,
                                      size_t n_documents, const char* question, const vkllm_sampling* sampling,
                                      vkllm_piece_fn on_piece, void* user_data) {
    return guarded([&] {
        vkllm_session& s = *c_api::live_session(session);
        require(prefix != nullptr, "prefix is NULL (\"\" is fine)");
        require(question != nullptr, "question is NULL (\"\" is fine)");
        require(documents != nullptr || n_documents == 0, "documents is NULL but n_documents is not 0");
        for (size_t i = 0; i < n_documents; ++i)
            require(documents[i] != nullptr, fmt::format("documents[{}] is NULL", i));
        const GeneratingScope scope(s);  // before reading the history another call may be writing
        const Tokenizer& tok = *s.model->loaded.tokenizer;
        const bool special = s.params.parse_special;
        std::vector<int32_t> tokens = s.history;
        const std::vector<int32_t> head = tok.encode(prefix, tokens.empty(), special);
        tokens.insert(tokens.end(), head.begin(), head.end());
        if (tokens.empty() && tok.bos_id() >= 0) tokens.push_back(tok.bos_id());
        engine::CompletionRequest req =
            request_from(c_api::read_params(sampling, vkllm_sampling_default(), "vkllm_sampling"));
        for (size_t i = 0; i < n_documents; ++i) {
            const std::vector<int32_t> doc = tok.encode(documents[i], false, special);
            if (!doc.empty()) req.documents.push_back({tokens.size(), doc.size()});
            tokens.insert(tokens.end(), doc.begin(), doc.end());
        }
        const std::vector<int32_t> tail = tok.encode(question, false, special);
        tokens.insert(tokens.end(), tail.begin(), tail.end());
        req.images = s.images;
        return run_generation(s, std::move(tokens), std::move(req), on_piece, user_data);
    });
}

vkllm_status vkllm_chat_images(vkllm_session* session, const vkllm_chat_message* messages, size_t n_messages,
                               const vkllm_chat_image* images, size_t n_images, const vkllm_sampling* sampling,
                               vkllm_piece_fn on_piece, void* user_data) {
    return guarded([&] {
        vkllm_session& s = *c_api::live_session(session);
        vkllm_model& m = *s.model;
        require(n_messages > 0, "no messages");
        require(messages != nullptr, "messages is NULL");
        require(n_images == 0 || images != nullptr, "images is NULL");
        require(m.vision != nullptr || n_images == 0,
                "the model was loaded without a vision encoder (vkllm_model_params.mmproj): it takes no images");
        // Each message's images, decoded in order, and its content with their markers.
        std::vector<std::vector<RgbImage>> per_message(n_messages);
        for (size_t i = 0; i < n_images; ++i) {
            const vkllm_chat_image& im = images[i];
            require(im.message < n_messages,
                    fmt::format("images[{}].message {} is not a message index (0..{})", i, im.message, n_messages - 1));
            require(im.data != nullptr && im.len > 0, fmt::format("images[{}] has no data", i));
            try {
                per_message[im.message].push_back(
                    decode_image({static_cast<const uint8_t*>(im.data), im.len}, {m.image_max_pixels}));
            } catch (const ImageError& e) {
                throw ApiFailure(VKLLM_ERR_INVALID_ARGUMENT, fmt::format("images[{}]: {}", i, e.what()));
            }
        }
        std::vector<std::string> contents(n_messages);
        std::vector<vkllm_chat_message> marked(messages, messages + n_messages);
        std::vector<RgbImage> all;
        for (size_t i = 0; i < n_messages; ++i) {
            require(messages[i].content != nullptr, fmt::format("messages[{}].content is NULL", i));
            const std::string_view text = messages[i].content;
            const size_t markers = count_media_markers(text);
            const size_t n = per_message[i].size();
            require(n == 0 || markers == 0 || markers == n,
                    fmt::format("messages[{}] marks {} image places ({}) for {} images", i, markers, kMediaMarker, n));
            // The images' places get a private marker: <__media__> in other messages (an answer that
            // quotes it) stays text.
            const std::string& mine = private_media_marker();
            for (size_t k = 0; markers == 0 && k < n; ++k) contents[i] += mine;
            if (markers == 0 || n == 0) {
                contents[i] += text;
            } else {
                for (size_t at = 0;;) {
                    const size_t hit = text.find(kMediaMarker, at);
                    contents[i] += text.substr(at, hit == std::string_view::npos ? std::string_view::npos : hit - at);
                    if (hit == std::string_view::npos) break;
                    contents[i] += mine;
                    at = hit + kMediaMarker.size();
                }
            }
            marked[i].content = contents[i].c_str();
            for (RgbImage& img : per_message[i]) all.push_back(std::move(img));
        }
        const GeneratingScope scope(s);
        const std::string text = c_api::render_chat(m, marked.data(), n_messages, true);
        const Tokenizer& tok = *m.loaded.tokenizer;
        MultimodalPrompt mm = build_multimodal_prompt(
            tok, m.vision.get(), text, all, true, true,
            [&](std::string_view piece) { return chat_template::encode_prompt(tok, std::string(piece)); },
            private_media_marker());
        engine::CompletionRequest req =
            request_from(c_api::read_params(sampling, vkllm_sampling_default(), "vkllm_sampling"));
        req.images = std::move(mm.images);
        return run_generation(s, std::move(mm.tokens), std::move(req), on_piece, user_data);
    });
}

vkllm_status vkllm_chat(vkllm_session* session, const vkllm_chat_message* messages, size_t n_messages,
                        const vkllm_sampling* sampling, vkllm_piece_fn on_piece, void* user_data) {
    return guarded([&] {
        vkllm_session& s = *c_api::live_session(session);
        require(n_messages > 0, "no messages");
        const GeneratingScope scope(s);
        const std::string text = c_api::render_chat(*s.model, messages, n_messages, true);
        return run_generation(s, chat_template::encode_prompt(*s.model->loaded.tokenizer, text),
                              request_from(c_api::read_params(sampling, vkllm_sampling_default(), "vkllm_sampling")),
                              on_piece, user_data);
    });
}

vkllm_chat_json_params vkllm_chat_json_default_params(void) {
    vkllm_chat_json_params p{};
    p.struct_size = sizeof(p);
    p.parallel_tool_calls = true;
    return p;
}

vkllm_status vkllm_chat_json(vkllm_session* session, const vkllm_chat_json_params* params,
                             const vkllm_sampling* sampling, vkllm_piece_fn on_piece, void* user_data) {
    return guarded([&] {
        using json = nlohmann::ordered_json;
        vkllm_session& s = *c_api::live_session(session);
        const vkllm_chat_json_params p =
            c_api::read_params(params, vkllm_chat_json_default_params(), "vkllm_chat_json_params");
        auto parse = [](const char* text, const char* what) {
            json j = answer::parse_json_bounded(text);
            require(!j.is_discarded(), fmt::format("{} is not valid JSON (or nests deeper than 64 levels)", what));
            return j;
        };
        require(p.messages != nullptr, "messages is NULL");
        // As the server reads them (MessageError: an invalid argument naming the field).
        json messages = chat_template::parse_messages(parse(p.messages, "messages"));
        json tools = p.tools ? parse(p.tools, "tools") : json(nullptr);
        if (!tools.is_null()) answer::check_tools(tools);  // ToolError: an invalid argument naming the field
        if (tools.is_array() && tools.empty()) tools = nullptr;
        const json kwargs = p.template_kwargs ? parse(p.template_kwargs, "template_kwargs") : json(nullptr);
        require(kwargs.is_null() || kwargs.is_object(), "template_kwargs must be a JSON object");
        std::string name;
        const answer::ToolChoice choice =
            p.tool_choice ? answer::parse_tool_choice(p.tool_choice, name) : answer::ToolChoice::Auto;
        const std::string reasoning_format = p.reasoning_format ? p.reasoning_format : "auto";
        require(reasoning_format == "auto" || reasoning_format == "deepseek" || reasoning_format == "none",
                fmt::format("reasoning_format '{}' is not one of auto, deepseek, none", reasoning_format));

        vkllm_model& m = *s.model;
        if (!m.chat_template) throw chat_template::TemplateError(m.chat_template_error);
        const std::string& src = m.chat_template->source();
        const answer::ToolPlan plan =
            answer::plan_tool_use(answer::detect_tool_format(src), answer::template_renders_tools(src), tools, choice,
                                  name, p.parallel_tool_calls);
        answer::add_system_text(messages, plan.system_text);

        engine::CompletionRequest req =
            request_from(c_api::read_params(sampling, vkllm_sampling_default(), "vkllm_sampling"));
        if (plan.forced) {
            require(!req.grammar, "a required tool call cannot be combined with a grammar or json_schema");
            require(req.stop.empty(), "a required tool call cannot be combined with stop strings");
        }
        const bool lazy = !plan.forced && plan.grammar && !req.grammar;  // a grammar given holds the whole reply
        if (plan.forced || lazy) req.grammar = plan.grammar;
        if (lazy) req.grammar_start.triggers = plan.triggers;
        if (plan.parse_as || answer::template_is_harmony(src))
            req.shown_control_tokens =
                chat_template::tool_control_tokens(*m.loaded.tokenizer, answer::detect_tool_format(src));

        const GeneratingScope scope(s);
        chat_template::ChatInputs in = chat_template::chat_inputs(*m.loaded.tokenizer, messages, tools, kwargs);
        const std::string rendered = m.chat_template->apply(in);
        const answer::ReasoningTags* thinks = answer::reasoning_tags(src);
        if (lazy && thinks)
            answer::skip_reasoning(req.grammar_start, answer::prompt_opens_reasoning(rendered, *thinks), *thinks);
        const std::string text = answer::forced_prompt(rendered, plan);
        answer::AnswerFormat format;
        format.harmony = answer::template_is_harmony(src);
        format.inline_reasoning = reasoning_format == "none";
        // As the server's reasoning_format: a forced call is the whole answer, with no block.
        format.split_reasoning = reasoning_format != "none" && !plan.forced ? thinks : nullptr;
        format.inside = thinks && answer::prompt_opens_reasoning(rendered, *thinks);
        format.plan = &plan;
        format.tools = tools;
        answer::AnswerStream split(format);
        return run_generation(s, chat_template::encode_prompt(*m.loaded.tokenizer, text), std::move(req), on_piece,
                              user_data, &split);
    });
}

vkllm_status vkllm_session_get_tool_calls(const vkllm_session* session, char* buf, size_t capacity, size_t* len) {
    return write_session_text(session, &vkllm_session::tool_calls, buf, capacity, len);
}

vkllm_status vkllm_session_get_reasoning(const vkllm_session* session, char* buf, size_t capacity, size_t* len) {
    return write_session_text(session, &vkllm_session::reasoning, buf, capacity, len);
}

vkllm_status vkllm_cancel(vkllm_session* session) {
    return guarded([&] {
        vkllm_session& s = *c_api::live_session(session);
        std::lock_guard lock(s.mutex);
        if (!s.generating) return VKLLM_OK;
        s.cancel_requested = true;
        if (s.ticket) s.ticket->cancel();
        return VKLLM_OK;
    });
}

vkllm_status vkllm_session_get_stats(const vkllm_session* session, vkllm_generation_stats* stats) {
    return guarded([&] {
        vkllm_session& s = *c_api::live_session(session);
        vkllm_generation_stats copy;
        {
            std::lock_guard lock(s.mutex);
            copy = s.stats;
        }
        c_api::write_out(stats, copy, "vkllm_generation_stats");
        return VKLLM_OK;
    });
}

}  // extern "C"
