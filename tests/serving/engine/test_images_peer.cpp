// Images through the whole path against llama.cpp's llama-server (build 9749, --mmproj, CPU), for
// gemma3, mlp, qwen2vl_merger and qwen2.5vl_merger: a random text model and mmproj as `vkllm gen-model --arch A --dim 64 --layers 2 --heads 4 --ffn 128
// --vocab 512 --type f16 --seed 55 --mmproj TYPE` writes them, the PNGs of tests/fixtures/vision/peer
// decoded, preprocessed (a 97 x 61 picture: resized and padded; a 64 x 64 one) and encoded on the
// device, the prompt laid out and evaluated by the engine: the prompt's token count and the first
// generated tokens with their top-3 log-probabilities must be llama-server's
// (tests/fixtures/vision/peer/README.md says how they were recorded).
#include "support/test_context.h"

#include "model/forward/model_gpu.h"
#include "model/testgen/model_shape.h"
#include "model/testgen/random_mmproj.h"
#include "model/vision/multimodal_prompt.h"
#include "serving/engine/engine.h"
#include "support/model_test_util.h"

#include <fstream>
#include <iterator>
#include <sstream>

using namespace vkllm;
using namespace std::chrono_literals;

namespace {

const std::string kPeer = std::string(VKLLM_SOURCE_DIR) + "/tests/fixtures/vision/peer/";

struct PeerToken {
    int32_t id = -1;
    std::vector<std::pair<int32_t, double>> top;
};
struct PeerRun {
    std::string prompt;
    uint32_t prompt_n = 0;
    std::vector<PeerToken> tokens;
};

PeerRun read_peer(const std::string& path) {
    std::ifstream in(path);
    REQUIRE_MESSAGE(in.good(), "missing fixture ", path);
    PeerRun r;
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream ls(line);
        std::string key;
        ls >> key;
        if (key == "prompt") {
            std::string raw;
            ls >> raw;
            for (size_t i = 0; i < raw.size(); ++i)  // "\\s" stands for a space
                if (raw.compare(i, 2, "\\s") == 0) {
                    r.prompt += ' ';
                    ++i;
                } else {
                    r.prompt += raw[i];
                }
        } else if (key == "prompt_n") {
            ls >> r.prompt_n;
        } else if (key == "token") {
            PeerToken t;
            ls >> t.id;
            std::string alt;
            while (ls >> alt) t.top.emplace_back(std::stoi(alt.substr(0, alt.find(':'))), std::stod(alt.substr(alt.find(':') + 1)));
            r.tokens.push_back(t);
        }
    }
    return r;
}

std::vector<uint8_t> read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    REQUIRE_MESSAGE(in.good(), "missing fixture ", path);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// gen-model's shape for those flags (with --mmproj TYPE: the projector's layout tokens in the vocabulary).
ModelShape text_shape(const std::string& arch, ProjectorType type) {
    ModelShape s;
    for (std::string_view t : image_layout_tokens(type)) s.control_tokens.emplace_back(t);
    s.arch = arch;
    s.name = arch == "llama" ? "vkllm-random" : "vkllm-random-" + arch;
    s.n_ctx = 2048;
    s.dim = 64;
    s.n_layers = 2;
    s.n_heads = s.n_kv_heads = 4;
    s.ffn_dim = 128;
    s.n_vocab = 512;
    s.weight_type = TensorType::F16;
    s.seed = 55;
    return s;
}

}  // namespace

TEST_CASE("images end to end: prompt tokens and the first tokens' top log-probabilities are llama-server's") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    // Each projector type with a text architecture its fixtures were recorded with (KEY-IMAGE.txt):
    // the Qwen encoders both with a llama text model (positions in sequence) and with Qwen2-VL's
    // (M-RoPE: an image's rows at their grid positions, the text after it from max(nx, ny) on).
    struct Case {
        ProjectorType type;
        const char* arch;
        std::string key;
        std::vector<const char*> images = {"cat", "sq"};
    };
    const Case kCases[] = {{ProjectorType::Gemma3, "gemma3", "gemma3"},
                           {ProjectorType::Mlp, "llama", "mlp"},
                           // sq: llama-server answered a 500 for every prompt tried (its answer not UTF-8)
                           {ProjectorType::Idefics3, "llama", "idefics3", {"cat"}},
                           {ProjectorType::Qwen2Vl, "llama", "qwen2vl_merger"},
                           {ProjectorType::Qwen25Vl, "llama", "qwen2.5vl_merger"},
                           {ProjectorType::Qwen2Vl, "qwen2vl", "qwen2vl-qwen2vl_merger"},
                           {ProjectorType::Qwen25Vl, "qwen2vl", "qwen2vl-qwen2.5vl_merger"}};
    for (const auto& [type, arch, name, images] : kCases) {
        CAPTURE(name);
        const test::LoadedModel m = test::open_model(test::write_model("vision-peer-" + name, text_shape(arch, type)));
        MmprojShape ms;
        ms.type = type;
        ms.text_dim = 64;
        ms.seed = 55;
        const std::string mmproj = (test::binary_dir() / "test-tmp" / "models" / ("vision-peer-" + name + "-mmproj.gguf")).string();
        write_random_mmproj(mmproj, resolve_mmproj_shape(ms));
        const std::unique_ptr<Tokenizer> tok = make_tokenizer(m.file);
        VisionModel vision(ctx, mmproj, m.cfg.dim);
        ModelOptions o;
        o.n_ctx = 256;
        o.ubatch = 64;
        ModelGpu g(ctx, m.file, m.cfg, o);
        engine::Engine e(g, *tok, {.n_slots = 1});
        for (const char* image : images) {
            CAPTURE(image);
            const PeerRun peer = read_peer(kPeer + name + "-" + image + ".txt");
            const std::vector<uint8_t> png = read_bytes(kPeer + image + ".png");
            const std::vector<RgbImage> pictures{decode_image(png)};
            MultimodalPrompt p = build_multimodal_prompt(*tok, &vision, peer.prompt, pictures, true, true);
            CHECK(p.tokens.size() == peer.prompt_n);
            engine::CompletionRequest r;
            r.prompt = std::move(p.tokens);
            r.images = std::move(p.images);
            r.max_tokens = int32_t(peer.tokens.size());
            r.sampler.temperature = 0;
            r.logprobs = true;
            r.top_logprobs = 3;
            std::unique_ptr<engine::Ticket> t = e.submit(std::move(r));
            std::vector<engine::TokenLogprob> got;
            for (;;) {
                std::optional<engine::Event> ev = t->next(100ms);
                if (!ev) continue;
                got.insert(got.end(), ev->logprobs.begin(), ev->logprobs.end());
                if (ev->kind == engine::Event::Kind::Done) {
                    CHECK_MESSAGE(ev->error.empty(), ev->error);
                    break;
                }
            }
            REQUIRE(got.size() >= peer.tokens.size());
            for (size_t i = 0; i < peer.tokens.size(); ++i) {
                CAPTURE(i);
                CHECK(got[i].token == peer.tokens[i].id);
                REQUIRE(got[i].top_ids.size() >= peer.tokens[i].top.size());
                for (size_t j = 0; j < peer.tokens[i].top.size(); ++j) {
                    CHECK(got[i].top_ids[j] == peer.tokens[i].top[j].first);
                    // llama.cpp's CPU backend (F16 products, table GELU) against the device: within 0.01.
                    CHECK(std::fabs(got[i].top[j].second - peer.tokens[i].top[j].second) < 1e-2);
                }
            }
        }
    }
}
