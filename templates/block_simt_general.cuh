{# Included by spmm_block_simt.cu.tera: the k-block step of a general block (W tile in shared memory). #}
        const float* as = As + (i % STAGES) * (BM * A_LD);
        const float* ws = Ws + (i % STAGES) * (BH * W_LD);
#pragma unroll
        for (int kk = 0; kk < BH; kk += 4) {
            float4 a[TM];
#pragma unroll
            for (int r = 0; r < TM; ++r) a[r] = *reinterpret_cast<const float4*>(as + (tm + r * THREADS_M) * A_LD + kk);
            float4 w[4];
#pragma unroll
            for (int q = 0; q < 4; ++q) w[q] = *reinterpret_cast<const float4*>(ws + (kk + q) * W_LD + tn * 4);
#pragma unroll
            for (int r = 0; r < TM; ++r) {
                fma4(acc[r], a[r].x, w[0]);
                fma4(acc[r], a[r].y, w[1]);
                fma4(acc[r], a[r].z, w[2]);
                fma4(acc[r], a[r].w, w[3]);
            }
        }
