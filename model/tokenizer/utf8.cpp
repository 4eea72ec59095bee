#include "model/tokenizer/utf8.h"

namespace vkllm::utf8 {

size_t char_len(std::string_view s, size_t pos) {
    const auto c = static_cast<unsigned char>(s[pos]);
    if (c < 0x80) return 1;
    size_t len;
    unsigned char lo = 0x80, hi = 0xbf;  // allowed range of the second byte
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0) lo = 0xa0;
        if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0) lo = 0x90;
        if (c == 0xf4) hi = 0x8f;
    } else {
        return 1;
    }
    const size_t n = s.size() - pos;
    const auto b1 = static_cast<unsigned char>(s[pos + (n > 1)]);
    if (n < len || b1 < lo || b1 > hi) return 1;
    for (size_t i = 2; i < len; ++i)
        if ((static_cast<unsigned char>(s[pos + i]) & 0xc0) != 0x80) return 1;
    return len;
}

size_t sequence_len(std::string_view s, size_t pos) {
    const auto* b = reinterpret_cast<const unsigned char*>(s.data());
    const size_t n = s.size();
    auto cont = [&](size_t i) { return i < n && (b[i] & 0xc0) == 0x80; };
    const unsigned c = b[pos];
    if (c < 0x80) return 1;
    if (c >= 0xc0 && c < 0xe0 && cont(pos + 1)) return 2;
    if (c >= 0xe0 && c < 0xf0 && cont(pos + 1) && cont(pos + 2)) return 3;
    if (c >= 0xf0 && c < 0xf8 && cont(pos + 1) && cont(pos + 2) && cont(pos + 3)) return 4;
    return 0;
}

size_t lenient_len(std::string_view s, size_t pos) {
    const size_t len = sequence_len(s, pos);
    if (len != 4) return len;
    const auto* b = reinterpret_cast<const unsigned char*>(s.data()) + pos;
    const uint32_t cp = (b[0] & 0x07u) << 18 | (b[1] & 0x3fu) << 12 | (b[2] & 0x3fu) << 6 | (b[3] & 0x3fu);
    return cp < 0x110000 ? 4 : 0;
}

void decode_lenient(std::string_view s, std::vector<uint32_t>& out) {
    out.clear();
    out.reserve(s.size());
    const auto* b = reinterpret_cast<const unsigned char*>(s.data());
    for (size_t i = 0; i < s.size();) {
        switch (lenient_len(s, i)) {
            case 1:
                out.push_back(b[i]);
                i += 1;
                break;
            case 2:
                out.push_back((b[i] & 0x1fu) << 6 | (b[i + 1] & 0x3fu));
                i += 2;
                break;
            case 3:
                out.push_back((b[i] & 0x0fu) << 12 | (b[i + 1] & 0x3fu) << 6 | (b[i + 2] & 0x3fu));
                i += 3;
                break;
            case 4:
                out.push_back((b[i] & 0x07u) << 18 | (b[i + 1] & 0x3fu) << 12 | (b[i + 2] & 0x3fu) << 6 |
                              (b[i + 3] & 0x3fu));
                i += 4;
                break;
            default:
                out.push_back(kReplacement);
                i += 1;
                break;
        }
    }
}

void append(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out += char(cp);
    } else if (cp < 0x800) {
        out += char(0xc0 | (cp >> 6));
        out += char(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        out += char(0xe0 | (cp >> 12));
        out += char(0x80 | ((cp >> 6) & 0x3f));
        out += char(0x80 | (cp & 0x3f));
    } else {
        out += char(0xf0 | (cp >> 18));
        out += char(0x80 | ((cp >> 12) & 0x3f));
        out += char(0x80 | ((cp >> 6) & 0x3f));
        out += char(0x80 | (cp & 0x3f));
    }
}

}  // namespace vkllm::utf8
