// Binding windows: every op binds a tensor through a slice whose offset meets
// minStorageBufferOffsetAlignment and whose size fits maxStorageBufferRange, and splits work that
// does not fit one binding. These helpers are the one place that arithmetic lives.
#pragma once

#include "runtime/caps.h"
#include "runtime/memory.h"
#include "runtime/ops/op_types.h"

#include <array>
#include <cstdint>

namespace vkllm::ops::detail {

// Bytes [begin, end) of `s` bound through a window whose offset is a multiple of `align` and
// whose size is rounded up to a multiple of `round` (kernels read whole 32-bit words, matvec whole
// vec4s of X); `inner` is where `begin` lies inside the window, in bytes.
struct ByteWindow {
    BufferSlice slice;
    uint64_t inner = 0;
};
ByteWindow byte_window(const BufferSlice& s, uint64_t begin, uint64_t end, uint64_t align, uint64_t round = 4);

// Elements [first, first + count) of `s` (elem_bytes each, a power of two <= 4) bound through a
// slice whose offset keeps the storage-buffer offset alignment: the window starts up to one
// alignment unit early (possibly before s itself) and `first` is where the requested range starts
// inside it. Throws std::invalid_argument when s.offset is not a multiple of elem_bytes.
struct Window {
    BufferSlice slice;
    uint32_t first = 0;
};
Window window(const DeviceCaps& caps, const BufferSlice& s, uint64_t first, uint64_t count, uint32_t elem_bytes);
// How many items of item_bytes each one window can hold on this device (throws DeviceLimitError
// naming `op` when not even one fits).
uint64_t items_per_window(const DeviceCaps& caps, uint64_t item_bytes, const char* op);
// Workgroup counts for `groups` workgroups, 2-D beyond maxComputeWorkGroupCount[0]; shaders
// flatten it as gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x and bounds-check.
std::array<uint32_t, 3> grid(const DeviceCaps& caps, uint64_t groups, const char* op);
// Throws std::invalid_argument naming op and tensor when `s` holds fewer than `bytes` bytes.
void require_bytes(const BufferSlice& s, uint64_t bytes, const char* op, const char* tensor);
// Throws std::invalid_argument naming op when a paged cache's pages are unusable for a call of
// `table_rows` table rows over sequences of n_ctx rows: a block size that is no power of two >= 2, a
// pool that is not whole blocks, a table that is too short or not 4-byte aligned. Nothing when not paged.
void check_pages(const KvPages& pages, uint32_t n_ctx, uint64_t table_rows, const char* op);

}  // namespace vkllm::ops::detail
