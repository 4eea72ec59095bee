// Image files written in the tests, with encoders independent of the decoders under test: PNG by a
// minimal writer over zlib (any colour type, 8 or 16 bits, or only a header declaring any size),
// JPEG by libjpeg-turbo, WebP by libwebp's encoder, GIF and BMP assembled byte by byte.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>  // before jpeglib.h, which uses FILE
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include <jpeglib.h>
#include <webp/encode.h>
#include <zlib.h>

namespace image_files {

inline void put_be32(std::vector<uint8_t>& b, uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t(v >> s));
}
inline void put_le16(std::vector<uint8_t>& b, uint32_t v) {
    b.push_back(uint8_t(v));
    b.push_back(uint8_t(v >> 8));
}
inline void put_le32(std::vector<uint8_t>& b, uint32_t v) {
    put_le16(b, v & 0xffff);
    put_le16(b, v >> 16);
}

inline void png_chunk(std::vector<uint8_t>& out, const char* type, const std::vector<uint8_t>& data) {
    put_be32(out, uint32_t(data.size()));
    std::vector<uint8_t> body(type, type + 4);
    body.insert(body.end(), data.begin(), data.end());
    out.insert(out.end(), body.begin(), body.end());
    put_be32(out, uint32_t(crc32(0, body.data(), uInt(body.size()))));
}

inline std::vector<uint8_t> png_signature_and_ihdr(uint32_t w, uint32_t h, int bit_depth, int colour_type) {
    std::vector<uint8_t> out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    std::vector<uint8_t> ihdr;
    put_be32(ihdr, w);
    put_be32(ihdr, h);
    ihdr.insert(ihdr.end(), {uint8_t(bit_depth), uint8_t(colour_type), 0, 0, 0});
    png_chunk(out, "IHDR", ihdr);
    return out;
}

// channels 1 (grey), 2 (grey + alpha), 3 (RGB), 4 (RGBA); samples row-major, interleaved, each
// below 2^bit_depth.
inline std::vector<uint8_t> png(uint32_t w, uint32_t h, int channels, const std::vector<uint16_t>& samples,
                                int bit_depth = 8) {
    static const int kColourType[] = {0, 0, 4, 2, 6};
    if (samples.size() != size_t(w) * h * channels) throw std::invalid_argument("png: sample count");
    std::vector<uint8_t> out = png_signature_and_ihdr(w, h, bit_depth, kColourType[channels]);
    std::vector<uint8_t> raw;
    for (uint32_t y = 0; y < h; ++y) {
        raw.push_back(0);  // filter: none
        for (size_t i = 0; i < size_t(w) * channels; ++i) {
            const uint16_t v = samples[y * size_t(w) * channels + i];
            if (bit_depth == 16) raw.push_back(uint8_t(v >> 8));
            raw.push_back(uint8_t(v));
        }
    }
    uLongf n = compressBound(uLong(raw.size()));
    std::vector<uint8_t> z(n);
    if (compress2(z.data(), &n, raw.data(), uLong(raw.size()), 9) != Z_OK) throw std::runtime_error("png: zlib");
    z.resize(n);
    png_chunk(out, "IDAT", z);
    png_chunk(out, "IEND", {});
    return out;
}

inline std::vector<uint8_t> png_rgb(uint32_t w, uint32_t h, const std::vector<uint8_t>& rgb) {
    return png(w, h, 3, std::vector<uint16_t>(rgb.begin(), rgb.end()));
}

// A PNG that declares w x h and holds no pixel data at all.
inline std::vector<uint8_t> png_header_only(uint32_t w, uint32_t h) {
    std::vector<uint8_t> out = png_signature_and_ihdr(w, h, 8, 2);
    png_chunk(out, "IEND", {});
    return out;
}

inline std::vector<uint8_t> jpeg(uint32_t w, uint32_t h, const std::vector<uint8_t>& rgb, int quality = 95) {
    jpeg_compress_struct c;
    jpeg_error_mgr err;
    c.err = jpeg_std_error(&err);
    jpeg_create_compress(&c);
    unsigned char* buf = nullptr;
    unsigned long size = 0;
    jpeg_mem_dest(&c, &buf, &size);
    c.image_width = w;
    c.image_height = h;
    c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, quality, TRUE);
    jpeg_start_compress(&c, TRUE);
    for (uint32_t y = 0; y < h; ++y) {
        JSAMPROW row = const_cast<JSAMPROW>(&rgb[size_t(y) * w * 3]);
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    std::vector<uint8_t> out(buf, buf + size);
    std::free(buf);
    return out;
}

// Lossless keeps every RGB byte; `exact` keeps the RGB of transparent pixels too.
inline std::vector<uint8_t> webp(uint32_t w, uint32_t h, const std::vector<uint8_t>& pixels, bool alpha,
                                 bool lossless) {
    WebPConfig config;
    WebPPicture pic;
    if (!WebPConfigInit(&config) || !WebPPictureInit(&pic)) throw std::runtime_error("webp: init");
    config.lossless = lossless ? 1 : 0;
    config.exact = 1;
    config.quality = lossless ? 100 : 90;
    pic.use_argb = 1;
    pic.width = int(w);
    pic.height = int(h);
    const int ok = alpha ? WebPPictureImportRGBA(&pic, pixels.data(), int(w * 4))
                         : WebPPictureImportRGB(&pic, pixels.data(), int(w * 3));
    if (!ok) throw std::runtime_error("webp: import");
    WebPMemoryWriter mw;
    WebPMemoryWriterInit(&mw);
    pic.writer = WebPMemoryWrite;
    pic.custom_ptr = &mw;
    const bool encoded = WebPEncode(&config, &pic) != 0;
    WebPPictureFree(&pic);
    std::vector<uint8_t> out(mw.mem, mw.mem + mw.size);
    WebPMemoryWriterClear(&mw);
    if (!encoded) throw std::runtime_error("webp: encode");
    return out;
}

// GIF89a with a 4-colour global palette; each frame is w x h palette indices (0..3). The LZW stream
// sends a clear code before every pixel, so every code stays 3 bits wide: valid, if not small.
inline std::vector<uint8_t> gif(uint32_t w, uint32_t h, const uint8_t palette[4][3],
                                const std::vector<std::vector<uint8_t>>& frames) {
    std::vector<uint8_t> out = {'G', 'I', 'F', '8', '9', 'a'};
    put_le16(out, w);
    put_le16(out, h);
    out.insert(out.end(), {0xF1, 0, 0});  // global table of 2^(1+1) = 4 colours
    for (int i = 0; i < 4; ++i) out.insert(out.end(), palette[i], palette[i] + 3);
    for (const std::vector<uint8_t>& idx : frames) {
        out.insert(out.end(), {0x21, 0xF9, 4, 0, 10, 0, 0, 0});  // graphic control: 0.1 s
        out.push_back(0x2C);
        put_le16(out, 0);
        put_le16(out, 0);
        put_le16(out, w);
        put_le16(out, h);
        out.push_back(0);
        out.push_back(2);  // LZW minimum code size
        std::vector<uint8_t> packed;
        uint32_t acc = 0;
        int bits = 0;
        auto code = [&](uint32_t c) {
            acc |= c << bits;
            bits += 3;
            while (bits >= 8) {
                packed.push_back(uint8_t(acc));
                acc >>= 8;
                bits -= 8;
            }
        };
        for (uint8_t i : idx) {
            code(4);  // clear
            code(i);
        }
        code(5);  // end of information
        if (bits > 0) packed.push_back(uint8_t(acc));
        for (size_t at = 0; at < packed.size(); at += 255) {
            const size_t n = std::min<size_t>(255, packed.size() - at);
            out.push_back(uint8_t(n));
            out.insert(out.end(), packed.begin() + long(at), packed.begin() + long(at + n));
        }
        out.push_back(0);
    }
    out.push_back(0x3B);
    return out;
}

// 24-bit BMP, rows stored bottom-up in BGR, each padded to 4 bytes.
inline std::vector<uint8_t> bmp(uint32_t w, uint32_t h, const std::vector<uint8_t>& rgb) {
    const uint32_t stride = (w * 3 + 3) / 4 * 4;
    std::vector<uint8_t> out = {'B', 'M'};
    put_le32(out, 54 + stride * h);
    put_le32(out, 0);
    put_le32(out, 54);
    put_le32(out, 40);
    put_le32(out, w);
    put_le32(out, h);
    put_le16(out, 1);
    put_le16(out, 24);
    for (int i = 0; i < 6; ++i) put_le32(out, i == 1 ? stride * h : 0);
    for (uint32_t r = 0; r < h; ++r) {
        const uint32_t y = h - 1 - r;
        for (uint32_t x = 0; x < w; ++x) {
            const uint8_t* p = &rgb[(size_t(y) * w + x) * 3];
            out.insert(out.end(), {p[2], p[1], p[0]});
        }
        out.resize(out.size() + (stride - w * 3), 0);
    }
    return out;
}

}  // namespace image_files
