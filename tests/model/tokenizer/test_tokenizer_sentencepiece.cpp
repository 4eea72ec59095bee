// The tokenizer against an independent oracle: libsentencepiece loading the LLaMA tokenizer.model,
// on thousands of generated strings (unicode, emoji, whitespace runs, digits, code, random valid
// UTF-8).
#include <random>

#include "model/gguf/gguf.h"
#include "model/tokenizer/tokenizer.h"
#include "support/model_test_util.h"

#if VKLLM_HAVE_SENTENCEPIECE
#include <sentencepiece_processor.h>
#endif

using namespace vkllm;

// The string generators serve only the oracle test: without libsentencepiece they would be unused
// functions, an error under -Werror.
#if VKLLM_HAVE_SENTENCEPIECE
namespace {

void append_utf8(std::string& s, uint32_t cp) {
    if (cp < 0x80) {
        s += char(cp);
    } else if (cp < 0x800) {
        s += char(0xc0 | (cp >> 6));
        s += char(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        s += char(0xe0 | (cp >> 12));
        s += char(0x80 | ((cp >> 6) & 0x3f));
        s += char(0x80 | (cp & 0x3f));
    } else {
        s += char(0xf0 | (cp >> 18));
        s += char(0x80 | ((cp >> 12) & 0x3f));
        s += char(0x80 | ((cp >> 6) & 0x3f));
        s += char(0x80 | (cp & 0x3f));
    }
}

// A random valid code point (no NUL, no surrogates), biased towards ranges real text uses.
uint32_t random_code_point(std::mt19937& rng) {
    struct Range {
        uint32_t lo, hi;
    };
    static const Range ranges[] = {
        {0x01, 0x7f},       {0x20, 0x7e},       {0xa0, 0x24f},     {0x370, 0x52f},    {0x590, 0x6ff},
        {0x900, 0x97f},     {0xe00, 0xe7f},     {0x1100, 0x11ff},  {0x2000, 0x2bff},  {0x3000, 0x30ff},
        {0x4e00, 0x9fff},   {0xac00, 0xd7a3},   {0xe000, 0xfffd},  {0x1f300, 0x1faff}, {0x10000, 0x10ffff},
    };
    const Range& r = ranges[rng() % std::size(ranges)];
    return r.lo + rng() % (r.hi - r.lo + 1);
}

std::string random_text(std::mt19937& rng) {
    static const std::vector<std::string> words = {
        "the", "The", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "Hello", "world", "tokenizer",
        "I've", "don't", "it's", "Lily", "once", "upon", "a", "time", "internationalization", "antidisestablishment",
        "caf\xc3\xa9", "na\xc3\xafve", "F\xc3\xbchrer", "stra\xc3\x9f" "e", "\xd0\xbf\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82",
        "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e", "\xe4\xb8\xad\xe6\x96\x87", "\xed\x95\x9c\xea\xb5\xad\xec\x96\xb4",
        "\xd9\x85\xd8\xb1\xd8\xad\xd8\xa8\xd8\xa7", "\xd7\xa9\xd7\x9c\xd7\x95\xd7\x9d",
        "\xce\xb5\xce\xbb\xce\xbb\xce\xb7\xce\xbd\xce\xb9\xce\xba\xce\xac", "\xe0\xa4\xb9\xe0\xa4\xbf\xe0\xa4\xa8\xe0\xa5\x8d\xe0\xa4\xa6\xe0\xa5\x80",
        "\xf0\x9f\xa6\x99", "\xf0\x9f\x98\x80", "\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd",
        "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7", "\xf0\x9f\x87\xba\xf0\x9f\x87\xb8",
        "\xe2\x9d\xa4\xef\xb8\x8f", "int main() {", "return 0;", "for (int i = 0; i < n; ++i)", "def foo(x):",
        "#include <stdio.h>", "std::vector<int>", "<html>", "</div>", "$x = @y;", "a->b", "// comment", "x += 1",
        "0x1F", "3.14159", "1,000,000", "2024-01-01", "12:30", "\xe2\x80\x94", "\xc2\xab\xc2\xbb",
        "\xe2\x80\x9cquoted\xe2\x80\x9d", "...", "!!", "?!", "<s>", "</s>", "<unk>", "<0x41>", "\xe2\x96\x81\xe2\x96\x81",
    };
    static const std::vector<std::string> spaces = {" ", " ", " ", "", "  ", "   ", "\t", "\n", "\n\n", "\r\n",
                                                    " \t ", "\xc2\xa0", "\xe3\x80\x80", "    "};
    std::string s;
    const int parts = 1 + int(rng() % 10);
    for (int p = 0; p < parts; ++p) {
        switch (rng() % 6) {
        case 0:
        case 1:
        case 2: s += words[rng() % words.size()]; break;
        case 3: s += std::to_string(rng() % 100000); break;
        case 4:
            for (int n = 1 + int(rng() % 6); n > 0; --n) append_utf8(s, random_code_point(rng));
            break;
        default: s += spaces[rng() % spaces.size()]; break;
        }
        s += spaces[rng() % spaces.size()];
    }
    if (rng() % 5 == 0) s = spaces[rng() % spaces.size()] + s;  // leading whitespace
    if (rng() % 5 == 0 && uint8_t(s.back()) < 0x80) s.pop_back();  // sometimes no trailing space
    return s;
}

}  // namespace
#endif

TEST_CASE("tokenizer: agrees with libsentencepiece on the LLaMA vocab") {
#if !VKLLM_HAVE_SENTENCEPIECE
    MESSAGE("skipped: built without libsentencepiece (pkg-config sentencepiece not found)");
#else
    VKLLM_REQUIRE_MODEL(vocab, "ggml-vocab-llama-spm.gguf");
    VKLLM_REQUIRE_MODEL(model, "tokenizer.model");
    sentencepiece::SentencePieceProcessor sp;
    const auto status = sp.Load(model);
    REQUIRE_MESSAGE(status.ok(), status.ToString());
    auto tok = make_tokenizer(GgufFile::open(vocab));
    REQUIRE(size_t(sp.GetPieceSize()) == tok->n_vocab());

    std::mt19937 rng(2024);
    std::vector<std::string> texts;
    for (int i = 0; i < 5000; ++i) texts.push_back(random_text(rng));
    // Pure random valid UTF-8 strings as well.
    for (int i = 0; i < 1000; ++i) {
        std::string s;
        for (int n = int(rng() % 24); n > 0; --n) append_utf8(s, random_code_point(rng));
        texts.push_back(s);
    }
    size_t mismatches = 0, total_ids = 0;
    for (const std::string& text : texts) {
        std::vector<int> want_int;
        REQUIRE(sp.Encode(text, &want_int).ok());
        const std::vector<int32_t> want(want_int.begin(), want_int.end());
        const std::vector<int32_t> got = tok->encode(text, false);
        total_ids += got.size();
        if (got != want) {
            ++mismatches;
            if (mismatches <= 5) {
                CAPTURE(text);
                CHECK(got == want);
            }
        }
        if (text.find("\xe2\x96\x81") == std::string::npos) CHECK(tok->decode(got) == text);
    }
    CHECK(mismatches == 0);
    MESSAGE(texts.size() << " strings, " << total_ids << " tokens compared with libsentencepiece, " << mismatches
                         << " mismatches");
#endif
}
