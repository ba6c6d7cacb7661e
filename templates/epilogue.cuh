// Fused epilogue on the fp32 accumulator: [+ previous output] [+ bias] [activation].
__device__ __forceinline__ float epilogue(float acc, float prev, const elem_t* __restrict__ bias, int col) {
{%- if epilogue.accumulate %}
    acc += prev;
{%- endif %}
{%- if epilogue.bias %}
    acc += to_f32(bias[col]);
{%- endif %}
{%- if epilogue.activation == "relu" %}
    acc = fmaxf(acc, 0.0f);
{%- elif epilogue.activation == "clip" %}
    acc = fminf(fmaxf(acc, {{ epilogue.clip_lo }}), {{ epilogue.clip_hi }});
{%- elif epilogue.activation == "gelu" %}
    acc = 0.5f * acc * (1.0f + tanhf(0.7978845608028654f * (acc + 0.044715f * acc * acc * acc)));
{%- elif epilogue.activation == "gelu_erf" %}
    acc = 0.5f * acc * (1.0f + erff(acc * 0.70710678118654752f));
{%- endif %}
    return acc;
}
