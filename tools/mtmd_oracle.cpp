// mtmd_oracle: what llama.cpp's libmtmd makes of one image, for vkllm's vision fixtures
// (tests/fixtures/vision/README.md). Built only on request (-DVKLLM_MTMD_ORACLE=ON); nothing in the
// test suite needs it or llama.cpp.
//
//   mtmd_oracle LIBDIR TEXT.gguf MMPROJ.gguf IMAGE.rgb NX NY OUT_PREFIX [PROMPT]
//
// dlopens LIBDIR/libllama.so.0 and LIBDIR/libmtmd.so.0 (llama.cpp's shared libraries), loads the text
// model and the mmproj, wraps the raw RGB bytes (NX * NY * 3, row-major) in a bitmap (no decoder
// involved), tokenizes PROMPT (default "A<__media__>B") and writes
//   OUT_PREFIX.chunks.txt   one line per chunk: "text N <pieces as a JSON-ish escaped string>" or
//                           "image N NX NY" (tokens, and the image chunk's token grid)
//   OUT_PREFIX.imageK.f32   image chunk K's embeddings, little-endian f32, N rows of the text width
// Environment: ORACLE_GPU=1 encodes on llama.cpp's GPU backend (Vulkan; GGML_VK_VISIBLE_DEVICES=0 for
// lavapipe) instead of its CPU one; ORACLE_ENCODE_REPS=N encodes each image chunk N more times and
// prints "encode chunk K: first F ms, median M ms, min L ms over N" (scripts/bench_vision_peer.sh);
// ORACLE_FLASH_ATTN=1 (or auto) the encoder's flash attention (off otherwise).
// The declarations below are the few C functions this calls; the two parameter structs are passed as
// opaque oversized buffers (both are the last argument, so a larger copy is harmless) after checking
// the one field layout this relies on.
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

struct Opaque {
    alignas(16) unsigned char bytes[1024];
};

using llama_token = int32_t;
struct Lib {
    void* h;
    template <class F>
    F get(const char* name) {
        void* p = dlsym(h, name);
        if (!p) throw std::runtime_error(std::string("missing symbol ") + name);
        return reinterpret_cast<F>(p);
    }
};

Lib open_lib(const std::string& path) {
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!h) throw std::runtime_error(std::string("dlopen: ") + dlerror());
    return {h};
}

std::string escape(const std::string& s) {
    std::string out;
    for (unsigned char c : s) {
        if (c == '\\' || c == '"')
            out += '\\', out += char(c);
        else if (c == '\n')
            out += "\\n";
        else if (c < 0x20 || c >= 0x7f) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            out += buf;
        } else
            out += char(c);
    }
    return out;
}

// ORACLE_FLASH_ATTN: unset disabled (0), "auto" llama.cpp's choice (-1), anything else enabled (1).
int32_t flash_attn_type(const char* env) {
    if (!env) return 0;
    return std::strcmp(env, "auto") == 0 ? -1 : 1;
}

int run(int argc, char** argv) {
    if (argc < 8) {
        std::fprintf(stderr, "usage: mtmd_oracle LIBDIR TEXT.gguf MMPROJ.gguf IMAGE.rgb NX NY OUT_PREFIX [PROMPT]\n");
        return 2;
    }
    const std::string dir = argv[1];
    const uint32_t nx = uint32_t(std::strtoul(argv[5], nullptr, 10)), ny = uint32_t(std::strtoul(argv[6], nullptr, 10));
    const std::string out = argv[7];
    const std::string prompt = argc > 8 ? argv[8] : "A<__media__>B";

    std::ifstream in(argv[4], std::ios::binary);
    std::vector<unsigned char> rgb((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (rgb.size() != size_t(nx) * ny * 3) throw std::runtime_error("image bytes != NX * NY * 3");

    Lib llama = open_lib(dir + "/libllama.so.0");
    Lib mtmd = open_lib(dir + "/libmtmd.so.0");

    auto backend_init = llama.get<void (*)()>("llama_backend_init");
    auto model_params = llama.get<Opaque (*)()>("llama_model_default_params");
    auto load_model = llama.get<void* (*)(const char*, Opaque)>("llama_model_load_from_file");
    auto get_vocab = llama.get<const void* (*)(const void*)>("llama_model_get_vocab");
    auto to_piece =
        llama.get<int32_t (*)(const void*, llama_token, char*, int32_t, int32_t, bool)>("llama_token_to_piece");

    auto ctx_params = mtmd.get<Opaque (*)()>("mtmd_context_params_default");
    auto default_marker = mtmd.get<const char* (*)()>("mtmd_default_marker");
    auto init = mtmd.get<void* (*)(const char*, const void*, Opaque)>("mtmd_init_from_file");
    auto bitmap_init = mtmd.get<void* (*)(uint32_t, uint32_t, const unsigned char*)>("mtmd_bitmap_init");
    auto chunks_init = mtmd.get<void* (*)()>("mtmd_input_chunks_init");
    auto chunks_size = mtmd.get<size_t (*)(const void*)>("mtmd_input_chunks_size");
    auto chunks_get = mtmd.get<const void* (*)(const void*, size_t)>("mtmd_input_chunks_get");
    auto chunk_type = mtmd.get<int (*)(const void*)>("mtmd_input_chunk_get_type");
    auto chunk_text = mtmd.get<const llama_token* (*)(const void*, size_t*)>("mtmd_input_chunk_get_tokens_text");
    auto chunk_image = mtmd.get<const void* (*)(const void*)>("mtmd_input_chunk_get_tokens_image");
    auto chunk_n_tokens = mtmd.get<size_t (*)(const void*)>("mtmd_input_chunk_get_n_tokens");
    auto image_nx = mtmd.get<size_t (*)(const void*)>("mtmd_image_tokens_get_nx");
    auto image_ny = mtmd.get<size_t (*)(const void*)>("mtmd_image_tokens_get_ny");
    // This build's mtmd_input_text carries the text's length after its pointer (found by its reading
    // past the end of a prompt given without one).
    struct InputText {
        const char* text;
        size_t n_text;
        bool add_special, parse_special;
    };
    auto tokenize = mtmd.get<int32_t (*)(void*, void*, const InputText*, const void**, size_t)>("mtmd_tokenize");
    auto encode_chunk = mtmd.get<int32_t (*)(void*, const void*)>("mtmd_encode_chunk");
    auto output_embd = mtmd.get<float* (*)(void*)>("mtmd_get_output_embd");

    backend_init();
    void* model = load_model(argv[2], model_params());
    if (!model) throw std::runtime_error("llama_model_load_from_file failed");

    // mtmd_context_params: bool use_gpu, bool print_timings, int n_threads, const char* image_marker,
    // const char* media_marker, enum flash_attn_type, ... (checked: media_marker is the default marker).
    Opaque cp = ctx_params();
    const char* media = nullptr;
    std::memcpy(&media, cp.bytes + 16, sizeof media);
    if (!media || std::strcmp(media, default_marker()) != 0)
        throw std::runtime_error("mtmd_context_params layout is not the expected one");
    const bool use_gpu = std::getenv("ORACLE_GPU") != nullptr;
    const int32_t n_threads = 2, flash_attn = flash_attn_type(std::getenv("ORACLE_FLASH_ATTN"));
    std::memcpy(cp.bytes + 0, &use_gpu, 1);
    std::memcpy(cp.bytes + 4, &n_threads, 4);
    std::memcpy(cp.bytes + 24, &flash_attn, 4);
    void* ctx = init(argv[3], model, cp);
    if (!ctx) throw std::runtime_error("mtmd_init_from_file failed");

    const void* bitmap = bitmap_init(nx, ny, rgb.data());
    void* chunks = chunks_init();
    const InputText text{prompt.c_str(), prompt.size(), false, true};
    if (int32_t rc = tokenize(ctx, chunks, &text, &bitmap, 1); rc != 0)
        throw std::runtime_error("mtmd_tokenize returned " + std::to_string(rc));

    std::ofstream layout(out + ".chunks.txt");
    const void* vocab = get_vocab(model);
    int image_index = 0;
    for (size_t i = 0; i < chunks_size(chunks); ++i) {
        const void* c = chunks_get(chunks, i);
        const size_t n = chunk_n_tokens(c);
        if (chunk_type(c) == 0) {
            size_t count = 0;
            const llama_token* toks = chunk_text(c, &count);
            std::string pieces;
            for (size_t t = 0; t < count; ++t) {
                if (toks[t] < 0) {  // a marker token the vocab lacks (mtmd looks them up by text)
                    pieces += "<null>";
                    continue;
                }
                char buf[256];
                const int32_t len = to_piece(vocab, toks[t], buf, sizeof buf, 0, true);
                if (len > 0) pieces.append(buf, size_t(len));
            }
            layout << "text " << n << " \"" << escape(pieces) << "\"";
            if (std::getenv("ORACLE_IDS"))
                for (size_t t = 0; t < count; ++t) layout << " " << toks[t];
            layout << "\n";
        } else {
            const void* img = chunk_image(c);
            layout << "image " << n << ' ' << image_nx(img) << ' ' << image_ny(img) << '\n';
            auto timed_encode = [&] {
                const auto t0 = std::chrono::steady_clock::now();
                if (int32_t rc = encode_chunk(ctx, c); rc != 0)
                    throw std::runtime_error("mtmd_encode_chunk returned " + std::to_string(rc));
                return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            };
            const double first = timed_encode();
            if (const char* reps = std::getenv("ORACLE_ENCODE_REPS")) {
                std::vector<double> ms;
                for (long r = 0; r < std::strtol(reps, nullptr, 10); ++r) ms.push_back(timed_encode());
                if (!ms.empty()) {
                    std::sort(ms.begin(), ms.end());
                    const size_t m = ms.size();
                    const double median = m % 2 ? ms[m / 2] : 0.5 * (ms[m / 2 - 1] + ms[m / 2]);
                    std::printf("encode chunk %d: first %.3f ms, median %.3f ms, min %.3f ms over %zu\n", image_index,
                                first, median, ms.front(), m);
                }
            }
            const float* e = output_embd(ctx);
            // The row width: the embeddings are the text model's; read it from the model.
            auto n_embd = llama.get<int32_t (*)(const void*)>("llama_model_n_embd");
            std::ofstream f(out + ".image" + std::to_string(image_index++) + ".f32", std::ios::binary);
            f.write(reinterpret_cast<const char*>(e), std::streamsize(n * size_t(n_embd(model)) * sizeof(float)));
        }
    }
    std::fprintf(stderr, "mtmd_oracle: %zu chunks, %d images -> %s.*\n", chunks_size(chunks), image_index, out.c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "mtmd_oracle: %s\n", e.what());
        return 1;
    }
}
