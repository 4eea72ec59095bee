// Tokenizer vocabularies for random models: SentencePiece-style and WordPiece.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vkllm {

// The tokenizer vocab written into random models: <unk>, <s>, </s>, <0x00>..<0xFF>, then "▁",
// single characters, and "▁"-prefixed and plain letter pieces of growing length, with descending
// scores, so the SentencePiece-style tokenizer works and merges on it.
struct RandomVocab {
    std::vector<std::string> tokens;
    std::vector<float> scores;
    std::vector<int32_t> types;
};
RandomVocab make_random_vocab(uint32_t n_vocab);
// The same pieces as a WordPiece vocab in llama.cpp's layout, for encoders (architectures with token
// types): [PAD] [UNK] [CLS] [SEP] [MASK] (ids 0..4), then the normal pieces ("▁x" starts a word,
// "x" continues one).
RandomVocab make_random_wordpiece_vocab(uint32_t n_vocab);

}  // namespace vkllm
