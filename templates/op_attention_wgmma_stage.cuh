{#- Stages key tile st_kt of the wgmma attention kernel in buffer st_b (zeros past SK and past the heads' widths):
    the K tile, then the V tile, by one loop over `staged` (the names and strides that set them apart); cp.async
    groups are committed by the caller. Rendered in place at each use: as a lambda, NVRTC kept the
    staging addresses of strided operands in registers (187 against 168 for BERT-base's layer, one CTA an SM less). #}
        const int j0 = st_kt * BK;
        unsigned char* kd = Ks + st_b * K_TILE_BYTES;
        unsigned char* vd = Vs + st_b * V_TILE_BYTES;
{%- for x in extras %}{% if x.used and x.rs == 0 %}
        if (t < BK) xn{{ x.index }} = (!KEYS_RAGGED || j0 + t < SK) ? {{ x.t.ld }}(xb{{ x.index }}[{% if x.cs != 0 %}({{ idx_t }})(j0 + t) * {{ x.cs }}{% else %}0{% endif %}]) : ({{ x.t.ct }})0;
{%- endif %}{% endfor %}
{%- for o in staged %}
{%- if o.asynchronous %}
        if ({{ o.flag }}) {
            const unsigned short* src = {{ o.src }} + (long long)j0 * {{ o.key_stride }};
#pragma unroll
            for (int it = 0; it < BK / {{ o.step }}; ++it) {
                const bool ok = ({{ o.width }} == {{ o.padded }} || {{ o.col_ok }}) && (!KEYS_RAGGED || j0 + {{ o.j }} + it * {{ o.step }} < SK);
                cp_async16({{ o.tile }} + {{ o.dst }} + it * {{ o.step }} * {{ o.row }}, ok ? src + (long long)(it * {{ o.step }}) * {{ o.key_stride }} : {{ o.base }}, ok);
            }
        } else
{%- endif %}
        {
            for (int i = t; i < BK * {{ o.padded }}; i += {{ threads }}) {
{%- if o.columns_fast %}
                const int jj = i / {{ o.padded }}, c = i % {{ o.padded }};
{%- else %}
                const int c = i / BK, jj = i % BK;
{%- endif %}
                const int j = j0 + jj;
                *reinterpret_cast<unsigned short*>({{ o.tile }} + swz<{{ o.row }}>(jj, c / 8) + 2 * (c % 8)) =
                    (j < SK && c < {{ o.width }}) ? {{ o.base }}[{{ o.elem }}] : (unsigned short)0;
            }
        }
{%- endfor %}
