// Four consecutive elements of global memory as fp32 (the fine kernel's dense operand and its
// prepasses): one vector load, p aligned to four elements (16 bytes fp32, 8 bytes 16-bit).
__device__ __forceinline__ float4 ldg4_f32(const elem_t* __restrict__ p) {
{%- if dtype == "f32" %}
    return __ldg(reinterpret_cast<const float4*>(p));
{%- else %}
    const uint2 u = __ldg(reinterpret_cast<const uint2*>(p));
    return make_float4(to_f32((elem_t)(u.x & 0xffffu)), to_f32((elem_t)(u.x >> 16)), to_f32((elem_t)(u.y & 0xffffu)),
                       to_f32((elem_t)(u.y >> 16)));
{%- endif %}
}
// The first n of four consecutive elements as fp32, one load each (a row whose length is not a
// multiple of 4: no alignment); the others zero.
__device__ __forceinline__ float4 ldg4_f32_first(const elem_t* __restrict__ p, int n) {
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (n > 0) v.x = to_f32(__ldg(p));
    if (n > 1) v.y = to_f32(__ldg(p + 1));
    if (n > 2) v.z = to_f32(__ldg(p + 2));
    if (n > 3) v.w = to_f32(__ldg(p + 3));
    return v;
}
