// Test helper shared by the small-op kernel tests (rms_norm, rope, elementwise, kv_store, argmax,
// softmax, topk).
#pragma once

#include "support/test_context.h"

#include "runtime/ops/kv_store.h"
#include "runtime/quant/tensor_types.h"

#include <cstring>
#include <string>
#include <vector>

namespace vkllm::small_ops_testing {

// A guarded device tensor whose slice starts `shift` bytes into the guarded payload. shift = 4 gives
// an offset that no device's minStorageBufferOffsetAlignment allows, so the op must bind an aligned
// window itself; the `shift` bytes before the slice are filled with a marker that must survive.
class ShiftedBuffer {
public:
    ShiftedBuffer(Context& ctx, size_t bytes, uint32_t shift, const std::string& name)
        : ctx_(ctx), g_(ctx, bytes + shift, name), bytes_(bytes), shift_(shift) {
        std::vector<uint8_t> marker(shift, kMarker);
        if (shift) g_.upload(marker.data(), shift);
    }
    BufferSlice slice() const { return g_.buffer().slice(g_.payload_offset() + shift_, bytes_); }
    void upload(const void* src, size_t bytes) { ctx_.upload(g_.buffer(), src, bytes, g_.payload_offset() + shift_); }
    void download(void* dst, size_t bytes) const { ctx_.download(g_.buffer(), dst, bytes, g_.payload_offset() + shift_); }
    std::vector<float> download_floats(size_t n) const {
        std::vector<float> v(n);
        download(v.data(), n * 4);
        return v;
    }
    // The guards around the payload and the marker bytes before the slice are intact.
    void check_guards() const {
        g_.check_guards();
        if (!shift_) return;
        std::vector<uint8_t> head(shift_);
        g_.download(head.data(), shift_);
        size_t bad = 0;
        for (uint8_t b : head) bad += b != kMarker;
        CHECK_MESSAGE(bad == 0, "bytes before a shifted slice were overwritten");
    }

private:
    static constexpr uint8_t kMarker = 0x5A;
    Context& ctx_;
    test::GuardedBuffer g_;
    size_t bytes_;
    uint32_t shift_;
};

// Rows of a KV cache as floats (f16 and q8_0 decoded), for comparisons with a tolerance.
inline std::vector<float> cache_floats(const std::vector<uint8_t>& bytes, ops::KvType type, uint32_t n_ctx,
                                       uint32_t row_elems) {
    const size_t n = size_t(n_ctx) * row_elems;
    std::vector<float> out(n);
    if (type == ops::KvType::F32) {
        std::memcpy(out.data(), bytes.data(), n * 4);
    } else if (type == ops::KvType::F16) {
        for (size_t i = 0; i < n; ++i) {
            uint16_t h;
            std::memcpy(&h, &bytes[2 * i], 2);
            out[i] = f16_to_f32(h);
        }
    } else {
        std::vector<uint32_t> words(bytes.size() / 4);
        std::memcpy(words.data(), bytes.data(), words.size() * 4);
        ref::kv_dequantize_q8_0(words.data(), out.data(), uint32_t(n));
    }
    return out;
}

}  // namespace vkllm::small_ops_testing
