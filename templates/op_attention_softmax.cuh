        // f on this tile's scores (rows r0 + g + 8h, keys kt·BK + 8nt + 2tq + w; -inf past the
        // last key or query), then the online softmax: the running maximum m and sum l of each
        // row, the accumulators rescaled by exp(m_old - m_new). A row whose scores so far are all
        // -inf keeps m = -inf and takes exponents against 0 (zero probabilities, never NaN).
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int gi = q0 + r0 + g + 8 * h;
{%- for x in extras %}{% if x.used %}
            const {{ x.t.st }}* xr{{ x.index }} = xb{{ x.index }} + ({{ idx_t }})gi * {{ x.rs }};
{%- endif %}{% endfor %}
            float mx = m[h];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
                for (int w = 0; w < 2; ++w) {
                    const int j = kt * BK + nt * 8 + 2 * tq + w;
                    float x = neg_inf;
                    if (gi < SQ && j < SK) {
                        const {{ score.ct }} v0 = ({{ score.ct }})s[nt][2 * h + w];
{%- for x in extras %}{% if x.used %}
                        const {{ x.t.ct }} v{{ x.index }} = {{ x.t.ld }}(xr{{ x.index }}[{% if x.cs != 0 %}({{ idx_t }})j * {{ x.cs }}{% else %}0{% endif %}]);
{%- endif %}{% endfor %}
                        x = (float)({{ expr }});
                    }
                    s[nt][2 * h + w] = x;
                    mx = fmaxf(mx, x);
                }
            }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            // exp(x - base) as 2^(x·log2 e - base·log2 e): one FMA and one ex2.approx.
            const float nb = (mx == neg_inf ? 0.0f : mx) * -1.4426950408889634f;
            const float alpha = exp2f(fmaf(m[h], 1.4426950408889634f, nb));
            m[h] = mx;
            float sum = 0.0f;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
                for (int w = 0; w < 2; ++w) {
                    const float p = exp2f(fmaf(s[nt][2 * h + w], 1.4426950408889634f, nb));
                    s[nt][2 * h + w] = p;
                    sum += p;
                }
            }
            l[h] = fmaf(l[h], alpha, sum);
#pragma unroll
            for (int ne = 0; ne < NE; ++ne) {
                o[ne][2 * h] *= alpha;
                o[ne][2 * h + 1] *= alpha;
            }
        }
