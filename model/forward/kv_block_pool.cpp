#include "model/forward/kv_block_pool.h"

#include <fmt/format.h>

#include <algorithm>

namespace vkllm {

KvBlockPool::KvBlockPool(uint32_t blocks, uint32_t block_rows, uint32_t n_seq, uint32_t max_rows)
    : block_rows_(block_rows), max_rows_(max_rows), seq_blocks_(n_seq), refs_(blocks, 0) {
    if (block_rows == 0) throw std::invalid_argument("a KV block holds at least one row");
    for (uint32_t b = blocks; b-- > 0;) free_.push_back(b);  // handed out from block 0 up
}

uint32_t KvBlockPool::take(uint32_t seq) {
    if (free_.empty())
        throw ContextFullError(
            fmt::format("the KV cache has no free block for sequence {} ({} blocks of {} rows, "
                        "all held by other sequences)",
                        seq, blocks_total(), block_rows_));
    const uint32_t b = free_.back();
    free_.pop_back();
    refs_[b] = 1;
    return b;
}

void KvBlockPool::release(uint32_t b) {
    if (--refs_[b] == 0) free_.push_back(b);
}

void KvBlockPool::hold_rows(uint32_t seq, uint32_t rows, uint32_t write_from, const CopyBlock& copy) {
    std::vector<uint32_t>& blocks = seq_blocks_.at(seq);
    const uint32_t need = blocks_for(std::min(rows, max_rows_));
    while (blocks.size() > need) {
        release(blocks.back());
        blocks.pop_back();
    }
    for (size_t j = write_from / block_rows_; j < blocks.size(); ++j)
        if (refs_[blocks[j]] > 1) {  // shared: this sequence writes into a copy of its own
            const uint32_t own = take(seq);
            copy(blocks[j], own);
            release(blocks[j]);
            blocks[j] = own;
        }
    while (blocks.size() < need) blocks.push_back(take(seq));
}

void KvBlockPool::share_prefix(uint32_t dst, uint32_t src, uint32_t rows) {
    hold_rows(dst, 0, 0, {});  // letting go copies nothing
    const std::vector<uint32_t>& from = seq_blocks_.at(src);
    std::vector<uint32_t>& to = seq_blocks_.at(dst);
    const uint32_t n = std::min<uint32_t>(blocks_for(rows), uint32_t(from.size()));
    to.assign(from.begin(), from.begin() + n);
    for (uint32_t b : to) ++refs_[b];
}

uint32_t KvBlockPool::blocks_needed(uint32_t seq, uint32_t held_rows, uint32_t n) const {
    const std::vector<uint32_t>& blocks = seq_blocks_.at(seq);
    const uint32_t need = blocks_for(std::min(held_rows + n, max_rows_));
    uint32_t k = need > blocks.size() ? need - uint32_t(blocks.size()) : 0;
    for (size_t j = held_rows / block_rows_; j < std::min<size_t>(need, blocks.size()); ++j)
        if (refs_[blocks[j]] > 1) ++k;
    return k;
}

}  // namespace vkllm
