// `vkllm chat-template`: renders a chat template over a messages file and prints exactly the
// rendered bytes (nothing added), as the model would be prompted. The template is a built-in
// name, a Jinja file, or the GGUF file's own `tokenizer.chat_template`; with -m only the file's
// metadata and vocabulary are read (no device is opened).
#include "apps/commands.h"
#include "apps/load_model.h"
#include "model/gguf/gguf.h"
#include "model/tokenizer/tokenizer.h"
#include "serving/chat_template/chat_template.h"

#include <fmt/format.h>

#include <cstdio>
#include <stdexcept>

namespace vkllm::apps {

namespace {

struct ChatTemplateOptions {
    std::string model, tmpl, messages, bos, eos, now;
    bool add_generation_prompt = false;
    CLI::Option* bos_opt = nullptr;
    CLI::Option* eos_opt = nullptr;
};

// MSGS.json: an OpenAI-style messages array, or an object with "messages", an optional "tools"
// list, and any further template variables (enable_thinking, ...).
void read_messages(const std::string& path, chat_template::ChatInputs& in) {
    const std::optional<std::string> text = read_whole_file(path);
    if (!text) throw std::invalid_argument(fmt::format("cannot read the messages file '{}'", path));
    nlohmann::ordered_json j;
    try {
        j = nlohmann::ordered_json::parse(*text);
    } catch (const nlohmann::json::exception& e) {
        throw std::invalid_argument(fmt::format("the messages file '{}' is not valid JSON: {}", path, e.what()));
    }
    if (j.is_array()) {
        in.messages = j;
        return;
    }
    if (!j.is_object() || !j.contains("messages") || !j["messages"].is_array())
        throw std::invalid_argument(fmt::format(
            "the messages file '{}' must hold a messages array, or an object with a \"messages\" array", path));
    in.extra = nlohmann::ordered_json::object();
    for (const auto& [k, v] : j.items()) {
        if (k == "messages")
            in.messages = v;
        else if (k == "tools")
            in.tools = v;
        else
            in.extra[k] = v;
    }
    if (!in.tools.is_null() && !in.tools.is_array())
        throw std::invalid_argument(fmt::format("\"tools\" in '{}' must be a list", path));
}

void chat_template(const ChatTemplateOptions& o) {
    if (o.model.empty() && o.tmpl.empty())
        throw std::invalid_argument(
            "no template: give -m M.gguf (its tokenizer.chat_template) or --template NAME|FILE");
    chat_template::ChatInputs in;
    read_messages(o.messages, in);
    in.add_generation_prompt = o.add_generation_prompt;
    in.now = o.now;

    std::string from_model;
    if (!o.model.empty()) {
        const GgufFile file = GgufFile::open(resolve_model_path(o.model));
        if (auto t = file.find_string("tokenizer.chat_template")) from_model = std::string(*t);
        // BOS / EOS default to the vocabulary's own token texts.
        if (file.has("tokenizer.ggml.model") && (!o.bos_opt->count() || !o.eos_opt->count())) {
            const std::unique_ptr<Tokenizer> tok = make_tokenizer(file);
            if (tok->bos_id() >= 0) in.bos_token = std::string(tok->token_text(tok->bos_id()));
            if (tok->eos_id() >= 0) in.eos_token = std::string(tok->token_text(tok->eos_id()));
        }
        if (o.tmpl.empty() && from_model.empty())
            fmt::print(stderr, "vkllm: warning: '{}' has no tokenizer.chat_template; using the built-in chatml\n",
                       o.model);
    }
    if (o.bos_opt->count()) in.bos_token = o.bos;
    if (o.eos_opt->count()) in.eos_token = o.eos;

    const chat_template::ChatTemplate t = chat_template::resolve_chat_template(o.tmpl, from_model);
    const std::string out = t.apply(in);
    std::fwrite(out.data(), 1, out.size(), stdout);
}

}  // namespace

void register_chat_template(CLI::App& app) {
    auto o = std::make_shared<ChatTemplateOptions>();
    auto* cmd = app.add_subcommand("chat-template", "Render a chat template over a messages file (prints the prompt)");
    cmd->add_option("-m,--model", o->model,
                    "GGUF file: its tokenizer.chat_template, BOS and EOS (vocab-only files work)");
    cmd->add_option("--template,--chat-template", o->tmpl,
                    "A built-in template name (chatml, llama2, llama3, mistral, phi3, gemma, zephyr, deepseek, "
                    "deepseek3, vicuna) or a Jinja file; overrides the model's");
    cmd->add_option(
           "--messages", o->messages,
           "JSON file: a messages array, or an object with \"messages\", optional \"tools\" and other variables")
        ->required();
    cmd->add_flag("--add-generation-prompt", o->add_generation_prompt, "End with the assistant turn's opening");
    o->bos_opt = cmd->add_option("--bos", o->bos, "The bos_token text (default: the model's BOS token, else empty)");
    o->eos_opt = cmd->add_option("--eos", o->eos, "The eos_token text (default: the model's EOS token, else empty)");
    cmd->add_option("--now", o->now, "Pin strftime_now() to \"YYYY-MM-DD HH:MM:SS\" (default: the local clock)");
    cmd->callback([o] { chat_template(*o); });
}

}  // namespace vkllm::apps
