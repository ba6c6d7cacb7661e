// Helpers of the wgmma kernels (block_wgmma, block_wgmma_ws): shared-memory matrix descriptors
// of the swizzled K-major layout, its chunk offsets, the wgmma fences and waits, and the
// m64n{{ bw }}k16 wgmma itself. Needs SBO, ROW_BYTES and ACC defined, and the context's desc_const,
// bw, dtype, acc_regs and operand numbers.
// Shared-memory matrix descriptor: start address, LBO and SBO in 16-byte units, swizzle mode.
__device__ __forceinline__ unsigned long long smem_desc(unsigned addr) {
    return (unsigned long long)((addr & 0x3FFFFu) >> 4) | {{ desc_const }}ull;
}
// Byte offset of 16-byte chunk q of row r in a swizzled tile.
__device__ __forceinline__ int swz(int r, int q) {
    return (r / 8) * SBO + (r % 8) * ROW_BYTES + 16 * (q ^ (((r % 8) * ROW_BYTES) >> 7));
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N_>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N_) : "memory"); }
// cp.async writes through the generic proxy; wgmma reads through the async proxy.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Keeps the compiler from moving accumulator reads or writes across a wgmma wait.
__device__ __forceinline__ void fence_acc(float (&d)[ACC]) {
#pragma unroll
    for (int i = 0; i < ACC; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
__device__ __forceinline__ void wgmma(float (&d)[ACC], unsigned long long da, unsigned long long db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %{{ operand_one }}, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n{{ bw }}k16.f32.{{ dtype }}.{{ dtype }} "
        "{ {% for i in range(end=acc_regs) %}%{{ i }}{% if not loop.last %},{% endif %}{% endfor %} }, %{{ operand_a }}, %{{ operand_b }}, p, 1, 1, 0, 0;\n}\n"
        : {% for i in range(end=acc_regs) %}"+f"(d[{{ i }}]){% if not loop.last %}, {% endif %}{% endfor %}
        : "l"(da), "l"(db), "r"(1));
}
