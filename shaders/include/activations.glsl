// Activation functions shared by the element-wise shaders (glu.comp, unary.comp). Each is written
// so that it is finite and correct for every finite input, whatever the driver does with exp or
// tanh of a large argument: GLSL's tanh is often lowered to (e^2z - 1) / (e^2z + 1), which is
// inf / inf = NaN once e^2z overflows (|z| > ~44) and loses relative precision near 0.

// silu(g) = g / (1 + exp(-g)). g very negative: exp(-g) = inf and the quotient is -0, the correct
// limit; g very positive: exp(-g) = 0 and the quotient is g.
float act_silu(float g) { return g / (1.0 + exp(-g)); }

// CLIP's quick GELU, x * sigmoid(1.702 x), as silu: the same limits for very large |x|.
float act_gelu_quick(float x) { return x / (1.0 + exp(-1.702 * x)); }

// gpt-oss's SwiGLU (llama.cpp's swiglu_oai, alpha 1.702, limit 7): x = min(g, 7), y = clamp(u, -7, 7),
// x / (1 + exp(-1.702 x)) * (y + 1). x very negative: exp = inf and the quotient is -0, the limit.
float act_swiglu_oai(float g, float u) {
    const float x = min(g, 7.0), y = clamp(u, -7.0, 7.0);
    return x / (1.0 + exp(-1.702 * x)) * (y + 1.0);
}

// tanh(z) with a relative error of a few ulp for every z, never NaN for finite z.
// |z| < 0.25: odd Taylor series to z^9 (the first dropped term, 1382/155925 z^11, is < 1e-8 of z;
// (1 - e) / (1 + e) would cancel there). Else (1 - e) / (1 + e) with e = exp(-2|z|) in (0, 0.61]:
// no overflow, and |z| is clamped at 20 where tanh is 1 in f32 (1 - 2e^-40) so exp never underflows
// to a denormal that a driver might flush.
float act_tanh(float z) {
    float a = abs(z);
    float t;
    if (a < 0.25) {
        float a2 = a * a;
        t = a * (1.0 + a2 * (-1.0 / 3.0 + a2 * (2.0 / 15.0 + a2 * (-17.0 / 315.0 + a2 * (62.0 / 2835.0)))));
    } else {
        float e = exp(-2.0 * min(a, 20.0));
        t = (1.0 - e) / (1.0 + e);
    }
    return z < 0.0 ? -t : t;
}

// GELU, tanh approximation (GPT-2, Gemma): 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
// Evaluated as x / (1 + exp(-2u)), the same function (0.5 (1 + tanh(u)) = 1 / (1 + e^-2u)) without
// the cancellation of 1 + tanh(u) for negative x. -2u > 80 (x < about -10.4): the true value is
// below |x| e^-80 (e^-2u falls like e^(-0.07 |x|^3)), so 0 is exact in f32 for every x, including
// x^3 = -inf; -2u is clamped below at -80 so exp never sees -inf or a huge argument (x / (1 + 1.8e-35)
// is x in f32). No NaN for any finite x, and gelu(+inf) = +inf, gelu(-inf) = 0.
float act_gelu(float x) {
    const float k = 0.7978845608028654;  // sqrt(2 / pi)
    float t = -2.0 * k * x * (1.0 + 0.044715 * x * x);
    if (t > 80.0) return 0.0;
    return x / (1.0 + exp(max(t, -80.0)));
}
