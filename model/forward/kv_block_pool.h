// The paged KV cache's bookkeeping, apart from any device: which blocks of a full-context layer's
// pool each sequence holds, in order, which are free, and how many sequences hold each (a shared
// prompt prefix is held once). ModelGpu owns one for all its layers and stages (every full-context
// layer's pool has the same blocks), writes a sequence's list into the block tables the kernels
// read, and does the one device operation the pool asks for: copying a shared block before a
// sequence writes into it (copy on write).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <stdexcept>
#include <vector>

namespace vkllm {

// A sequence needs more context than it has: its own limit, or a KV pool without free blocks.
class ContextFullError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

class KvBlockPool {
public:
    // `blocks` blocks of `block_rows` rows for `n_seq` sequences, each holding at most `max_rows`
    // rows (the context). Blocks are handed out from block 0 up.
    KvBlockPool(uint32_t blocks, uint32_t block_rows, uint32_t n_seq, uint32_t max_rows);

    // Copies one block's rows into another, in every pool that has it (the caller's device work).
    using CopyBlock = std::function<void(uint32_t from, uint32_t to)>;

    // Gives sequence `seq` blocks for its first `rows` rows (capped at max_rows) and lets go of those
    // past them. Rows from `write_from` on are about to be written: a shared block among them is
    // first copied, through `copy`, into one of the sequence's own. ContextFullError when the pool
    // runs out of blocks (the blocks taken so far stay with the sequence).
    void hold_rows(uint32_t seq, uint32_t rows, uint32_t write_from, const CopyBlock& copy);
    // Sequence `dst` lets go of its blocks and holds the first blocks of `src` that cover `rows` rows.
    void share_prefix(uint32_t dst, uint32_t src, uint32_t rows);
    // Free blocks sequence `seq`, holding `held_rows` rows, takes to hold n more: new blocks, and
    // copies of the shared ones it would write into.
    uint32_t blocks_needed(uint32_t seq, uint32_t held_rows, uint32_t n) const;

    std::span<const uint32_t> blocks(uint32_t seq) const { return seq_blocks_.at(seq); }
    uint32_t holders(uint32_t block) const { return refs_.at(block); }  // sequences holding it
    uint32_t blocks_total() const { return uint32_t(refs_.size()); }
    uint32_t blocks_used() const { return blocks_total() - uint32_t(free_.size()); }
    uint32_t block_rows() const { return block_rows_; }

private:
    uint32_t blocks_for(uint32_t rows) const { return (rows + block_rows_ - 1) / block_rows_; }
    uint32_t take(uint32_t seq);
    void release(uint32_t block);

    uint32_t block_rows_ = 0, max_rows_ = 0;
    std::vector<std::vector<uint32_t>> seq_blocks_;  // per sequence, its blocks in order
    std::vector<uint32_t> free_;  // taken from the back
    std::vector<uint32_t> refs_;  // per block, the sequences holding it
};

}  // namespace vkllm
