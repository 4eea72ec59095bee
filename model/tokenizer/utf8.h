// UTF-8 helpers shared by the tokenizers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vkllm::utf8 {

inline constexpr uint32_t kReplacement = 0xfffd;

// Length of the UTF-8 character at s[pos], or 1 when the bytes there are not a valid encoding
// (stray continuation byte, truncated sequence, overlong form, surrogate, > U+10FFFF). The
// SentencePiece tokenizer uses it so that an invalid byte becomes a symbol of its own.
size_t char_len(std::string_view s, size_t pos);

// Decodes `s` the way llama.cpp's byte-level BPE does, so the pre-tokenizer sees the same code
// points: an invalid lead byte or truncated sequence becomes U+FFFD and decoding resumes at the
// next byte; overlong forms and surrogates are accepted as the values they spell. (llama.cpp
// aborts on 4-byte sequences above U+10FFFF; here they are invalid bytes like any other.)
void decode_lenient(std::string_view s, std::vector<uint32_t>& out);

// Bytes of the sequence at s[pos] by its form alone, as llama.cpp's UTF-8 decoder delimits it: a
// lead byte and the continuation bytes it calls for, whatever value they spell (overlong forms,
// surrogates, 4-byte values past U+10FFFF); 0 for a stray continuation byte, F8..FF or a truncated
// sequence.
size_t sequence_len(std::string_view s, size_t pos);
// sequence_len, but 0 also for a 4-byte value past U+10FFFF: the bytes decode_lenient takes for the
// character at s[pos], 0 where it would turn the byte there into U+FFFD.
size_t lenient_len(std::string_view s, size_t pos);

// Appends the UTF-8 encoding of cp (< 0x110000; surrogates encode as 3 bytes, as llama.cpp does).
void append(std::string& out, uint32_t cp);

}  // namespace vkllm::utf8
