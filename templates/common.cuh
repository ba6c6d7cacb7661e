// Shared helpers of every spartac kernel: element type, conversions, cp.async, ldmatrix, mma.
// No CUDA headers: NVRTC compiles this alone, half types are raw 16-bit storage.
{% if dtype == "f32" %}
typedef float elem_t;
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float from_f32(float x) { return x; }
{% elif dtype == "f16" %}
typedef unsigned short elem_t;
__device__ __forceinline__ float to_f32(unsigned short x) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
    return f;
}
__device__ __forceinline__ unsigned short from_f32(float x) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
    return h;
}
{% else %}
typedef unsigned short elem_t;
__device__ __forceinline__ float to_f32(unsigned short x) { return __uint_as_float(((unsigned)x) << 16); }
__device__ __forceinline__ unsigned short from_f32(float x) {
    unsigned short h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
    return h;
}
{% endif %}

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    unsigned s;
    asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(s) : "l"(p));
    return s;
}

// 16-byte global->shared copy; zero-fills when !valid.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0));
}
// 4-byte global->shared copy (through L1); zero-fills when !valid.
__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool valid = true) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
