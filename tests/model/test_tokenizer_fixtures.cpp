// Token ids against llama.cpp on every shared vocab: llama.cpp's own test vectors (.inp/.out next to
// each vocab), and the committed fixtures in tests/fixtures/tokenizer (thousands of generated
// strings and real chat prompts, tokenized by the peer build; README there). Plus end-of-generation
// tokens, BOS defaults, an unknown pre-tokenizer, and speed on a 1 MB text.
#include <chrono>
#include <filesystem>
#include <functional>
#include <sstream>

#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/wordpiece.h"
#include "model_test_util.h"

using namespace vkllm;
namespace fs = std::filesystem;

namespace {

// The fixtures sit beside this source file (CMake compiles it by its absolute path).
fs::path fixture(const std::string& name) { return fs::path(__FILE__).parent_path().parent_path() / "fixtures/tokenizer" / name; }

const char* const kVocabs[] = {"llama-spm", "llama-bpe", "qwen2", "gpt-2", "deepseek-llm", "falcon", "phi-3", "bert-bge"};

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

// Undoes make_fixtures.py's escaping: \xNN is a byte, \\ a backslash, everything else as is.
std::string unescape(std::string_view s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\\' && i + 1 < s.size() && s[i + 1] == '\\') {
            out += '\\';
            ++i;
        } else if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] == 'x') {
            out += char(std::stoi(std::string(s.substr(i + 2, 2)), nullptr, 16));
            i += 3;
        } else {
            out += s[i];
        }
    }
    return out;
}

struct Case {
    bool parse_special;
    std::string text;
    std::vector<int32_t> ids;
};

std::vector<Case> read_fixture(const std::string& vocab) {
    std::vector<Case> cases;
    std::istringstream in(vkllm::test::read_text_file(fixture(vocab + ".txt").string()));
    for (std::string line; std::getline(in, line);) {
        const size_t t1 = line.find('\t'), t2 = line.find('\t', t1 + 1);
        REQUIRE_MESSAGE((t1 == 1 && t2 != std::string::npos), "bad fixture line: " << line);
        cases.push_back({line[0] == 's', unescape(std::string_view(line).substr(2, t2 - 2)), parse_ids(line.substr(t2 + 1))});
    }
    return cases;
}

bool valid_utf8(std::string_view s) {
    for (size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        size_t len = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
        if (!len || i + len > s.size()) return false;
        for (size_t k = 1; k < len; ++k)
            if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return false;
        const auto c1 = static_cast<unsigned char>(s[i + 1 < s.size() ? i + 1 : i]);
        if ((c == 0xe0 && c1 < 0xa0) || (c == 0xed && c1 > 0x9f) || (c == 0xf0 && c1 < 0x90) || (c == 0xf4 && c1 > 0x8f))
            return false;
        i += len;
    }
    return true;
}

}  // namespace

TEST_CASE("tokenizer: llama.cpp's test vectors of every shared vocab") {
    for (const char* vocab : kVocabs) {
        const std::string vocab_name = vocab;
        CAPTURE(vocab_name);
        const std::string base = std::string("ggml-vocab-") + vocab + ".gguf";
        VKLLM_REQUIRE_MODEL(path, base);
        VKLLM_REQUIRE_MODEL(inp, base + ".inp");
        VKLLM_REQUIRE_MODEL(outp, base + ".out");
        GgufFile f = GgufFile::open(path);
        auto tok = make_tokenizer(f);
        CHECK(tok->warnings().empty());
        // Inputs end with a separator and outputs with a newline: both leave one empty last item.
        std::vector<std::string> inputs, outputs;
        const std::string in = vkllm::test::read_text_file(inp), sep = "\n__ggml_vocab_test__\n";
        for (size_t from = 0, at; (at = in.find(sep, from)) != std::string::npos; from = at + sep.size())
            inputs.push_back(in.substr(from, at - from));
        std::istringstream out(vkllm::test::read_text_file(outp));
        for (std::string line; std::getline(out, line);) outputs.push_back(line);
        REQUIRE(inputs.size() == outputs.size());
        REQUIRE(inputs.size() >= 40);
        size_t passed = 0;
        for (size_t i = 0; i < inputs.size(); ++i) {
            const auto want = parse_ids(outputs[i]);
            const auto got = tok->encode(inputs[i], false);
            passed += got == want;
            if (got != want) {
                CAPTURE(inputs[i]);
                CHECK_MESSAGE(got == want, "got:  " << show(got) << "\nwant: " << show(want));
            }
        }
        CHECK(passed == inputs.size());
        MESSAGE(vocab_name << ": " << passed << "/" << inputs.size() << " llama.cpp test vectors match");
    }
}

TEST_CASE("tokenizer: generated strings and chat prompts give llama-tokenize's ids") {
    for (const char* vocab : kVocabs) {
        const std::string vocab_name = vocab;
        CAPTURE(vocab_name);
        VKLLM_REQUIRE_MODEL(path, std::string("ggml-vocab-") + vocab + ".gguf");
        auto tok = make_tokenizer(GgufFile::open(path));
        const std::vector<Case> cases = read_fixture(vocab);
        REQUIRE(cases.size() >= 400);
        size_t passed = 0, mismatches = 0, exempt_mismatches = 0, n_special = 0, n_invalid = 0, round_trips = 0;
        for (const Case& c : cases) {
            const auto got = tok->encode(c.text, false, c.parse_special);
            n_special += c.parse_special;
            const bool valid = valid_utf8(c.text);
            n_invalid += !valid;
            // SentencePiece vocabs: vkllm splits invalid UTF-8 as SentencePiece does (each invalid byte a
            // symbol of its own), llama.cpp takes a lead byte's declared length blindly and swallows the
            // characters after it; such strings are counted, not required to match.
            const bool exempt = !valid && tok->model_name() == "llama";
            if (got == c.ids) {
                ++passed;
            } else if (exempt) {
                ++exempt_mismatches;
            } else if (++mismatches <= 8) {
                CAPTURE(c.text);
                CAPTURE(c.parse_special);
                CAPTURE(valid);
                CHECK_MESSAGE(got == c.ids, "got:  " << show(got) << "\nwant: " << show(c.ids));
            }
            // Byte-level BPE loses nothing: valid text decodes back to itself. (Falcon's vocab has no
            // entry for a few control bytes, U+000B, U+001C.., which llama.cpp drops as well.)
            if (valid && !c.parse_special && tok->model_name() == "gpt2" && vocab_name != "falcon") {
                CHECK(tok->decode(got) == c.text);
                ++round_trips;
            }
        }
        CHECK(passed + exempt_mismatches == cases.size());
        const std::string v = vocab;
        if (v == "llama-bpe" || v == "qwen2" || v == "phi-3") CHECK(n_special >= 6);
        MESSAGE(vocab_name << ": " << passed << "/" << cases.size() << " fixture cases match (" << n_special
                            << " chat prompts with parse_special, " << n_invalid << " with invalid UTF-8, "
                            << exempt_mismatches << " of them exempt and different), " << round_trips
                            << " decoded back to their text");
    }
}

TEST_CASE("tokenizer: WordPiece puts [CLS] and [SEP] around the text, drops accents and marks, and decodes") {
    VKLLM_REQUIRE_MODEL(path, "ggml-vocab-bert-bge.gguf");
    const GgufFile f = GgufFile::open(path);
    const auto tok = make_tokenizer(f);
    CHECK(tok->model_name() == "bert");
    // llama-tokenize -m ggml-vocab-bert-bge.gguf -p "Hello world, Äpfel!" --ids (add_special on)
    const std::vector<int32_t> want = {101, 7592, 2088, 1010, 9706, 7959, 2140, 999, 102};
    CHECK(tok->encode("Hello world, \xc3\x84pfel!", true) == want);
    CHECK(tok->encode("Hello world, \xc3\x84pfel!", false) == std::vector<int32_t>(want.begin() + 1, want.end() - 1));
    CHECK(tok->bos_id() == 101);
    CHECK(tok->eos_id() == 102);
    CHECK(tok->unk_id() == 100);
    // Words: whitespace splits, punctuation stands alone, combining marks and controls vanish.
    CHECK(wordpiece_words("  A\xcc\x81" "b,c\x01 \xe4\xb8\xad\xe6\x96\x87!") ==
          std::vector<std::string>{"ab", ",", "c", "\xe4\xb8\xad", "\xe6\x96\x87", "!"});
    CHECK(wordpiece_words(" \t\n").empty());
    // A word no piece covers is one [UNK]; continuation pieces glue onto the word when decoded.
    CHECK(tok->encode("\xf0\x9f\xa6\x99", false) == std::vector<int32_t>{100});
    CHECK(tok->decode(tok->encode("hello apfel", false)) == "hello apfel");
    // Punctuation pieces are words ("▁,"): without llama.cpp's optional space clean-up they keep
    // their space; [CLS] and [SEP] print nothing.
    CHECK(tok->decode(want) == "hello world , apfel !");

    // The file's flags: no [SEP] with add_sep_token false, no [CLS] with add_bos_token false; a
    // vocab without an unknown token is refused.
    auto with = [&](const std::function<void(GgufWriter&)>& edit) {
        GgufWriter w;
        for (const GgufKeyValue& kv : f.metadata()) w.set_value(kv.key, kv.value);
        edit(w);
        return GgufFile::from_memory(w.write_memory(), "edited-bge.gguf");
    };
    const GgufFile no_sep = with([](GgufWriter& w) { w.set_bool("tokenizer.ggml.add_sep_token", false); });
    CHECK(make_tokenizer(no_sep)->encode("hello", true) == std::vector<int32_t>{101, 7592});
    const GgufFile no_cls = with([](GgufWriter& w) { w.set_bool("tokenizer.ggml.add_bos_token", false); });
    CHECK(make_tokenizer(no_cls)->encode("hello", true) == std::vector<int32_t>{7592, 102});
    const GgufFile no_unk = with([](GgufWriter& w) {
        w.set_i32("tokenizer.ggml.unknown_token_id", -1);
        std::vector<std::string> few = {"[PAD]", "a"};
        w.set_string_array("tokenizer.ggml.tokens", few);
        w.remove("tokenizer.ggml.token_type");
        w.remove("tokenizer.ggml.cls_token_id");
        w.remove("tokenizer.ggml.seperator_token_id");
        w.remove("tokenizer.ggml.padding_token_id");
        w.remove("tokenizer.ggml.mask_token_id");
    });
    VKLLM_CHECK_THROWS_WITH_SUBSTR(make_tokenizer(no_unk), GgufError, "a WordPiece vocab needs an unknown token");
}

TEST_CASE("tokenizer: a reranker's (query, document) pair is joined as llama-server joins it") {
    auto edited = [](const GgufFile& f, const std::function<void(GgufWriter&)>& edit) {
        GgufWriter w;
        for (const GgufKeyValue& kv : f.metadata()) w.set_value(kv.key, kv.value);
        edit(w);
        return GgufFile::from_memory(w.write_memory(), "edited.gguf");
    };
    auto cat = [](std::initializer_list<std::vector<int32_t>> parts) {
        std::vector<int32_t> out;
        for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
        return out;
    };
    {
        // BERT: [CLS] query [SEP] document (llama-server's /v1/rerank on a bge vocab: no EOS, so no
        // closing [SEP]; test_embed_peer.cpp checks the token counts llama-server reports).
        VKLLM_REQUIRE_MODEL(path, "ggml-vocab-bert-bge.gguf");
        const GgufFile f = GgufFile::open(path);
        const auto tok = make_tokenizer(f);
        const auto q = tok->encode("what is a panda?", false), d = tok->encode("Pandas eat bamboo.", false);
        CHECK(q == std::vector<int32_t>{2054, 2003, 1037, 25462, 1029});
        CHECK(tok->encode_pair("what is a panda?", "Pandas eat bamboo.") == cat({{101}, q, {102}, d}));
        // add_eos_token: EOS (here [SEP], the vocab has no EOS) after each part as well.
        const GgufFile eos = edited(f, [](GgufWriter& w) { w.set_bool("tokenizer.ggml.add_eos_token", true); });
        CHECK(make_tokenizer(eos)->encode_pair("what is a panda?", "Pandas eat bamboo.") ==
              cat({{101}, q, {102, 102}, d, {102}}));
    }
    {
        // SentencePiece: [BOS] query document, and EOS after each with add_eos_token.
        VKLLM_REQUIRE_MODEL(path, "ggml-vocab-llama-spm.gguf");
        const GgufFile f = GgufFile::open(path);
        const auto tok = make_tokenizer(f);
        const auto q = tok->encode("query", false), d = tok->encode("doc", false);
        CHECK(tok->encode_pair("query", "doc") == cat({{1}, q, d}));
        const GgufFile eos = edited(f, [](GgufWriter& w) { w.set_bool("tokenizer.ggml.add_eos_token", true); });
        CHECK(make_tokenizer(eos)->encode_pair("query", "doc") == cat({{1}, q, {2}, d, {2}}));
        // Only reranking reads the separator: an id outside the vocab is a warning, not a load error.
        const GgufFile bad_sep = edited(f, [](GgufWriter& w) {
            w.set_bool("tokenizer.ggml.add_sep_token", true);
            w.set_u32("tokenizer.ggml.seperator_token_id", 99999);
        });
        const auto t = make_tokenizer(bad_sep);
        CHECK(t->encode_pair("query", "doc") == cat({{1}, q, d}));
        REQUIRE(t->warnings().size() == 1);
        CHECK(t->warnings()[0].find("seperator_token_id 99999 is not a token id") != std::string::npos);
    }
}
