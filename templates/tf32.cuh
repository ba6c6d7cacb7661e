// 3xTF32 helpers: the split of an fp32 operand into a TF32 part and a remainder, and the
// m16n8k8 TF32 mma.sync with fp32 accumulation.
// x as big + small: big rounded to TF32 (nearest, ties away from zero; two integer
// instructions, the host's rounding of W), small = x - big exact in fp32 and left for the
// tensor core to truncate to TF32 (|small| <= 2^-11 |x|, so that costs at most 2^-21 |x|).
// Non-finite operands stay non-finite but an Inf's sign is lost: small = Inf - Inf is NaN, and
// the cross products meet Inf · 0 or Inf - Inf, so a product with an Inf input comes out NaN
// (`kernels test --filter +nonfinite` accepts NaN for ±Inf on these kernels only).
__device__ __forceinline__ void split(float x, unsigned& big, unsigned& small) {
    big = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
    small = __float_as_uint(x - __uint_as_float(big));
}
__device__ __forceinline__ void mma1688(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 { %0,%1,%2,%3}, { %4,%5,%6,%7}, { %8,%9}, "
        "{ %0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// x as big + small with big truncated instead of rounded: big is x's own bits (the tensor core reads
// only the TF32 ones), small = x - trunc(x) exact (|small| < 2^-10 |x|; its truncation costs < 2^-20 |x|).
// Two instructions instead of three, for operands split once per use.
__device__ __forceinline__ void split_trunc(float x, unsigned& big, unsigned& small) {
    big = __float_as_uint(x);
    small = __float_as_uint(x - __uint_as_float(big & 0xffffe000u));
}
