// The file `vkllm perplexity --kl-divergence-base FILE` writes: the log-probabilities a base model
// gave every scored position, so that a second model (a quantization of the first) can be
// compared with it later (`--kl-divergence`). The layout is llama.cpp's `llama-perplexity
// --kl-divergence-base` file, byte for byte, so either program can read the other's: a base
// computed by llama.cpp on a big machine can judge a vkllm quantization, and vice versa. That
// layout has no version field; instead every size follows from the header, and a file whose length
// differs from what its header implies is refused as truncated or foreign.
//
// All integers and floats little-endian:
//   char[8]  "_logits_"
//   int32    n_ctx       tokens per chunk
//   int32    n_vocab
//   int32    n_chunks
//   int32    tokens[n_chunks * n_ctx]   the text as tokenized (each chunk's first token as it is in
//                                       the text: the BOS that replaces it is not stored)
//   then, for each chunk, one row for each scored position j = n_ctx/2 .. n_ctx-2 (the logits at
//   position j predict token j + 1; n_ctx - 1 - n_ctx/2 rows), each row
//   uint16[row_words(n_vocab)] = float scale, float min_log_prob (as four uint16), then q[n_vocab]
//                                and one uint16 of padding when n_vocab is odd:
//     log p(i) = scale * q[i] + min_log_prob, where min_log_prob is the log-probability of the
//     smallest logit within 16 of the largest; tokens below that are stored as q = 0 (and ignored
//     by the KL divergence, their probability being under e^-16 of the top one's).
#pragma once

#include <cstdint>
#include <fstream>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace vkllm {

// A base file that is missing, truncated, foreign, or does not match the run: the message names
// the file and the mismatch.
class KlBaseError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct KlBaseHeader {
    uint32_t n_ctx = 0, n_vocab = 0, n_chunks = 0;
    uint32_t rows_per_chunk() const { return n_ctx - 1 - n_ctx / 2; }
};

// uint16 words of one row: two floats, then n_vocab values rounded up to an even count.
inline uint32_t kl_row_words(uint32_t n_vocab) { return 2 * ((n_vocab + 1) / 2) + 4; }

// Quantizes the log-softmax of `logits` into `row` (kl_row_words(logits.size()) words).
void encode_log_probs(std::span<const float> logits, uint16_t* row);

// One stored row, decoded on the fly.
struct LogProbRow {
    float scale = 0, min_log_prob = 0;
    const uint16_t* q = nullptr;
    explicit LogProbRow(const uint16_t* row);
    float log_prob(uint32_t i) const { return scale * float(q[i]) + min_log_prob; }
};

// Writes to FILE.tmp and renames it to FILE in finish(), so that a run that fails half-way never
// leaves a truncated base behind; an unfinished file is removed by the destructor.
class KlBaseWriter {
public:
    KlBaseWriter(const std::string& path, const KlBaseHeader& header, std::span<const int32_t> tokens);
    ~KlBaseWriter();
    KlBaseWriter(const KlBaseWriter&) = delete;
    KlBaseWriter& operator=(const KlBaseWriter&) = delete;

    const KlBaseHeader& header() const { return header_; }
    void add_row(std::span<const float> logits);  // the next scored position, in file order
    void finish();  // throws when rows are missing or a write failed

private:
    void check_stream(const char* what);

    std::string path_, tmp_path_;
    KlBaseHeader header_;
    std::ofstream out_;
    std::vector<uint16_t> row_;
    uint64_t rows_written_ = 0;
    bool finished_ = false;
};

// Reads the header and tokens at once and the rows one chunk at a time (a 32000-vocab model at
// -c 512 stores 16 MiB per chunk).
class KlBaseReader {
public:
    explicit KlBaseReader(const std::string& path);  // KlBaseError for any malformed file
    const std::string& path() const { return path_; }
    const KlBaseHeader& header() const { return header_; }
    const std::vector<int32_t>& tokens() const { return tokens_; }
    // rows_per_chunk() rows of kl_row_words(n_vocab) words.
    std::vector<uint16_t> read_chunk(uint32_t chunk);

private:
    std::string path_;
    KlBaseHeader header_;
    std::vector<int32_t> tokens_;
    std::ifstream in_;
    uint64_t rows_offset_ = 0;
};

}  // namespace vkllm
