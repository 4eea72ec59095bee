// Token ids against llama.cpp on every shared vocab: llama.cpp's own test vectors (.inp/.out next to
// each vocab), and the committed fixtures in tests/fixtures/tokenizer (thousands of generated
// strings and real chat prompts, tokenized by the peer build; README there). Plus end-of-generation
// tokens, BOS defaults, an unknown pre-tokenizer, and speed on a 1 MB text.
#include <chrono>
#include <filesystem>
#include <functional>
#include <sstream>

#include "model/gguf/gguf.h"
#include "model/gguf/gguf_writer.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/unigram.h"
#include "model/tokenizer/wordpiece.h"
#include "support/model_test_util.h"

using namespace vkllm;
namespace fs = std::filesystem;

namespace {

// The fixtures sit beside this source file (CMake compiles it by its absolute path).
fs::path fixture(const std::string& name) { return test::fixtures_dir() / "tokenizer" / name; }

const char* const kVocabs[] = {"llama-spm", "llama-bpe", "qwen2", "gpt-2", "deepseek-llm", "falcon", "phi-3", "bert-bge"};
// Vocabs committed beside the fixtures (make_unigram_vocab.py): ../shared has no Unigram vocab.
const char* const kLocalVocabs[] = {"unigram"};

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
    std::vector<std::pair<std::string, std::string>> vocabs;  // name, file
    for (const char* vocab : kVocabs) vocabs.emplace_back(vocab, vkllm::test::model_path(std::string("ggml-vocab-") + vocab + ".gguf"));
    for (const char* vocab : kLocalVocabs) vocabs.emplace_back(vocab, fixture(std::string("ggml-vocab-") + vocab + ".gguf").string());
    for (const auto& [vocab_name, path] : vocabs) {
        CAPTURE(vocab_name);
        if (path.empty()) continue;
        auto tok = make_tokenizer(GgufFile::open(path));
        const std::vector<Case> cases = read_fixture(vocab_name);
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
        const std::string& v = vocab_name;
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

TEST_CASE("tokenizer: Unigram picks the segmentation of highest total score, normalises, and checks its charsmap") {
    // A vocab written here, scores chosen so that the best segmentation is known from the Unigram
    // definition (the sum of the pieces' log-probabilities is maximal).
    const std::vector<std::string> pieces = {"<pad>", "</s>", "<unk>", "\xe2\x96\x81", "\xe2\x96\x81" "a", "b",
                                             "\xe2\x96\x81" "ab", "c", "bc", "<sep>", "\xe2\x96\x81" "abc"};
    const std::vector<float> scores = {0, 0, 0, -3, -1, -2, -2.5f, -1, -4, 0, -9};
    const std::vector<int32_t> types = {3, 3, 2, 1, 1, 1, 1, 1, 1, 4, 5};  // <sep> user-defined, ▁abc unused
    auto vocab = [&](const std::function<void(GgufWriter&)>& edit) {
        GgufWriter w;
        w.set_string("general.architecture", "t5");
        w.set_string("tokenizer.ggml.model", "t5");
        w.set_string_array("tokenizer.ggml.tokens", pieces);
        w.set_f32_array("tokenizer.ggml.scores", scores);
        w.set_i32_array("tokenizer.ggml.token_type", types);
        w.set_bool("tokenizer.ggml.add_space_prefix", true);
        edit(w);
        return GgufFile::from_memory(w.write_memory(), "unigram.gguf");
    };
    const GgufFile f = vocab([](GgufWriter&) {});
    const auto tok = make_tokenizer(f);
    CHECK(tok->model_name() == "t5");
    // llama.cpp's T5 defaults: no BOS, EOS 1 after the text, unknown 2.
    CHECK(tok->bos_id() == -1);
    CHECK(tok->eos_id() == 1);
    CHECK(tok->unk_id() == 2);
    // "▁ab" (-2.5) beats "▁a" "b" (-3); "▁ab" "c" (-3.5) beats "▁a" "bc" (-5); the unused "▁abc" is
    // a piece too (llama.cpp matches unused pieces), at -9 it loses.
    CHECK(tok->encode("ab", false) == std::vector<int32_t>{6});
    CHECK(tok->encode("abc", true) == std::vector<int32_t>{6, 7, 1});
    // Unknown characters score 10 below the lowest normal piece (-4): a run of them is one <unk>.
    CHECK(tok->encode("a\xe4\xb8\xad\xe6\x96\x87" "b", false) == std::vector<int32_t>{4, 2, 5});
    // User-defined pieces are always matched whole; every piece of text gets its own "▁" prefix.
    CHECK(tok->encode("a<sep>a", false) == std::vector<int32_t>{4, 9, 4});
    // Without a charsmap or remove_extra_whitespaces, spaces stay, each one "▁".
    const auto* uni = dynamic_cast<const UnigramTokenizer*>(tok.get());
    REQUIRE(uni != nullptr);
    CHECK(uni->normalize(" a  b") == "\xe2\x96\x81\xe2\x96\x81" "a\xe2\x96\x81\xe2\x96\x81" "b");
    CHECK(uni->normalize("a\xff") == "\xe2\x96\x81" "a\xef\xbf\xbd");  // an invalid byte is U+FFFD
    // As llama.cpp's decoder: a 4-byte form past U+10FFFF passes whole, a stray continuation byte does not.
    CHECK(uni->normalize("\xf4\x90\x80\x80\x80") == "\xe2\x96\x81\xf4\x90\x80\x80\xef\xbf\xbd");
    CHECK(tok->decode(tok->encode("abc ab", true)) == "abc ab");
    // An unused piece prints nothing, as llama.cpp's token_to_piece (only special, user-defined,
    // normal and byte pieces have text); a user-defined piece prints its text.
    CHECK(tok->decode_piece(10, 4).empty());
    CHECK(tok->token_to_piece(10, true).empty());
    CHECK(tok->decode(std::vector<int32_t>{4, 10, 5}) == "ab");
    CHECK(tok->decode_piece(9, 4) == "<sep>");
    // remove_extra_whitespaces: runs collapse, ends drop, each word gets one "▁".
    const auto merged = make_tokenizer(vocab([](GgufWriter& w) { w.set_bool("tokenizer.ggml.remove_extra_whitespaces", true); }));
    CHECK(dynamic_cast<const UnigramTokenizer&>(*merged).normalize("  a   b ") ==
          "\xe2\x96\x81" "a\xe2\x96\x81" "b");

    // A charsmap: a Darts-clone trie with one rule "A" -> "a" (root unit offset 1; node 1^'A' holds
    // label 'A' and a leaf whose value unit (bit 31) points at replacement offset 0).
    auto charsmap = [](std::vector<uint32_t> units, std::string strings) {
        std::vector<uint8_t> blob;
        auto put = [&](uint32_t x) { for (int i = 0; i < 4; ++i) blob.push_back(uint8_t(x >> (8 * i))); };
        put(uint32_t(units.size() * 4));
        for (uint32_t u : units) put(u);
        blob.insert(blob.end(), strings.begin(), strings.end());
        return blob;
    };
    std::vector<uint32_t> units(128, 0);
    const uint32_t node = 1 ^ 'A';  // 64
    units[0] = 1u << 10;                                // root: children at offset 1
    units[node] = (uint32_t(node ^ 65) << 10) | (1u << 8) | 'A';  // label 'A', has leaf, children at node ^ 65 = 1
    units[node ^ (node ^ 65)] = (1u << 31) | 0;         // the leaf's value unit: replacement at offset 0
    const std::vector<uint8_t> good = charsmap(units, std::string("a\0", 2));
    const auto mapped = make_tokenizer(vocab([&](GgufWriter& w) { w.set_u8_array("tokenizer.ggml.precompiled_charsmap", good); }));
    CHECK(dynamic_cast<const UnigramTokenizer&>(*mapped).normalize("AbA") == "\xe2\x96\x81" "aba");
    CHECK(mapped->encode("Ab", false) == std::vector<int32_t>{6});

    // Malformed charsmaps and vocabs are refused by name.
    auto refuses = [&](std::vector<uint8_t> blob, const char* what) {
        VKLLM_CHECK_THROWS_WITH_SUBSTR(
            make_tokenizer(vocab([&](GgufWriter& w) { w.set_u8_array("tokenizer.ggml.precompiled_charsmap", blob); })),
            GgufError, std::string("unigram.gguf: key 'tokenizer.ggml.precompiled_charsmap': ") + what);
    };
    refuses({1, 0}, "2 bytes is too short for a charsmap");
    refuses({6, 0, 0, 0, 1, 2, 3, 4, 5, 6, 0}, "trie size 6 is not a multiple of 4 bytes");
    refuses({4, 0, 0, 0, 1, 2, 3, 4}, "trie of 4 bytes leaves no replacement strings");
    refuses(charsmap(units, "ax"), "the replacement strings do not end with a NUL byte");
    VKLLM_CHECK_THROWS_WITH_SUBSTR(
        make_tokenizer(vocab([&](GgufWriter& w) { w.set_f32_array("tokenizer.ggml.precompiled_charsmap", scores); })),
        GgufError, "has type ARRAY[FLOAT32], expected ARRAY[UINT8]");
    VKLLM_CHECK_THROWS_WITH_SUBSTR(make_tokenizer(vocab([](GgufWriter& w) { w.set_i32("tokenizer.ggml.unknown_token_id", -1); })),
                                   GgufError, "a Unigram vocab needs an unknown token");
    // A trie of random units (offsets anywhere, values past the strings) never reads out of bounds.
    uint32_t x = 12345;
    for (int trial = 0; trial < 200; ++trial) {
        std::vector<uint32_t> random_units(1 + trial % 40);
        for (uint32_t& u : random_units) u = (x = x * 1664525u + 1013904223u);
        const auto t = make_tokenizer(vocab([&](GgufWriter& w) {
            w.set_u8_array("tokenizer.ggml.precompiled_charsmap", charsmap(random_units, std::string("xy\0z\0", 5)));
        }));
        for (const char* text : {"A", "abc AbC", "\x01\x80\xff", "\xe4\xb8\xad"}) CHECK_NOTHROW((void)t->encode(text, true));
    }
}
