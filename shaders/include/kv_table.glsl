// Paged caches (a pool of blocks shared by sequences): logical row r of a sequence (position j's
// ring row, j % n_ctx) lives in physical row table[r >> shift] << shift | r & (B - 1), B = 1 << shift
// rows per block, the block numbers read from the table row the host wrote for the sequence. shift
// 0: no table, the binding holds one sequence's rows and the logical row is the physical one. A kernel
// that reads or writes through a table defines KV_TABLE_BINDING (its binding number) first.
#ifdef KV_TABLE_BINDING
layout(std430, binding = KV_TABLE_BINDING) readonly buffer KvTable { uint kv_table[]; };
uint paged_row(uint r, uint table_at, uint shift) {
    if (shift == 0u) return r;
    return (kv_table[table_at + (r >> shift)] << shift) | (r & ((1u << shift) - 1u));
}
// Entries per table row: blocks enough for n_ctx logical rows.
uint table_stride(uint n_ctx, uint shift) { return shift == 0u ? 0u : (n_ctx + (1u << shift) - 1u) >> shift; }
#endif
