// The random numbers of model/testgen's files: deterministic on every platform (no std::
// distributions), one stream per tensor name, so a tensor's values depend only on the seed and
// its name (not on what else the file holds or the order it is written in).
#pragma once

#include <cstdint>
#include <string_view>

namespace vkllm {

inline uint64_t splitmix64(uint64_t& state) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

inline uint64_t fnv1a(std::string_view s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (char c : s) h = (h ^ uint8_t(c)) * 0x100000001b3ull;
    return h;
}

// Cheap enough for 1e9 weights: a sum of four 16-bit uniforms (Irwin-Hall) is close to normal and
// bounded at about 3.5 sigma.
class WeightRng {
public:
    WeightRng(uint64_t seed, std::string_view tensor) : state_(seed ^ fnv1a(tensor)) { splitmix64(state_); }
    // The state advances by a constant per value (splitmix64 is a counter), so a row range can
    // start where a sequential pass would be: the values do not depend on how the work is split.
    void skip(uint64_t values) { state_ += values * 0x9e3779b97f4a7c15ull; }
    float normal() {
        uint64_t x = splitmix64(state_);
        uint32_t sum =
            uint32_t(x & 0xffff) + uint32_t((x >> 16) & 0xffff) + uint32_t((x >> 32) & 0xffff) + uint32_t(x >> 48);
        constexpr float kScale = 1.7320508f / 65536.0f;  // sqrt(12 / 4) / 65536: unit variance
        return (float(sum) - 131070.0f) * kScale;
    }

private:
    uint64_t state_;
};

}  // namespace vkllm
