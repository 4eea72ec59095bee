// The vision fixtures of tests/fixtures/vision (README.md there): llama.cpp's libmtmd embeddings of
// two test images through random mmproj files, and what regenerates their inputs here (the file as
// `vkllm gen-model --mmproj TYPE --seed 55` writes it, the images make_fixtures.sh draws, mtmd's
// normalisation). Shared by the host reference's and the device encoder's tests.
#pragma once

#include "model/gguf/gguf.h"
#include "model/image/image_preprocess.h"
#include "model/mmproj/mmproj_config.h"
#include "model/testgen/random_mmproj.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace vkllm::test {

inline const std::string kFixtures = std::string(VKLLM_SOURCE_DIR) + "/tests/fixtures/vision/";

// llama.cpp's CPU backend against the double reference on these files: NMSE up to 2.6e-7 and max
// abs error up to 1.9e-3 on rows of RMS ~0.6 to 1 (F16 weights, and ggml's F16 rounding of the patch
// convolution's input and its table GELU). The bounds leave 3.8x and 5x margin; a wrong stage gives
// NMSE above 0.05 (test_vision_cpu.cpp, the class-row case).
inline constexpr double kMaxNmse = 1e-6, kMaxAbs = 1e-2;

inline GgufFile fixture_mmproj(ProjectorType type) {
    MmprojShape s;
    s.type = type;
    s.text_dim = 64;
    s.seed = 55;
    return GgufFile::from_memory(make_random_mmproj(s).write_memory(), "random-mmproj");
}

// The images make_fixtures.sh writes: "ramp" smooth, "hash" a different value at nearly every pixel.
inline std::vector<uint8_t> test_image(const std::string& name, uint32_t nx, uint32_t ny) {
    std::vector<uint8_t> rgb;
    for (uint32_t y = 0; y < ny; ++y)
        for (uint32_t x = 0; x < nx; ++x)
            for (uint32_t c = 0; c < 3; ++c) {
                if (name == "ramp") {
                    const uint32_t v[3] = {x * 255 / (nx - 1), y * 255 / (ny - 1), (x + y) * 255 / (nx + ny - 2)};
                    rgb.push_back(uint8_t(v[c]));
                } else {
                    rgb.push_back(uint8_t(((x * 131 + y * 71 + c * 29) ^ (x * y)) & 255));
                }
            }
    return rgb;
}

// mtmd's normalisation: (v / 255 - mean) / std, in float.
inline ImageTile normalized(const std::vector<uint8_t>& rgb, uint32_t nx, uint32_t ny, const PreprocessSpec& spec) {
    ImageTile t;
    t.nx = nx;
    t.ny = ny;
    const size_t plane = size_t(nx) * ny;
    t.chw.resize(3 * plane);
    for (uint32_t c = 0; c < 3; ++c)
        for (size_t i = 0; i < plane; ++i)
            t.chw[c * plane + i] = (float(rgb[i * 3 + c]) / 255.0f - spec.mean[c]) / spec.std[c];
    return t;
}

inline std::vector<float> read_f32_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    REQUIRE_MESSAGE(in.good(), "missing fixture ", path);
    std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<float> v(raw.size() / 4);
    std::memcpy(v.data(), raw.data(), v.size() * 4);
    return v;
}

struct Diff {
    double nmse = 0, max_abs = 0;
    bool finite = true;
};

inline Diff compare(const std::vector<float>& got, const std::vector<float>& want) {
    Diff d;
    double se = 0, ref = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        if (!std::isfinite(got[i])) d.finite = false;
        const double e = double(got[i]) - want[i];
        se += e * e;
        ref += double(want[i]) * want[i];
        d.max_abs = std::max(d.max_abs, std::fabs(e));
    }
    d.nmse = se / ref;
    return d;
}

}  // namespace vkllm::test
