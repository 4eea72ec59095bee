#include "model/image/png_inflate_guard.h"

#include <zlib.h>

#include <array>
#include <cstdint>
#include <cstring>

#include <fmt/format.h>

#include "model/image/image_decode.h"

namespace vkllm {

namespace {

uint32_t be32(const uint8_t* p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }

// The filtered rows of a non-interlaced image: a filter byte and the packed samples per row. Adam7
// adds at most a filter byte and a partly used byte per row of each of its 7 passes: the slack.
uint64_t max_inflated_bytes(std::span<const uint8_t> b, uint64_t width, uint64_t height) {
    static constexpr uint8_t kChannels[7] = {1, 0, 3, 1, 2, 0, 4};  // by colour type
    const uint8_t depth = b[24], type = b[25];
    const uint64_t channels = type < 7 && kChannels[type] ? kChannels[type] : 4;
    const uint64_t bits = depth ? depth : 16;
    const uint64_t row = (width * channels * bits + 7) / 8;  // width < 2^32: no overflow
    if (row + 15 > (UINT64_MAX - 4096) / (height + 8)) return UINT64_MAX;  // only with an absurd pixel limit
    return height * (1 + row) + 14 * (height + 8) + 4096;
}

}  // namespace

void check_png_inflated_size(std::span<const uint8_t> bytes, uint64_t width, uint64_t height) {
    if (bytes.size() < 33) return;  // no IHDR data: stb_image reports it
    const uint64_t limit = max_inflated_bytes(bytes, width, height);
    z_stream z{};
    if (inflateInit(&z) != Z_OK) throw ImageError("PNG image: zlib cannot start");
    std::array<uint8_t, 16384> scratch;
    uint64_t produced = 0;
    int status = Z_OK;
    // Chunks: length, type, data, CRC; IDAT ones concatenated form one zlib stream.
    for (size_t at = 8; at + 12 <= bytes.size() && status == Z_OK;) {
        const uint64_t len = be32(bytes.data() + at);
        if (len > bytes.size() - at - 12) break;  // cut short: stb_image reports it
        if (std::memcmp(bytes.data() + at + 4, "IDAT", 4) == 0) {
            z.next_in = const_cast<Bytef*>(bytes.data() + at + 8);
            z.avail_in = uInt(len);
            while (z.avail_in > 0 && status == Z_OK) {
                z.next_out = scratch.data();
                z.avail_out = uInt(scratch.size());
                status = inflate(&z, Z_NO_FLUSH);
                produced += scratch.size() - z.avail_out;
                if (produced > limit) {
                    inflateEnd(&z);
                    throw ImageError(fmt::format(
                        "PNG image data inflates to more than {} bytes, beyond what its declared {} x {} pixels "
                        "can use (a decompression bomb?)",
                        limit, width, height));
                }
                if (status == Z_BUF_ERROR) status = Z_OK;  // needs the next chunk's input
                if (z.avail_out != 0 && z.avail_in == 0) break;
            }
        }
        at += 12 + size_t(len);
    }
    inflateEnd(&z);
}

}  // namespace vkllm
