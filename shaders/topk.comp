#version 450
// topk: the k largest logits of one row, sorted (top-k / top-p sampling on the device).
//
// Input:   x[n] f32, read as raw bits (bound from word x_first); 1 <= k <= min(256, n)
// Outputs: ids[k] uint32 (from ids_first), vals[k] f32 (from vals_first): the k largest elements in
//          descending order, ties by lower index first; NaN ranks below every number.
// Math:    every element gets a unique 64-bit rank (order_key(x[i]) << 32 | ~i; order_key maps the
//          float bits to an order-preserving uint with -0 folded onto +0 and NaN -> 0). A radix select
//          over 4-bit digits, most significant first, finds the prefix of the k-th largest rank: one
//          pass over x per digit builds a 16-bin histogram (shared-memory atomics) of the elements that
//          still match the prefix, and stops as soon as every element matching the prefix is taken
//          (usually after the key digits; the index digits only resolve ties). The k selected
//          elements are then gathered into shared memory and bitonic-sorted.
// One workgroup (a single dispatch of one group) does everything. No subgroup operations.
// Workgroup size: specialization constant 0, a power of two.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256;

layout(std430, binding = 0) readonly buffer X { uint x[]; };
layout(std430, binding = 1) writeonly buffer I { uint ids[]; };
layout(std430, binding = 2) writeonly buffer V { uint vals[]; };  // f32 bits, copied unchanged
layout(push_constant) uniform Push {
    uint n;
    uint k;
    uint x_first;
    uint ids_first;
    uint vals_first;
} pc;

const uint MAX_K = 256u;
const uint NONE = 0xffffffffu;

shared uint hist[16];
shared uint sel_hi, sel_lo, mask_hi, mask_lo, k_rem, done, counter;
shared uint sh_key[MAX_K];
shared uint sh_idx[MAX_K];

uint order_key(uint bits) {
    if ((bits & 0x7fffffffu) > 0x7f800000u) return 0u;  // NaN
    if (bits == 0x80000000u) bits = 0u;                  // -0 ties with +0
    return (bits & 0x80000000u) != 0u ? ~bits : (bits | 0x80000000u);
}

// Rank of (key, idx) is (key, ~idx) compared as a 64-bit number: a ranks below b.
bool rank_less(uint ka, uint ia, uint kb, uint ib) { return ka < kb || (ka == kb && ia > ib); }

void main() {
    uint lid = gl_LocalInvocationIndex;
    if (lid == 0u) {
        sel_hi = 0u; sel_lo = 0u; mask_hi = 0u; mask_lo = 0u;
        k_rem = pc.k; done = 0u; counter = 0u;
    }
    barrier();

    // Radix select: 16 digits of 4 bits, 8 of the key then 8 of ~index.
    for (uint d = 16u; d-- > 0u;) {
        if (lid < 16u) hist[lid] = 0u;
        barrier();
        uint phi = sel_hi, plo = sel_lo, mhi = mask_hi, mlo = mask_lo;
        uint shift = (d & 7u) * 4u;
        for (uint i = lid; i < pc.n; i += WG) {
            uint hi = order_key(x[pc.x_first + i]), lo = ~i;
            if ((hi & mhi) == phi && (lo & mlo) == plo) atomicAdd(hist[((d >= 8u ? hi : lo) >> shift) & 15u], 1u);
        }
        barrier();
        if (lid == 0u) {
            uint rem = k_rem, b = 15u;
            while (hist[b] < rem) {  // terminates: the bins hold at least rem elements in all
                rem -= hist[b];
                --b;
            }
            if (d >= 8u) {
                sel_hi |= b << shift;
                mask_hi |= 15u << shift;
            } else {
                sel_lo |= b << shift;
                mask_lo |= 15u << shift;
            }
            k_rem = rem;
            if (hist[b] == rem) done = 1u;  // every element matching the prefix is taken
        }
        barrier();
        if (done != 0u) break;  // uniform: read after the barrier by everyone
    }

    // Gather: exactly k elements have a masked rank >= the selected prefix.
    for (uint i = lid; i < MAX_K; i += WG) {
        sh_key[i] = 0u;
        sh_idx[i] = NONE;  // padding ranks below everything, NaN included
    }
    barrier();
    {
        uint phi = sel_hi, plo = sel_lo, mhi = mask_hi, mlo = mask_lo;
        for (uint i = lid; i < pc.n; i += WG) {
            uint hi = order_key(x[pc.x_first + i]) & mhi, lo = ~i & mlo;
            if (hi > phi || (hi == phi && lo >= plo)) {
                uint slot = atomicAdd(counter, 1u);
                if (slot < MAX_K) {  // always true; keeps a bug from writing past the arrays
                    sh_key[slot] = order_key(x[pc.x_first + i]);
                    sh_idx[slot] = i;
                }
            }
        }
    }
    barrier();

    // Bitonic sort of MAX_K entries, descending by rank.
    for (uint size = 2u; size <= MAX_K; size <<= 1) {
        for (uint stride = size >> 1; stride > 0u; stride >>= 1) {
            for (uint t = lid; t < MAX_K; t += WG) {
                uint o = t ^ stride;
                if (o > t) {
                    bool desc = (t & size) == 0u;
                    bool swap_ab = desc ? rank_less(sh_key[t], sh_idx[t], sh_key[o], sh_idx[o])
                                        : rank_less(sh_key[o], sh_idx[o], sh_key[t], sh_idx[t]);
                    if (swap_ab) {
                        uint tk = sh_key[t], ti = sh_idx[t];
                        sh_key[t] = sh_key[o];
                        sh_idx[t] = sh_idx[o];
                        sh_key[o] = tk;
                        sh_idx[o] = ti;
                    }
                }
            }
            barrier();
        }
    }

    for (uint j = lid; j < pc.k; j += WG) {
        uint idx = sh_idx[j];
        ids[pc.ids_first + j] = idx;
        vals[pc.vals_first + j] = x[pc.x_first + idx];
    }
}
