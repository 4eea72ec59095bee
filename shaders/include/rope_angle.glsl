// The rotation RoPE applies to pair i of a head at position pos, as (cos theta, sin theta) * mscale:
// rope.comp's math (its header has the definitions and the precision argument), shared with
// kv_store.comp's ROPE variants and attention_decode.comp's STORE variants so that all rotate with
// the same instructions.
// The including shader declares `float ff[]` (frequency factors) and the push-constant fields
// log2_step, has_ff, ff_first, freq_scale, ext_factor, mscale, corr_low, corr_high (and, for
// rope_pair, rope_partner and rope_rotate, layout_id and rot_half).

const float INV_2PI = 0.15915494309189535;
const float TWO_PI_HI = 6.28125;                // 201/32: 8 significant bits
const float TWO_PI_LO = 0.0019353071795864769;  // 2*pi - TWO_PI_HI

// The two elements of pair i of the head starting at element `base`: (2i, 2i + 1) in layout 0
// (Adjacent), (i, i + rot_half) in layout 1 (HalfSplit). Needs pc.layout_id and pc.rot_half.
uvec2 rope_pair(uint base, uint i) {
    return pc.layout_id == 0u ? uvec2(base + 2u * i, base + 2u * i + 1u) : uvec2(base + i, base + i + pc.rot_half);
}

vec2 rope_cs(uint i, int pos) {
    float freq = exp2(float(i) * pc.log2_step);
    if (pc.has_ff != 0u) freq /= ff[pc.ff_first + i];
    float rate_scale = pc.freq_scale;
    if (pc.ext_factor != 0.0) {
        float ramp = 1.0 - clamp((float(i) - pc.corr_low) / max(0.001, pc.corr_high - pc.corr_low), 0.0, 1.0);
        float mix_ = ramp * pc.ext_factor;
        rate_scale = pc.freq_scale * (1.0 - mix_) + mix_;
    }
    float theta = float(pos) * (freq * rate_scale);
    float k = floor(theta * INV_2PI + 0.5);
    precise float r = (theta - k * TWO_PI_HI) - k * TWO_PI_LO;
    return vec2(cos(r), sin(r)) * pc.mscale;
}

// One element at a time, for kernels that rotate an element where they load it: element e (< head_dim)
// of a head pairs with rope_partner(e) (itself past rot_dim); rope_rotate(x, xp, e, pos) is element
// e after RoPE, from its value x and its partner's xp, with rope.comp's expressions. Needs
// pc.layout_id and pc.rot_half.
uint rope_partner(uint e) {
    if (e >= 2u * pc.rot_half) return e;
    return pc.layout_id == 0u ? e ^ 1u : (e < pc.rot_half ? e + pc.rot_half : e - pc.rot_half);
}
float rope_rotate(float x, float xp, uint e, int pos) {
    if (e >= 2u * pc.rot_half) return x;
    const bool first = pc.layout_id == 0u ? (e & 1u) == 0u : e < pc.rot_half;
    const vec2 cs = rope_cs(pc.layout_id == 0u ? e >> 1 : e % pc.rot_half, pos);
    return first ? x * cs.x - xp * cs.y : xp * cs.y + x * cs.x;
}
