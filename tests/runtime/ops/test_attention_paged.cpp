// Paged KV caches (ops::KvPages) and decode batches (AttentionParams::batch): each sequence's rows
// scattered over a shared pool of blocks in a shuffled order, found through its block table.
//   - attention (decode and prefill) through a table against ref::attention over the sequence's rows
//     gathered back into order;
//   - a batch of decode queries in one dispatch against each query alone through its own table row,
//     bit for bit (a sequence's result must not depend on its company), and against the reference;
//   - attention_store of a batch against each sequence's own call on a copy of the pool, bit for bit
//     (outputs and the whole pools), and each lone paged call against the unpaged kernel over the
//     gathered cache (out and the stored row, bit for bit);
//   - kv_store and kv_store_pair, a chunk through row 0 and a batch one table row per token, against
//     ref::kv_store placed at the table's rows; every other pool row untouched.
// Pool rows no sequence owns hold NaN, so a read through a wrong table entry shows.
#include "support/attention_testing.h"
#include "support/small_ops_testing.h"
#include "runtime/ops/kv_store.h"
#include "runtime/ops/rope.h"

#include <algorithm>
#include <numeric>
#include <random>

using namespace vkllm;
using namespace vkllm::test::attention;

namespace {

// A pool holding `n_seq` sequences of p.n_ctx rows each (plus spare blocks no table names), every
// sequence's blocks drawn from a shuffled order.
struct Pool {
    uint32_t block_rows = 0, stride = 0, blocks = 0;
    size_t row_bytes = 0, v_row_bytes = 0;
    std::vector<uint32_t> table;  // [n_seq][stride]
    std::vector<uint8_t> k, v;    // the pools' bytes
    std::vector<std::vector<uint8_t>> k_logical, v_logical;  // per sequence, as make_cache made them

    uint32_t phys(uint32_t seq, uint32_t r) const { return table[seq * stride + r / block_rows] * block_rows + r % block_rows; }
    uint32_t rows() const { return blocks * block_rows; }
};

Pool make_pool(const AttentionParams& p, uint32_t n_seq, uint32_t block_rows, const std::vector<uint32_t>& filled,
               uint32_t seed) {
    Pool pl;
    pl.block_rows = block_rows;
    pl.stride = (p.n_ctx + block_rows - 1) / block_rows;
    pl.blocks = n_seq * pl.stride + 3;
    pl.row_bytes = ops::kv_row_bytes(p.kv_type, uint64_t(p.n_kv_heads) * p.head_dim);
    pl.v_row_bytes = ops::kv_row_bytes(p.kv_type, uint64_t(p.n_kv_heads) * p.v_dim());
    std::vector<uint32_t> order(pl.blocks);
    std::iota(order.begin(), order.end(), 0u);
    std::shuffle(order.begin(), order.end(), std::mt19937(seed));
    pl.table.assign(order.begin(), order.begin() + size_t(n_seq) * pl.stride);
    AttentionParams whole = p;  // the pool as one NaN cache
    whole.n_ctx = pl.rows();
    pl.k = make_cache(whole, 0, seed + 1);
    pl.v = make_cache(whole, 0, seed + 2, p.v_dim());
    for (uint32_t s = 0; s < n_seq; ++s) {
        pl.k_logical.push_back(make_cache(p, filled[s], seed * 31 + 3 * s + 3));
        pl.v_logical.push_back(make_cache(p, filled[s], seed * 31 + 3 * s + 4, p.v_dim()));
        for (uint32_t r = 0; r < p.n_ctx; ++r) {
            std::memcpy(&pl.k[pl.phys(s, r) * pl.row_bytes], &pl.k_logical[s][r * pl.row_bytes], pl.row_bytes);
            std::memcpy(&pl.v[pl.phys(s, r) * pl.v_row_bytes], &pl.v_logical[s][r * pl.v_row_bytes], pl.v_row_bytes);
        }
    }
    return pl;
}

// Sequence s's rows of a pool's bytes, in order.
std::vector<uint8_t> gather(const Pool& pl, const std::vector<uint8_t>& pool, size_t row_bytes, uint32_t seq, uint32_t n_ctx) {
    std::vector<uint8_t> out(size_t(n_ctx) * row_bytes);
    for (uint32_t r = 0; r < n_ctx; ++r) std::memcpy(&out[r * row_bytes], &pool[pl.phys(seq, r) * row_bytes], row_bytes);
    return out;
}

struct Device {
    Buffer k, v, table;
    Device(Context& ctx, const Pool& pl) {
        k = ctx.create_buffer(pl.k.size(), MemoryUsage::Device, "k_pool");
        v = ctx.create_buffer(pl.v.size(), MemoryUsage::Device, "v_pool");
        table = ctx.create_buffer(pl.table.size() * 4, MemoryUsage::Device, "tables");
        ctx.upload(k, pl.k.data(), pl.k.size());
        ctx.upload(v, pl.v.data(), pl.v.size());
        ctx.upload(table, pl.table.data(), pl.table.size() * 4);
    }
    ops::KvPages pages(const Pool& pl, uint32_t row, bool per_token = false) const {
        const uint64_t at = 4ull * pl.stride * row;
        return {table.slice(at, table.size() - at), pl.block_rows, pl.rows(), per_token};
    }
};

// A decode batch of one query per sequence (positions pos) through the pool, against each query alone.
void check_decode_batch(Context& ctx, const std::string& cls, AttentionParams p1, const std::vector<int32_t>& pos,
                        uint32_t block_rows, uint32_t seed) {
    CAPTURE(cls);
    CAPTURE(kv_name(p1.kv_type));
    CAPTURE(p1.n_heads);
    CAPTURE(p1.n_kv_heads);
    CAPTURE(p1.head_dim);
    CAPTURE(p1.n_ctx);
    CAPTURE(p1.window);
    CAPTURE(block_rows);
    const uint32_t B = uint32_t(pos.size());
    std::vector<uint32_t> filled;
    for (int32_t x : pos) filled.push_back(std::min<uint32_t>(uint32_t(x) + 1, p1.n_ctx));
    const Pool pl = make_pool(p1, B, block_rows, filled, seed);
    const Device d(ctx, pl);
    AttentionParams pb = p1;
    pb.n_tokens = B;
    pb.batch = true;
    const auto plan = ops::detail::attention_plan(ctx.caps(), pb);
    CAPTURE(plan.n_splits);
    REQUIRE(plan.decode);
    const size_t act = size_t(p1.n_heads) * p1.head_dim, act_out = size_t(p1.n_heads) * p1.v_dim();
    const auto q = test::random_floats(act * B, seed * 7 + 5, -2.0f, 2.0f);
    test::GuardedBuffer qb(ctx, act * B * 4, "q"), ob(ctx, act_out * B * 4, "out"), posb(ctx, B * 4, "positions"),
        ol(ctx, act_out * B * 4, "out (alone)");
    const size_t scratch_one = ops::attention_scratch_bytes(ctx, p1), scratch_b = ops::attention_scratch_bytes(ctx, pb);
    CHECK(scratch_b == scratch_one * B);
    test::GuardedBuffer sb(ctx, std::max<size_t>(scratch_b, 4), "scratch"), sl(ctx, std::max<size_t>(scratch_b, 4), "scratch (alone)");
    qb.upload(q.data(), q.size() * 4);
    posb.upload(pos.data(), B * 4);
    const std::vector<float> poison(act_out * B, std::numeric_limits<float>::quiet_NaN());
    ob.upload(poison.data(), poison.size() * 4);
    ol.upload(poison.data(), poison.size() * 4);
    const BufferSlice vs = p1.v_in_k ? BufferSlice{} : d.v.slice();

    CommandStream s(ctx);
    s.begin();
    ops::attention(ctx, s, pb, qb.slice(), d.k.slice(), vs, posb.slice(), ob.slice(), sb.slice(), {.pages = d.pages(pl, 0)});
    s.end();
    CHECK(s.stats().dispatches == (plan.n_splits > 1 ? 2u : 1u));  // one dispatch (and one merge) for all
    s.submit_and_wait();
    CommandStream alone(ctx);
    alone.begin();
    auto part = [](const test::GuardedBuffer& b, size_t i, size_t bytes) {
        const BufferSlice s = b.slice();
        return BufferSlice{s.buffer, s.offset + i * bytes, bytes};
    };
    for (uint32_t i = 0; i < B; ++i)
        ops::attention(ctx, alone, p1, part(qb, i, act * 4), d.k.slice(), vs, part(posb, i, 4), part(ol, i, act_out * 4),
                       part(sl, i, std::max<size_t>(scratch_one, 4)), {.pages = d.pages(pl, i)});
    alone.end();
    alone.submit_and_wait();
    const std::vector<float> got = ob.download_floats(act_out * B), lone = ol.download_floats(act_out * B);
    CHECK(std::memcmp(got.data(), lone.data(), got.size() * 4) == 0);
    for (uint32_t i = 0; i < B; ++i) {
        CAPTURE(i);
        CAPTURE(pos[i]);
        std::vector<float> ref(act_out);
        const int32_t at = pos[i];
        ref::attention(p1, q.data() + i * act, pl.k_logical[i].data(), p1.v_in_k ? nullptr : pl.v_logical[i].data(), &at,
                       ref.data());
        const auto c = test::validate_result("paged attention out",
                                             std::vector<float>(got.begin() + i * act_out, got.begin() + (i + 1) * act_out), ref, kTol);
        record_worst(cls, p1.kv_type, c);
    }
    for (const auto* b : {&qb, &ob, &posb, &ol, &sb, &sl}) b->check_guards();
}

TEST_CASE("paged attention: a decode batch in one dispatch equals each query alone, and the reference") {
    Context& ctx = test::context();
    uint32_t seed = 1;
    for (KvType t : ops::kAllKvTypes) {
        // GQA 2:1, 64 wide; histories of every length class: 1 row, inside the first block, block
        // boundaries, and the whole sequence (n_ctx 70: not whole blocks).
        check_decode_batch(ctx, "batch", params(1, 4, 2, 64, 70, t), {0, 5, 15, 16, 69}, 16, seed++);
        check_decode_batch(ctx, "batch small blocks", params(1, 8, 1, 32, 40, t), {39, 3, 17}, 4, seed++);
        // Long enough for several splits on every device class; a window over a ring of 20 rows.
        check_decode_batch(ctx, "batch splits", params(1, 8, 4, 64, 2048, t), {2047, 1, 700}, 16, seed++);
        AttentionParams w = params(1, 4, 4, 32, 20, t);
        w.window = 16;
        check_decode_batch(ctx, "batch window ring", w, {19, 30, 57}, 8, seed++);
    }
    AttentionParams caps = params(1, 8, 2, 64, 300, KvType::F16);
    caps.softcap = 30.0f;
    caps.sinks = false;
    check_decode_batch(ctx, "batch softcap", caps, {299, 4}, 16, seed++);
    // Latent attention's shape: one KV head of 576, V the last 512 of each K row.
    check_decode_batch(ctx, "batch mla", mla(1, 8, 100, KvType::F16), {99, 31, 0}, 16, seed++);
}

TEST_CASE("paged attention: a prompt chunk through its table row matches the reference") {
    Context& ctx = test::context();
    uint32_t seed = 100;
    for (KvType t : ops::kAllKvTypes) {
        const AttentionParams p = params(6, 4, 2, 64, 90, t);
        const Pool pl = make_pool(p, 2, 16, {90, 37}, seed);
        const Device d(ctx, pl);
        const size_t act = size_t(p.n_tokens) * p.n_heads * p.head_dim;
        const auto q = test::random_floats(act, seed + 9, -2.0f, 2.0f);
        const std::vector<int32_t> pos = consecutive(6, 31);  // rows 31..36 of sequence 1
        test::GuardedBuffer qb(ctx, act * 4, "q"), ob(ctx, act * 4, "out"), posb(ctx, 24, "positions");
        qb.upload(q.data(), act * 4);
        posb.upload(pos.data(), 24);
        CommandStream s(ctx);
        s.begin();
        ops::attention(ctx, s, p, qb.slice(), d.k.slice(), d.v.slice(), posb.slice(), ob.slice(), BufferSlice{},
                       {.pages = d.pages(pl, 1)});
        s.end();
        s.submit_and_wait();
        std::vector<float> ref(act);
        ref::attention(p, q.data(), pl.k_logical[1].data(), pl.v_logical[1].data(), pos.data(), ref.data());
        record_worst("prefill", t, test::validate_result("paged prefill out", ob.download_floats(act), ref, kTol));
        ob.check_guards();
        ++seed;
    }
}

TEST_CASE("paged attention_store: a batch equals each sequence's own call, which equals the unpaged kernel") {
    Context& ctx = test::context();
    uint32_t seed = 200;
    for (KvType t : ops::kAllKvTypes) {
        for (uint32_t n_ctx : {70u, 2048u}) {
            const AttentionParams p1 = params(1, 8, 2, 64, n_ctx, t);
            CAPTURE(kv_name(t));
            CAPTURE(n_ctx);
            REQUIRE(ops::attention_store_supported(p1));
            const std::vector<int32_t> pos = {0, 16, int32_t(n_ctx) - 1, 33};
            const uint32_t B = uint32_t(pos.size());
            std::vector<uint32_t> filled;
            for (int32_t x : pos) filled.push_back(uint32_t(x));  // the row each step writes is still NaN
            const Pool pl = make_pool(p1, B, 16, filled, seed++);
            AttentionParams pb = p1;
            pb.n_tokens = B;
            pb.batch = true;
            const uint32_t row = p1.n_kv_heads * p1.head_dim, act = p1.n_heads * p1.head_dim;
            const auto q = test::random_floats(size_t(act) * B, seed + 1, -1.0f, 1.0f);
            const auto k = test::random_floats(size_t(row) * B, seed + 2, -1.0f, 1.0f);
            const auto v = test::random_floats(size_t(row) * B, seed + 3, -1.0f, 1.0f);
            const ops::RopeParams rp{p1.n_heads, p1.head_dim, 32, 10000.0f, ops::RopeLayout::HalfSplit};
            Device batch(ctx, pl), alone(ctx, pl);
            test::GuardedBuffer qb(ctx, q.size() * 4, "q"), kb(ctx, k.size() * 4, "new k"), vb(ctx, v.size() * 4, "new v"),
                posb(ctx, B * 4, "positions"), ob(ctx, act * B * 4, "out"), ol(ctx, act * B * 4, "out (alone)"),
                ou(ctx, act * 4, "out (unpaged)");
            const size_t scratch_one = ops::attention_scratch_bytes(ctx, p1);
            test::GuardedBuffer sb(ctx, std::max<size_t>(scratch_one * B, 4), "scratch"),
                sl(ctx, std::max<size_t>(scratch_one * B, 4), "scratch (alone)"), su(ctx, std::max<size_t>(scratch_one, 4), "scratch (unpaged)");
            qb.upload(q.data(), q.size() * 4);
            kb.upload(k.data(), k.size() * 4);
            vb.upload(v.data(), v.size() * 4);
            posb.upload(pos.data(), B * 4);
            auto part = [](const test::GuardedBuffer& b, size_t i, size_t bytes) {
                const BufferSlice s = b.slice();
                return BufferSlice{s.buffer, s.offset + i * bytes, bytes};
            };
            CommandStream s(ctx), l(ctx);
            s.begin();
            ops::attention_store(ctx, s, pb, qb.slice(), {kb.slice(), vb.slice(), &rp, nullptr}, batch.k.slice(),
                                 batch.v.slice(), posb.slice(), ob.slice(), sb.slice(), {.pages = batch.pages(pl, 0)});
            s.end();
            l.begin();
            for (uint32_t i = 0; i < B; ++i)
                ops::attention_store(ctx, l, p1, part(qb, i, act * 4), {part(kb, i, row * 4), part(vb, i, row * 4), &rp, nullptr},
                                     alone.k.slice(), alone.v.slice(), part(posb, i, 4), part(ol, i, act * 4),
                                     part(sl, i, std::max<size_t>(scratch_one, 4)), {.pages = alone.pages(pl, i)});
            l.end();
            s.submit_and_wait();
            l.submit_and_wait();
            CHECK(ob.download_floats(act * B) == ol.download_floats(act * B));
            std::vector<uint8_t> kg(pl.k.size()), vg(pl.v.size()), ka(pl.k.size()), va(pl.v.size());
            ctx.download(batch.k, kg.data(), kg.size());
            ctx.download(batch.v, vg.data(), vg.size());
            ctx.download(alone.k, ka.data(), ka.size());
            ctx.download(alone.v, va.data(), va.size());
            CHECK(kg == ka);
            CHECK(vg == va);
            // Each sequence alone, unpaged, over its own rows in order: the same row stored, the same output.
            const size_t rb = pl.row_bytes;
            for (uint32_t i = 0; i < B; ++i) {
                CAPTURE(i);
                Buffer kc = ctx.create_buffer(pl.k_logical[i].size(), MemoryUsage::Device, "k (unpaged)");
                Buffer vc = ctx.create_buffer(pl.v_logical[i].size(), MemoryUsage::Device, "v (unpaged)");
                ctx.upload(kc, pl.k_logical[i].data(), pl.k_logical[i].size());
                ctx.upload(vc, pl.v_logical[i].data(), pl.v_logical[i].size());
                CommandStream u(ctx);
                u.begin();
                ops::attention_store(ctx, u, p1, part(qb, i, act * 4), {part(kb, i, row * 4), part(vb, i, row * 4), &rp, nullptr},
                                     kc.slice(), vc.slice(), part(posb, i, 4), ou.slice(), su.slice());
                u.end();
                u.submit_and_wait();
                const std::vector<float> lone = ol.download_floats(act * B);
                CHECK(ou.download_floats(act) == std::vector<float>(lone.begin() + i * act, lone.begin() + (i + 1) * act));
                std::vector<uint8_t> ku(pl.k_logical[i].size()), vu(pl.v_logical[i].size());
                ctx.download(kc, ku.data(), ku.size());
                ctx.download(vc, vu.data(), vu.size());
                CHECK(gather(pl, ka, rb, i, p1.n_ctx) == ku);
                CHECK(gather(pl, va, rb, i, p1.n_ctx) == vu);
            }
            // Blocks no table names are untouched.
            std::vector<bool> owned(pl.blocks, false);
            for (uint32_t b : pl.table) owned[b] = true;
            for (uint32_t b = 0; b < pl.blocks; ++b)
                if (!owned[b])
                    CHECK(std::memcmp(&kg[b * pl.block_rows * rb], &pl.k[b * pl.block_rows * rb], pl.block_rows * rb) == 0);
            for (const auto* g : {&qb, &kb, &vb, &posb, &ob, &ol, &ou, &sb, &sl, &su}) g->check_guards();
        }
    }
}

TEST_CASE("paged kv_store: a chunk through row 0 and a batch through a row per token land at the table's rows") {
    Context& ctx = test::context();
    uint32_t seed = 300;
    for (KvType t : ops::kAllKvTypes) {
        for (bool per_token : {false, true}) {
            CAPTURE(kv_name(t));
            CAPTURE(per_token);
            const AttentionParams p = params(1, 4, 2, 32, 50, t);  // rows of 64 values, 50 per sequence
            const uint32_t n_seq = 3, row = p.n_kv_heads * p.head_dim;
            const Pool pl = make_pool(p, n_seq, 8, {0, 0, 0}, seed++);
            const Device d(ctx, pl);
            // A chunk: 5 rows of sequence 0 across a block boundary (6..10). A batch: one row for each
            // sequence, the last wrapping its ring (n_ctx 50: position 53 is row 3).
            const std::vector<int32_t> pos = per_token ? std::vector<int32_t>{7, 49, 53} : consecutive(5, 6);
            const uint32_t n = uint32_t(pos.size());
            const auto k = test::random_floats(size_t(row) * n, seed + 1), v = test::random_floats(size_t(row) * n, seed + 2);
            test::GuardedBuffer kb(ctx, k.size() * 4, "k"), vb(ctx, v.size() * 4, "v"), posb(ctx, n * 4, "positions");
            kb.upload(k.data(), k.size() * 4);
            vb.upload(v.data(), v.size() * 4);
            posb.upload(pos.data(), n * 4);
            CommandStream s(ctx);
            s.begin();
            ops::kv_store_pair(ctx, s, kb.slice(), d.k.slice(), vb.slice(), d.v.slice(), posb.slice(), n, row, p.n_ctx, t,
                               d.pages(pl, 0, per_token));
            s.end();
            s.submit_and_wait();
            std::vector<uint8_t> want_k = pl.k, want_v = pl.v, got_k(pl.k.size()), got_v(pl.v.size());
            for (uint32_t i = 0; i < n; ++i) {
                const uint32_t seq = per_token ? i : 0, r = uint32_t(pos[i]) % p.n_ctx;
                const int32_t zero = 0;
                ref::kv_store(k.data() + size_t(i) * row, &want_k[pl.phys(seq, r) * pl.row_bytes], &zero, 1, row, 1, t);
                ref::kv_store(v.data() + size_t(i) * row, &want_v[pl.phys(seq, r) * pl.row_bytes], &zero, 1, row, 1, t);
            }
            ctx.download(d.k, got_k.data(), got_k.size());
            ctx.download(d.v, got_v.data(), got_v.size());
            CHECK(got_k == want_k);
            CHECK(got_v == want_v);
            // The single kv_store writes K alone the same way.
            Device d2(ctx, pl);
            CommandStream s2(ctx);
            s2.begin();
            ops::kv_store(ctx, s2, kb.slice(), d2.k.slice(), posb.slice(), n, row, p.n_ctx, t, d2.pages(pl, 0, per_token));
            s2.end();
            s2.submit_and_wait();
            ctx.download(d2.k, got_k.data(), got_k.size());
            CHECK(got_k == want_k);
            for (const auto* g : {&kb, &vb, &posb}) g->check_guards();
        }
    }
}

TEST_CASE("paged caches: bad pages are refused by name") {
    Context& ctx = test::context();
    const AttentionParams p1 = params(1, 4, 2, 32, 40, KvType::F16);
    const Pool pl = make_pool(p1, 2, 8, {10, 10}, 400);
    const Device d(ctx, pl);
    Buffer b = ctx.create_buffer(1 << 16, MemoryUsage::Device, "act");
    auto thrown = [](auto&& f) {
        try {
            f();
        } catch (const std::invalid_argument& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    CommandStream s(ctx);
    s.begin();
    const BufferSlice q = b.slice(0, 4096), out = b.slice(4096, 4096), pos = b.slice(8192, 64), scratch = b.slice(16384, 16384);
    AttentionParams pb = p1;
    pb.n_tokens = 2;
    pb.batch = true;
    // A batch without pages; a block size that is no power of two; a pool of partial blocks; a table
    // too short for the batch's rows.
    CHECK(thrown([&] { ops::attention(ctx, s, pb, q, d.k.slice(), d.v.slice(), pos, out, scratch); }).find("paged") != std::string::npos);
    ops::KvPages bad = d.pages(pl, 0);
    bad.block_rows = 6;
    CHECK(thrown([&] { ops::attention(ctx, s, p1, q, d.k.slice(), d.v.slice(), pos, out, scratch, {.pages = bad}); })
              .find("power of two") != std::string::npos);
    bad = d.pages(pl, 0);
    bad.pool_rows = pl.rows() - 3;
    CHECK(thrown([&] { ops::kv_store(ctx, s, q, d.k.slice(), pos, 1, 64, p1.n_ctx, KvType::F16, bad); }).find("whole blocks") !=
          std::string::npos);
    pb.n_tokens = 3;
    ops::KvPages two_rows = d.pages(pl, 0);
    two_rows.table.size = 4ull * pl.table.size();
    CHECK(thrown([&] { ops::attention(ctx, s, pb, q, d.k.slice(), d.v.slice(), pos, out, scratch, {.pages = two_rows}); })
              .find("block table") != std::string::npos);
    // A batch is decode only.
    AttentionParams chunk = params(2, 4, 2, 32, 40, KvType::F16);
    chunk.batch = true;
    chunk.causal = false;
    CHECK(thrown([&] { ops::attention(ctx, s, chunk, q, d.k.slice(), d.v.slice(), pos, out, scratch, {.pages = d.pages(pl, 0)}); })
              .find("decode") != std::string::npos);
    s.end();
}

}  // namespace

TEST_CASE("paged attention: worst error per case class (report)") { report_worst(); }
