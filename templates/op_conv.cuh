// Shared helpers of the convolution kernels (templates/op_conv_*.cu.tera): runs of V consecutive
// floats loaded and stored as one 16-byte access when V == 4 and the caller checked the
// alignment (A), else as V scalar accesses.

template <typename T>
__device__ __forceinline__ bool aligned16(const T* p) {
    return reinterpret_cast<unsigned long long>(p) % 16 == 0;
}
template <int V, bool A>
__device__ __forceinline__ void load_v(float (&r)[V], const float* __restrict__ p) {
    if constexpr (V == 4 && A) {
        const float4 t = __ldg(reinterpret_cast<const float4*>(p));
        r[0] = t.x;
        r[1] = t.y;
        r[2] = t.z;
        r[3] = t.w;
    } else {
#pragma unroll
        for (int j = 0; j < V; ++j) r[j] = __ldg(p + j);
    }
}
template <int V, bool A>
__device__ __forceinline__ void store_v(float* __restrict__ p, const float (&r)[V]) {
    if constexpr (V == 4 && A) {
        *reinterpret_cast<float4*>(p) = make_float4(r[0], r[1], r[2], r[3]);
    } else {
#pragma unroll
        for (int j = 0; j < V; ++j) p[j] = r[j];
    }
}
