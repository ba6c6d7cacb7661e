{#- Loads this warp's Q rows of the query tile at row qr0 into the A fragments qa (zero past SQ and D): a
    fragment's two columns in one 32-bit load where q's rows are contiguous and aligned. Rendered in place at each
    use (the kernel's first tile, and the next tile's while the current one's softmax and P·V run). #}
#pragma unroll
    for (int kk = 0; kk < DK; ++kk) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int row = qr0 + r0 + g + 8 * (i & 1), c = kk * 16 + 2 * tq + 8 * (i >> 1);
            const unsigned short* src = qb + (long long)row * {{ q_rs }} + (long long)c * {{ q_cs }};
{%- if q_pair %}
            if (q_pair) {
                qa[kk][i] = ((!ROWS_RAGGED || row < SQ) && c < D) ? *reinterpret_cast<const unsigned*>(src) : 0u;
                continue;
            }
{%- endif %}
            const unsigned lo = (row < SQ && c < D) ? src[0] : 0u;
            const unsigned hi = (row < SQ && c + 1 < D) ? src[{{ q_cs }}] : 0u;
            qa[kk][i] = lo | (hi << 16);
        }
    }

