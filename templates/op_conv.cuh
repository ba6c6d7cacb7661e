// Shared helpers of the convolution kernels (templates/op_conv_*.cu.tera). x and y are stored as
// act_t ({{ act.st }}), the packed weight and the bias as float; all math is float. Runs of V
// consecutive elements are loaded and stored as one access of 4 elements (16 bytes of float, 8 of a
// 16-bit type) when V == 4 and the caller checked the alignment (A, aligned_v), else as V scalar
// accesses. ld_act / st_act convert one element: no-ops for float, ops.cuh's conversions for 16 bits.
typedef {{ act.st }} act_t;
__device__ __forceinline__ float ld_act(float x) { return x; }
__device__ __forceinline__ void st_act(float* p, float x) { *p = x; }
{%- if act_bytes == 2 %}
__device__ __forceinline__ float ld_act(act_t x) { return {{ act.ld }}(x); }
__device__ __forceinline__ void st_act(act_t* p, float x) { *p = {{ act.store }}(x); }
// Two 16-bit elements, the first in the low half (little-endian memory order).
__device__ __forceinline__ unsigned pack2(float a, float b) {
    return (unsigned){{ act.store }}(a) | ((unsigned){{ act.store }}(b) << 16);
}
{%- endif %}

// p is aligned to one access of 4 elements.
template <typename T>
__device__ __forceinline__ bool aligned_v(const T* p) {
    return reinterpret_cast<unsigned long long>(p) % (4 * sizeof(T)) == 0;
}
template <int V, bool A, typename T>
__device__ __forceinline__ void load_v(float (&r)[V], const T* __restrict__ p) {
    if constexpr (V == 4 && A && sizeof(T) == 4) {
        const float4 t = __ldg(reinterpret_cast<const float4*>(p));
        r[0] = t.x;
        r[1] = t.y;
        r[2] = t.z;
        r[3] = t.w;
{%- if act_bytes == 2 %}
    } else if constexpr (V == 4 && A) {
        const uint2 t = __ldg(reinterpret_cast<const uint2*>(p));
        r[0] = ld_act((act_t)(t.x & 0xffffu));
        r[1] = ld_act((act_t)(t.x >> 16));
        r[2] = ld_act((act_t)(t.y & 0xffffu));
        r[3] = ld_act((act_t)(t.y >> 16));
{%- endif %}
    } else {
#pragma unroll
        for (int j = 0; j < V; ++j) r[j] = ld_act(__ldg(p + j));
    }
}
template <int V, bool A, typename T>
__device__ __forceinline__ void store_v(T* __restrict__ p, const float (&r)[V]) {
    if constexpr (V == 4 && A && sizeof(T) == 4) {
        *reinterpret_cast<float4*>(p) = make_float4(r[0], r[1], r[2], r[3]);
{%- if act_bytes == 2 %}
    } else if constexpr (V == 4 && A) {
        *reinterpret_cast<uint2*>(p) = make_uint2(pack2(r[0], r[1]), pack2(r[2], r[3]));
{%- endif %}
    } else {
#pragma unroll
        for (int j = 0; j < V; ++j) st_act(p + j, r[j]);
    }
}
