// Fused epilogue on the fp32 accumulator: [+ previous output] [+ bias] [activation].
{#- ReLU and Clip keep NaN as ONNX's do (`x < lo ? lo : x`: a NaN compares false); fmaxf(NaN, 0)
    would return 0. #}
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
    acc = 0.5f * acc * (1.0f + tanhf(0.7978845608028654f * (acc + 0.044715f * acc * acc * acc)));
{%- elif epilogue.activation == "gelu_erf" %}
    acc = 0.5f * acc * (1.0f + erff(acc * 0.70710678118654752f));
{%- endif %}
    return acc;
}
