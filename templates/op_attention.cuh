// Shared pieces of the flash-attention kernels (op_attention_flash*.cu.tera), rendered in their
// context: cp.async, and the score expression with the online softmax of one key tile.

__device__ __forceinline__ unsigned smem_u32(const void* p) {
    unsigned s;
    asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(s) : "l"(p));
    return s;
}
// 16-byte global->shared copy; zero-fills when !valid (src must still be a valid address).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
__device__ __forceinline__ bool aligned16(const void* p) { return (reinterpret_cast<unsigned long long>(p) & 15) == 0; }
__device__ __forceinline__ bool aligned_word(const void* p) { return (reinterpret_cast<unsigned long long>(p) & 3) == 0; }
// 2^x in one MUFU instruction; results under 2^-126 flush to 0, -inf gives 0.
__device__ __forceinline__ float ex2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
