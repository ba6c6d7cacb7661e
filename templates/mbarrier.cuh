// mbarrier helpers (shared::cta, 32-bit shared addresses) and the bulk and tensor (TMA) copies that complete
// on one.
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
// Waits until the barrier's phase with the given parity has completed.
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    asm volatile(
        "{\n.reg .pred done;\nWAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT_%=;\n}\n" ::"r"(bar), "r"(parity) : "memory");
}

// Adds the bytes a stage's bulk copies will deliver to its "full" barrier's transaction count.
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// bytes (a multiple of 16, both addresses 16-byte aligned) from global src into shared memory at dst, completing on bar.
__device__ __forceinline__ void bulk_copy(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}
// The tensor map of A (128 opaque bytes the runtime encodes with cuTensorMapEncodeTiled, see the
// kernel's TmaBox): boxes landing in the swizzled layout, rows and columns past A zero-filled.
struct __align__(64) TmaMap {
    unsigned long long opaque[16];
};
// One box of A (its rows from row m0, its columns from column k0) into shared memory at dst, completing on bar.
__device__ __forceinline__ void tma_load_a(unsigned dst, const TmaMap* map, int k0, int m0, unsigned bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, { %2, %3 }], [%4];\n"
        ::"r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(k0), "r"(m0), "r"(bar)
        : "memory");
}
