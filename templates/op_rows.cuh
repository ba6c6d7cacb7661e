// The row walk shared by op_layernorm and op_softmax: {% if warp %}one warp per row, {{ warps }} rows per CTA{% else %}one CTA of {{ threads }} threads per row{% endif %};
// each of the row's {{ lanes }} threads holds {{ chunks }} chunk(s) of {{ vec }} consecutive element(s), chunk k at column
// k * {{ step }} + lane * {{ vec }}{% if cached %}, loaded once into registers{% else %}, reloaded by every pass (the row is too long for registers){% endif %}.
{%- if warp %}
    const int lane = threadIdx.x % 32;
    const long long row = (long long)blockIdx.x * {{ warps }} + threadIdx.x / 32;
    if (row >= {{ rows }}) return;
{%- else %}
    __shared__ float red[{{ warps }}];
    const int lane = threadIdx.x;
    const long long row = blockIdx.x;
    if (row >= {{ rows }}) return;
{%- endif %}
    const {{ x.st }}* xr = x + row * {{ cols }};
    {{ y.st }}* yr = y + row * {{ cols }};
{%- if vec == 4 %}
    const bool aligned = aligned4(x) && aligned4(y){% if scale %} && aligned4(scale){% endif %}{% if bias %} && aligned4(bias){% endif %};
{%- endif %}
    // Chunk k's first column, whether it is inside the row, and its values (zeros outside).
    auto col = [&](int k) { return k * {{ step }} + lane * {{ vec }}; };
    auto valid = [&]({% if guard %}int k{% else %}int{% endif %}) { return {% if guard %}col(k) < {{ cols }}{% else %}true{% endif %}; };
    auto load = [&](int k, float* w) {
        const int c = col(k);
{%- if guard %}
        if (!valid(k)) {
#pragma unroll
            for (int j = 0; j < {{ vec }}; ++j) w[j] = 0.f;
            return;
        }
{%- endif %}
{%- if vec == 4 %}
        const Vec4<{{ x.st }}> a = ld4(xr + c, aligned);
#pragma unroll
        for (int j = 0; j < 4; ++j) w[j] = {{ x.ld }}(a.v[j]);
{%- else %}
        w[0] = {{ x.ld }}(xr[c]);
{%- endif %}
    };
{%- if cached %}
    float v[{{ chunks }}][{{ vec }}];
#pragma unroll
    for (int k = 0; k < {{ chunks }}; ++k) load(k, v[k]);
{%- endif %}
