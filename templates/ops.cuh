// Shared helpers of the graph-op kernels (templates/op_*.cu.tera): 16-bit float storage and its
// conversions, four-element vectors with an alignment fallback, ONNX arithmetic that C does not
// spell the same way (NaN-propagating max/min, Pow, integer division by zero), and warp/block folds.
// No CUDA headers: f16 and bf16 are raw 16-bit storage converted with cvt, as in common.cuh.

typedef unsigned short half_t;
typedef unsigned short bf16_t;

__device__ __forceinline__ float ld_f16(half_t x) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
    return f;
}
__device__ __forceinline__ half_t st_f16(float x) {
    half_t h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
    return h;
}
__device__ __forceinline__ float ld_bf16(bf16_t x) { return __uint_as_float(((unsigned)x) << 16); }
__device__ __forceinline__ bf16_t st_bf16(float x) {
    bf16_t h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
    return h;
}
__device__ __forceinline__ bool ld_bool(unsigned char x) { return x != 0; }
// A value rounded to f16 / bf16 and back (ONNX Cast to a 16-bit float type).
__device__ __forceinline__ float rnd_f16(float x) { return ld_f16(st_f16(x)); }
__device__ __forceinline__ float rnd_bf16(float x) { return ld_bf16(st_bf16(x)); }
// Float to a narrow integer the way Rust's `as` does it: saturated, NaN to 0 (the int conversion
// saturates and maps NaN to 0 already; the clamp narrows it).
__device__ __forceinline__ int sat_narrow(int x, int lo, int hi) { return x < lo ? lo : (x > hi ? hi : x); }

// Four consecutive elements; loaded and stored as one access when the pointer is aligned to them.
template <typename T>
struct alignas(4 * sizeof(T)) Vec4 {
    T v[4];
};
template <typename T>
__device__ __forceinline__ bool aligned4(const T* p) {
    return reinterpret_cast<unsigned long long>(p) % (4 * sizeof(T)) == 0;
}
template <typename T>
__device__ __forceinline__ Vec4<T> ld4(const T* p, bool aligned) {
    if (aligned) return *reinterpret_cast<const Vec4<T>*>(p);
    Vec4<T> r;
#pragma unroll
    for (int j = 0; j < 4; ++j) r.v[j] = p[j];
    return r;
}
template <typename T>
__device__ __forceinline__ void st4(T* p, const Vec4<T>& x, bool aligned) {
    if (aligned) {
        *reinterpret_cast<Vec4<T>*>(p) = x;
        return;
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) p[j] = x.v[j];
}

// N consecutive elements (the row kernels: 8 for 16-bit types, a 16-byte access); loaded and
// stored as one access when the pointer is aligned to them.
template <typename T, int N>
struct alignas(N * sizeof(T)) VecN {
    T v[N];
};
template <int N, typename T>
__device__ __forceinline__ bool aligned_n(const T* p) {
    return reinterpret_cast<unsigned long long>(p) % (N * sizeof(T)) == 0;
}
template <int N, typename T>
__device__ __forceinline__ VecN<T, N> ld_n(const T* p, bool aligned) {
    if (aligned) return *reinterpret_cast<const VecN<T, N>*>(p);
    VecN<T, N> r;
#pragma unroll
    for (int j = 0; j < N; ++j) r.v[j] = p[j];
    return r;
}
// ld_n through the read-only path (ld.global.nc, cached in L1): rows every CTA reads again,
// such as a LayerNorm's scale and bias.
template <int N, typename T>
__device__ __forceinline__ VecN<T, N> ldg_n(const T* p, bool aligned) {
    VecN<T, N> r;
    if (aligned && sizeof(r) == 16) {
        const uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
        *reinterpret_cast<uint4*>(&r) = u;
    } else if (aligned && sizeof(r) == 8) {
        const uint2 u = __ldg(reinterpret_cast<const uint2*>(p));
        *reinterpret_cast<uint2*>(&r) = u;
    } else {
#pragma unroll
        for (int j = 0; j < N; ++j) r.v[j] = __ldg(p + j);
    }
    return r;
}
template <int N, typename T>
__device__ __forceinline__ void st_n(T* p, const VecN<T, N>& x, bool aligned) {
    if (aligned) {
        *reinterpret_cast<VecN<T, N>*>(p) = x;
        return;
    }
#pragma unroll
    for (int j = 0; j < N; ++j) p[j] = x.v[j];
}

// numpy maximum / minimum: NaN when either operand is NaN.
template <typename T>
__device__ __forceinline__ T op_max(T a, T b) {
    return (a >= b || a != a) ? a : b;
}
template <typename T>
__device__ __forceinline__ T op_min(T a, T b) {
    return (a <= b || a != a) ? a : b;
}
template <typename T>
__device__ __forceinline__ T op_relu(T x) {
    return x < T(0) ? T(0) : x;
}
template <typename T>
__device__ __forceinline__ T op_iabs(T x) {
    return x < T(0) ? T(-x) : x;
}
// Integer division truncating toward zero; 0 for a zero divisor.
template <typename T>
__device__ __forceinline__ T op_idiv(T a, T b) {
    return b == T(0) ? T(0) : T(a / b);
}
__device__ __forceinline__ float op_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ double op_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
// Pow squares exactly (x * x), as the reference does.
// Squares and cubes (GPT-2's GELU cubes its input) as products: a literal exponent folds the test.
__device__ __forceinline__ float op_pow(float a, float b) { return b == 2.0f ? a * a : b == 3.0f ? a * a * a : powf(a, b); }
__device__ __forceinline__ double op_pow(double a, double b) { return b == 2.0 ? a * a : b == 3.0 ? a * a * a : pow(a, b); }
// tanh of a value a 16-bit type stores: the odd Taylor polynomial below |x| = 1/16 (truncation
// under 4e-9 relative), 1 - 2 / (e^{2x} + 1) with the MUFU exp2 and reciprocal above (at most
// about 3e-6 relative): far below the 2^-11 rounding after it, at a third of tanhf's instructions.
__device__ __forceinline__ float op_tanh_16(float x) {
    float e, r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(x * 2.8853900817779268f));
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(e + 1.0f));
    const float x2 = x * x;
    const float small = x * fmaf(x2, fmaf(x2, 0.13333333333f, -0.33333333333f), 1.0f);
    return fabsf(x) < 0.0625f ? small : fmaf(-2.0f, r, 1.0f);
}
// Integer Pow, wrapping like the element type: binary exponentiation modulo 2^64, truncated.
// A negative exponent truncates 1 / base^|e| toward zero: only 1 and -1 survive.
template <typename T>
__device__ __forceinline__ T op_ipow(T base, T e) {
    if ((long long)e < 0 && T(-1) < T(0)) {
        if (base == T(1)) return T(1);
        if (base == T(-1)) return ((long long)e % 2 == 0) ? T(1) : base;
        return T(0);
    }
    unsigned long long acc = 1, b = (unsigned long long)(long long)base, n = (unsigned long long)e;
    while (n > 0) {
        if (n & 1) acc *= b;
        b *= b;
        n >>= 1;
    }
    return (T)acc;
}

// Folds of an accumulator across a warp (every lane gets the result) and a block.
struct FoldAdd {
    template <typename T>
    __device__ __forceinline__ T operator()(T a, T b) const {
        return a + b;
    }
};
struct FoldMul {
    template <typename T>
    __device__ __forceinline__ T operator()(T a, T b) const {
        return a * b;
    }
};
struct FoldMax {
    template <typename T>
    __device__ __forceinline__ T operator()(T a, T b) const {
        return op_max(a, b);
    }
};
struct FoldMin {
    template <typename T>
    __device__ __forceinline__ T operator()(T a, T b) const {
        return op_min(a, b);
    }
};
// fmaxf: the row max of Softmax, where a NaN reaches every output through the sum anyway.
struct FoldFmax {
    __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
template <typename T, typename F>
__device__ __forceinline__ T warp_fold(T v, F f) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = f(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
// The same across each aligned group of W lanes (W a power of two up to 32): every lane gets its
// group's result.
template <int W, typename T, typename F>
__device__ __forceinline__ T lanes_fold(T v, F f) {
#pragma unroll
    for (int o = W / 2; o > 0; o >>= 1) v = f(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
// `red` holds one slot per warp; every thread returns the block's result.
template <int WARPS, typename T, typename F>
__device__ __forceinline__ T block_fold(T v, F f, T* red) {
    v = warp_fold(v, f);
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
    __syncthreads();
    T r = red[0];
#pragma unroll
    for (int w = 1; w < WARPS; ++w) r = f(r, red[w]);
    __syncthreads();
    return r;
}
