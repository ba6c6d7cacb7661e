// Fused epilogue on the fp32 accumulator: [+ previous output] [+ bias] [activation].
{#- ReLU and Clip keep NaN as ONNX's do (`x < lo ? lo : x`: a NaN compares false); fmaxf(NaN, 0)
    would return 0. #}
{%- if epilogue.activation == "gelu_erf" and dtype != "f32" %}
// erf for 16-bit outputs: Abramowitz and Stegun 7.1.26 (|error| <= 1.5e-7 exact, about 5e-7
// in f32 arithmetic), below half the 2^-11 relative rounding of the 16-bit GELU it feeds; 2 MUFU
// and about 10 other instructions where erff takes some 30. NaN stays NaN, erf(±Inf) = ±1.
__device__ __forceinline__ float erf_16(float x) {
    const float ax = fabsf(x);
    float t;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(t) : "f"(fmaf(0.3275911f, ax, 1.0f)));
    float p = fmaf(1.061405429f, t, -1.453152027f);
    p = fmaf(p, t, 1.421413741f);
    p = fmaf(p, t, -0.284496736f);
    p = fmaf(p, t, 0.254829592f);
    float e;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(ax * ax * -1.4426950408889634f));
    return copysignf(fmaf(-p * t, e, 1.0f), x);
}
{%- endif %}
{%- if epilogue.activation == "gelu" and dtype != "f32" %}
// tanh inside the tanh GELU of 16-bit outputs: 1 - 2 / (e^{2u} + 1) with the MUFU exp2 and
// reciprocal. Its absolute error (about 1e-7) is what 1 + tanh keeps, far below the 2^-11
// rounding of the 16-bit GELU; ±1 past |u| ≈ 9 (e^{2u} overflows to Inf or flushes to 0).
__device__ __forceinline__ float tanh_16(float u) {
    float e, r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(u * 2.8853900817779268f));
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(e + 1.0f));
    return fmaf(-2.0f, r, 1.0f);
}
{%- endif %}
__device__ __forceinline__ float epilogue(float acc, float prev, const elem_t* __restrict__ bias, int col) {
{%- if epilogue.accumulate %}
    acc += prev;
{%- endif %}
{%- if epilogue.bias %}
    acc += to_f32(bias[col]);
{%- endif %}
{%- if epilogue.activation == "relu" %}
    acc = acc < 0.0f ? 0.0f : acc;
{%- elif epilogue.activation == "clip" %}
    acc = acc < {{ epilogue.clip_lo }} ? {{ epilogue.clip_lo }} : acc;
    acc = acc > {{ epilogue.clip_hi }} ? {{ epilogue.clip_hi }} : acc;
{%- elif epilogue.activation == "gelu" %}
    acc = 0.5f * acc * (1.0f + {% if dtype != "f32" %}tanh_16{% else %}tanhf{% endif %}(0.7978845608028654f * (acc + 0.044715f * acc * acc * acc)));
{%- elif epilogue.activation == "gelu_erf" %}
    acc = 0.5f * acc * (1.0f + {% if dtype != "f32" %}erf_16{% else %}erff{% endif %}(acc * 0.70710678118654752f));
{%- endif %}
    return acc;
}
