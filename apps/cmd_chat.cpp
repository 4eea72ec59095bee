// `vkllm chat`: an interactive conversation in the terminal. Line editing and history come from
// libedit; answers stream as they are generated; Ctrl-C stops the current answer (not the
// program); /reset starts over. The conversation runs on a one-slot serving engine, so each turn
// evaluates only its new tokens: the rendered prompt of turn n + 1 starts with turn n's, which the
// slot's KV cache already holds (prefix reuse).
#include "apps/app_options.h"
#include "apps/commands.h"
#include "apps/load_model.h"
#include "apps/speculation_options.h"
#include "apps/vision_options.h"
#include "model/grammar/grammar.h"
#include "model/vision/multimodal_prompt.h"
#include "serving/engine/engine.h"
#include "serving/answer/answer_stream.h"
#include "serving/chat_template/chat_prompt.h"
#include "serving/chat_template/chat_template.h"
#include "serving/answer/tool_calls.h"

#include <fmt/format.h>

#include <editline/readline.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <random>
#include <cstdio>
#include <iostream>

namespace vkllm::apps {

namespace {

using namespace std::chrono_literals;

struct ChatOptions {
    std::string model;
    std::string system;
    std::string chat_template;
    uint32_t n_ctx = 4096;
    int32_t n_predict = -1;
    float temperature = 0.8f;
    int32_t top_k = 40;
    float top_p = 0.95f;
    float min_p = 0.05f;
    float repeat_penalty = 1.0f;
    uint64_t seed = 0;
    bool seed_set = false;
    bool show_stats = false;
    std::string tools_file;  // OpenAI's tools array (JSON)
    std::string tool_choice = "auto";  // auto | none | required | a tool's name
    DeviceOptions device;
    VisionOptions vision;
    SpeculationOptions speculation;
};

std::atomic<bool> g_interrupted{false};
void on_sigint(int) { g_interrupted = true; }

// One line of input: libedit on a terminal (editing, history), plain getline otherwise (pipes,
// tests). False at end of input.
bool read_line(bool tty, std::string& line) {
    if (tty) {
        for (;;) {
            g_interrupted = false;
            char* in = readline("> ");
            if (!in) {
                // Ctrl-C at the prompt interrupts the read: start a fresh line, keep going.
                if (g_interrupted) {
                    std::fputs("\n", stdout);
                    continue;
                }
                return false;
            }
            line = in;
            std::free(in);
            if (!line.empty()) add_history(line.c_str());
            return true;
        }
    }
    return static_cast<bool>(std::getline(std::cin, line));
}

void chat(const ChatOptions& o) {
    ModelOptions mo;
    mo.n_ctx = o.n_ctx;
    mo.n_seq = 1;
    o.vision.fit_ubatch(mo);
    o.speculation.fit_model(mo);
    LoadedModel m = load_model(resolve_model_path(o.model), o.device, mo, false);
    chat_template::ChatTemplate tmpl = chat_template_for(m, o.chat_template);
    const Tokenizer& tok = *m.tokenizer;
    const engine::Speculation spec = make_speculation(o.speculation, m, o.device, 1, false);
    engine::EngineOptions eo{.n_slots = 1};
    eo.drafter = spec.drafter;
    eo.draft_max = o.speculation.params.draft_max;
    eo.draft_min = o.speculation.params.draft_min;
    engine::Engine engine(*m.model, tok, eo);
    const std::unique_ptr<VisionModel> vision = load_vision(m, o.vision, false);
    std::vector<RgbImage> images;  // of the whole conversation, in order: one media marker each
    std::vector<RgbImage> attached;  // for the next message (/image)

    const bool tty = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
    // Ctrl-C sets a flag instead of ending the process; no SA_RESTART, so a blocked read returns.
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    if (tty) {
        rl_initialize();
        using_history();
    }
    fmt::print(stderr,
               "vkllm chat: template '{}', context {} tokens. /reset starts over, /exit (or Ctrl-D) quits, "
               "Ctrl-C stops an answer.{}\n",
               tmpl.name(), m.model->n_ctx(), vision ? " /image PATH attaches a picture to your next message." : "");

    using json = nlohmann::ordered_json;
    json tools = nullptr;
    answer::ToolChoice choice = answer::ToolChoice::Auto;
    std::string choice_name;
    const answer::ToolFormat& format = answer::detect_tool_format(tmpl.source());
    if (!o.tools_file.empty()) {
        const std::optional<std::string> text = read_whole_file(o.tools_file);
        if (!text) throw std::invalid_argument(fmt::format("--tools {}: cannot read the file", o.tools_file));
        tools = json::parse(*text, nullptr, false);
        if (tools.is_discarded()) throw std::invalid_argument(fmt::format("--tools {}: not valid JSON", o.tools_file));
        try {
            answer::check_tools(tools);
        } catch (const answer::ToolError& e) {
            throw std::invalid_argument(fmt::format("--tools {}: {}", o.tools_file, e.what()));
        }
        try {
            choice = answer::parse_tool_choice(o.tool_choice, choice_name);
            // Checked now: a format that cannot be parsed or forced is an error before the first turn.
            (void)answer::plan_tool_use(format, answer::template_renders_tools(tmpl.source()), tools, choice,
                                        choice_name, false);
        } catch (const answer::ToolError& e) {
            throw std::invalid_argument(fmt::format("--tool-choice {}: {}", o.tool_choice, e.what()));
        }
        fmt::print(stderr, "vkllm chat: {} tools, calls in the '{}' format; after a call, type its result.\n",
                   tools.size(), format.name);
    }

    json messages = json::array();
    auto reset = [&] {
        messages = json::array();
        if (!o.system.empty()) messages.push_back({{"role", "system"}, {"content", o.system}});
    };
    reset();
    // One assistant turn: generated, streamed and added to the conversation. The calls it made
    // (none without tools); false when it could not run.
    auto answer_turn = [&](answer::ToolChoice turn_choice, std::vector<answer::ToolCall>& calls) -> bool {
        calls.clear();
        json turn_messages = messages;
        answer::ToolPlan plan;
        engine::CompletionRequest req;
        try {
            // One call per turn: the user answers each before the model goes on.
            plan = answer::plan_tool_use(format, answer::template_renders_tools(tmpl.source()), tools, turn_choice,
                                         choice_name, false);
            answer::add_system_text(turn_messages, plan.system_text);
            chat_template::ChatInputs in = chat_template::chat_inputs(tok, turn_messages, tools, nullptr);
            const std::string rendered = tmpl.apply(in);
            MultimodalPrompt mm = build_multimodal_prompt(
                tok, vision.get(), answer::forced_prompt(rendered, plan), images, true, true,
                [&](std::string_view piece) { return chat_template::encode_prompt(tok, std::string(piece)); },
                private_media_marker());
            req.prompt = std::move(mm.tokens);
            req.images = std::move(mm.images);
            if (plan.grammar) {
                req.grammar = plan.grammar;
                if (!plan.forced) {  // 'auto': the calls follow their parameters from the call marker on
                    req.grammar_start.triggers = plan.triggers;
                    if (const answer::ReasoningTags* thinks = answer::reasoning_tags(tmpl.source()))
                        answer::skip_reasoning(req.grammar_start, answer::prompt_opens_reasoning(rendered, *thinks),
                                               *thinks);
                }
            }
        } catch (const std::exception& e) {  // a template error, a tool the format cannot force
            fmt::print(stderr, "error: {}\n", e.what());
            return false;
        }
        const bool harmony = answer::template_is_harmony(tmpl.source());
        if (plan.parse_as || harmony) req.shown_control_tokens = chat_template::tool_control_tokens(tok, format);
        req.max_tokens = o.n_predict;
        req.sampler.temperature = o.temperature;
        req.sampler.top_k = o.top_k;
        req.sampler.top_p = o.top_p;
        req.sampler.min_p = o.min_p;
        req.sampler.repeat_penalty = o.repeat_penalty;
        req.sampler.seed = o.seed_set ? o.seed : uint64_t(std::random_device{}());
        std::unique_ptr<engine::Ticket> t;
        try {
            t = engine.submit(std::move(req));
        } catch (const std::invalid_argument& e) {
            fmt::print(stderr, "{} (use /reset, or a larger --ctx)\n", e.what());
            return false;
        }
        // Calls split off; a Harmony answer's reasoning too (other templates' blocks are shown as written).
        answer::AnswerFormat answer_format;
        answer_format.harmony = harmony;
        answer_format.plan = &plan;
        answer_format.tools = tools;
        answer::AnswerStream reply(answer_format);
        g_interrupted = false;
        std::string answer;
        bool thinking = false;
        // A Harmony answer's reasoning is shown as it comes, marked, and kept out of the conversation.
        auto show = [&](const std::string& reasoning, const std::string& content) {
            if (!reasoning.empty()) {
                if (!thinking) fmt::print("(thinking) ");
                thinking = true;
                fmt::print("{}", reasoning);
            }
            if (!content.empty()) {
                if (thinking) fmt::print("\n");
                thinking = false;
                answer += content;
                fmt::print("{}", content);
            }
            std::fflush(stdout);
        };
        for (;;) {
            if (g_interrupted) {
                t->cancel();
                g_interrupted = false;
            }
            std::optional<engine::Event> e = t->next(50ms);
            if (!e) continue;
            if (e->kind == engine::Event::Kind::Text) {
                const answer::AnswerStream::Piece p = reply.push(e->text);
                show(p.reasoning, p.content);
                continue;
            }
            answer::AnswerStream::Rest rest = reply.finish(engine::cut_short(e->finish));
            show(rest.reasoning, rest.content);
            calls = std::move(rest.calls);
            for (const answer::ToolCall& c : calls)
                fmt::print("{}[tool call] {}({})", answer.empty() ? "" : "\n", c.name, c.arguments);
            fmt::print("\n");
            std::fflush(stdout);  // the answer before the notes on stderr
            if (e->finish == engine::FinishReason::Cancelled) fmt::print(stderr, "(stopped)\n");
            if (e->finish == engine::FinishReason::Error) fmt::print(stderr, "error: {}\n", e->error);
            if (e->finish == engine::FinishReason::Length && o.n_predict < 0)
                fmt::print(stderr, "(the context is full: /reset to start over)\n");
            if (o.show_stats)
                fmt::print(stderr,
                           "[{} prompt tokens, {} reused from the cache, {:.0f} ms to first token; {} tokens in "
                           "{:.0f} ms{}]\n",
                           e->prompt_tokens, e->cached_tokens, e->prompt_ms, e->completion_tokens, e->generate_ms,
                           spec.drafter ? fmt::format("; {} of {} drafts kept", e->accepted_tokens, e->draft_tokens)
                                        : std::string());
            break;
        }
        json msg = {{"role", "assistant"}, {"content", answer}};
        if (!calls.empty()) {
            msg["tool_calls"] = answer::tool_calls_json(calls, format.family, false);
            answer::arguments_as_objects(msg);
        }
        messages.push_back(std::move(msg));
        return true;
    };

    std::string line;
    while (read_line(tty, line)) {
        if (line == "/exit" || line == "/quit") break;
        if (line == "/reset") {
            reset();
            images.clear();
            attached.clear();
            fmt::print(stderr, "(conversation cleared)\n");
            continue;
        }
        if (line.rfind("/image", 0) == 0) {
            const std::string path = line.size() > 7 ? line.substr(7) : "";
            if (!vision || path.empty()) {
                fmt::print(stderr, "{}\n",
                           vision ? "usage: /image PATH" : "images need a vision encoder: start with --mmproj");
                continue;
            }
            try {
                attached.push_back(read_image(path, o.vision.limits(), "/image"));
                fmt::print(stderr, "(image {} attached to your next message: {} x {})\n", path, attached.back().nx,
                           attached.back().ny);
            } catch (const std::exception& e) {
                fmt::print(stderr, "error: {}\n", e.what());
            }
            continue;
        }
        if (line.empty()) continue;
        // Attached images go before the message's text, as llama.cpp's mtmd-cli puts them, marked by a
        // private marker: text that quotes <__media__> stays text.
        std::string content;
        for (size_t i = 0; i < attached.size(); ++i) content += private_media_marker();
        content += line;
        const size_t images_before = images.size();
        images.insert(images.end(), attached.begin(), attached.end());
        attached.clear();
        messages.push_back({{"role", "user"}, {"content", content}});
        std::vector<answer::ToolCall> calls;
        if (!answer_turn(choice, calls)) {
            messages.erase(messages.end() - 1);
            images.resize(images_before);
            continue;
        }
        // The user answers each call; the model then goes on (choosing freely: a required choice
        // holds for the turn after the user's message only, or it would call forever).
        bool ended = false;
        while (!calls.empty() && !ended) {
            const json& sent = messages.back()["tool_calls"];
            for (size_t i = 0; i < calls.size(); ++i) {
                fmt::print(stderr, "result of {}: ", calls[i].name);
                std::string result;
                if (!read_line(false, result)) {
                    ended = true;
                    break;
                }
                messages.push_back(
                    {{"role", "tool"}, {"tool_call_id", sent[i]["id"]}, {"name", calls[i].name}, {"content", result}});
            }
            if (!ended && !answer_turn(answer::ToolChoice::Auto, calls)) break;
        }
        if (ended) break;
    }
}

}  // namespace

void register_chat(CLI::App& app) {
    auto o = std::make_shared<ChatOptions>();
    CLI::App* cmd = app.add_subcommand("chat", "Interactive chat in the terminal, in the model's chat format");
    cmd->add_option("-m,--model", o->model, "GGUF model (default: stories260K from ../shared/models)");
    cmd->add_option("-s,--system", o->system, "System prompt");
    cmd->add_option("--chat-template", o->chat_template,
                    "Built-in template name or a Jinja file (default: the model's own, else one guessed from its "
                    "architecture); see `vkllm chat-template`");
    cmd->add_option("--ctx", o->n_ctx, "Context length (tokens of the whole conversation)")->check(positive_number());
    cmd->add_option("-n,--n-predict", o->n_predict, "Most tokens per answer (-1: until the model stops)")
        ->check(CLI::Range(-1, 1 << 30));
    cmd->add_option("--temp", o->temperature, "Temperature (0 = greedy)")->check(non_negative_number());
    cmd->add_option("--top-k", o->top_k, "Top-k (<= 0: off)");
    cmd->add_option("--top-p", o->top_p, "Top-p");
    cmd->add_option("--min-p", o->min_p, "Min-p");
    cmd->add_option("--repeat-penalty", o->repeat_penalty, "Repetition penalty (1: off)");
    cmd->add_option("--seed", o->seed, "Sampling seed (default: random)")->each([o](const std::string&) {
        o->seed_set = true;
    });
    cmd->add_flag("--stats", o->show_stats, "Print prompt/cache/timing figures after each answer");
    cmd->add_option("--tools", o->tools_file,
                    "JSON file with OpenAI's tools array: the model may call them; you type "
                    "each call's result")
        ->check(CLI::ExistingFile);
    cmd->add_option("--tool-choice", o->tool_choice,
                    "auto, none, required, or a tool's name (forces a call in the turn "
                    "after each message of yours)")
        ->needs("--tools");
    o->vision.add_to(cmd, false);
    o->speculation.add_to(cmd);
    o->device.add_to(cmd);
    o->device.add_split_to(cmd);
    o->device.add_tune_to(cmd);
    cmd->callback([o] { chat(*o); });
}

}  // namespace vkllm::apps
