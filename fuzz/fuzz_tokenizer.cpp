// libFuzzer target: the tokenizers on arbitrary bytes, with real vocabularies.
//
// The first input byte picks the vocab (bits 0-1, and bit 4 for the second four: stories260K's 512
// SentencePiece tokens, LLaMA's 32000, Llama 3's 128256 byte-level BPE tokens, a small byte-level
// BPE vocab with DeepSeek's six-regex pre-tokenizer, bge's WordPiece, the Unigram vocab with its
// nmt_nfkc charsmap from tests/fixtures/tokenizer; loaded once), whether control tokens are parsed
// (bit 3), and what to do with the rest (bit 2):
//   encode  -- any bytes, invalid UTF-8 included, must encode to ids inside the vocab, with and
//              without BOS alike; SentencePiece and byte-level BPE vocabs must decode back to the
//              input: exactly for SentencePiece (every byte has a byte-fallback token; only a
//              literal U+2581, its space, decodes differently), and for byte-level BPE as llama.cpp
//              reads it (invalid bytes U+FFFD). WordPiece and Unigram normalise, so they do not;
//   decode  -- the bytes as little-endian int32 ids, most of them out of range: decode_piece must
//              throw std::out_of_range for exactly those, never read outside the vocab.
// The vocab files are taken from $VKLLM_MODELS_DIR or the build's ../shared/models (the Unigram one
// from the source tree); when one is absent a generated vocab stands in, so the target always runs.
#include "model/gguf/gguf.h"
#include "model/gguf/gguf_writer.h"
#include "model/testgen/random_model.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/utf8.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

using namespace vkllm;

namespace {

void require(bool ok, const char* what) {
    if (!ok) {
        std::fprintf(stderr, "fuzz_tokenizer: invariant broken: %s\n", what);
        std::abort();
    }
}

struct Vocab {
    std::unique_ptr<GgufFile> file;  // the tokenizer keeps no views into it, but keep it alive anyway
    std::unique_ptr<Tokenizer> tok;
};

// Byte-level BPE: the 256 byte characters in GPT-2 spelling, a few merges, one control token.
std::vector<uint8_t> small_bpe_vocab() {
    GgufWriter w;
    w.set_string("general.architecture", "llama");
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", "deepseek-llm");
    std::vector<std::string> tokens;
    int n = 0;
    for (int b = 0; b < 256; ++b) {
        const bool printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
        std::string s;
        utf8::append(s, printable ? uint32_t(b) : uint32_t(256 + n++));
        tokens.push_back(s);
    }
    for (const char* t : {"th", "the", "\xc4\xa0t", "\xc4\xa0the", "in", "ing", "<|endoftext|>"}) tokens.push_back(t);
    std::vector<int32_t> types(tokens.size(), 1);
    types.back() = 3;
    w.set_string_array("tokenizer.ggml.tokens", tokens);
    w.set_i32_array("tokenizer.ggml.token_type", types);
    w.set_string_array("tokenizer.ggml.merges", {"t h", "th e", "\xc4\xa0 t", "\xc4\xa0t he", "i n", "in g"});
    w.set_u32("tokenizer.ggml.eos_token_id", uint32_t(tokens.size() - 1));
    return w.write_memory();
}

Vocab load_vocab(const char* file_name, uint32_t fallback_vocab, const char* dir = nullptr) {
    const char* env = std::getenv("VKLLM_MODELS_DIR");
    const std::filesystem::path path = std::filesystem::path(dir ? dir : env ? env : VKLLM_MODELS_DIR) / file_name;
    Vocab v;
    if (std::filesystem::is_regular_file(path)) {
        v.file = std::make_unique<GgufFile>(GgufFile::open(path.string()));
    } else if (fallback_vocab == 0) {
        std::fprintf(stderr, "fuzz_tokenizer: %s not found; using a small byte-level BPE vocab instead\n",
                     path.c_str());
        v.file = std::make_unique<GgufFile>(GgufFile::from_memory(small_bpe_vocab(), file_name));
    } else {
        std::fprintf(stderr, "fuzz_tokenizer: %s not found; using a random %u-token vocab instead\n", path.c_str(),
                     fallback_vocab);
        ModelShape s;
        s.dim = 32;
        s.n_layers = 1;
        s.n_heads = 4;
        s.n_kv_heads = 4;
        s.ffn_dim = 32;
        s.n_vocab = fallback_vocab;
        v.file = std::make_unique<GgufFile>(GgufFile::from_memory(make_random_model(s).write_memory(), file_name));
    }
    v.tok = make_tokenizer(*v.file);
    return v;
}

const Vocab& vocab(int which) {
    static const Vocab small = load_vocab("stories260K.gguf", 512);
    static const Vocab llama = load_vocab("ggml-vocab-llama-spm.gguf", 32000);
    static const Vocab llama3 = load_vocab("ggml-vocab-llama-bpe.gguf", 0);
    static const Vocab small_bpe = [] {
        Vocab v;
        v.file = std::make_unique<GgufFile>(GgufFile::from_memory(small_bpe_vocab(), "small-bpe"));
        v.tok = make_tokenizer(*v.file);
        return v;
    }();
    static const Vocab bert = load_vocab("ggml-vocab-bert-bge.gguf", 0);
    static const Vocab unigram = load_vocab("ggml-vocab-unigram.gguf", 0, VKLLM_FIXTURE_VOCABS_DIR);
    const Vocab* all[] = {&small, &llama, &llama3, &small_bpe, &bert, &unigram};
    return *all[which];
}

// The text as byte-level BPE reads it: invalid bytes become U+FFFD.
std::string lenient(std::string_view text) {
    std::vector<uint32_t> cps;
    utf8::decode_lenient(text, cps);
    std::string out;
    for (uint32_t cp : cps) utf8::append(out, cp);
    return out;
}

void fuzz_encode(const Tokenizer& tok, std::string_view text, bool parse_special) {
    const std::vector<int32_t> with_bos = tok.encode(text, true, parse_special);
    const std::vector<int32_t> plain = tok.encode(text, false, parse_special);
    for (int32_t id : with_bos) require(id >= 0 && size_t(id) < tok.n_vocab(), "encode yields ids inside the vocab");
    const bool bos = tok.add_bos() && tok.bos_id() >= 0, eos = tok.add_eos() && tok.eos_id() >= 0;
    require(with_bos.size() == plain.size() + bos + eos, "add_special adds BOS / EOS only");
    require(!bos || with_bos[0] == tok.bos_id(), "BOS first");
    require(std::equal(plain.begin(), plain.end(), with_bos.begin() + bos), "encode with BOS is BOS + encode without");
    for (size_t i = 0; i < plain.size(); ++i) (void)tok.token_to_piece(plain[i], true);
    if (parse_special) return;  // control tokens decode to nothing
    const bool spm = tok.model_name() == "llama";
    if (!spm && tok.model_name() != "gpt2") return;  // WordPiece and Unigram normalise the text
    if (!spm || text.find("\xe2\x96\x81") == std::string_view::npos) {
        const std::string back = tok.decode(with_bos);
        if (back != (spm ? std::string(text) : lenient(text))) {
            std::fprintf(stderr, "fuzz_tokenizer: decode(encode(%zu bytes)) gave %zu bytes\n", text.size(),
                         back.size());
            require(false, "decode(encode(text)) == text");
        }
    }
}

void fuzz_decode(const Tokenizer& tok, const uint8_t* data, size_t size) {
    int32_t prev = -1;
    for (size_t i = 0; i + 4 <= size; i += 4) {
        int32_t id;
        std::memcpy(&id, data + i, 4);
        // Small ids land inside the vocab often enough to decode real pieces too.
        if (data[i + 3] == 0 && data[i + 2] == 0) id = int32_t(uint32_t(id) % (tok.n_vocab() + 8));
        const bool valid = id >= 0 && size_t(id) < tok.n_vocab();
        bool thrown = false;
        try {
            (void)tok.decode_piece(id, prev);
            (void)tok.token_text(id);
            (void)tok.token_type(id);
            (void)tok.token_score(id);
        } catch (const std::out_of_range&) {
            thrown = true;
        }
        require(thrown == !valid, "decode_piece throws std::out_of_range exactly for ids outside the vocab");
        prev = id;  // an out-of-range previous id must be harmless too
    }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    for (int i = 0; i < 6; ++i) vocab(i);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const int which = (data[0] & 3) | (data[0] >> 2 & 4);  // 0..7; 6 and 7 repeat 2 and 3
    const Tokenizer& tok = *vocab(which < 6 ? which : which - 4).tok;
    if (data[0] & 4)
        fuzz_decode(tok, data + 1, size - 1);
    else
        fuzz_encode(tok, std::string_view(reinterpret_cast<const char*>(data + 1), size - 1), data[0] & 8);
    return 0;
}
