#include "apps/model_card.h"

#include "runtime/quant/tensor_types.h"

#include <fmt/format.h>

#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <map>

namespace vkllm::apps {

namespace {

using json = nlohmann::ordered_json;

// Arrays longer than this come back empty, as Ollama's show (without verbose) leaves the
// vocabulary's tokens, scores and merges out.
constexpr uint64_t kMaxArray = 16;

template <class T>
T read_le(std::span<const uint8_t> raw, size_t i) {
    T v{};
    std::memcpy(&v, raw.data() + i * sizeof(T), sizeof(T));
    return v;
}

json scalar(GgufType t, std::span<const uint8_t> raw, size_t i) {
    switch (t) {
        case GgufType::UINT8: return read_le<uint8_t>(raw, i);
        case GgufType::INT8: return read_le<int8_t>(raw, i);
        case GgufType::UINT16: return read_le<uint16_t>(raw, i);
        case GgufType::INT16: return read_le<int16_t>(raw, i);
        case GgufType::UINT32: return read_le<uint32_t>(raw, i);
        case GgufType::INT32: return read_le<int32_t>(raw, i);
        case GgufType::UINT64: return read_le<uint64_t>(raw, i);
        case GgufType::INT64: return read_le<int64_t>(raw, i);
        case GgufType::FLOAT32: return read_le<float>(raw, i);
        case GgufType::FLOAT64: return read_le<double>(raw, i);
        case GgufType::BOOL: return read_le<uint8_t>(raw, i) != 0;
        default: return nullptr;
    }
}

json value_json(const GgufValue& v) {
    if (v.type == GgufType::STRING) return std::string(v.as_string().value_or(""));
    if (v.type != GgufType::ARRAY) return scalar(v.type, v.raw, 0);
    json a = json::array();
    if (v.array_size > kMaxArray) return a;
    if (v.array_type == GgufType::STRING) {
        for (std::string_view s : v.strings) a.push_back(std::string(s));
    } else if (v.array_type != GgufType::ARRAY) {
        for (size_t i = 0; i < v.array_size; ++i) a.push_back(scalar(v.array_type, v.raw, i));
    }
    return a;
}

// An identifier of the file that costs no read of its weights: FNV-1a over its name, size, time
// and header, four lanes of 64 bits (not a SHA-256 of its bytes, as Ollama's digests are).
std::string file_digest(const GgufFile& f, const std::string& name, uint64_t size, int64_t mtime) {
    std::string seed = fmt::format("{}\n{}\n{}\n", name, size, mtime);
    const std::span<const uint8_t> head = f.bytes().subspan(0, std::min<size_t>(f.bytes().size(), f.data_offset()));
    std::string out;
    for (uint64_t lane = 0; lane < 4; ++lane) {
        uint64_t h = 1469598103934665603ULL ^ (lane * 0x9e3779b97f4a7c15ULL);
        auto mix = [&h](uint8_t b) {
            h ^= b;
            h *= 1099511628211ULL;
        };
        for (char c : seed) mix(uint8_t(c));
        for (uint8_t b : head) mix(b);
        out += fmt::format("{:016x}", h);
    }
    return out;
}

}  // namespace

std::string file_type_name(uint32_t ft) {
    static const std::map<uint32_t, const char*> names = {
        {0, "F32"},     {1, "F16"},     {2, "Q4_0"},     {3, "Q4_1"},    {7, "Q8_0"},     {8, "Q5_0"},
        {9, "Q5_1"},    {10, "Q2_K"},   {11, "Q3_K_S"},  {12, "Q3_K_M"}, {13, "Q3_K_L"},  {14, "Q4_K_S"},
        {15, "Q4_K_M"}, {16, "Q5_K_S"}, {17, "Q5_K_M"},  {18, "Q6_K"},   {19, "IQ2_XXS"}, {20, "IQ2_XS"},
        {21, "Q2_K_S"}, {22, "IQ3_XS"}, {23, "IQ3_XXS"}, {24, "IQ1_S"},  {25, "IQ4_NL"},  {26, "IQ3_S"},
        {27, "IQ3_M"},  {28, "IQ2_S"},  {29, "IQ2_M"},   {30, "IQ4_XS"}, {31, "IQ1_M"},   {32, "BF16"},
        {36, "TQ1_0"},  {37, "TQ2_0"},  {38, "MXFP4"},
    };
    auto it = names.find(ft);
    return it == names.end() ? "" : it->second;
}

server::ModelCard model_card(const LoadedModel& m, const std::string& path, const std::string& chat_template) {
    const GgufFile& f = *m.file;
    server::ModelCard c;
    std::error_code ec;
    c.file_bytes = std::filesystem::file_size(path, ec);
    if (ec) c.file_bytes = f.bytes().size();
    if (struct stat st{}; ::stat(path.c_str(), &st) == 0)
        c.modified_ns = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    // Read leniently: a key of an unexpected type leaves its field empty rather than failing the server.
    auto text = [&f](std::string_view key) {
        const GgufValue* v = f.find(key);
        return v ? std::string(v->as_string().value_or("")) : std::string();
    };
    auto number = [&f](std::string_view key) {
        const GgufValue* v = f.find(key);
        return v ? v->as_u64() : std::nullopt;
    };
    c.architecture = text("general.architecture");
    std::map<std::string_view, uint64_t> elements_by_type;
    for (const GgufTensorInfo& t : f.tensors()) {
        c.parameters += t.n_elements;
        elements_by_type[ggml_type_name(uint32_t(t.type))] += t.n_elements;
    }
    if (auto ft = number("general.file_type")) c.file_type = file_type_name(uint32_t(*ft));
    if (c.file_type.empty()) {  // no file type: the type most of the weights have
        uint64_t most = 0;
        for (const auto& [name, n] : elements_by_type)
            if (n > most) {
                most = n;
                c.file_type = std::string(name);
            }
    }
    c.license = text("general.license");
    c.trained_ctx = uint32_t(number(c.architecture + ".context_length").value_or(0));
    for (const GgufKeyValue& kv : f.metadata()) {
        if (kv.key == "general.name" || kv.key == "tokenizer.chat_template") continue;
        c.metadata[std::string(kv.key)] = value_json(kv.value);
    }
    if (!c.metadata.contains("general.parameter_count")) c.metadata["general.parameter_count"] = c.parameters;
    c.digest = file_digest(f, std::filesystem::path(path).filename().string(), c.file_bytes, c.modified_ns);
    c.chat_template = chat_template;
    return c;
}

}  // namespace vkllm::apps
