#include "model/kl_base_file.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

namespace vkllm {

// The layout is written as the host's bytes: the format is little-endian.
static_assert(std::endian::native == std::endian::little, "kl_base_file assumes a little-endian host");

namespace {

constexpr char kMagic[8] = {'_', 'l', 'o', 'g', 'i', 't', 's', '_'};
constexpr uint64_t kHeaderBytes = sizeof(kMagic) + 3 * 4;
// Log-probabilities this far below the top one are stored as "absent" (q = 0).
constexpr float kLogProbRange = 16.0f;

// Bytes of a file with this header; UINT64_MAX when that overflows (a hostile header), which no
// real file size equals.
uint64_t file_bytes(const KlBaseHeader& h) {
    uint64_t tokens = 0, rows = 0, total = 0;
    if (__builtin_mul_overflow(uint64_t(h.n_chunks), uint64_t(h.n_ctx), &tokens) ||
        __builtin_mul_overflow(uint64_t(h.n_chunks), uint64_t(h.rows_per_chunk()), &rows) ||
        __builtin_mul_overflow(rows, 2ull * kl_row_words(h.n_vocab), &rows) || tokens > (UINT64_MAX >> 2) ||
        __builtin_add_overflow(kHeaderBytes + 0, rows, &total) || __builtin_add_overflow(total, tokens * 4, &total))
        return UINT64_MAX;
    return total;
}

}  // namespace

void encode_log_probs(std::span<const float> logits, uint16_t* row) {
    const uint32_t n = uint32_t(logits.size());
    float max_logit = logits[0], min_logit = logits[0];
    for (float v : logits) {
        max_logit = std::max(max_logit, v);
        min_logit = std::min(min_logit, v);
    }
    min_logit = std::max(min_logit, max_logit - kLogProbRange);
    double sum_exp = 0;
    for (float v : logits) sum_exp += std::exp(double(v) - max_logit);
    const float log_sum_exp = float(std::log(sum_exp));
    const float scale = (max_logit - min_logit) / 65535.0f;
    const float min_log_prob = min_logit - max_logit - log_sum_exp;
    std::memcpy(row, &scale, 4);
    std::memcpy(row + 2, &min_log_prob, 4);
    uint16_t* q = row + 4;
    std::fill(q, q + (kl_row_words(n) - 4), uint16_t(0));
    if (scale == 0) return;  // all logits equal: every q is 0, log p = min_log_prob = -log(n)
    const float inv_scale = 1.0f / scale;
    for (uint32_t i = 0; i < n; ++i)
        if (logits[i] > min_logit)
            q[i] = uint16_t(std::clamp(std::lrintf(inv_scale * (logits[i] - min_logit)), 0l, 65535l));
}

LogProbRow::LogProbRow(const uint16_t* row) : q(row + 4) {
    std::memcpy(&scale, row, 4);
    std::memcpy(&min_log_prob, row + 2, 4);
}

// --- writer ----------------------------------------------------------------------------------------

KlBaseWriter::KlBaseWriter(const std::string& path, const KlBaseHeader& header, std::span<const int32_t> tokens)
    : path_(path), tmp_path_(path + ".tmp"), header_(header), row_(kl_row_words(header.n_vocab)) {
    if (header.n_ctx < 4 || header.n_vocab == 0 || header.n_chunks == 0)
        throw std::invalid_argument(fmt::format("KL base {}: bad header (n_ctx {}, n_vocab {}, {} chunks)", path,
                                                header.n_ctx, header.n_vocab, header.n_chunks));
    if (tokens.size() != uint64_t(header.n_chunks) * header.n_ctx)
        throw std::invalid_argument(fmt::format("KL base {}: {} tokens given for {} chunks of {}", path, tokens.size(),
                                                header.n_chunks, header.n_ctx));
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
        throw KlBaseError(fmt::format("cannot write the KL-divergence base '{}': it is a directory", path));
    out_.open(tmp_path_, std::ios::binary | std::ios::trunc);
    if (!out_)
        throw KlBaseError(fmt::format("cannot write the KL-divergence base '{}': {}", tmp_path_, std::strerror(errno)));
    const int32_t h[3] = {int32_t(header.n_ctx), int32_t(header.n_vocab), int32_t(header.n_chunks)};
    out_.write(kMagic, sizeof(kMagic));
    out_.write(reinterpret_cast<const char*>(h), sizeof(h));
    out_.write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * 4));
    try {
        check_stream("header");
    } catch (...) {  // the destructor does not run for a throwing constructor: drop the partial file here
        out_.close();
        std::error_code rm;
        std::filesystem::remove(tmp_path_, rm);
        throw;
    }
}

KlBaseWriter::~KlBaseWriter() {
    if (finished_) return;
    out_.close();
    std::error_code ec;
    std::filesystem::remove(tmp_path_, ec);
}

void KlBaseWriter::check_stream(const char* what) {
    if (!out_)
        throw KlBaseError(
            fmt::format("writing the {} of the KL-divergence base '{}' failed (disk full?)", what, tmp_path_));
}

void KlBaseWriter::add_row(std::span<const float> logits) {
    if (logits.size() != header_.n_vocab)
        throw std::invalid_argument(
            fmt::format("KL base: a row of {} logits for a vocab of {}", logits.size(), header_.n_vocab));
    if (rows_written_ == uint64_t(header_.n_chunks) * header_.rows_per_chunk())
        throw std::logic_error("KL base: more rows than the header announces");
    encode_log_probs(logits, row_.data());
    out_.write(reinterpret_cast<const char*>(row_.data()), std::streamsize(row_.size() * 2));
    check_stream("log-probabilities");
    ++rows_written_;
}

void KlBaseWriter::finish() {
    const uint64_t expected = uint64_t(header_.n_chunks) * header_.rows_per_chunk();
    if (rows_written_ != expected)
        throw std::logic_error(fmt::format("KL base: {} rows written of {}", rows_written_, expected));
    out_.close();
    check_stream("end");
    std::error_code ec;
    std::filesystem::rename(tmp_path_, path_, ec);
    if (ec) throw KlBaseError(fmt::format("cannot rename '{}' to '{}': {}", tmp_path_, path_, ec.message()));
    finished_ = true;
}

// --- reader ----------------------------------------------------------------------------------------

KlBaseReader::KlBaseReader(const std::string& path) : path_(path) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec))
        throw KlBaseError(
            fmt::format("KL-divergence base '{}' does not exist (write it first with "
                        "--kl-divergence-base without --kl-divergence)",
                        path));
    if (!std::filesystem::is_regular_file(path, ec))
        throw KlBaseError(fmt::format("KL-divergence base '{}' is not a regular file", path));
    const uint64_t size = std::filesystem::file_size(path, ec);
    in_.open(path, std::ios::binary);
    if (!in_) throw KlBaseError(fmt::format("cannot read the KL-divergence base '{}': {}", path, std::strerror(errno)));
    char magic[8] = {};
    int32_t h[3] = {};
    in_.read(magic, sizeof(magic));
    in_.read(reinterpret_cast<char*>(h), sizeof(h));
    if (!in_ || std::memcmp(magic, kMagic, sizeof(kMagic)) != 0)
        throw KlBaseError(
            fmt::format("'{}' is not a KL-divergence base file (it does not start with \"_logits_\")", path));
    if (h[0] < 4 || h[1] <= 0 || h[2] <= 0)
        throw KlBaseError(fmt::format("KL-divergence base '{}' has a bad header: n_ctx {}, n_vocab {}, {} chunks", path,
                                      h[0], h[1], h[2]));
    header_ = {uint32_t(h[0]), uint32_t(h[1]), uint32_t(h[2])};
    const uint64_t expected = file_bytes(header_);
    if (size != expected)
        throw KlBaseError(
            fmt::format("KL-divergence base '{}' is {} bytes, but its header ({} chunks of {} tokens, "
                        "vocab {}) implies {}: the file is truncated or was not written by a "
                        "perplexity run",
                        path, size, header_.n_chunks, header_.n_ctx, header_.n_vocab, expected));
    tokens_.resize(uint64_t(header_.n_chunks) * header_.n_ctx);
    in_.read(reinterpret_cast<char*>(tokens_.data()), std::streamsize(tokens_.size() * 4));
    if (!in_) throw KlBaseError(fmt::format("reading the tokens of the KL-divergence base '{}' failed", path));
    for (size_t i = 0; i < tokens_.size(); ++i)
        if (tokens_[i] < 0 || uint32_t(tokens_[i]) >= header_.n_vocab)
            throw KlBaseError(fmt::format("KL-divergence base '{}': token {} at position {} is outside its vocab of {}",
                                          path, tokens_[i], i, header_.n_vocab));
    rows_offset_ = kHeaderBytes + 4ull * tokens_.size();
}

std::vector<uint16_t> KlBaseReader::read_chunk(uint32_t chunk) {
    if (chunk >= header_.n_chunks)
        throw std::out_of_range(fmt::format("KL base '{}' has {} chunks, not {}", path_, header_.n_chunks, chunk + 1));
    const uint64_t words = uint64_t(header_.rows_per_chunk()) * kl_row_words(header_.n_vocab);
    std::vector<uint16_t> rows(words);
    in_.clear();
    in_.seekg(std::streamoff(rows_offset_ + 2 * words * chunk));
    in_.read(reinterpret_cast<char*>(rows.data()), std::streamsize(words * 2));
    if (!in_)
        throw KlBaseError(fmt::format("reading chunk {} of the KL-divergence base '{}' failed", chunk + 1, path_));
    return rows;
}

}  // namespace vkllm
