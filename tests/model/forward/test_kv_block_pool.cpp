// The paged KV cache's bookkeeping without a device: blocks taken as a sequence grows and given back
// when it shrinks, a shared prefix held once and copied before a sequence writes into it, the
// count a scheduler asks for before it admits a token, and a full pool refused with a clear error.
// ModelGpu's device side of the same (block tables, copies on every stage) is tested in
// test_multi_sequence.cpp.
#include "model/forward/kv_block_pool.h"

#include <doctest/doctest.h>

#include <utility>
#include <vector>

using namespace vkllm;

namespace {

std::vector<uint32_t> held(const KvBlockPool& p, uint32_t seq) {
    const auto b = p.blocks(seq);
    return {b.begin(), b.end()};
}

// Records the copies the pool asks for instead of doing them.
struct Copies {
    std::vector<std::pair<uint32_t, uint32_t>> done;
    KvBlockPool::CopyBlock fn() {
        return [this](uint32_t from, uint32_t to) { done.emplace_back(from, to); };
    }
};

}  // namespace

TEST_CASE("kv block pool: blocks are taken in order as a sequence grows and given back as it shrinks") {
    KvBlockPool pool(8, 4, 2, 32);  // 8 blocks of 4 rows, 2 sequences of up to 32 rows
    Copies c;
    CHECK(pool.blocks_total() == 8);
    CHECK(pool.blocks_used() == 0);
    pool.hold_rows(0, 1, 0, c.fn());
    CHECK(held(pool, 0) == std::vector<uint32_t>{0});
    pool.hold_rows(0, 9, 1, c.fn());  // rows 0..8: three blocks
    CHECK(held(pool, 0) == std::vector<uint32_t>{0, 1, 2});
    pool.hold_rows(1, 4, 0, c.fn());
    CHECK(held(pool, 1) == std::vector<uint32_t>{3});
    CHECK(pool.blocks_used() == 4);
    pool.hold_rows(0, 5, UINT32_MAX, c.fn());  // truncated to 5 rows: block 2 goes back
    CHECK(held(pool, 0) == std::vector<uint32_t>{0, 1});
    CHECK(pool.blocks_used() == 3);
    pool.hold_rows(1, 6, 4, c.fn());  // the freed block is the next one taken
    CHECK(held(pool, 1) == std::vector<uint32_t>{3, 2});
    pool.hold_rows(0, 0, UINT32_MAX, c.fn());  // reset
    CHECK(held(pool, 0).empty());
    CHECK(pool.blocks_used() == 2);
    CHECK(c.done.empty());
    // Rows past the context are never held: a sequence's blocks stop at max_rows.
    pool.hold_rows(1, 0, UINT32_MAX, c.fn());
    pool.hold_rows(0, 100, 0, c.fn());
    CHECK(held(pool, 0).size() == 8);  // 32 rows in blocks of 4, not 100
    CHECK(pool.blocks_used() == 8);
}

TEST_CASE("kv block pool: a shared prefix is held once and copied before a sequence writes into it") {
    KvBlockPool pool(16, 4, 3, 64);
    Copies c;
    pool.hold_rows(0, 10, 0, c.fn());  // blocks 0, 1, 2 (rows 8..9 in block 2)
    pool.share_prefix(1, 0, 10);
    CHECK(held(pool, 1) == held(pool, 0));
    CHECK(pool.holders(0) == 2);
    CHECK(pool.holders(2) == 2);
    CHECK(pool.blocks_used() == 3);  // shared blocks count once
    // Sequence 1 appends at row 10: block 2 is shared, so it is copied into one of its own first;
    // blocks 0 and 1 (rows it does not write) stay shared.
    CHECK(pool.blocks_needed(1, 10, 1) == 1);
    pool.hold_rows(1, 11, 10, c.fn());
    REQUIRE(c.done.size() == 1);
    CHECK(c.done[0] == std::pair<uint32_t, uint32_t>{2, 3});
    CHECK(held(pool, 1) == std::vector<uint32_t>{0, 1, 3});
    CHECK(pool.holders(2) == 1);
    CHECK(pool.holders(0) == 2);
    // A prefix ending on a block boundary shares whole blocks and needs no copy to grow.
    pool.share_prefix(2, 0, 8);
    CHECK(held(pool, 2) == std::vector<uint32_t>{0, 1});
    CHECK(pool.blocks_needed(2, 8, 4) == 1);
    pool.hold_rows(2, 12, 8, c.fn());
    CHECK(c.done.size() == 1);
    CHECK(held(pool, 2) == std::vector<uint32_t>{0, 1, 4});
    CHECK(pool.holders(0) == 3);
    // Letting go of a shared block frees it only with its last holder.
    pool.hold_rows(0, 0, UINT32_MAX, c.fn());
    pool.hold_rows(1, 0, UINT32_MAX, c.fn());
    CHECK(pool.holders(0) == 1);
    CHECK(pool.blocks_used() == 3);  // sequence 2's blocks 0, 1, 4
    // Sharing replaces whatever the destination held.
    pool.hold_rows(1, 4, 0, c.fn());
    pool.share_prefix(1, 2, 12);
    CHECK(held(pool, 1) == held(pool, 2));
    CHECK(pool.blocks_used() == 3);
}

TEST_CASE("kv block pool: blocks_needed counts new blocks and copies of shared ones written into") {
    KvBlockPool pool(32, 8, 2, 100);
    Copies c;
    CHECK(pool.blocks_needed(0, 0, 1) == 1);
    CHECK(pool.blocks_needed(0, 0, 17) == 3);
    CHECK(pool.blocks_needed(0, 0, 1000) == 13);  // capped at the context: 100 rows
    pool.hold_rows(0, 12, 0, c.fn());
    CHECK(pool.blocks_needed(0, 12, 4) == 0);  // block 1 has room
    CHECK(pool.blocks_needed(0, 12, 5) == 1);
    pool.share_prefix(1, 0, 12);
    CHECK(pool.blocks_needed(1, 12, 1) == 1);  // block 1 is shared: a copy
    CHECK(pool.blocks_needed(1, 12, 5) == 2);  // the copy and a new block
    CHECK(pool.blocks_needed(0, 12, 1) == 1);  // the source writes into a shared block too
    // What blocks_needed promised is what hold_rows takes.
    const uint32_t free_before = pool.blocks_total() - pool.blocks_used();
    pool.hold_rows(1, 17, 12, c.fn());
    CHECK(free_before - (pool.blocks_total() - pool.blocks_used()) == 2);
}

TEST_CASE("kv block pool: a full pool is refused with the sequence and the pool's size") {
    KvBlockPool pool(3, 8, 2, 64);
    Copies c;
    pool.hold_rows(0, 16, 0, c.fn());
    pool.hold_rows(1, 8, 0, c.fn());
    CHECK(pool.blocks_used() == 3);
    CHECK_THROWS_WITH_AS(pool.hold_rows(1, 9, 8, c.fn()),
                         "the KV cache has no free block for sequence 1 (3 blocks of 8 rows, all held by other sequences)",
                         ContextFullError);
    CHECK(held(pool, 1).size() == 1);  // what it held before stays
    pool.hold_rows(0, 0, UINT32_MAX, c.fn());
    pool.hold_rows(1, 9, 8, c.fn());  // room again
    CHECK(held(pool, 1).size() == 2);
    CHECK_THROWS_AS(KvBlockPool(4, 0, 1, 8), std::invalid_argument);
}
