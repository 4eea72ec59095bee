// A PNG's compressed pixel data checked against its declared size before stb_image inflates it.
//
// The declared-size limit stops a header that asks for a huge canvas, but not its twin: a header of a
// few pixels whose IDAT data inflates to gigabytes (deflate reaches about 1000:1). stb_image grows its
// buffer for all of it (up to 4 GiB) before it notices the excess. This inflates the data once with
// zlib into a small scratch buffer, counting, and refuses the file as soon as the count passes what
// the declared size can use.
#pragma once

#include <cstdint>
#include <span>

namespace vkllm {

// bytes: a whole PNG file whose IHDR says width x height. Throws ImageError when the IDAT stream
// inflates beyond the rows that size needs (with slack for interlacing); truncated or corrupt data
// is left for stb_image to report.
void check_png_inflated_size(std::span<const uint8_t> bytes, uint64_t width, uint64_t height);

}  // namespace vkllm
