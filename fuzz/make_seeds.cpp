// Writes the seed corpora of the fuzzers into the build tree (binary corpora are never committed):
//   <out>/gguf/       small valid GGUF models from the project's writer, one per weight type and
//                     layout, a vocab-only file, one with every metadata value type, and copies of the
//                     shared test models;
//   <out>/tokenizer/  inputs for fuzz_tokenizer: the llama.cpp tokenizer test strings and a few more
//                     for each of its four vocabs (first byte 0..3), chat prompts with special tokens
//                     parsed (8..11), and short id sequences to decode (4..7);
//   <out>/template/   the real chat templates of ../shared/templates and the built-in ones;
//   <out>/grammar/    inputs for fuzz_grammar: GBNF grammars (first byte 0) and the schemas of the
//                     JSON Schema Test Suite, draft 7 (first byte 1);
//   <out>/image/      tiny valid images for fuzz_image, one or more of each format (PNG of each
//                     colour type and 16-bit, JPEG, lossy and lossless WebP with and without alpha,
//                     a two-frame GIF, BMP);
//   <out>/mmproj/     small random mmproj files of each projector type, and edit scripts (first byte
//                     the type) for fuzz_mmproj.
// Usage: fuzz_make_seeds <out> <shared models dir>
#include "model/gguf/gguf_writer.h"
#include "model/testgen/random_mmproj.h"
#include "model/testgen/random_model.h"
#include "serving/chat_template/chat_template.h"
#include "tests/support/image_files.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

using namespace vkllm;
namespace fs = std::filesystem;

namespace {

void write_bytes(const fs::path& p, const std::string& bytes) {
    std::ofstream out(p, std::ios::binary);
    out.write(bytes.data(), std::streamsize(bytes.size()));
    if (!out) throw std::runtime_error("cannot write " + p.string());
}

ModelShape tiny(TensorType t, uint64_t seed) {
    ModelShape s;
    s.dim = 32;
    s.n_layers = 1;
    s.n_heads = 4;
    s.n_kv_heads = 2;
    s.ffn_dim = 64;
    s.n_vocab = 262;
    s.n_ctx = 64;
    s.weight_type = t;
    s.seed = seed;
    return s;
}

void gguf_seeds(const fs::path& dir, const fs::path& models) {
    const std::pair<const char*, TensorType> types[] = {
        {"f32", TensorType::F32}, {"f16", TensorType::F16}, {"q8_0", TensorType::Q8_0}, {"q4_0", TensorType::Q4_0}};
    uint64_t seed = 1;
    for (auto [name, type] : types)
        write_random_model((dir / (std::string("tiny-") + name + ".gguf")).string(), tiny(type, seed++));

    ModelShape tied = tiny(TensorType::Q8_0, 9);
    tied.tied_embeddings = true;
    tied.n_layers = 2;
    write_random_model((dir / "tied-2layers.gguf").string(), tied);

    // Every metadata value type, and a non-default alignment.
    GgufWriter all = make_random_model(tiny(TensorType::F16, 11));
    all.set_u8("test.u8", 7);
    all.set_i32("test.i32", -5);
    all.set_u64("test.u64", 1ull << 40);
    all.set_f64("test.f64", 0.5);
    all.set_bool("test.bool", true);
    all.set_string_array("test.strings", {"a", "", "\xe2\x96\x81x"});
    all.set_i32_array("test.i32s", std::vector<int32_t>{-1, 0, 1});
    all.set_alignment(64);
    all.write_file((dir / "all-types-align64.gguf").string());

    // Vocab only: no tensors (like ggml-vocab-*.gguf).
    GgufWriter vocab = make_random_model(tiny(TensorType::F32, 12));
    while (!vocab.tensors().empty()) vocab.remove_tensor(vocab.tensors().front().name);
    vocab.write_file((dir / "vocab-only.gguf").string());

    // Edit scripts (fuzz_gguf's second mode, any input not starting with "GGUF"): none; a zero
    // head count; a rewritten vocab entry; a reshaped tensor.
    write_bytes(dir / "edits-none", std::string("\0\0", 2));
    write_bytes(dir / "edits-heads", std::string("\1\2\0\7\0\0\0\0", 8));
    write_bytes(dir / "edits-vocab", std::string("\0\3\5\0\x10\0\3abc\4\0\0\x80\x7f", 15));
    write_bytes(dir / "edits-tensor", std::string("\1\0\x08\0\1\3\2\x1f\x05", 9));

    for (const char* name : {"stories260K.gguf", "llama-2-tiny-random.gguf", "ggml-vocab-llama-spm.gguf"}) {
        if (fs::is_regular_file(models / name)) {
            // The shared files are read-only; the copy must stay replaceable by the next build.
            fs::copy_file(models / name, dir / name, fs::copy_options::overwrite_existing);
            fs::permissions(dir / name, fs::perms::owner_write, fs::perm_options::add);
        } else
            std::fprintf(stderr, "fuzz_make_seeds: %s not found in %s; seeding without it\n", name, models.c_str());
    }
}

void tokenizer_seeds(const fs::path& dir, const fs::path& models) {
    std::vector<std::string> texts = {"",
                                      " ",
                                      "Hello world",
                                      " Hello  World!",
                                      "Once upon a time, there was a cat.",
                                      "\n\t\r",
                                      "\xff\xfe\x80",
                                      "\xe2\x96\x81",
                                      "<s></s><unk><0x41>",
                                      "日本語 ü 🦙",
                                      "I'M 12345678 'll\u00a0\u3000 x",
                                      "\xc0\xaf\xed\xa0\x80\xf4\x90\x80\x80"};
    const std::vector<std::string> chats = {"<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
                                            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n",
                                            "the<|endoftext|>thing <|endoftext|>"};
    std::ifstream inp(models / "ggml-vocab-llama-spm.gguf.inp", std::ios::binary);
    if (inp) {
        const std::string all{std::istreambuf_iterator<char>(inp), std::istreambuf_iterator<char>()};
        const std::string sep = "\n__ggml_vocab_test__\n";
        for (size_t pos = 0; pos < all.size();) {
            size_t end = all.find(sep, pos);
            if (end == std::string::npos) end = all.size();
            texts.push_back(all.substr(pos, end - pos));
            pos = end + sep.size();
        }
    }
    size_t i = 0;
    for (const std::string& t : texts)
        for (char which : {'\0', '\1', '\2', '\3', '\20', '\21'})  // the six vocabs
            write_bytes(dir / ("text-" + std::to_string(i++)), std::string(1, which) + t);
    for (const std::string& t : chats)
        for (char which : {'\10', '\11', '\12', '\13'})
            write_bytes(dir / ("chat-" + std::to_string(i++)), std::string(1, which) + t);
    // Id sequences: in range, BOS-led, negative, past the end.
    const std::vector<std::vector<int32_t>> id_seqs = {{1, 15043, 3186},
                                                       {1, 2, 0, 3, 258, 259},
                                                       {-1, 0},
                                                       {511, 512, 31999, 32000},
                                                       {0x7fffffff, int32_t(0x80000000)},
                                                       {128000, 128006, 9906, 128009, 128255, 128256}};
    for (const auto& ids : id_seqs)
        for (char which : {'\4', '\5', '\6', '\7'}) {
            std::string b(1, which);
            b.append(reinterpret_cast<const char*>(ids.data()), ids.size() * 4);
            write_bytes(dir / ("ids-" + std::to_string(i++)), b);
        }
}

// The real chat templates next to the models (../shared/templates/templates) and the built-ins.
void template_seeds(const fs::path& dir, const fs::path& models) {
    for (const std::string& name : vkllm::chat_template::builtin_template_names())
        write_bytes(dir / ("builtin-" + name + ".jinja"), vkllm::chat_template::builtin_template_source(name));
    const fs::path shared = models.parent_path() / "templates" / "templates";
    std::error_code ec;
    if (!fs::is_directory(shared, ec)) return;
    for (const auto& entry : fs::directory_iterator(shared)) {
        std::ifstream in(entry.path(), std::ios::binary);
        write_bytes(dir / entry.path().filename(), std::string(std::istreambuf_iterator<char>(in), {}));
    }
}

void grammar_seeds(const fs::path& dir) {
    const char* gbnf[] = {
        "root ::= \"yes\" | \"no\"",
        "root ::= [a-z]+ (\" \" [a-z]+)* \".\"",
        "root ::= obj\nobj ::= \"{\" (pair (\",\" pair)*)? \"}\"\npair ::= [a-z]+ \":\" (obj | [0-9]{1,3})\n",
        "# comment\nroot ::= (\"a\" | [^\\x00-\\x1F]){2,5} .? [\\u00e9-\\u00ff]*",
    };
    int i = 0;
    for (const char* g : gbnf) write_bytes(dir / ("gbnf-" + std::to_string(i++)), std::string(1, '\0') + g);
    // Tool-call replies (first byte 2 mod 4; its upper bits pick the family and the piece size).
    const char* replies[] = {
        "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
        "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
        "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}, \"id\": \"abcdefghi\"}]",
        "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"x\"}",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": "
        "\"x\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "<function=f>{}</function>",
        "{\"tool_calls\": [{\"name\": \"f\", \"arguments\": {}}]}",
        "<|tool_call|>[{\"name\": \"f\", \"arguments\": {}}]",
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{}<|tool_call_end|>"
        "<|tool_calls_section_end|>",
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>",
        // Bare values holding markup, a JSON value holding the closing tag, Python's True.
        "<tool_call>\n<function=get_weather>\n<parameter=city>\n<b>P</b></arg_value>\n</parameter>\n<parameter=n>\n"
        "[\"a</parameter>b\"]\n</parameter>\n<parameter=ok>\nTrue\n</parameter>\n</function>\n</tool_call>",
        "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"a<|call|>b\"}<|call|>",
        "all\nChecking.>>>get_weather\n{\"city\": \"x\"}",
        "Action: ```json\n[{\"tool_name\": \"f\", \"parameters\": {}}]\n```",
        "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather "
        "<|constrain|>json<|message|>{\"city\": \"x\"}",
        "<|channel|>analysis<|message|>Hm.<|end|><|start|>assistant<|channel|>final<|message|>Hi.<|return|>",
    };
    // Every family row and piece size (the selector's upper six bits).
    for (size_t k = 0; k < std::size(replies); ++k)
        for (uint8_t family = 0; family < 64; ++family)
            write_bytes(dir / ("reply-" + std::to_string(i++)), std::string(1, char(2 | (family << 2))) + replies[k]);
    write_bytes(dir / ("params-" + std::to_string(i++)),
                std::string(1, '\3') + R"({"type":"object","properties":{"a":{"type":"integer"}}})");
    // Parameters that Qwen3-Coder writes bare and as JSON, references and bounds.
    write_bytes(dir / ("params-" + std::to_string(i++)),
                std::string(1, '\3') +
                    R"({"type":"object","properties":{"s":{"type":"string"},"b":{"type":"boolean"},)"
                    R"("e":{"enum":["x","y"]},"r":{"$ref":"#/$defs/d"},"n":{"type":"number","minimum":0,)"
                    R"("maximum":1.5}},"$defs":{"d":{"type":"string"}},"required":["s"]})");
    const fs::path suite = "/usr/share/json-schema-test-suite/tests/draft7";
    std::error_code ec;
    if (!fs::is_directory(suite, ec)) return;
    for (const auto& entry : fs::directory_iterator(suite)) {
        if (entry.path().extension() != ".json") continue;
        std::ifstream in(entry.path());
        const auto groups = nlohmann::json::parse(in, nullptr, false);
        if (!groups.is_array()) continue;
        for (const auto& g : groups)
            if (g.contains("schema"))
                write_bytes(dir / ("schema-" + std::to_string(i++)), std::string(1, '\1') + g["schema"].dump());
    }
}

}  // namespace

void image_seeds(const fs::path& dir) {
    namespace imf = image_files;
    auto put = [&](const char* name, const std::vector<uint8_t>& b) {
        write_bytes(dir / name, std::string(b.begin(), b.end()));
    };
    std::vector<uint8_t> rgb(5 * 3 * 3), rgba(5 * 3 * 4);
    for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = uint8_t(i * 17);
    for (size_t i = 0; i < rgba.size(); ++i) rgba[i] = uint8_t(i * 13 + 1);
    put("rgb.png", imf::png_rgb(5, 3, rgb));
    put("grey.png", imf::png(3, 2, 1, {0, 50, 100, 150, 200, 250}));
    put("grey-alpha.png", imf::png(2, 1, 2, {1, 0, 2, 255}));
    put("rgba.png", imf::png(2, 1, 4, {1, 2, 3, 0, 4, 5, 6, 255}));
    put("rgb16.png", imf::png(2, 1, 3, {0x1234, 0xffff, 0, 0x8000, 1, 2}, 16));
    put("header-only.png", imf::png_header_only(20, 20));
    put("rgb.jpg", imf::jpeg(5, 3, rgb));
    put("rgb.bmp", imf::bmp(5, 3, rgb));
    put("lossless.webp", imf::webp(5, 3, rgb, false, true));
    put("lossy.webp", imf::webp(5, 3, rgb, false, false));
    put("alpha.webp", imf::webp(5, 3, rgba, true, true));
    const uint8_t palette[4][3] = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {9, 9, 9}};
    put("two-frames.gif", imf::gif(3, 2, palette, {{0, 1, 2, 3, 0, 1}, {3, 3, 3, 3, 3, 3}}));
}

// Small random mmproj files of each projector type (parsed as they are), and edit scripts (fuzz_mmproj).
void mmproj_seeds(const fs::path& dir) {
    uint8_t index = 0;
    for (const ProjectorDesc& d : projector_table()) {
        MmprojShape s;
        s.type = d.type;
        s.text_dim = 16, s.dim = 16, s.heads = 2, s.ffn = 32, s.layers = 1;
        s.image_size = 32, s.patch_size = 8, s.seed = 5;
        const std::vector<uint8_t> b = make_random_mmproj(s).write_memory();
        write_bytes(dir / (std::string(d.name) + ".gguf"), std::string(b.begin(), b.end()));
        write_bytes(dir / (std::string(d.name) + ".edits"), std::string{char(index), 0, 3, char(9), 4, 7});
        ++index;
    }
}

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s <out dir> <shared models dir>\n", argv[0]);
        return 2;
    }
    try {
        const fs::path out = argv[1], models = argv[2];
        fs::create_directories(out / "gguf");
        fs::create_directories(out / "tokenizer");
        fs::create_directories(out / "template");
        fs::create_directories(out / "grammar");
        fs::create_directories(out / "image");
        fs::create_directories(out / "mmproj");
        gguf_seeds(out / "gguf", models);
        tokenizer_seeds(out / "tokenizer", models);
        template_seeds(out / "template", models);
        grammar_seeds(out / "grammar");
        image_seeds(out / "image");
        mmproj_seeds(out / "mmproj");
    } catch (const std::exception& e) {
        std::fprintf(stderr, "fuzz_make_seeds: %s\n", e.what());
        return 1;
    }
    return 0;
}
