// Tool calls (serving/answer/tool_calls.h): the family each real chat template of
// ../shared/templates speaks; replies rendered by those templates themselves parsed back into the
// calls they were rendered from, whole and streamed in any pieces; call markup never leaking into
// streamed content; malformed calls coming back as content; forced calls whose grammar accepts the
// calls the parser reads and refuses the ones it must not; the checks on `tools`.
//
// The oracle for the round trips is the model's own template: what it renders for an assistant
// turn with tool calls is what the model was trained to write, so the parser must read it back.
//
// This file: the families' rows, detection, and the round trips through the real templates; the
// parsing details, the grammars and the streams have files of their own (test_tool_call_*.cpp),
// with their helpers in tool_call_testing.h.
#include "support/tool_call_testing.h"

using namespace vkllm::tool_call_testing;

namespace {

// The families' expected table entries, as the header documents them.
const std::map<std::string, ToolFamily>& expected_families() {
    static const std::map<std::string, ToolFamily> m = {
        {"Qwen-Qwen2.5-7B-Instruct", ToolFamily::Hermes},
        {"Qwen-Qwen3-0.6B", ToolFamily::Hermes},
        {"Qwen-QwQ-32B", ToolFamily::Hermes},
        {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", ToolFamily::Hermes},
        {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", ToolFamily::Hermes},
        {"Qwen3-Coder", ToolFamily::QwenCoder},
        {"meta-llama-Llama-3.1-8B-Instruct", ToolFamily::Llama3},
        {"meta-llama-Llama-3.2-3B-Instruct", ToolFamily::Llama3},
        {"meta-llama-Llama-3.3-70B-Instruct", ToolFamily::Llama3},
        {"mistralai-Mistral-Nemo-Instruct-2407", ToolFamily::MistralNemo},
        {"Mistral-Small-3.2-24B-Instruct-2506", ToolFamily::MistralV11},
        {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B", ToolFamily::DeepSeekR1},
        {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", ToolFamily::DeepSeekR1},
        {"deepseek-ai-DeepSeek-V3.1", ToolFamily::DeepSeekV31},
        {"meetkai-functionary-medium-v3.1", ToolFamily::FunctionaryV31},
        {"meetkai-functionary-medium-v3.2", ToolFamily::FunctionaryV32},
        {"ibm-granite-granite-3.3-2B-Instruct", ToolFamily::Granite},
        {"moonshotai-Kimi-K2", ToolFamily::KimiK2},
        {"GLM-4.6", ToolFamily::Glm45},
        {"CohereForAI-c4ai-command-r-plus-tool_use", ToolFamily::CommandRPlus},
        {"openai-gpt-oss-120b", ToolFamily::Harmony},
        {"google-gemma-2-2b-it", ToolFamily::Generic},
        {"microsoft-Phi-3.5-mini-instruct", ToolFamily::Generic},
        {"HuggingFaceTB-SmolLM3-3B", ToolFamily::Generic},
    };
    return m;
}

}  // namespace

TEST_CASE("tool calls: every family has its row, with the force kind the header documents") {
    // Several rows may share a family (the unsupported formats each have one, for detection);
    // tool_format() gives the family's own row.
    for (const ToolFormat& f : vkllm::answer::tool_formats()) {
        INFO("row: " << std::string(f.name));
        CHECK(tool_format(f.family).family == f.family);
        CHECK(std::string(f.name).size() > 0);
    }
    const std::vector<ToolFamily> parsed = {
        ToolFamily::Generic,        ToolFamily::Hermes,         ToolFamily::QwenCoder,  ToolFamily::Llama3,
        ToolFamily::MistralNemo,    ToolFamily::MistralV11,     ToolFamily::DeepSeekR1, ToolFamily::DeepSeekV31,
        ToolFamily::FunctionaryV31, ToolFamily::FunctionaryV32, ToolFamily::Granite,    ToolFamily::KimiK2,
        ToolFamily::Glm45,          ToolFamily::CommandRPlus,   ToolFamily::CommandR7B, ToolFamily::Harmony};
    for (ToolFamily f : parsed) CHECK(tool_format(f).family == f);
    CHECK(vkllm::answer::tool_formats().size() == parsed.size());
    // A call object names its tool in JSON; NamedMarkup families in markup (text, or control tokens
    // the request speaks); gpt-oss in the header the prompt holds.
    for (ToolFamily f : {ToolFamily::Hermes, ToolFamily::Llama3, ToolFamily::MistralNemo, ToolFamily::Granite, ToolFamily::Generic,
                         ToolFamily::CommandRPlus, ToolFamily::CommandR7B})
        CHECK(tool_format(f).force == ForceKind::CallObject);
    for (ToolFamily f : {ToolFamily::QwenCoder, ToolFamily::FunctionaryV31, ToolFamily::FunctionaryV32, ToolFamily::Glm45,
                         ToolFamily::MistralV11, ToolFamily::DeepSeekR1, ToolFamily::DeepSeekV31, ToolFamily::KimiK2})
        CHECK(tool_format(f).force == ForceKind::NamedMarkup);
    CHECK(tool_format(ToolFamily::Harmony).force == ForceKind::NamedPrefix);
    // Formats that hold several calls in one reply, as their templates render them.
    for (ToolFamily f : {ToolFamily::Hermes, ToolFamily::QwenCoder, ToolFamily::MistralNemo, ToolFamily::DeepSeekV31,
                         ToolFamily::FunctionaryV32, ToolFamily::Granite, ToolFamily::KimiK2, ToolFamily::Glm45,
                         ToolFamily::CommandRPlus, ToolFamily::CommandR7B})
        CHECK(tool_format(f).parallel);
}

TEST_CASE("tool calls: each real template is detected as the family its model speaks") {
    if (!have_templates()) return;
    const auto files = template_files();
    for (const auto& [name, family] : expected_families()) {
        CAPTURE(name);
        REQUIRE_MESSAGE(fs::exists(kRoot / "templates" / (name + ".jinja")), "template missing");
        const std::string source = read_file(kRoot / "templates" / (name + ".jinja"));
        const ToolFormat& got = vkllm::answer::detect_tool_format(source);
        INFO("detected " << std::string(got.name) << ", expected " << std::string(tool_format(family).name));
        CHECK(got.family == family);
    }
    for (const auto& [name, file] : files)
        if (!expected_families().count(name))
            MESSAGE(name << ": detected as " << std::string(vkllm::answer::detect_tool_format(file.source).name) << " (not checked)");
}

TEST_CASE("tool calls: template_renders_tools agrees with what the template renders") {
    if (!have_templates()) return;
    // The oracle: a template renders `tools` when its prompt changes with them.
    for (const auto& [name, file] : template_files()) {
        CAPTURE(name);
        ChatTemplate t(file.source, name);
        std::optional<bool> differs;
        std::string error;
        // Some templates refuse a system message (Gemma): then without one.
        for (bool with_system : {true, false}) {
            if (differs) break;
            ChatInputs in;
            if (with_system) in.messages.push_back({{"role", "system"}, {"content", "You are helpful."}});
            in.messages.push_back({{"role", "user"}, {"content", "What is the weather like in Paris?"}});
            in.bos_token = file.bos;
            in.eos_token = file.eos;
            in.now = "2024-07-26 00:00:00";
            // Hermes 2 Pro and Command R iterate `tools` unconditionally: for them "without" is an
            // empty list.
            for (const Json& none : {Json(nullptr), Json::array()}) {
                if (differs) break;
                try {
                    in.tools = none;
                    const std::string without = t.apply(in);
                    in.tools = both_tools();
                    differs = t.apply(in) != without;
                } catch (const std::exception& e) {
                    error = e.what();
                }
            }
        }
        if (!differs) {
            MESSAGE(name << ": cannot render (" << error << "), not checked");
            continue;
        }
        CHECK(vkllm::answer::template_renders_tools(file.source) == *differs);
    }
}

TEST_CASE("tool calls: calls rendered by each model's own template parse back, whole and streamed") {
    if (!have_templates()) return;
    const Json d_tool_call = Json::parse(read_file(kRoot / "messages" / "d_tool_call.json"));
    Json tools = d_tool_call["tools"];
    tools.push_back(time_tool());
    tools.push_back(options_tool());
    const std::string system = d_tool_call["messages"][0]["content"].get<std::string>();
    const std::string user = d_tool_call["messages"][1]["content"].get<std::string>();
    // The families whose templates must render a call this runtime reads back.
    const std::vector<std::string> must = {
        "Qwen-Qwen2.5-7B-Instruct", "Qwen3-Coder", "meta-llama-Llama-3.1-8B-Instruct",
        "mistralai-Mistral-Nemo-Instruct-2407", "Mistral-Small-3.2-24B-Instruct-2506", "deepseek-ai-DeepSeek-V3.1",
        "deepseek-ai-DeepSeek-R1-Distill-Llama-8B", "meetkai-functionary-medium-v3.1", "meetkai-functionary-medium-v3.2",
        "moonshotai-Kimi-K2", "GLM-4.6", "CohereForAI-c4ai-command-r-plus-tool_use"};
    // The turn ends here in what a template renders; generation stops at these tokens.
    const std::vector<std::string> end_of_turn = {"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "</s>",
                                                  "<｜end▁of▁sentence｜>"};

    const auto files = template_files();
    size_t round_trips = 0, lazy_checked = 0, forced_checked = 0;
    for (const auto& [name, family] : expected_families()) {
        // Harmony's round trips are test_harmony's: its replies are read by HarmonyStream.
        if (family == ToolFamily::Generic || family == ToolFamily::Harmony) continue;
        CAPTURE(name);
        const TemplateFile& file = files.at(name);
        const bool required = std::find(must.begin(), must.end(), name) != must.end();
        const ToolFormat& format = tool_format(family);
        ChatTemplate tmpl(file.source, name);
        // Ids of nine characters: Mistral's templates refuse any other. The assistant's text, where
        // its template renders it beside the calls, is the reply's content.
        const std::vector<std::pair<std::string, std::vector<WantCall>>> turns = {
            {"", {weather_call("call00001")}},
            {"", {weather_call("call00001"), time_call("call00002")}},
            {"Let me check.", {weather_call("call00001")}},
            {"", {options_call("call00003")}}};
        for (const auto& [text, calls] : turns) {
            if (calls.size() > 1 && !format.parallel) continue;
            CAPTURE(calls.size());
            CAPTURE(text);
            // Templates disagree on what an assistant turn with calls looks like in the messages:
            // most take arguments as an object, DeepSeek R1's and Functionary v3.2's concatenate
            // them as a string; R1's drops the calls unless content is null, Command R+'s writes a
            // null content as "None" (so "" is tried first); some want a system message, some do
            // without. The first shape that renders every call is used.
            std::optional<std::string> reply;
            std::string last_error = "the calls do not appear in the render";
            for (bool with_system : {true, false}) {
                for (bool string_args : {false, true}) {
                    for (bool null_content : {false, true}) {
                        if (reply) break;
                        Json prompt = Json::array();
                        if (with_system) prompt.push_back({{"role", "system"}, {"content", system}});
                        prompt.push_back({{"role", "user"}, {"content", user}});
                        Json tool_calls = Json::array();
                        for (const auto& c : calls) {
                            const Json args = string_args ? Json(c.arguments.dump()) : c.arguments;
                            tool_calls.push_back({{"id", c.id},
                                                  {"type", "function"},
                                                  {"function", {{"name", c.name}, {"arguments", args}}}});
                        }
                        Json conversation = prompt;
                        conversation.push_back({{"role", "assistant"},
                                                {"content", null_content && text.empty() ? Json(nullptr) : Json(text)},
                                                {"tool_calls", tool_calls}});
                        ChatInputs in;
                        in.tools = tools;
                        in.bos_token = file.bos;
                        in.eos_token = file.eos;
                        in.now = "2024-07-26 00:00:00";
                        std::string gen, full;
                        try {
                            in.messages = prompt;
                            in.add_generation_prompt = true;
                            gen = tmpl.apply(in);
                            in.messages = conversation;
                            in.add_generation_prompt = false;
                            full = tmpl.apply(in);
                        } catch (const std::exception& e) {
                            last_error = e.what();
                            continue;
                        }
                        if (!starts_with(full, gen)) {
                            // DeepSeek R1 and QwQ open a reasoning block in the generation prompt
                            // (and close it at once when thinking is off) that their rendered
                            // history does not show; reasoning is split off before calls are
                            // parsed, so the reply begins where the prompt did before that block.
                            for (std::string_view opener : {"<think>\n</think>", "<think>\n", "<think>"})
                                if (ends_with(gen, opener) && starts_with(full, gen.substr(0, gen.size() - opener.size()))) {
                                    gen.resize(gen.size() - opener.size());
                                    break;
                                }
                        }
                        std::string r;
                        if (starts_with(full, gen)) {
                            r = full.substr(gen.size());
                        } else {
                            // Command R+'s template ends every prompt with an instruction after the
                            // history, and the reply's turn goes in before it: the prompt without
                            // the generation prompt's header is history + ending, the conversation
                            // history + header + reply + ending.
                            std::string base;
                            try {
                                in.messages = prompt;
                                in.add_generation_prompt = false;
                                base = tmpl.apply(in);
                            } catch (const std::exception& e) {
                                last_error = e.what();
                                continue;
                            }
                            std::optional<std::string> cut;
                            if (starts_with(gen, base) && gen.size() > base.size()) {
                                const std::string header = gen.substr(base.size());
                                // The history ends at or before where the two renders part.
                                size_t common = 0;
                                while (common < base.size() && common < full.size() && base[common] == full[common]) ++common;
                                for (size_t n = common + 1; n > 0 && !cut; --n) {
                                    const size_t k = n - 1;
                                    const std::string history = base.substr(0, k), ending = base.substr(k);
                                    if (full.size() >= base.size() + header.size() && starts_with(full, history + header) &&
                                        ends_with(full, ending))
                                        cut = full.substr(k + header.size(), full.size() - base.size() - header.size());
                                }
                            }
                            if (!cut) {
                                last_error = "the render of the conversation does not begin with the generation prompt";
                                continue;
                            }
                            r = *cut;
                        }
                        // Qwen3 and GLM show the last assistant turn's (empty) reasoning before
                        // its content; that is reasoning, split off before calls are parsed.
                        if (starts_with(r.substr(std::min(r.size(), r.find_first_not_of(" \n"))), "<think>")) {
                            const size_t close = r.find("</think>");
                            if (close != std::string::npos) {
                                r.erase(0, close + std::string_view("</think>").size());
                                r.erase(0, r.find_first_not_of(" \n"));
                            }
                        }
                        size_t cut = r.size();
                        for (const std::string& eot : end_of_turn) cut = std::min(cut, r.find(eot));
                        if (!file.eos.empty()) cut = std::min(cut, r.find(file.eos));
                        r.resize(cut);
                        bool all = true;
                        for (const auto& c : calls) all = all && r.find(c.name) != std::string::npos;
                        // Templates that drop the text beside calls (Llama 3's) are read without it.
                        if (all && (text.empty() || r.find(text) != std::string::npos)) reply = r;
                    }
                }
            }
            if (!reply) {
                if (required && calls.size() == 1 && text.empty())
                    FAIL_CHECK(name << " cannot render a call: " << last_error);
                else
                    MESSAGE(name << ": cannot render " << calls.size() << " call(s): " << last_error);
                continue;
            }
            MESSAGE(name << " (" << std::string(format.name) << "), " << calls.size() << " call(s), reply:\n" << *reply);
            // Ids come back only where the model writes them: Mistral's formats the ones it was
            // given, Kimi K2 the ones its template makes of the name and the call's index.
            std::vector<WantCall> want = calls;
            for (size_t i = 0; i < want.size(); ++i) {
                const std::string kimi_id = "functions." + want[i].name + ":" + std::to_string(i);
                if (reply->find(want[i].id) == std::string::npos) want[i].id.clear();
                if (reply->find(kimi_id) != std::string::npos) want[i].id = kimi_id;
            }
            check_reply(format, tools, *reply, text, want);
            ++round_trips;
            // tool_choice required: the forced grammar takes the calls the model was trained to write
            // after the forced prefix (control-token markers as their text: a request with tools
            // speaks them).
            if (text.empty() && (format.force != ForceKind::NamedPrefix || calls.size() == 1)) {
                const std::string only = format.force == ForceKind::NamedPrefix ? calls[0].name : std::string();
                vkllm::answer::ForcedCall fc;
                REQUIRE_NOTHROW(fc = vkllm::answer::forced_call(format, tools, only, true));
                CAPTURE(fc.prompt_prefix);
                // The prefix leaves out the call id Mistral's template writes back (the parser takes both).
                std::string written = *reply;
                if (const size_t id = written.find("[CALL_ID]" + calls[0].id); id != std::string::npos)
                    written.erase(id, std::string("[CALL_ID]").size() + calls[0].id.size());
                const auto rest = after_prefix(written, fc.prompt_prefix);
                REQUIRE_MESSAGE(rest.has_value(), "the reply does not begin with the forced prefix");
                std::string body = *rest;
                while (!body.empty() && is_space(std::string_view(body).substr(body.size() - 1))) body.pop_back();
                CHECK_MESSAGE(fit(Grammar::parse(fc.gbnf), body).has_value(), "the forced grammar refuses:\n" << body);
                ++forced_checked;
            }
            // tool_choice auto: the family's lazy grammar holds from the call marker on and must let
            // through the calls the model was trained to write.
            const vkllm::answer::LazyCall lazy = vkllm::answer::lazy_call(format, tools, true);
            if (!lazy.gbnf.empty()) {
                const size_t at = vkllm::grammar::find_trigger(*reply, {lazy.triggers});
                REQUIRE(at != std::string::npos);
                const Grammar g = Grammar::parse(lazy.gbnf);
                Matcher m(g);
                CHECK(m.accept(std::string_view(*reply).substr(at)));
                CHECK(m.can_end());
                ++lazy_checked;
            }
        }
    }
    CHECK(round_trips >= must.size());
    // hermes (Qwen, Hermes), llama3, mistral-nemo, mistral-v11, deepseek, kimi-k2, qwen3-coder, glm-4.5,
    // functionary-v3.1 and v3.2, gpt-oss, command-r-plus (64 renders today); Granite's template renders no calls.
    CHECK(lazy_checked >= 64);
    CHECK(forced_checked >= 20);
}

TEST_CASE("tool calls: a template that concatenates the arguments as text gets them as text (Functionary v3.2)") {
    if (!have_templates()) return;
    const TemplateFile file = template_files().at("meetkai-functionary-medium-v3.2");
    ChatTemplate t(file.source, "functionary-v3.2");
    ChatInputs in;
    in.tools = both_tools();
    in.messages = Json::parse(R"([{"role": "user", "content": "Time in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call00001", "type": "function",
          "function": {"name": "get_time", "arguments": {"timezone": "Europe/Paris"}}}]},
        {"role": "tool", "tool_call_id": "call00001", "content": "12:00"}])");
    std::string prompt;
    REQUIRE_NOTHROW(prompt = t.apply(in));
    CHECK(prompt.find(">>>get_time\n{\"timezone\":\"Europe/Paris\"}") != std::string::npos);
    // Templates that take the object still get the object.
    const TemplateFile qwen = template_files().at("Qwen-Qwen2.5-7B-Instruct");
    const std::string q = ChatTemplate(qwen.source, "qwen").apply(in);
    CHECK(q.find("\"arguments\": {\"timezone\": \"Europe/Paris\"}") != std::string::npos);
}

TEST_CASE("tool calls: a follow-up turn's null content is no text, also for templates that would print None") {
    if (!have_templates()) return;
    const auto files = template_files();
    const Json turn = Json::parse(R"([{"role":"user","content":"Weather?"},{"role":"assistant","content":null,"tool_calls":[)"
                                  R"({"id":"call00001","type":"function","function":{"name":"get_time","arguments":{"timezone":"UTC"}}}]},)"
                                  R"({"role":"tool","tool_call_id":"call00001","content":"12:00"}])");
    std::map<std::string, bool> expected = {{"GLM-4.6", true}, {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B", false},
                                            {"Qwen-Qwen2.5-7B-Instruct", false}, {"CohereForAI-c4ai-command-r-plus-tool_use", true}};
    for (const auto& [name, prints] : expected) {
        CAPTURE(name);
        const TemplateFile& file = files.at(name);
        ChatTemplate tmpl(file.source, name);
        CHECK(tmpl.prints_null_content() == prints);
        ChatInputs in;
        in.messages = turn;
        in.tools = both_tools();
        in.bos_token = file.bos;
        in.eos_token = file.eos;
        in.now = "2024-07-26 00:00:00";
        const std::string out = tmpl.apply(in);
        CHECK(out.find("get_time") != std::string::npos);  // R1's template shows the call only for a null content
        if (prints) {
            // As if the client had sent "": no "None" for the null.
            ChatInputs empty = in;
            empty.messages[1]["content"] = "";
            CHECK(out == tmpl.apply(empty));
        }
    }
    // GLM-4.6 writes the content as it is: no "None" anywhere.
    {
        const TemplateFile& file = files.at("GLM-4.6");
        ChatTemplate tmpl(file.source, "GLM-4.6");
        ChatInputs in;
        in.messages = turn;
        CHECK(tmpl.apply(in).find("None") == std::string::npos);
    }
}

TEST_CASE("tool calls: Command R7B plans, acts and responds between its control tokens") {
    // Its own template is not in ../shared/templates: a stand-in written from the format renders
    // the turns as the model writes them (tests/fixtures/templates/command-r7b-format.jinja).
    const std::string src = read_file(fs::path(VKLLM_FIXTURES_DIR) / "templates" / "command-r7b-format.jinja");
    const ToolFormat& r7b = vkllm::answer::detect_tool_format(src);
    REQUIRE(r7b.family == ToolFamily::CommandR7B);
    const vkllm::answer::ReasoningTags* thinks = vkllm::answer::reasoning_tags(src);
    REQUIRE(thinks != nullptr);
    CHECK(thinks->open == "<|START_THINKING|>");
    const Json tools = both_tools();

    // The template's render of an assistant turn with a plan and two calls, after the generation
    // prompt and up to the end of the turn: what the model was trained to write.
    ChatTemplate tmpl(src, "command-r7b-format");
    ChatInputs in;
    in.tools = tools;
    in.bos_token = "<BOS_TOKEN>";
    in.messages = Json::array({{{"role", "user"}, {"content", "Weather and time in Paris?"}}});
    in.add_generation_prompt = true;
    const std::string prompt = tmpl.apply(in);
    Json assistant = {{"role", "assistant"}, {"content", nullptr}, {"reasoning_content", "I will look both up."}};
    assistant["tool_calls"] = Json::array();
    for (const WantCall& c : {weather_call(), time_call()})
        assistant["tool_calls"].push_back({{"id", "call_" + c.name}, {"type", "function"},
                                           {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    in.messages.push_back(assistant);
    in.add_generation_prompt = false;
    std::string reply = tmpl.apply(in);
    REQUIRE(starts_with(reply, prompt));
    reply.erase(0, prompt.size());
    REQUIRE(ends_with(reply, "<|END_OF_TURN_TOKEN|>"));
    reply.resize(reply.size() - std::string_view("<|END_OF_TURN_TOKEN|>").size());
    MESSAGE("rendered reply:\n" << reply);

    // Read as every front end reads it: the plan is reasoning, the actions are the calls, nothing
    // is content; in any pieces.
    vkllm::answer::ToolPlan plan;
    plan.parse_as = &r7b;
    vkllm::answer::AnswerFormat f;
    f.split_reasoning = thinks;
    f.plan = &plan;
    f.tools = tools;
    auto read = [&](const std::string& text, size_t piece) { return read_answer(f, text, piece); };
    for (size_t piece : {reply.size(), size_t(1), size_t(5)}) {
        CAPTURE(piece);
        const auto r = read(reply, piece);
        CHECK(r.reasoning == "I will look both up.");
        CHECK(r.content.empty());
        check_calls(r.calls, {weather_call(), time_call()});
        // A response: its markers are not content.
        const auto answer = read("<|START_RESPONSE|>It is 21 C in Paris.<|END_RESPONSE|>", piece);
        CHECK(answer.content == "It is 21 C in Paris.");
        CHECK(answer.calls.empty());
    }
    // Without a plan, and the tool_call_id (the call's place in the conversation) is no id.
    check_reply(r7b, tools, "<|START_ACTION|>[{\"tool_call_id\": \"3\", \"tool_name\": \"get_time\", \"parameters\": "
                            "{\"timezone\": \"Europe/Paris\"}}]<|END_ACTION|>", "", {time_call()});
    // Malformed actions come back as written; a response marker is dropped from the content all the same.
    check_reply(r7b, tools, "<|START_RESPONSE|>Hi<|END_RESPONSE|><|START_ACTION|>[{\"tool_name\": \"nope\"}]<|END_ACTION|>",
                "Hi<|START_ACTION|>[{\"tool_name\": \"nope\"}]<|END_ACTION|>", {});
    check_reply(r7b, tools, "<|START_ACTION|>[]<|END_ACTION|>", "<|START_ACTION|>[]<|END_ACTION|>", {});
    // A marker's beginning at the end is text.
    check_reply(r7b, tools, "Hi <|START_RESP", "Hi <|START_RESP", {});
    // reasoning_format none: the plan stays in the content, its markers do not.
    vkllm::answer::AnswerFormat inline_plan = f;
    inline_plan.split_reasoning = nullptr;
    f = inline_plan;
    const auto inlined = read("<|START_THINKING|>Easy.<|END_THINKING|><|START_RESPONSE|>Hi.<|END_RESPONSE|>", 3);
    CHECK(inlined.reasoning.empty());
    CHECK(inlined.content == "Easy.Hi.");

    // tool_choice required: the prompt opens the action list, the grammar holds the rest as the
    // template writes it and refuses arguments the tool does not take.
    const vkllm::answer::ForcedCall fc = vkllm::answer::forced_call(r7b, tools, "", true);
    CHECK(fc.prompt_prefix == "<|START_ACTION|>");
    const size_t action = reply.find("<|START_ACTION|>");
    REQUIRE(action != std::string::npos);
    const Grammar forced = Grammar::parse(fc.gbnf);
    const std::string actions = reply.substr(action + fc.prompt_prefix.size());
    CHECK_MESSAGE(fit(forced, actions).has_value(), "the forced grammar refuses:\n" << actions);
    CHECK_FALSE(fit(forced, R"([{"tool_call_id": "0", "tool_name": "get_time", "parameters": {"tz": "UTC"}}]<|END_ACTION|>)"));
    CHECK_FALSE(fit(forced, R"([{"tool_call_id": "0", "tool_name": "get_news", "parameters": {}}]<|END_ACTION|>)"));
    CHECK_FALSE(fit(forced, R"([]<|END_ACTION|>)"));
    // tool_choice auto: free until <|START_ACTION|>, not inside the plan.
    const vkllm::answer::LazyCall lazy = vkllm::answer::lazy_call(r7b, tools, true);
    REQUIRE(!lazy.gbnf.empty());
    vkllm::grammar::LazyStart start{lazy.triggers};
    vkllm::answer::skip_reasoning(start, false, *thinks);
    const size_t at = vkllm::grammar::find_trigger(reply, start);
    CHECK(at == action);
    const Grammar lg = Grammar::parse(lazy.gbnf);
    CHECK(fit(lg, reply.substr(at)).has_value());
    CHECK(vkllm::grammar::find_trigger("<|START_THINKING|>Maybe <|START_ACTION|>?", start) == std::string::npos);
    CHECK(vkllm::grammar::find_trigger("<|START_RESPONSE|>Hi<|END_RESPONSE|>", start) == std::string::npos);
}
