// libFuzzer target: arbitrary bytes as an mmproj file, read by VisionConfig::from_gguf.
//
// Inputs that start with "GGUF" are parsed as they are. Any other input picks a small random mmproj of
// one projector type (its first byte) and edits it with the rest: keys set to hostile values, keys and
// tensors removed or reshaped, the projector type renamed. Whatever the config accepts must be
// consistent (every tensor it lists present with its dims, a width per row) and its derived values
// must not fail other than by their documented refusals: GgufError (MmprojError) for a bad file,
// std::invalid_argument for a tile or spec the encoder does not take. Any other exception escapes to
// libFuzzer and is reported as a crash, like a sanitizer finding.
#include "model/gguf/gguf.h"
#include "model/gguf/gguf_writer.h"
#include "model/image/image_preprocess.h"
#include "model/mmproj/image_prompt.h"
#include "model/mmproj/mmproj_config.h"
#include "model/testgen/random_mmproj.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

using namespace vkllm;

namespace {

void require(bool ok, const char* what) {
    if (!ok) {
        std::fprintf(stderr, "fuzz_mmproj: invariant broken: %s\n", what);
        std::abort();
    }
}

// Reads the input's bytes in order; zeros once they run out.
struct Bytes {
    const uint8_t* p;
    size_t n;
    uint8_t u8() { return n ? (--n, *p++) : 0; }
    uint32_t u32() { return uint32_t(u8()) | uint32_t(u8()) << 8 | uint32_t(u8()) << 16 | uint32_t(u8()) << 24; }
};

constexpr const char* kU32Keys[] = {
    "clip.vision.image_size",         "clip.vision.patch_size",
    "clip.vision.embedding_length",   "clip.vision.feed_forward_length",
    "clip.vision.block_count",        "clip.vision.attention.head_count",
    "clip.vision.projection_dim",     "clip.vision.projector.scale_factor",
    "clip.vision.spatial_merge_size", "clip.vision.preproc_image_size",
    "clip.vision.n_wa_pattern",
};
constexpr const char* kOtherKeys[] = {
    "clip.projector_type",
    "clip.has_vision_encoder",
    "clip.vision.image_mean",
    "clip.vision.image_std",
    "clip.vision.attention.layer_norm_epsilon",
    "clip.use_gelu",
    "clip.use_silu",
    "clip.vision.feature_layer",
};
constexpr const char* kTypes[] = {"gemma3",           "idefics3",       "mlp",      "qwen2vl_merger",
                                  "qwen2.5vl_merger", "qwen3vl_merger", "ultravox", ""};

GgufWriter edited(Bytes& in) {
    const auto table = projector_table();
    MmprojShape s;
    s.type = table[in.u8() % table.size()].type;
    s.text_dim = 16, s.dim = 16, s.heads = 2, s.ffn = 32, s.layers = 1 + in.u8() % 2;
    s.image_size = 32, s.patch_size = 8, s.seed = 5;
    GgufWriter w = make_random_mmproj(s);
    for (int op = 0; op < 8 && in.n; ++op) {
        switch (in.u8() % 8) {
            case 0: w.set_u32(kU32Keys[in.u8() % std::size(kU32Keys)], in.u32() % 4099); break;
            case 1: w.set_u32(kU32Keys[in.u8() % std::size(kU32Keys)], in.u32()); break;
            case 2:
                w.remove(in.u8() % 2 ? kU32Keys[in.u8() % std::size(kU32Keys)]
                                     : kOtherKeys[in.u8() % std::size(kOtherKeys)]);
                break;
            case 3: w.set_string("clip.projector_type", kTypes[in.u8() % std::size(kTypes)]); break;
            case 4: {  // a tensor removed
                const auto& ts = w.tensors();
                if (!ts.empty()) w.remove_tensor(ts[in.u8() % ts.size()].name);
                break;
            }
            case 5: {  // a tensor reshaped (f32, small dims)
                const auto& ts = w.tensors();
                if (ts.empty()) break;
                const std::string name = ts[in.u8() % ts.size()].name;
                w.remove_tensor(name);
                const uint64_t a = 1 + in.u8() % 64, b = 1 + in.u8() % 8;
                w.add_tensor(name, TensorType::F32, {a, b},
                             [](std::span<uint8_t> d) { std::memset(d.data(), 0, d.size()); });
                break;
            }
            case 6: {
                float v[3];
                for (float& x : v) {
                    const uint32_t bits = in.u32();
                    std::memcpy(&x, &bits, 4);
                }
                w.set_f32_array(in.u8() % 2 ? "clip.vision.image_mean" : "clip.vision.image_std", v);
                break;
            }
            case 7: {
                const int32_t layers[2] = {int32_t(in.u32() % 7) - 2, int32_t(in.u32() % 7) - 2};
                w.set_i32_array("clip.vision.feature_layer", std::span<const int32_t>(layers, 1 + in.u8() % 2));
                break;
            }
        }
    }
    return w;
}

void exercise(const GgufFile& f) {
    VisionConfig cfg;
    try {
        cfg = VisionConfig::from_gguf(f);
    } catch (const GgufError&) {
        return;
    }
    require(cfg.desc && cfg.n_embd && cfg.text_dim && cfg.merge >= 1, "an accepted config is complete");
    require(cfg.n_layer_used <= cfg.n_layer, "layers used");
    for (const VisionTensor& t : vision_tensors(cfg)) {
        const GgufTensorInfo* info = f.find_tensor(t.name);
        require(info != nullptr, "every listed tensor is in the file");
        for (size_t i = 0; i < t.ne.size(); ++i) require(info->ne[i] == t.ne[i], "listed dims are the file's");
    }
    try {
        check_text_dim(cfg, cfg.text_dim);
    } catch (...) {
        require(false, "the config's own text width");
    }
    try {
        check_preprocess_spec(preprocess_spec(cfg));
    } catch (const std::invalid_argument&) {}
    try {
        const uint32_t n = tile_tokens(cfg, cfg.image_size, cfg.image_size);
        PreprocessedImage img;
        ImageTile tile;
        tile.nx = tile.ny = cfg.image_size;
        img.tiles.push_back(tile);
        if (cfg.desc->preprocess == PreprocessKind::Idefics3) {
            img.tiles.push_back(tile);
            img.grid_cols = img.grid_rows = 1;
        }
        const std::vector<ImagePiece> pieces = image_prompt(cfg, img);
        require(image_prompt_rows(pieces) >= n, "the prompt holds the tile's rows");
    } catch (const std::invalid_argument&) {}
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::vector<uint8_t> file;
    if (size >= 4 && std::memcmp(data, "GGUF", 4) == 0) {
        file.assign(data, data + size);
    } else {
        Bytes in{data, size};
        try {
            file = edited(in).write_memory();
        } catch (const GgufError&) {
            return 0;  // an edit the writer refuses (a duplicate or empty name)
        }
    }
    try {
        exercise(GgufFile::from_memory(std::move(file), "fuzz.mmproj"));
    } catch (const GgufError&) {}
    return 0;
}
