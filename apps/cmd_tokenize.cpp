// `vkllm tokenize`: the token ids of a text, as llama.cpp's llama-tokenize prints them. Needs only
// the vocabulary: vocab-only GGUF files (no tensors) work, and no device is opened.
#include "apps/commands.h"
#include "apps/load_model.h"
#include "model/gguf/gguf.h"
#include "model/tokenizer/tokenizer.h"

#include <fmt/format.h>

#include <cstdio>
#include <stdexcept>

namespace vkllm::apps {

namespace {

struct TokenizeOptions {
    std::string model, prompt, file;
    bool ids = false, no_bos = false, parse_special = false, show_count = false;
    CLI::Option* prompt_opt = nullptr;
    CLI::Option* file_opt = nullptr;
};

void tokenize(const TokenizeOptions& o) {
    if (o.prompt_opt->count() && o.file_opt->count())
        throw std::invalid_argument("give the text either with -p or with -f, not both");
    if (!o.prompt_opt->count() && !o.file_opt->count()) throw std::invalid_argument("no text: give -p TEXT or -f FILE");
    std::string text = o.prompt;
    if (o.file_opt->count()) {
        std::optional<std::string> file_text = read_whole_file(o.file);
        if (!file_text) throw std::invalid_argument(fmt::format("cannot read the text file '{}'", o.file));
        text = *std::move(file_text);
    }
    const std::string path = resolve_model_path(o.model);
    GgufFile file = GgufFile::open(path);
    std::unique_ptr<Tokenizer> tok = make_tokenizer(file);
    for (const std::string& w : tok->warnings()) fmt::print(stderr, "vkllm: warning: {}\n", w);

    const std::vector<int32_t> ids = tok->encode(text, !o.no_bos, o.parse_special);
    std::string out;
    if (o.ids) {
        out = "[";
        for (size_t i = 0; i < ids.size(); ++i) out += fmt::format("{}{}", i ? ", " : "", ids[i]);
        out += "]\n";
    } else {
        for (int32_t id : ids) out += fmt::format("{:6d} -> '{}'\n", id, tok->token_to_piece(id, true));
    }
    if (o.show_count) out += fmt::format("Total number of tokens: {}\n", ids.size());
    std::fwrite(out.data(), 1, out.size(), stdout);
}

}  // namespace

void register_tokenize(CLI::App& app) {
    auto o = std::make_shared<TokenizeOptions>();
    auto* cmd = app.add_subcommand("tokenize", "Print the token ids of a text (like llama.cpp's llama-tokenize)");
    cmd->add_option("-m,--model", o->model, "GGUF file with a vocabulary (vocab-only files work)")->required();
    o->prompt_opt = cmd->add_option("-p,--prompt", o->prompt, "Text to tokenize, taken as is (no escape sequences)");
    o->file_opt = cmd->add_option("-f,--file", o->file, "File whose bytes are the text (a final newline included)");
    cmd->add_flag("--ids", o->ids, "Print only the ids, as a list like [1, 2, 3]");
    cmd->add_flag("--no-bos", o->no_bos, "Add no BOS / EOS even when the vocab asks for them");
    cmd->add_flag("--parse-special", o->parse_special,
                  "Turn the text of control tokens (<|eot_id|>, <|im_start|>, ...) into those tokens");
    cmd->add_flag("--show-count", o->show_count, "Print the number of tokens at the end");
    cmd->callback([o] { tokenize(*o); });
}

}  // namespace vkllm::apps
