{#- Stages key tile st_kt of the wgmma attention kernel in buffer st_b (zeros past SK and past the heads' widths);
    cp.async groups are committed by the caller. Rendered in place at each use: as a lambda, NVRTC kept the
    staging addresses of strided operands in registers (187 against 168 for BERT-base's layer, one CTA an SM less). #}
        const int j0 = st_kt * BK;
        unsigned char* kd = Ks + st_b * K_TILE_BYTES;
        unsigned char* vd = Vs + st_b * V_TILE_BYTES;
{%- for x in extras %}{% if x.used and x.rs == 0 %}
        if (t < BK) xn{{ x.index }} = (!KEYS_RAGGED || j0 + t < SK) ? {{ x.t.ld }}(xb{{ x.index }}[{% if x.cs != 0 %}({{ idx_t }})(j0 + t) * {{ x.cs }}{% else %}0{% endif %}]) : ({{ x.t.ct }})0;
{%- endif %}{% endfor %}
{%- if k_async %}
        if (k_async) {
            const unsigned short* src = ksrc + (long long)j0 * {{ k_cs }};
#pragma unroll
            for (int it = 0; it < BK / K_STEP; ++it) {
                const bool ok = (D == DP || k_col_ok) && (!KEYS_RAGGED || j0 + kj + it * K_STEP < SK);
                cp_async16(kd + kdst + it * K_STEP * K_ROW, ok ? src + (long long)(it * K_STEP) * {{ k_cs }} : kb, ok);
            }
        } else
{%- endif %}
        {
            for (int i = t; i < BK * DP; i += {{ threads }}) {
{%- if k_d_fast %}
                const int jj = i / DP, c = i % DP;
{%- else %}
                const int c = i / BK, jj = i % BK;
{%- endif %}
                const int j = j0 + jj;
                *reinterpret_cast<unsigned short*>(kd + swz<K_ROW>(jj, c / 8) + 2 * (c % 8)) =
                    (j < SK && c < D) ? kb[(long long)c * {{ k_rs }} + (long long)j * {{ k_cs }}] : (unsigned short)0;
            }
        }
{%- if v_async %}
        if (v_async) {
            const unsigned short* src = vsrc + (long long)j0 * {{ v_rs }};
#pragma unroll
            for (int it = 0; it < BK / V_STEP; ++it) {
                const bool ok = (DV == DVP || v_col_ok) && (!KEYS_RAGGED || j0 + vj + it * V_STEP < SK);
                cp_async16(vd + vdst + it * V_STEP * V_ROW, ok ? src + (long long)(it * V_STEP) * {{ v_rs }} : vb, ok);
            }
        } else
{%- endif %}
        {
            for (int i = t; i < BK * DVP; i += {{ threads }}) {
{%- if v_e_fast %}
                const int jj = i / DVP, e = i % DVP;
{%- else %}
                const int e = i / BK, jj = i % BK;
{%- endif %}
                const int j = j0 + jj;
                *reinterpret_cast<unsigned short*>(vd + swz<V_ROW>(jj, e / 8) + 2 * (e % 8)) =
                    (j < SK && e < DV) ? vb[(long long)j * {{ v_rs }} + (long long)e * {{ v_cs }}] : (unsigned short)0;
            }
        }
