// From a request to prompt ids with a real vocabulary (stories260K: SentencePiece, BOS "<s>") and
// a stand-in chat template: control-token texts become control tokens, BOS is never doubled, the
// context limit is OpenAI's 400.
#include "model/gguf/gguf.h"
#include "serving/server/prompt.h"
#include "support/test_context.h"

#include <doctest/doctest.h>

using namespace vkllm;
using namespace vkllm::server;

namespace {

struct Vocab {
    std::unique_ptr<GgufFile> file;
    std::unique_ptr<Tokenizer> tok;
};

const Vocab* stories() {
    static Vocab v;
    static bool tried = false;
    if (!tried) {
        tried = true;
        std::string path = test::model_path("stories260K.gguf");
        if (path.empty()) return nullptr;
        v.file = std::make_unique<GgufFile>(GgufFile::open(path));
        v.tok = make_tokenizer(*v.file);
    }
    return v.tok ? &v : nullptr;
}

// A template in the spirit of Llama 2's: BOS text first, one line per message.
std::string render(const chat_template::ChatInputs& in) {
    std::string s = in.bos_token;
    for (const auto& m : in.messages) s += m["role"].get<std::string>() + ": " + m["content"].get<std::string>() + "\n";
    if (in.add_generation_prompt) s += "assistant:";
    return s;
}

ParsedRequest chat_request(const std::string& content) {
    return parse_chat_request(json{{"messages", json::array({json{{"role", "user"}, {"content", content}}})}}, 1);
}

}  // namespace

TEST_CASE("prompt: BOS once, whether or not the text starts with it") {
    const Vocab* v = stories();
    if (!v) return;
    const Tokenizer& tok = *v->tok;
    REQUIRE(tok.bos_id() == 1);
    std::vector<int32_t> plain = chat_template::encode_prompt(tok, "Once upon a time");
    CHECK(plain == tok.encode("Once upon a time", true, false));  // what `vkllm run` evaluates
    CHECK(plain.front() == 1);
    std::vector<int32_t> with_bos = chat_template::encode_prompt(tok, "<s>Once upon a time");
    CHECK(with_bos.front() == 1);
    CHECK(with_bos.size() >= 2);
    CHECK(with_bos[1] != 1);
    CHECK(chat_template::encode_prompt(tok, "") == std::vector<int32_t>{1});
}

TEST_CASE("prompt: a chat is rendered with the vocabulary's BOS/EOS texts and tokenized with control tokens") {
    const Vocab* v = stories();
    if (!v) return;
    const Tokenizer& tok = *v->tok;
    chat_template::ChatInputs seen;
    auto spy = [&](const chat_template::ChatInputs& in) {
        seen = in;
        return render(in);
    };
    ParsedRequest req =
        parse_chat_request(json{{"messages", json::array({json{{"role", "user"}, {"content", "Hi"}}})},
                                {"chat_template_kwargs", {{"enable_thinking", false}}},
                                {"tools", json::array({json{{"type", "function"}, {"function", {{"name", "f"}}}}})}},
                           1);
    std::vector<int32_t> ids = prompt_tokens(tok, spy, req, 512);
    CHECK(seen.bos_token == "<s>");
    CHECK(seen.eos_token == "</s>");
    CHECK(seen.add_generation_prompt);
    CHECK(seen.extra["enable_thinking"] == false);
    CHECK(seen.tools.size() == 1);
    CHECK(ids == tok.encode("user: Hi\nassistant:", true, true));  // one BOS: the rendered "<s>"
    CHECK(ids[0] == 1);
    CHECK(ids[1] != 1);
}

TEST_CASE("prompt: template errors are 400s, other failures are not hidden") {
    const Vocab* v = stories();
    if (!v) return;
    auto raising = [](const chat_template::ChatInputs&) -> std::string {
        throw chat_template::TemplateError("template 'x', line 1: Conversation roles must alternate user/assistant");
    };
    try {
        prompt_tokens(*v->tok, raising, chat_request("Hi"), 512);
        FAIL("no error");
    } catch (const ApiError& e) {
        CHECK(e.status() == 400);
        CHECK(e.param() == "messages");
        CHECK(std::string(e.what()).find("roles must alternate") != std::string::npos);
    }
    auto broken = [](const chat_template::ChatInputs&) -> std::string { throw std::runtime_error("disk on fire"); };
    CHECK_THROWS_WITH_AS(prompt_tokens(*v->tok, broken, chat_request("Hi"), 512), "disk on fire", std::runtime_error);
}

TEST_CASE("prompt: completions prompts, token ids, and the context limit") {
    const Vocab* v = stories();
    if (!v) return;
    const Tokenizer& tok = *v->tok;
    ParsedRequest req = parse_completion_request(json{{"prompt", "Once upon a time"}}, 1);
    CHECK(prompt_tokens(tok, {}, req, 512) == tok.encode("Once upon a time", true, true));

    req = parse_completion_request(json{{"prompt", json::array({1, 400, 401})}}, 1);
    CHECK(prompt_tokens(tok, {}, req, 512) == std::vector<int32_t>{1, 400, 401});
    req = parse_completion_request(json{{"prompt", json::array({1, 512})}}, 1);
    try {
        prompt_tokens(tok, {}, req, 512);
        FAIL("no error");
    } catch (const ApiError& e) {
        CHECK(e.status() == 400);
        CHECK(e.param() == "prompt");
    }

    // A prompt must leave room for one generated token.
    std::string long_text;
    for (int i = 0; i < 40; ++i) long_text += "Once upon a time ";
    size_t n = chat_template::encode_prompt(tok, long_text).size();
    req = parse_completion_request(json{{"prompt", long_text}}, 1);
    CHECK(prompt_tokens(tok, {}, req, uint32_t(n + 1)).size() == n);
    try {
        prompt_tokens(tok, {}, req, uint32_t(n));
        FAIL("no error");
    } catch (const ApiError& e) {
        CHECK(e.status() == 400);
        CHECK(e.code() == "context_length_exceeded");
    }
}

TEST_CASE("prompt: --blend-separator splits prefix, documents and question, each tokenized alone") {
    const Vocab* v = stories();
    if (!v) return;
    const Tokenizer& tok = *v->tok;
    std::vector<engine::DocumentSpan> spans;
    const std::vector<int32_t> ids =
        encode_documents(tok, "Stories. ## Lily had a ball. ##  ## Tom ran. ## Who ran?", " ## ", spans);
    // The pieces as encoded alone, the empty document skipped.
    std::vector<int32_t> want = chat_template::encode_prompt(tok, "Stories.");
    const std::vector<int32_t> lily = tok.encode("Lily had a ball.", false, true);
    const std::vector<int32_t> tom = tok.encode("Tom ran.", false, true);
    const std::vector<int32_t> question = tok.encode("Who ran?", false, true);
    const std::vector<engine::DocumentSpan> want_spans{{want.size(), lily.size()},
                                                       {want.size() + lily.size(), tom.size()}};
    for (const auto* p : {&lily, &tom, &question}) want.insert(want.end(), p->begin(), p->end());
    CHECK(ids == want);
    CHECK(spans == want_spans);
    CHECK(std::count(ids.begin(), ids.end(), tok.bos_id()) == 1);
    // No separator in the text, or none configured: the prompt as ever, no documents.
    CHECK(encode_documents(tok, "Once upon a time", " ## ", spans) == chat_template::encode_prompt(tok, "Once upon a time"));
    CHECK(spans.empty());
    CHECK(encode_documents(tok, "a ## b ## c", "", spans) == chat_template::encode_prompt(tok, "a ## b ## c"));
    // One separator: a prefix and a question, no document.
    encode_documents(tok, "a ## b", " ## ", spans);
    CHECK(spans.empty());
    // Through prompt_tokens, for chat and completions alike.
    ParsedRequest chat = chat_request("Read: ## Lily had a ball. ## Who had a ball?");
    std::vector<engine::DocumentSpan> chat_spans;
    prompt_tokens(tok, render, chat, 512, nullptr, 0, {" ## ", &chat_spans});
    CHECK(chat_spans.size() == 1);
}
