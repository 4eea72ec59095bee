#include "model/tokenizer/pre_tokenizer.h"

#include "model/tokenizer/utf8.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <fmt/format.h>

#include <stdexcept>

namespace vkllm {

namespace {

// The GPT-2 split, also the core of most others.
constexpr std::string_view kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
// Llama 3 (tiktoken cl100k style): case-insensitive contractions spelled out, digits in threes.
constexpr std::string_view kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen2: as Llama 3 but every digit alone.
constexpr std::string_view kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// DeepSeek's CJK and Hangul runs (U+0800..U+4E00 included, as the model's tokenizer.json has it).
constexpr std::string_view kDeepseekCjk = R"([\x{4e00}-\x{9fa5}\x{0800}-\x{4e00}\x{ac00}-\x{d7ff}]+)";
// DeepSeek LLM's letters: the cased letters (Lu, Ll, Lt) of the Unicode version its tokenizer.json
// was written from, as explicit ranges; newer cased letters and uncased ones (Lo: CJK, Georgian
// Mkhedruli, Hebrew, ...) are not in it.
constexpr std::string_view kDeepseekLetters =
    R"(\s?[A-Za-z\x{b5}\x{c0}-\x{d6}\x{d8}-\x{f6}\x{f8}-\x{1ba}\x{1bc}-\x{1bf}\x{1c4}-\x{293}\x{295}-\x{2af})"
    R"(\x{370}-\x{373}\x{376}\x{377}\x{37b}-\x{37d}\x{37f}\x{386}\x{388}-\x{38a}\x{38c}\x{38e}-\x{3a1})"
    R"(\x{3a3}-\x{3f5}\x{3f7}-\x{481}\x{48a}-\x{52f}\x{531}-\x{556}\x{10a0}-\x{10c5}\x{13a0}-\x{13f5})"
    R"(\x{13f8}-\x{13fd}\x{1c90}-\x{1cba}\x{1cbd}-\x{1cbf}\x{1d00}-\x{1d2b}\x{1d6b}-\x{1d77}\x{1d79}-\x{1d9a})"
    R"(\x{1e00}-\x{1f15}\x{1f18}-\x{1f1d}\x{1f20}-\x{1f45}\x{1f48}-\x{1f4d}\x{1f50}-\x{1f57}\x{1f59}\x{1f5b})"
    R"(\x{1f5d}\x{1f5f}-\x{1f7d}\x{1f80}-\x{1fb4}\x{1fb6}-\x{1fbc}\x{1fbe}\x{1fc2}-\x{1fc4}\x{1fc6}-\x{1fcc})"
    R"(\x{1fd0}-\x{1fd3}\x{1fd6}-\x{1fdb}\x{1fe0}-\x{1fec}\x{1ff2}-\x{1ff4}\x{1ff6}-\x{1ffc}\x{2102}\x{2107})"
    R"(\x{210a}-\x{2113}\x{2115}\x{2119}-\x{211d}\x{2124}\x{2126}\x{2128}\x{212a}-\x{212d}\x{212f}-\x{2134})"
    R"(\x{2139}\x{213c}-\x{213f}\x{2145}-\x{2149}\x{214e}\x{2183}\x{2184}\x{2c00}-\x{2c7b}\x{2c7e}-\x{2ce4})"
    R"(\x{2ceb}-\x{2cee}\x{2cf2}\x{2cf3}\x{a640}-\x{a66d}\x{a680}-\x{a69b}\x{a722}-\x{a76f}\x{a771}-\x{a787})"
    R"(\x{a78b}-\x{a78e}\x{ab70}-\x{abbf}\x{fb00}-\x{fb06}\x{fb13}-\x{fb17}\x{ff21}-\x{ff3a}\x{ff41}-\x{ff5a})"
    R"(\x{10400}-\x{1044f}\x{104b0}-\x{104d3}\x{104d8}-\x{104fb}\x{10c80}-\x{10cb2}\x{10cc0}-\x{10cf2})"
    R"(\x{118a0}-\x{118df}\x{1e900}-\x{1e943}]+)";
// DeepSeek LLM's punctuation: ASCII, fullwidth forms, quotation marks, ideographic space to full stop.
constexpr std::string_view kDeepseekPunct =
    R"(\s?[!-/:-~\x{ff01}-\x{ff0f}\x{ff1a}-\x{ff5e}\x{2018}-\x{201f}\x{3000}-\x{3002}]+)";

const std::vector<PreTokenizerSpec>& table() {
    static const std::vector<PreTokenizerSpec> specs = {
        {"default", {}, {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"}},
        {"llama-bpe",
         {"llama3", "llama-v3", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"},
         {kLlama3},
         /*ignore_merges=*/true,
         /*add_bos=*/true},
        {"dbrx", {"smaug-bpe"}, {kLlama3}},
        {"qwen2", {"deepseek-r1-qwen", "stablelm2", "megrez", "hunyuan", "kormo"}, {kQwen2}},
        {"gpt-2",
         {"mpt", "olmo", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "exaone4", "jais",
          "trillion", "granite-docling", "mellum"},
         {kGpt2}},
        {"starcoder", {"refact", "smollm", "command-r", "codeshell", "exaone", "minerva-7b"}, {R"(\p{N})", kGpt2}},
        {"falcon", {}, {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"}},
        {"deepseek-llm", {}, {"[\\r\\n]", kDeepseekLetters, kDeepseekPunct, R"(\s+$)", kDeepseekCjk, R"(\p{N}+)"}},
        {"deepseek-coder", {}, {"[\\r\\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kDeepseekCjk, R"(\p{N})"}},
    };
    return specs;
}

// llama.cpp hands the regex engine text in which every non-ASCII White_Space character became
// U+000B (C++'s std::regex knows only ASCII spaces), so \s is the ASCII set here too: the text
// this file matches against makes the same substitution (see PreTokenizer::split).
std::string translate(std::string_view re) {
    constexpr std::string_view ws = R"(\t-\r )";
    std::string out;
    bool in_class = false;
    for (size_t i = 0; i < re.size(); ++i) {
        const char c = re[i];
        if (c == '\\' && i + 1 < re.size()) {
            const char e = re[++i];
            if (e == 's') {
                if (in_class)
                    out += ws;
                else
                    out += fmt::format("[{}]", ws);
            } else if (e == 'S') {
                if (in_class) throw std::runtime_error(fmt::format("pre-tokenizer regex {}: \\S inside [...]", re));
                out += fmt::format("[^{}]", ws);
            } else {
                out += c;
                out += e;
            }
            continue;
        }
        if (c == '[') in_class = true;
        if (c == ']') in_class = false;
        out += c;
    }
    return out;
}

bool is_white_space(uint32_t cp) {
    // Unicode's White_Space property (what llama.cpp's unicode tables mark as whitespace).
    return (cp >= 0x09 && cp <= 0x0d) || cp == 0x20 || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f ||
           cp == 0x3000;
}

}  // namespace

const PreTokenizerSpec* find_pre_tokenizer(std::string_view pre) {
    for (const PreTokenizerSpec& s : table()) {
        if (s.name == pre) return &s;
        for (std::string_view a : s.aliases)
            if (a == pre) return &s;
    }
    return nullptr;
}

const PreTokenizerSpec& default_pre_tokenizer() { return table().front(); }

std::span<const PreTokenizerSpec> pre_tokenizers() { return table(); }

struct PreTokenizer::Compiled {
    pcre2_code* code = nullptr;
    ~Compiled() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(const PreTokenizerSpec& spec) : spec_(spec) {
    for (std::string_view re : spec.regexes) {
        const std::string pattern = translate(re);
        int err = 0;
        PCRE2_SIZE err_off = 0;
        auto c = std::make_unique<Compiled>();
        // DOLLAR_ENDONLY: "$" is the end of the piece, as in C++'s std::regex, never before a final \n.
        c->code =
            pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                          PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY | PCRE2_NO_UTF_CHECK, &err, &err_off, nullptr);
        if (!c->code) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            throw std::runtime_error(fmt::format("pre-tokenizer '{}': regex {} does not compile at offset {}: {}",
                                                 spec.name, re, err_off, reinterpret_cast<const char*>(msg)));
        }
        // JIT is an optimisation only: without it (no JIT support on the platform) matching is the same.
        (void)pcre2_jit_compile(c->code, PCRE2_JIT_COMPLETE);
        regexes_.push_back(std::move(c));
    }
}

PreTokenizer::~PreTokenizer() = default;

void PreTokenizer::split(std::string_view text, std::string& canonical,
                         std::vector<std::pair<uint32_t, uint32_t>>& words) const {
    words.clear();
    canonical.clear();
    std::vector<uint32_t> cps;
    utf8::decode_lenient(text, cps);
    const size_t n = cps.size();
    // `canonical` is what the words are cut from: the code points re-encoded (invalid bytes become
    // U+FFFD, overlong forms their shortest encoding). `shadow` is what the regexes see: the same
    // with non-ASCII White_Space as U+000B and surrogates (not encodable for PCRE2) as U+FFFD.
    std::string shadow;
    std::vector<uint32_t> canon_off(n + 1), shadow_off(n + 1);
    canonical.reserve(text.size());
    shadow.reserve(text.size());
    for (size_t i = 0; i < n; ++i) {
        const uint32_t cp = cps[i];
        canon_off[i] = uint32_t(canonical.size());
        shadow_off[i] = uint32_t(shadow.size());
        utf8::append(canonical, cp);
        if (cp >= 0x80 && is_white_space(cp))
            shadow += '\x0b';
        else if (cp >= 0xd800 && cp <= 0xdfff)
            utf8::append(shadow, utf8::kReplacement);
        else
            utf8::append(shadow, cp);
    }
    canon_off[n] = uint32_t(canonical.size());
    shadow_off[n] = uint32_t(shadow.size());
    std::vector<uint32_t> cp_at(shadow.size() + 1, 0);  // shadow byte offset -> code point index
    for (size_t i = 0; i <= n; ++i) cp_at[shadow_off[i]] = uint32_t(i);

    // Pieces as code point ranges [first, second).
    std::vector<std::pair<uint32_t, uint32_t>> pieces, next;
    if (n) pieces.push_back({0, uint32_t(n)});

    pcre2_match_context* mctx = pcre2_match_context_create(nullptr);
    pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    if (mctx && jit_stack) pcre2_jit_stack_assign(mctx, nullptr, jit_stack);
    struct Cleanup {
        pcre2_match_context* m;
        pcre2_jit_stack* j;
        ~Cleanup() {
            pcre2_jit_stack_free(j);
            pcre2_match_context_free(m);
        }
    } cleanup{mctx, jit_stack};

    for (const auto& re : regexes_) {
        pcre2_match_data* md = pcre2_match_data_create_from_pattern(re->code, nullptr);
        if (!md) throw std::bad_alloc();
        next.clear();
        for (auto [first, last] : pieces) {
            const auto* subject = reinterpret_cast<PCRE2_SPTR>(shadow.data() + shadow_off[first]);
            const size_t len = shadow_off[last] - shadow_off[first];
            size_t pos = 0, done = 0;
            while (pos < len) {
                const int rc = pcre2_match(re->code, subject, len, pos, PCRE2_NO_UTF_CHECK, md, mctx);
                if (rc < 0) {
                    if (rc == PCRE2_ERROR_NOMATCH) break;
                    pcre2_match_data_free(md);
                    throw std::runtime_error(
                        fmt::format("pre-tokenizer '{}': regex matching failed (PCRE2 error {})", spec_.name, rc));
                }
                const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
                const size_t ms = ov[0], me = ov[1];
                if (me == ms) {  // an empty match splits nothing; resume after the next character
                    pos = ms + 1;
                    while (pos < len && (subject[pos] & 0xc0) == 0x80) ++pos;
                    continue;
                }
                const uint32_t base = shadow_off[first];
                if (ms > done) next.push_back({cp_at[base + done], cp_at[base + ms]});
                next.push_back({cp_at[base + ms], cp_at[base + me]});
                done = pos = me;
            }
            if (done < len) next.push_back({cp_at[shadow_off[first] + done], last});
        }
        pcre2_match_data_free(md);
        pieces.swap(next);
    }
    words.reserve(pieces.size());
    for (auto [first, last] : pieces) words.push_back({canon_off[first], canon_off[last]});
}

}  // namespace vkllm
