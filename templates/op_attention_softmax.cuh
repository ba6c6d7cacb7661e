        // f on this tile's scores (rows r0 + g + 8h, keys kt·BK + 8nt + 2tq + w; -inf past the
        // last key or query), then the online softmax: the running maximum m and sum l of each
        // row, the accumulators rescaled by exp(m_old - m_new). A row whose scores so far are all
        // -inf keeps m = -inf and takes exponents against 0 (zero probabilities, never NaN).
        // Bounds are tested only where a tile can be ragged (KEYS_RAGGED: the last key tile;
        // ROWS_RAGGED: a query tile past SQ).
        // Both of a lane's rows in one walk of the tile, so that a value that does not vary along the rows (a padding
        // mask) is read once, where it is used, for the two scores it enters (not held for the tile in registers).
        float mxs[2] = {m[0], m[1]};
{%- for x in extras %}{% if x.used and x.rs != 0 %}
        const {{ x.t.st }}* xr{{ x.index }}[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int gi = q0 + r0 + g + 8 * h;
            xr{{ x.index }}[h] = xb{{ x.index }} + ({{ idx_t }})(ROWS_RAGGED && gi >= SQ ? 0 : gi) * {{ x.rs }};
        }
{%- endif %}{% endfor %}
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
            for (int w = 0; w < 2; ++w) {
                const int j = kt * BK + nt * 8 + 2 * tq + w;
{%- for x in extras %}{% if x.used and x.rs == 0 %}
{%- if xk_smem %}
                const {{ x.t.ct }} xk{{ x.index }} = xsm{{ x.index }}[b][nt * 8 + 2 * tq + w];
{%- else %}
                const {{ x.t.ct }} xk{{ x.index }} = (!KEYS_RAGGED || j < SK) ? {{ x.t.ld }}(xb{{ x.index }}[{% if x.cs != 0 %}({{ idx_t }})j * {{ x.cs }}{% else %}0{% endif %}]) : ({{ x.t.ct }})0;
{%- endif %}
{%- endif %}{% endfor %}
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int gi = q0 + r0 + g + 8 * h;
                    float x = neg_inf;
                    if ((!ROWS_RAGGED || gi < SQ) && (!KEYS_RAGGED || j < SK)) {
                        const {{ score.ct }} v0 = ({{ score.ct }})s[nt][2 * h + w];
{%- for x in extras %}{% if x.used %}{% if x.rs == 0 %}
                        const {{ x.t.ct }} v{{ x.index }} = xk{{ x.index }};
{%- else %}
                        const {{ x.t.ct }} v{{ x.index }} = {{ x.t.ld }}(xr{{ x.index }}[h][{% if x.cs != 0 %}({{ idx_t }})j * {{ x.cs }}{% else %}0{% endif %}]);
{%- endif %}{% endif %}{% endfor %}
                        x = (float)({{ expr }});
                    }
                    s[nt][2 * h + w] = x;
                    mxs[h] = fmaxf(mxs[h], x);
                }
            }
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float mx = mxs[h];
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            // exp(x - base) as 2^(x·log2 e - base·log2 e): one FMA and one ex2.approx.ftz (a
            // probability under 2^-126 of the row's largest is 0). A row whose largest score so
            // far is below -1e37 (every key under a finite "lowest value" mask, transformers'
            // finfo.min) would overflow base·log2 e: its exponents take the differences first,
            // so that equal scores are equally likely, as in the reference.
            const float L2E = 1.4426950408889634f;
            float alpha, sum = 0.0f;
            if (mx >= -1.0e37f || mx == neg_inf) {
                const float nb = (mx == neg_inf ? 0.0f : mx) * -L2E;
                alpha = ex2_ftz(fmaf(m[h], L2E, nb));
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
                    for (int w = 0; w < 2; ++w) {
                        const float p = ex2_ftz(fmaf(s[nt][2 * h + w], L2E, nb));
                        s[nt][2 * h + w] = p;
                        sum += p;
                    }
                }
            } else {
                alpha = ex2_ftz((m[h] - mx) * L2E);
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
                    for (int w = 0; w < 2; ++w) {
                        const float p = ex2_ftz((s[nt][2 * h + w] - mx) * L2E);
                        s[nt][2 * h + w] = p;
                        sum += p;
                    }
                }
            }
            m[h] = mx;
            l[h] = fmaf(l[h], alpha, sum);
#pragma unroll
            for (int ne = 0; ne < NE; ++ne) {
                o[ne][2 * h] *= alpha;
                o[ne][2 * h + 1] *= alpha;
            }
        }
