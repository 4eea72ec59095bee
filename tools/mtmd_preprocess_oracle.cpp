// Oracle for model/image/: runs the image preprocessing of llama.cpp build 9749 (the peer's
// libmtmd.so.0) on random images and prints what it produced, as the fixture
// tests/fixtures/image/mtmd_preprocess.txt that tests/model/image/test_mtmd_fixtures.cpp checks.
// Never built by CMake and never needed by the tests; see tests/fixtures/image/README.md for the
// command. The functions it calls are internal to libmtmd (img_tool::resize and the preprocessors'
// preprocess methods): their addresses come from the library's symbol table (nm) and the object
// layouts below were read from build 9749's machine code, so the tool is tied to that build.
#include <dlfcn.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "model/gguf/gguf_writer.h"

namespace {

// Build 9749's layouts: clip_image_u8 is {vector<uint8_t> buf; int nx, ny}; clip_image_f32 is
// 40 bytes, {8 bytes; vector<float> buf (RGB interleaved); int nx, ny}; mtmd_image_preproc_out
// starts {vector<clip_image_f32> entries; clip_image_f32 overview; int grid_x, grid_y}.
struct ClipImageU8 {
    std::vector<uint8_t> buf;
    int nx = 0, ny = 0;
};
struct ClipImageSize {
    int w, h;
};
struct ClipContextParams {  // passed by value; all zero: CPU, no flash attention, no warmup
    unsigned char bytes[256];
};
struct ClipInitResult {
    void* vision;
    void* audio;
    void* more[6];
};

std::map<std::string, uintptr_t> g_symbols;
uintptr_t g_base = 0;

void* symbol(const std::string& mangled) {
    const auto it = g_symbols.find(mangled);
    if (it == g_symbols.end()) {
        std::fprintf(stderr, "libmtmd has no symbol %s\n", mangled.c_str());
        std::exit(2);
    }
    return reinterpret_cast<void*>(g_base + it->second);
}

void load(const std::string& lib) {
    void* h = dlopen(lib.c_str(), RTLD_NOW);
    if (!h) {
        std::fprintf(stderr, "%s\n", dlerror());
        std::exit(2);
    }
    FILE* p = popen(("nm " + lib).c_str(), "r");
    char line[8192], name[8000];
    unsigned long addr;
    char type;
    while (std::fgets(line, sizeof line, p))
        if (std::sscanf(line, "%lx %c %7999s", &addr, &type, name) == 3) g_symbols[name] = addr;
    pclose(p);
    g_base = reinterpret_cast<uintptr_t>(dlsym(h, "mtmd_init_from_file")) - g_symbols.at("mtmd_init_from_file");
}

// The images: bytes of a 32-bit LCG, seeded per case (test_mtmd_fixtures.cpp has the same).
std::vector<uint8_t> random_bytes(uint32_t seed, size_t n) {
    std::vector<uint8_t> out(n);
    for (uint8_t& b : out) {
        seed = seed * 1664525u + 1013904223u;
        b = uint8_t(seed >> 24);
    }
    return out;
}

uint64_t fnv1a(const void* data, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const uint8_t*>(data)[i]) * 1099511628211ull;
    return h;
}

void resize_case(int algo, int pad, int sw, int sh, int tw, int th, uint32_t seed) {
    ClipImageU8 src, dst;
    src.nx = sw;
    src.ny = sh;
    src.buf = random_bytes(seed, size_t(sw) * sh * 3);
    using Fn = void (*)(const ClipImageU8&, ClipImageU8&, const ClipImageSize&, int, int, std::array<uint8_t, 3>);
    auto fn = reinterpret_cast<Fn>(
        symbol("_ZN8img_tool6resizeERK13clip_image_u8RS0_RK15clip_image_size11resize_algo9pad_styleSt5arrayIhLm3EE"));
    const ClipImageSize target{tw, th};
    fn(src, dst, target, algo, pad, {122, 116, 104});
    std::printf("resize %d %d %d %d %d %d %u -> %d %d %016llx\n", algo, pad, sw, sh, tw, th, seed, dst.nx, dst.ny,
                (unsigned long long)fnv1a(dst.buf.data(), dst.buf.size()));
}

struct Mmproj {
    std::string type;
    uint32_t image_size, patch, preproc;
};

std::string write_mmproj(const Mmproj& m, const std::string& dir) {
    using namespace vkllm;
    const uint64_t E = 64, F = 128, T = 64;
    GgufWriter w;
    auto t = [&](const std::string& name, std::initializer_list<uint64_t> ne) {
        w.add_tensor(name, TensorType::F32, ne, [](std::span<uint8_t> d) { std::memset(d.data(), 0, d.size()); });
    };
    w.set_string("general.architecture", "clip");
    w.set_bool("clip.has_vision_encoder", true);
    w.set_string("clip.projector_type", m.type);
    w.set_u32("clip.vision.image_size", m.image_size);
    w.set_u32("clip.vision.patch_size", m.patch);
    w.set_u32("clip.vision.embedding_length", E);
    w.set_u32("clip.vision.feed_forward_length", F);
    w.set_u32("clip.vision.block_count", 1);
    w.set_u32("clip.vision.attention.head_count", 4);
    w.set_f32("clip.vision.attention.layer_norm_epsilon", 1e-6f);
    w.set_u32("clip.vision.projection_dim", T);
    const float mean[3] = {0.48145466f, 0.4578275f, 0.40821073f}, stdv[3] = {0.26862954f, 0.26130258f, 0.27577711f};
    w.set_f32_array("clip.vision.image_mean", mean);
    w.set_f32_array("clip.vision.image_std", stdv);
    w.set_bool("clip.use_gelu", true);
    const uint64_t np = (m.image_size / m.patch) * (m.image_size / m.patch);
    const bool qwen = m.type.rfind("qwen", 0) == 0;
    t("v.patch_embd.weight", {m.patch, m.patch, 3, E});
    if (!qwen) t("v.patch_embd.bias", {E});  // llama.cpp's Qwen2-VL graph refuses a patch bias
    if (qwen) t("v.patch_embd.weight.1", {m.patch, m.patch, 3, E});
    if (!qwen) t("v.position_embd.weight", {E, np + (m.type == "mlp" ? 1 : 0)});
    for (const char* n : {"attn_q", "attn_k", "attn_v", "attn_out"}) {
        t(std::string("v.blk.0.") + n + ".weight", {E, E});
        t(std::string("v.blk.0.") + n + ".bias", {E});
    }
    for (const char* n : {"ln1", "ln2"}) {
        t(std::string("v.blk.0.") + n + ".weight", {E});
        t(std::string("v.blk.0.") + n + ".bias", {E});
    }
    t("v.blk.0.ffn_up.weight", {E, F});
    t("v.blk.0.ffn_up.bias", {F});
    t("v.blk.0.ffn_down.weight", {F, E});
    t("v.blk.0.ffn_down.bias", {E});
    if (m.type == "gemma3") {
        w.set_u32("clip.vision.projector.scale_factor", 2);
        t("v.post_ln.weight", {E});
        t("v.post_ln.bias", {E});
        t("mm.input_projection.weight", {T, E});
        t("mm.soft_emb_norm.weight", {E});
    } else if (m.type == "idefics3") {
        w.set_u32("clip.vision.projector.scale_factor", 2);
        if (m.preproc) w.set_u32("clip.vision.preproc_image_size", m.preproc);
        t("v.post_ln.weight", {E});
        t("v.post_ln.bias", {E});
        t("mm.model.fc.weight", {E * 4, T});
    } else if (m.type == "mlp") {
        t("v.class_embd", {E});
        t("v.pre_ln.weight", {E});
        t("v.pre_ln.bias", {E});
        t("mm.0.weight", {E, T});
        t("mm.0.bias", {T});
        t("mm.2.weight", {T, T});
        t("mm.2.bias", {T});
    } else if (qwen) {
        w.set_u32("clip.vision.spatial_merge_size", 2);
        t("v.post_ln.weight", {E});
        t("v.post_ln.bias", {E});
        t("mm.0.weight", {E * 4, E * 4});
        t("mm.0.bias", {E * 4});
        t("mm.2.weight", {E * 4, T});
        t("mm.2.bias", {T});
    }
    const std::string path = dir + "/" + m.type + "-" + std::to_string(m.image_size) + "-" + std::to_string(m.patch) +
                             "-" + std::to_string(m.preproc) + ".gguf";
    w.write_file(path);
    return path;
}

const void* load_hparams(const std::string& mmproj) {
    ClipContextParams params{};
    ClipInitResult result{};
    auto init = reinterpret_cast<void (*)(ClipInitResult*, const char*, ClipContextParams)>(
        symbol("_Z9clip_initPKc19clip_context_params"));
    init(&result, mmproj.c_str(), params);
    if (!result.vision) {
        std::fprintf(stderr, "clip_init refused %s\n", mmproj.c_str());
        std::exit(2);
    }
    auto get = reinterpret_cast<const void* (*)(void*)>(symbol("_Z16clip_get_hparamsPK8clip_ctx"));
    return get(result.vision);
}

void print_f32(const unsigned char* img, const char* role) {
    const float *b, *e;
    int nx, ny;
    std::memcpy(&b, img + 8, sizeof b);
    std::memcpy(&e, img + 16, sizeof e);
    std::memcpy(&nx, img + 32, 4);
    std::memcpy(&ny, img + 36, 4);
    std::printf(" %s %d %d %016llx", role, nx, ny, (unsigned long long)fnv1a(b, size_t(e - b) * sizeof(float)));
}

// The preprocessor class mtmd 9749 uses for the projector (mtmd_image_preprocessor_<cls>), run on a
// w x h random image; prints its tiles in mtmd's encode order (slices, then the overview).
void preprocess_case(const std::string& kind, const std::string& cls, const Mmproj& m, const std::string& path, int w,
                     int h, uint32_t seed) {
    static std::map<std::string, const void*> hparams;
    if (!hparams.count(path)) hparams[path] = load_hparams(path);
    ClipImageU8 img;
    img.nx = w;
    img.ny = h;
    img.buf = random_bytes(seed, size_t(w) * h * 3);
    const std::string name = "mtmd_image_preprocessor_" + cls;
    const std::string len = std::to_string(name.size());
    alignas(16) static unsigned char self[512];
    alignas(16) static unsigned char out[4096];
    std::memset(self, 0, sizeof self);
    std::memset(out, 0, sizeof out);
    void* vtable = static_cast<char*>(symbol("_ZTV" + len + name)) + 16;
    const void* hp = hparams[path];
    std::memcpy(self, &vtable, 8);
    std::memcpy(self + 8, &hp, 8);
    auto pre = reinterpret_cast<void (*)(void*, void*, const ClipImageU8*)>(
        symbol("_ZN" + len + name + "10preprocessERK13clip_image_u8"));
    pre(out, self, &img);  // the result object is leaked: a few tiles per case
    const unsigned char *eb, *ee;
    std::memcpy(&eb, out, 8);
    std::memcpy(&ee, out + 8, 8);
    int gx, gy;
    std::memcpy(&gx, out + 64, 4);
    std::memcpy(&gy, out + 68, 4);
    uint64_t ob, oe;
    std::memcpy(&ob, out + 32, 8);
    std::memcpy(&oe, out + 40, 8);
    std::printf("preprocess %s %u %u %u %d %d %u -> grid %d %d tiles %d", kind.c_str(), m.image_size, m.patch,
                m.preproc, w, h, seed, gx, gy, int((ee - eb) / 40) + (ob != oe ? 1 : 0));
    for (const unsigned char* e = eb; e < ee; e += 40) print_f32(e, "tile");
    if (ob != oe) print_f32(out + 24, "tile");
    std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s PEER_BIN_DIR SCRATCH_DIR > mtmd_preprocess.txt\n", argv[0]);
        return 2;
    }
    load(std::string(argv[1]) + "/libmtmd.so.0");
    const std::string dir = argv[2];
    std::printf("# llama.cpp build 9749 (libmtmd.so.0), tools/mtmd_preprocess_oracle.cpp\n");
    std::printf(
        "# resize ALGO PAD SW SH TW TH SEED -> NX NY FNV1A64(u8 RGB); ALGO 0 bilinear 1 bicubic 2 pillow "
        "bicubic 3 lanczos; PAD 0 none 1 ceil 2 nearest; pad colour 122 116 104\n");
    const int sizes[][4] = {{2, 2, 3, 3},    {3, 2, 2, 3},   {7, 5, 3, 4},     {5, 7, 11, 6}, {13, 9, 4, 4},
                            {1, 1, 3, 2},    {16, 12, 7, 7}, {40, 30, 17, 23}, {3, 8, 8, 3},  {64, 48, 20, 20},
                            {30, 70, 33, 9}, {9, 9, 9, 4},   {2, 5, 2, 9}};
    uint32_t seed = 1;
    for (int algo = 0; algo < 4; ++algo)
        for (int pad = 0; pad < 3; ++pad)
            for (const auto& s : sizes) resize_case(algo, pad, s[0], s[1], s[2], s[3], seed++);

    std::printf(
        "# preprocess KIND IMAGE_SIZE PATCH PREPROC W H SEED -> grid COLS ROWS tiles N (tile NX NY "
        "FNV1A64(f32 RGB interleaved))...; mean 0.48145466 0.4578275 0.40821073, std 0.26862954 0.26130258 "
        "0.27577711; smart_resize: merge 2, min/max pixels mtmd's 8 and 4096 merged patches\n");
    struct Kind {
        std::string kind, cls;
        Mmproj m;
    };
    const Kind kinds[] = {
        {"square", "fixed_size", {"gemma3", 32, 8, 0}},
        {"square", "fixed_size", {"gemma3", 56, 14, 0}},
        {"pad_square", "fixed_size", {"mlp", 32, 8, 0}},
        {"pad_square", "fixed_size", {"mlp", 42, 14, 0}},
        {"idefics3", "idefics3", {"idefics3", 32, 8, 96}},
        {"idefics3", "idefics3", {"idefics3", 32, 8, 0}},
        {"idefics3", "idefics3", {"idefics3", 64, 16, 160}},
        {"smart_resize", "dyn_size", {"qwen2vl_merger", 32, 8, 0}},
        {"smart_resize", "dyn_size", {"qwen2vl_merger", 56, 14, 0}},
    };
    const int images[][2] = {{5, 3},  {32, 32}, {40, 17},  {17, 40}, {100, 100}, {1, 1},
                             {64, 8}, {8, 64},  {200, 50}, {33, 31}, {300, 7},   {1000, 700}};
    for (const Kind& k : kinds) {
        const std::string path = write_mmproj(k.m, dir);
        for (const auto& im : images) preprocess_case(k.kind, k.cls, k.m, path, im[0], im[1], seed++);
    }
    return 0;
}
