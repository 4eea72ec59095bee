// SentencePiece-style tokenizer: llama.cpp's reference vectors for the LLaMA vocab, decoding
// rules, the stories260K vocab, and robustness on arbitrary bytes.
#include <algorithm>
#include <random>
#include <sstream>

#include "model/gguf/gguf.h"
#include "model/tokenizer/tokenizer.h"
#include "support/model_test_util.h"

using namespace vkllm;

namespace {

std::vector<std::string> split(const std::string& s, const std::string& sep) {
    std::vector<std::string> out;
    size_t from = 0;
    for (size_t at; (at = s.find(sep, from)) != std::string::npos; from = at + sep.size()) out.push_back(s.substr(from, at - from));
    out.push_back(s.substr(from));
    return out;
}

std::vector<int32_t> parse_ids(const std::string& line) {
    std::vector<int32_t> ids;
    std::istringstream in(line);
    for (int32_t id; in >> id;) ids.push_back(id);
    return ids;
}

std::string show(const std::vector<int32_t>& ids) {
    std::string s;
    for (int32_t id : ids) s += std::to_string(id) + " ";
    return s;
}

const std::string kSpace = "\xe2\x96\x81";

}  // namespace

TEST_CASE("tokenizer: llama.cpp reference vectors for the LLaMA SentencePiece vocab") {
    VKLLM_REQUIRE_MODEL(vocab, "ggml-vocab-llama-spm.gguf");
    VKLLM_REQUIRE_MODEL(inp, "ggml-vocab-llama-spm.gguf.inp");
    VKLLM_REQUIRE_MODEL(outp, "ggml-vocab-llama-spm.gguf.out");
    GgufFile f = GgufFile::open(vocab);
    auto tok = make_tokenizer(f);
    REQUIRE(tok->n_vocab() == 32000);
    CHECK(tok->bos_id() == 1);
    CHECK(tok->eos_id() == 2);
    CHECK(tok->unk_id() == 0);
    CHECK(tok->add_bos());

    // Inputs are separated by "\n__ggml_vocab_test__\n" (the file ends with one, leaving an empty
    // last input); outputs are one line each (the file ends with a newline, leaving an empty last
    // line). Both split into 47 items: 46 vectors plus the empty-input case.
    const auto inputs = split(vkllm::test::read_text_file(inp), "\n__ggml_vocab_test__\n");
    const auto outputs = split(vkllm::test::read_text_file(outp), "\n");
    REQUIRE(inputs.size() == 47);
    REQUIRE(outputs.size() == inputs.size());
    int passed = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
        CAPTURE(i);
        CAPTURE(inputs[i]);
        const auto want = parse_ids(outputs[i]);
        const auto got = tok->encode(inputs[i], false);
        CHECK_MESSAGE(got == want, "got:  " << show(got) << "\nwant: " << show(want));
        passed += got == want;
        CHECK(tok->decode(got) == inputs[i]);
        // with BOS: same ids after it, same text back
        auto with_bos = tok->encode(inputs[i], true);
        REQUIRE(!with_bos.empty());
        CHECK(with_bos[0] == 1);
        CHECK(std::vector<int32_t>(with_bos.begin() + 1, with_bos.end()) == got);
        CHECK(tok->decode(with_bos) == inputs[i]);
    }
    MESSAGE(passed << "/" << inputs.size() << " reference vectors match");
}

TEST_CASE("tokenizer: decoding rules") {
    VKLLM_REQUIRE_MODEL(vocab, "ggml-vocab-llama-spm.gguf");
    auto tok = make_tokenizer(GgufFile::open(vocab));
    const int32_t hello = tok->find_token(kSpace + "Hello");
    REQUIRE(hello == 15043);
    CHECK(tok->token_text(hello) == kSpace + "Hello");
    CHECK(tok->token_type(hello) == TokenType::Normal);
    CHECK(tok->token_type(1) == TokenType::Control);
    CHECK(tok->token_type(0) == TokenType::Unknown);
    CHECK(tok->token_type(3 + 0x41) == TokenType::Byte);
    CHECK(tok->token_score(1) == 0.0f);

    CHECK(tok->decode_piece(1, -1).empty());        // control tokens print nothing
    CHECK(tok->decode_piece(2, hello).empty());
    CHECK(tok->decode_piece(hello, 1) == "Hello");  // first piece after BOS loses its space
    CHECK(tok->decode_piece(hello, -1) == "Hello"); // ... and so does the first of a sequence
    CHECK(tok->decode_piece(hello, hello) == " Hello");
    CHECK(tok->decode_piece(3 + 0x0a, hello) == "\n");  // <0x0A>
    CHECK(tok->decode_piece(3 + 0x20, -1) == " ");      // a byte token's space is real text
    CHECK(tok->decode_piece(3 + 0xe2, hello) == "\xe2");
    CHECK(tok->decode_piece(0, hello) == " \xe2\x81\x87 ");  // <unk> as SentencePiece prints it

    const std::vector<int32_t> ids = {1, hello, 29892, 3186, 29991, 2};  // <s> Hello, world!</s>
    CHECK(tok->decode(ids) == "Hello, world!");
    // byte tokens concatenate into UTF-8: "🦙" = F0 9F A6 99
    const std::vector<int32_t> llama = {1, 29871, 3 + 0xf0, 3 + 0x9f, 3 + 0xa6, 3 + 0x99};
    CHECK(tok->decode(llama) == "\xf0\x9f\xa6\x99");
    CHECK(tok->encode("\xf0\x9f\xa6\x99", true) == llama);

    CHECK_THROWS_AS(tok->decode_piece(32000, -1), std::out_of_range);
    CHECK_THROWS_AS(tok->decode_piece(-1, -1), std::out_of_range);
    CHECK_THROWS_AS(tok->token_text(99999), std::out_of_range);
    CHECK(tok->find_token("definitely not a token") == -1);

    CHECK(tok->encode("", true) == std::vector<int32_t>{1});
    CHECK(tok->encode("", false).empty());
    // Special-token text is not parsed: "<s>" is plain text.
    auto s = tok->encode("<s>", false);
    CHECK(std::find(s.begin(), s.end(), 1) == s.end());
    CHECK(tok->decode(s) == "<s>");
}

TEST_CASE("tokenizer: stories260K vocab") {
    VKLLM_REQUIRE_MODEL(path, "stories260K.gguf");
    GgufFile f = GgufFile::open(path);
    auto tok = make_tokenizer(f);
    CHECK(tok->n_vocab() == 512);
    CHECK(tok->bos_id() == 1);
    CHECK(tok->eos_id() == 2);
    CHECK(tok->add_bos());

    const std::string text = "Once upon a time, there was a little girl named Lily. She loved to play outside.";
    auto ids = tok->encode(text, true);
    CHECK(ids[0] == 1);
    for (int32_t id : ids) CHECK((id >= 0 && id < 512));
    CHECK(ids.size() < text.size() / 2);  // a trained vocab merges common English well
    CHECK(tok->decode(ids) == text);
    // "▁Once" is one piece; the first piece after BOS drops its space.
    CHECK(tok->decode_piece(ids[1], ids[0]).front() == 'O');

    // The published greedy output decodes from the ids this tokenizer gives it.
    VKLLM_REQUIRE_MODEL(greedy, "stories260K.greedy200.txt");
    const std::string story = vkllm::test::read_text_file(greedy);
    REQUIRE(!story.empty());
    CHECK(tok->decode(tok->encode(story, true)) == story);
    // Bytes outside the 512-piece vocab fall back to byte tokens and still round trip.
    const std::string odd = "\xce\xbb \xe4\xbd\xa0\xe5\xa5\xbd \t\r\n ~";
    CHECK(tok->decode(tok->encode(odd, false)) == odd);
}

TEST_CASE("tokenizer: arbitrary bytes, invalid UTF-8 included, never crash and round trip") {
    VKLLM_REQUIRE_MODEL(vocab, "ggml-vocab-llama-spm.gguf");
    auto tok = make_tokenizer(GgufFile::open(vocab));
    std::mt19937 rng(7);
    const std::vector<std::string> tricky = {
        "\xff", "\xc3", "\xc3(", "\xe2\x82", "\xe2\x82(", "\xf0\x9f\xa6", "\xed\xa0\x80" /* surrogate */,
        "\xc0\xaf" /* overlong */, "\xf4\x90\x80\x80" /* > U+10FFFF */, "\x80\x80", std::string("a\0b", 3),
        "  \xff  ", "\xe2\x96"};
    for (const std::string& s : tricky) {
        CAPTURE(s);
        auto ids = tok->encode(s, true);
        CHECK(tok->decode(ids) == s);
    }
    // A literal "▁" is SentencePiece's space and decodes as one.
    CHECK(tok->decode(tok->encode("\xe2\x96\x81\xe2\x96", false)) == " \xe2\x96");
    // A stray byte next to a valid character must not swallow it: "\xe4" + "A" keeps the "A" piece.
    auto ids = tok->encode("\xe4" "A", false);
    CHECK(ids == std::vector<int32_t>{tok->find_token(kSpace), 3 + 0xe4, tok->find_token("A")});
    for (int i = 0; i < 2000; ++i) {
        std::string s(rng() % 48, '\0');
        for (char& c : s) c = char(rng() % 4 == 0 ? ' ' : rng());
        if (s.find(kSpace) != std::string::npos) continue;  // a literal "▁" decodes as a space by design
        auto enc = tok->encode(s, i % 2 == 0);
        for (int32_t id : enc) REQUIRE((id >= 0 && id < 32000));
        REQUIRE(tok->decode(enc) == s);
    }
}
