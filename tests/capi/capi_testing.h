// Helpers of the C API's contract tests (tests/capi/test_capi*.cpp): models and sessions freed at
// scope exit with the validation layer watched, callbacks that collect the pieces, generated models.
// Only the public header: these tests see libvkllm.so as an app does.
#pragma once

#include <doctest/doctest.h>

#include <vkllm/vkllm.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <sstream>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace capi_test {

inline std::string model_path(const char* name) { return std::string(VKLLM_MODELS_DIR) + "/" + name; }

inline std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::ostringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

inline std::atomic<int> validation_errors{0};
inline void count_errors(vkllm_log_level level, const char* message, void*) {
    if (level == VKLLM_LOG_ERROR) {
        std::fprintf(stderr, "validation: %s\n", message);
        ++validation_errors;
    }
}

inline vkllm_model_params test_params() {
    vkllm_model_params p = vkllm_model_default_params();
    p.validation = true;
    p.log = count_errors;
    p.cache_dir = "";
    return p;
}

// A loaded model that is freed at scope exit; the validation layer must stay silent meanwhile.
struct Model {
    vkllm_model* m = nullptr;
    explicit Model(const char* name = "stories260K.gguf", vkllm_model_params p = test_params()) {
        const vkllm_status st = vkllm_model_load(model_path(name).c_str(), &p, &m);
            REQUIRE(st == VKLLM_OK);
    }
    ~Model() {
        vkllm_model_free(m);
        CHECK(validation_errors.load() == 0);
    }
};

struct Session {
    vkllm_session* s = nullptr;
    explicit Session(vkllm_model* m) {
        const vkllm_status st = vkllm_session_new(m, nullptr, &s);
            REQUIRE(st == VKLLM_OK);
    }
    ~Session() { vkllm_session_free(s); }
};

// What vkllm_session_get_reasoning or vkllm_session_get_tool_calls gives (at most 511 bytes here).
template <typename Getter>
inline std::string session_text(Getter getter, const vkllm_session* session) {
    size_t len = 0;
    std::string buf(512, '\0');
    REQUIRE(getter(session, buf.data(), buf.size(), &len) == VKLLM_OK);
    return std::string(buf.data(), len);
}

struct Collected {
    std::string text;
    std::vector<std::string> pieces;
};
inline int collect(const char* utf8, size_t len, void* user) {
    auto* c = static_cast<Collected*>(user);
    c->text.append(utf8, len);
    c->pieces.emplace_back(utf8, len);
    return 0;
}

inline vkllm_sampling greedy(int32_t n) {
    vkllm_sampling s = vkllm_sampling_default();
    s.temperature = 0.0f;
    s.n_predict = n;
    return s;
}

inline vkllm_generation_stats stats_of(vkllm_session* s) {
    vkllm_generation_stats st{};
    st.struct_size = sizeof(st);
    REQUIRE(vkllm_session_get_stats(s, &st) == VKLLM_OK);
    return st;
}

inline bool contains(const char* haystack, const char* needle) { return std::string(haystack).find(needle) != std::string::npos; }

// Whole, valid UTF-8 characters only.
inline bool valid_utf8(const std::string& s) {
    size_t i = 0;
    while (i < s.size()) {
        const auto c = static_cast<unsigned char>(s[i]);
        size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
        if (n == 0 || i + n > s.size()) return false;
        for (size_t k = 1; k < n; ++k)
            if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
        i += n;
    }
    return true;
}

// `vkllm gen-model` into VKLLM_TMP_DIR; "" when the vocabulary is missing (the case is skipped).
inline std::string gen_capi_model(const std::string& name, const std::string& vocab_file, const std::string& args) {
    const std::string vocab = model_path(vocab_file.c_str());
    if (!std::filesystem::exists(vocab)) {
        MESSAGE("skipped: " << vocab << " is missing");
        return "";
    }
    std::filesystem::create_directories(VKLLM_TMP_DIR);
    const std::string out = std::string(VKLLM_TMP_DIR) + "/" + name;
    const std::string gen = std::string(VKLLM_EXE) + " gen-model --vocab-from " + vocab + " " + args + " -o " + out + " 2>/dev/null";
    REQUIRE(std::system(gen.c_str()) == 0);
    return out;
}

// The whitespace-separated floats a command prints.
inline std::vector<float> command_floats(const std::string& cmd) {
    FILE* f = popen((cmd + " 2>/dev/null").c_str(), "r");
    REQUIRE(f != nullptr);
    std::vector<float> out;
    for (float x; std::fscanf(f, "%f", &x) == 1;) out.push_back(x);
    CHECK(pclose(f) == 0);
    return out;
}


// vkllm_model_get_info of a live model.
inline vkllm_model_info model_info(const vkllm_model* m) {
    vkllm_model_info info{};
    info.struct_size = sizeof info;
    REQUIRE(vkllm_model_get_info(m, &info) == VKLLM_OK);
    return info;
}

}  // namespace capi_test
