// libFuzzer target: the SentencePiece tokenizer on arbitrary bytes, with real vocabularies.
//
// The first input byte picks the vocab (stories260K's 512 tokens or LLaMA's 32000, loaded once) and
// what to do with the rest:
//   encode  -- any bytes, invalid UTF-8 included, must encode to ids inside the vocab, and decode back
//              to exactly the input (every byte has a byte-fallback token; only a literal U+2581, the
//              SentencePiece space, legitimately decodes differently);
//   decode  -- the bytes as little-endian int32 ids, most of them out of range: decode_piece must
//              throw std::out_of_range for exactly those, never read outside the vocab.
// The vocab files are taken from $VKLLM_MODELS_DIR or the build's ../shared/models; when one is
// absent a generated random vocab stands in, so the target always runs.
#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "model/tokenizer/tokenizer.h"

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

Vocab load_vocab(const char* file_name, uint32_t fallback_vocab) {
    const char* env = std::getenv("VKLLM_MODELS_DIR");
    const std::filesystem::path path = std::filesystem::path(env ? env : VKLLM_MODELS_DIR) / file_name;
    Vocab v;
    if (std::filesystem::is_regular_file(path)) {
        v.file = std::make_unique<GgufFile>(GgufFile::open(path.string()));
    } else {
        std::fprintf(stderr, "fuzz_tokenizer: %s not found; using a random %u-token vocab instead\n",
                     path.c_str(), fallback_vocab);
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
    return which ? llama : small;
}

void fuzz_encode(const Tokenizer& tok, std::string_view text) {
    const std::vector<int32_t> with_bos = tok.encode(text, true);
    const std::vector<int32_t> plain = tok.encode(text, false);
    for (int32_t id : with_bos) require(id >= 0 && size_t(id) < tok.n_vocab(), "encode yields ids inside the vocab");
    require(!with_bos.empty() && with_bos[0] == tok.bos_id(), "BOS first");
    require(std::equal(plain.begin(), plain.end(), with_bos.begin() + 1, with_bos.end()),
            "encode with BOS is BOS + encode without");
    if (text.find("\xe2\x96\x81") == std::string_view::npos) {
        const std::string back = tok.decode(with_bos);
        if (back != text) {
            std::fprintf(stderr, "fuzz_tokenizer: decode(encode(%zu bytes)) gave %zu bytes\n", text.size(), back.size());
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
    vocab(0);
    vocab(1);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const Tokenizer& tok = *vocab(data[0] & 1).tok;
    if (data[0] & 2)
        fuzz_decode(tok, data + 1, size - 1);
    else
        fuzz_encode(tok, std::string_view(reinterpret_cast<const char*>(data + 1), size - 1));
    return 0;
}
