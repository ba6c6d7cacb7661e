{# Included by spmm_block_simt.cu.tera: the k-block step of a uniform block (value v). #}
        // Uniform block: A·(v·1) = v · (row sums of the A tile), the same for every column.
        const float* as = As + (i % STAGES) * (BM * A_LD);
        float rs[TM];
#pragma unroll
        for (int r = 0; r < TM; ++r) rs[r] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < BH; kk += 4) {
#pragma unroll
            for (int r = 0; r < TM; ++r) {
                const float4 a = *reinterpret_cast<const float4*>(as + (tm + r * THREADS_M) * A_LD + kk);
                rs[r] += (a.x + a.y) + (a.z + a.w);
            }
        }
#pragma unroll
        for (int r = 0; r < TM; ++r)
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[r][c] = fmaf(v, rs[r], acc[r][c]);
