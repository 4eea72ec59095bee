// Byte-level BPE and the shared special-token rules: special tokens with and without
// parse_special, BOS/EOS defaults, end-of-generation tokens, decoding, an unknown pre-tokenizer,
// and speed (load time, 1 MB of text, pathological runs).
#include <algorithm>
#include <chrono>

#include "model/gguf/gguf.h"
#include "model/gguf/gguf_writer.h"
#include "model/tokenizer/pre_tokenizer.h"
#include "model/tokenizer/tokenizer.h"
#include "support/model_test_util.h"

using namespace vkllm;

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

bool contains(const std::vector<int32_t>& ids, int32_t id) { return std::find(ids.begin(), ids.end(), id) != ids.end(); }

// A vocab of the 256 byte characters plus "ab" and "abc" (merges "a b", "ab c"), in GPT-2 spelling.
GgufWriter tiny_bpe(std::string_view pre, bool with_merges = true) {
    GgufWriter w;
    w.set_string("general.architecture", "llama");
    w.set_string("tokenizer.ggml.model", "gpt2");
    if (!pre.empty()) w.set_string("tokenizer.ggml.pre", pre);
    std::vector<std::string> tokens;
    int n = 0;
    for (int b = 0; b < 256; ++b) {
        const bool printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
        const uint32_t cp = printable ? uint32_t(b) : uint32_t(256 + n++);
        std::string s;
        if (cp < 0x80) {
            s += char(cp);
        } else {
            s += char(0xc0 | (cp >> 6));
            s += char(0x80 | (cp & 0x3f));
        }
        tokens.push_back(s);
    }
    tokens.push_back("ab");
    tokens.push_back("abc");
    tokens.push_back("<|endoftext|>");
    w.set_string_array("tokenizer.ggml.tokens", tokens);
    std::vector<int32_t> types(tokens.size(), 1);
    types.back() = 3;
    w.set_i32_array("tokenizer.ggml.token_type", types);
    if (with_merges) w.set_string_array("tokenizer.ggml.merges", {"a b", "ab c"});
    return w;
}

}  // namespace

TEST_CASE("tokenizer: Llama 3 chat tokens, BOS and end of generation") {
    VKLLM_REQUIRE_MODEL(path, "ggml-vocab-llama-bpe.gguf");
    auto tok = make_tokenizer(GgufFile::open(path));
    CHECK(tok->model_name() == "gpt2");
    CHECK(tok->pre_tokenizer_name() == "llama-bpe");
    CHECK(tok->n_vocab() == 128256);
    CHECK(tok->bos_id() == 128000);
    CHECK(tok->eos_id() == 128001);
    CHECK(tok->eot_id() == 128009);
    CHECK(tok->add_bos());
    CHECK(!tok->add_eos());
    CHECK(tok->is_eog(128001));  // <|end_of_text|>
    CHECK(tok->is_eog(128009));  // <|eot_id|>
    CHECK(!tok->is_eog(128000));
    CHECK(!tok->is_eog(128006));
    CHECK(!tok->is_eog(9906));
    CHECK(!tok->is_eog(-1));

    const std::string chat = "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>";
    const std::vector<int32_t> want = {128000, 128006, 882, 128007, 271, 13347, 128009};  // llama-tokenize
    CHECK(tok->encode(chat, true, true) == want);
    CHECK(tok->encode(chat, false, true) == std::vector<int32_t>(want.begin() + 1, want.end()));
    // Without parse_special the markers are text: no id of a control token comes out.
    const auto plain = tok->encode(chat, false, false);
    for (int32_t id : plain) CHECK(id < 128000);
    CHECK(tok->decode(plain) == chat);
    // Control tokens print nothing when decoding, their text with token_to_piece(special).
    CHECK(tok->decode(want) == "user\n\nHi");
    CHECK(tok->token_to_piece(128009, true) == "<|eot_id|>");
    CHECK(tok->token_to_piece(128009, false).empty());
    CHECK(tok->decode_piece(1917, 9906) == " world");
    CHECK(tok->decode_piece(1917, -1) == " world");  // no dummy-prefix rule in byte-level BPE
    CHECK(tok->encode("", true) == std::vector<int32_t>{128000});
    CHECK(tok->encode("", false).empty());
    CHECK_THROWS_AS(tok->decode_piece(128256, -1), std::out_of_range);
}

TEST_CASE("tokenizer: Qwen2, Phi-3 and GPT-2 end tokens and BOS defaults") {
    {
        VKLLM_REQUIRE_MODEL(path, "ggml-vocab-qwen2.gguf");
        auto tok = make_tokenizer(GgufFile::open(path));
        CHECK(!tok->add_bos());  // the file says so
        CHECK(tok->eot_id() == 151645);
        CHECK(tok->is_eog(151643));  // <|endoftext|>
        CHECK(tok->is_eog(151645));  // <|im_end|>
        CHECK(!tok->is_eog(151644));  // <|im_start|>
        const std::string chat = "<|im_start|>user\nHi<|im_end|>\n";
        const auto ids = tok->encode(chat, true, true);
        REQUIRE(ids.size() >= 4);
        CHECK(ids.front() == 151644);
        CHECK(contains(ids, 151645));
        CHECK(!contains(tok->encode(chat, true, false), 151645));
    }
    {
        VKLLM_REQUIRE_MODEL(path, "ggml-vocab-phi-3.gguf");
        auto tok = make_tokenizer(GgufFile::open(path));
        CHECK(tok->model_name() == "llama");
        CHECK(tok->eos_id() == 32000);
        CHECK(tok->is_eog(32000));  // <|endoftext|>
        CHECK(tok->is_eog(32007));  // <|end|>
        CHECK(tok->is_eog(2));      // </s>, an end token by its text
        CHECK(!tok->is_eog(32010));  // <|user|>
        // llama.cpp's Phi-3 rule: the newline after a chat token is dropped.
        CHECK(tok->encode("<|user|>\nHi", false, true) == tok->encode("<|user|>Hi", false, true));
    }
    {
        VKLLM_REQUIRE_MODEL(path, "ggml-vocab-gpt-2.gguf");
        auto tok = make_tokenizer(GgufFile::open(path));
        CHECK(!tok->add_bos());  // gpt2 vocabs add no BOS unless the file or the pre-tokenizer says so
        CHECK(tok->bos_id() == 50256);
        CHECK(tok->is_eog(50256));
        CHECK(tok->encode("Hello", true) == std::vector<int32_t>{15496});
    }
}

TEST_CASE("tokenizer: an unknown or missing pre-tokenizer warns and splits as llama.cpp's default") {
    for (std::string_view pre : {"no-such-pre", ""}) {
        CAPTURE(pre);
        GgufFile f = GgufFile::from_memory(tiny_bpe(pre).write_memory(), "tiny.gguf");
        auto tok = make_tokenizer(f);
        REQUIRE(tok->warnings().size() == 1);
        CHECK(tok->warnings()[0].find("tiny.gguf") != std::string::npos);
        CHECK(tok->warnings()[0].find("tokenizer.ggml.pre") != std::string::npos);
        CHECK(tok->pre_tokenizer_name() == "default");
        CHECK(tok->encode("abc", false) == std::vector<int32_t>{257});
        CHECK(tok->encode("abcab", false) == std::vector<int32_t>{257, 256});
        // The default split cuts "ab,c" at the comma: no merge across it.
        CHECK(tok->encode("ab,c", false) == std::vector<int32_t>{256, ',', 'c'});  // byte tokens have the byte's id here
        CHECK(tok->decode(tok->encode("a\xff b\n", false)) == "a\xef\xbf\xbd b\n");  // invalid byte -> U+FFFD
        CHECK(tok->encode("x<|endoftext|>", false, true).back() == 258);
        CHECK(!contains(tok->encode("x<|endoftext|>", false, false), 258));
    }
    GgufFile known = GgufFile::from_memory(tiny_bpe("qwen2").write_memory(), "tiny.gguf");
    CHECK(make_tokenizer(known)->warnings().empty());
    GgufFile no_merges = GgufFile::from_memory(tiny_bpe("gpt-2", false).write_memory(), "x.gguf");
    VKLLM_CHECK_THROWS_WITH_SUBSTR(make_tokenizer(no_merges), GgufError, "tokenizer.ggml.merges");
}

TEST_CASE("tokenizer: every pre-tokenizer compiles, and the names the issue lists are known") {
    for (const PreTokenizerSpec& s : pre_tokenizers()) {
        CAPTURE(s.name);
        PreTokenizer p(s);
        std::string canonical;
        std::vector<std::pair<uint32_t, uint32_t>> words;
        p.split("Hello, world! 123456 \xe4\xbd\xa0\xe5\xa5\xbd  \n\n x", canonical, words);
        CHECK(words.size() >= 5);
        size_t joined = 0;
        for (auto [b, e] : words) joined += e - b;
        CHECK(joined == canonical.size());
    }
    for (std::string_view name : {"llama-bpe", "qwen2", "gpt-2", "deepseek-llm", "deepseek-coder", "falcon", "starcoder",
                                  "refact", "smollm", "mpt", "olmo", "default", "llama3", "dbrx"})
        CHECK_MESSAGE(find_pre_tokenizer(name) != nullptr, name);
    CHECK(find_pre_tokenizer("unknown") == nullptr);
}

TEST_CASE("tokenizer: load time and speed on 1 MB of text, no quadratic cases") {
    VKLLM_REQUIRE_MODEL(path, "ggml-vocab-llama-bpe.gguf");
    auto t0 = std::chrono::steady_clock::now();
    GgufFile f = GgufFile::open(path);
    auto tok = make_tokenizer(f);
    const double load_ms = ms_since(t0);

    std::string text;
    const std::string sample = vkllm::test::read_text_file(path + ".inp");
    REQUIRE(!sample.empty());
    while (text.size() < (1u << 20)) text += sample;
    text.resize(1u << 20);
    t0 = std::chrono::steady_clock::now();
    const auto ids = tok->encode(text, false);
    const double encode_ms = ms_since(t0);
    CHECK(ids.size() > text.size() / 8);

    // One 256 KB word (every merge inside one word), 256 KB of spaces, 256 KB of digits.
    double worst_ms = 0;
    for (std::string run : {std::string(1u << 18, 'a'), std::string(1u << 18, ' '), std::string(1u << 18, '7')}) {
        t0 = std::chrono::steady_clock::now();
        const auto r = tok->encode(run, false);
        worst_ms = std::max(worst_ms, ms_since(t0));
        CHECK(tok->decode(r) == run);
    }
    MESSAGE("llama-bpe (128256 tokens, 280147 merges): load " << load_ms << " ms; 1 MiB of text: " << encode_ms
                                                                << " ms, " << ids.size() << " tokens; slowest 256 KiB run: "
                                                                << worst_ms << " ms");
    // Hang guards, not speed targets (those live in benchmarks): sanitizer builds are several times
    // slower and CI shares its two cores with another test, while a quadratic step would take minutes.
    CHECK(load_ms < 30000);
    CHECK(encode_ms < 60000);
    CHECK(worst_ms < 60000);
}
