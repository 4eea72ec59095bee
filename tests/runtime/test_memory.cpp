#include "support/test_context.h"

#include "runtime/vk_check.h"

#include <numeric>

using namespace vkllm;

TEST_CASE("memory: round trips from 1 byte to more than 128 MiB") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    for (size_t bytes : {size_t(1), size_t(3), size_t(4097), size_t(1) << 20, (size_t(129) << 20) + 7}) {
        for (MemoryUsage usage : {MemoryUsage::Device, MemoryUsage::DeviceHostVisible}) {
            CAPTURE(bytes);
            std::vector<uint8_t> src(bytes), dst(bytes, 0);
            for (size_t i = 0; i < bytes; ++i) src[i] = uint8_t((i * 2654435761u) >> 13);
            Buffer b = ctx.create_buffer(bytes, usage, "roundtrip");
            ctx.upload(b, src.data(), bytes);
            ctx.download(b, dst.data(), bytes);
            CHECK(src == dst);
        }
    }
}

TEST_CASE("memory: staging path (device buffer without host mapping) round-trips in chunks") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    // Copy through a second device buffer with the GPU so that the staging upload, a GPU copy and a
    // staging download all take part, across the 64 MiB staging chunk boundary.
    size_t bytes = (size_t(70) << 20) + 12;
    std::vector<uint32_t> src(bytes / 4);
    std::iota(src.begin(), src.end(), 7u);
    Buffer a = ctx.create_buffer(bytes, MemoryUsage::Device, "a");
    Buffer b = ctx.create_buffer(bytes, MemoryUsage::Device, "b");
    ctx.upload(a, src.data(), bytes);
    CommandStream s(ctx);
    s.begin();
    s.copy(a.slice(), b.slice());
    s.end();
    s.submit_and_wait();
    std::vector<uint32_t> dst(bytes / 4);
    ctx.download(b, dst.data(), bytes);
    CHECK(src == dst);
}

TEST_CASE("memory: sub-allocator aligns, packs into shared blocks, and reuses freed space") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    Allocator alloc(ctx.device(), 4u << 20);
    const VkDeviceSize align = alloc.alignment();
    CHECK(align % ctx.caps().min_storage_buffer_offset_alignment == 0);

    std::vector<Buffer> bufs;
    for (size_t i = 0; i < 50; ++i) bufs.push_back(alloc.allocate(1000 + 37 * i, MemoryUsage::Device, "t"));
    for (auto& b : bufs) CHECK(b.offset() % align == 0);
    CHECK(alloc.stats().blocks == 1);  // 50 small tensors share one block
    CHECK(bufs[0].vk() == bufs[49].vk());
    for (size_t i = 0; i + 1 < bufs.size(); ++i) {
        BufferSlice a = bufs[i].slice(), b = bufs[i + 1].slice();
        CHECK(!a.overlaps(b));
    }
    VkDeviceSize used = alloc.stats().used_bytes;
    VkDeviceSize off10 = bufs[10].offset();
    bufs[10].reset();
    CHECK(alloc.stats().used_bytes < used);
    Buffer again = alloc.allocate(900, MemoryUsage::Device, "reuse");
    CHECK(again.offset() == off10);  // first fit reuses the hole

    // Free everything: the free list must coalesce back into one range.
    bufs.clear();
    again.reset();
    Buffer whole = alloc.allocate(alloc.block_size(), MemoryUsage::Device, "whole");
    CHECK(alloc.stats().blocks == 1);
    CHECK(whole.offset() == 0);

    // Larger than a block: a dedicated block, released on free.
    {
        Buffer big = alloc.allocate(alloc.block_size() + 1, MemoryUsage::Device, "big");
        CHECK(alloc.stats().blocks == 2);
    }
    CHECK(alloc.stats().blocks == 1);
    CHECK(alloc.stats().peak_used_bytes >= alloc.block_size() * 2);
}

TEST_CASE("memory: impossible requests give clear errors") {
    Context& ctx = test::context();
    CHECK_THROWS_AS(ctx.create_buffer(0, MemoryUsage::Device, "empty"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(ctx.create_buffer(ctx.caps().max_memory_allocation_size + 1, MemoryUsage::Device, "huge"),
                         doctest::Contains("buffer 'huge' needs"), DeviceLimitError);
    Buffer b = ctx.create_buffer(16, MemoryUsage::Device, "small");
    std::vector<uint8_t> data(32);
    CHECK_THROWS_AS(ctx.upload(b, data.data(), 32), std::out_of_range);
    CHECK_THROWS_AS(ctx.download(b, data.data(), 8, 12), std::out_of_range);
    CHECK_THROWS_AS(b.slice(8, 16), std::out_of_range);
}
