// The row walk shared by op_layernorm and op_softmax: {% if warp %}{% if rpw > 1 %}{{ rpw }} rows per warp ({{ lanes }} lanes each){% else %}one warp per row{% endif %}, {{ warps * rpw }} rows per CTA{% else %}one CTA of {{ threads }} threads per row{% endif %};
// each of the row's {{ lanes }} threads holds {{ chunks }} chunk(s) of {{ vec }} consecutive element(s), chunk k at column
// k * {{ step }} + lane * {{ vec }}{% if cached %}, loaded once into registers{% else %}, reloaded by every pass (the row is too long for registers){% endif %}.
{%- if inputs %}
// The row is not read from memory: each element is computed from the prologue inputs (x = {{ expr }}),
// rounded to {{ x.st }}{% if sum %} and also written to xs{% endif %}.
{%- endif %}
{%- if warp %}
    const int lane = threadIdx.x % {{ lanes }};
{%- if ragged %}
    // The last warp's rows past the end walk the last row (their lanes take part in the folds,
    // which shuffle across the whole warp) and store nothing.
    long long row = ((long long)blockIdx.x * {{ warps }} + threadIdx.x / 32) * {{ rpw }} + (threadIdx.x % 32) / {{ lanes }};
    const bool live = row < {{ rows }};
    if (!live) row = {{ rows }} - 1;
{%- else %}
    const long long row = ((long long)blockIdx.x * {{ warps }} + threadIdx.x / 32){% if rpw > 1 %} * {{ rpw }} + (threadIdx.x % 32) / {{ lanes }}{% endif %};
    if (row >= {{ rows }}) return;
{%- endif %}
{%- else %}
    __shared__ float red[{{ warps }}];
    const int lane = threadIdx.x;
    const long long row = blockIdx.x;
    if (row >= {{ rows }}) return;
{%- endif %}
{%- if inputs %}
{%- for i in inputs %}{% if i.used %}
{%- if i.mode == "rows" %}
    const {{ i.t.st }}* in{{ i.index }}r = in{{ i.index }} + row * {{ cols }};
{%- elif i.mode == "strided" %}
    // in{{ i.index }}'s rows lie apart (its row axes permuted or broadcast): the row's coordinates times their strides.
    const {{ i.idx_t }} rw{{ i.index }} = ({{ i.idx_t }})row;
    const {{ i.t.st }}* in{{ i.index }}r = in{{ i.index }} + ({{ i.row_start }});
{%- elif i.mode == "gathered" %}
    // in{{ i.index }}'s row is a table row, ix{{ i.index }}[row] of {{ i.gather_rows }} (a Gather folded in: a negative
    // index counts from the end, one outside the table reads zeros).
    long long gi{{ i.index }} = (long long)ix{{ i.index }}[row];
    if (gi{{ i.index }} < 0) gi{{ i.index }} += {{ i.gather_rows }};
    const bool gv{{ i.index }} = gi{{ i.index }} >= 0 && gi{{ i.index }} < {{ i.gather_rows }};
    const {{ i.t.st }}* in{{ i.index }}r = in{{ i.index }} + (gv{{ i.index }} ? gi{{ i.index }} : 0) * {{ cols }};
{%- elif i.mode == "scalar" %}
    const {{ i.t.ct }} v{{ i.index }} = {{ i.t.ld }}(in{{ i.index }}[0]);
{%- endif %}
{%- endif %}{% endfor %}
{%- if sum %}
    {{ x.st }}* xsr = xs + row * {{ cols }};
{%- endif %}
{%- else %}
    const {{ x.st }}* xr = x + row * {{ cols }};
{%- endif %}
    {{ y.st }}* yr = y + row * {{ cols }};
{%- if vec > 1 %}
    const bool aligned = {{ aligned }};
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
{%- if inputs %}
{%- for i in inputs %}{% if i.used and i.mode != "scalar" %}
        {% if i.mode != "gathered" %}const {% endif %}VecN<{{ i.t.st }}, {{ vec }}> a{{ i.index }} = ld_n<{{ vec }}>(in{{ i.index }}{% if i.mode == "rows" or i.mode == "strided" or i.mode == "gathered" %}r{% endif %} + c, {% if vec > 1 %}aligned{% else %}true{% endif %});
{%- if i.mode == "gathered" %}
        if (!gv{{ i.index }}) a{{ i.index }} = VecN<{{ i.t.st }}, {{ vec }}>{};
{%- endif %}
{%- endif %}{% endfor %}
#pragma unroll
        for (int j = 0; j < {{ vec }}; ++j) {
{%- for i in inputs %}{% if i.used and i.mode != "scalar" %}
            const {{ i.t.ct }} v{{ i.index }} = {{ i.t.ld }}(a{{ i.index }}.v[j]);
{%- endif %}{% endfor %}
            w[j] = {{ round }}({{ expr }});
        }
{%- elif vec > 1 %}
        const VecN<{{ x.st }}, {{ vec }}> a = ld_n<{{ vec }}>(xr + c, aligned);
#pragma unroll
        for (int j = 0; j < {{ vec }}; ++j) w[j] = {{ x.ld }}(a.v[j]);
{%- else %}
        w[0] = {{ x.ld }}(xr[c]);
{%- endif %}
    };
{%- if sum %}
    // x itself, the second output (exact: w holds x rounded to its type).
    auto store_sum = [&](int k, const float* w) {
        if (!valid(k){% if ragged %} || !live{% endif %}) return;
        VecN<{{ x.st }}, {{ vec }}> o;
#pragma unroll
        for (int j = 0; j < {{ vec }}; ++j) o.v[j] = {{ x.store }}(w[j]);
        st_n<{{ vec }}>(xsr + col(k), o, {% if vec > 1 %}aligned{% else %}true{% endif %});
    };
{%- endif %}
{%- if cached %}
    float v[{{ chunks }}][{{ vec }}];
#pragma unroll
    for (int k = 0; k < {{ chunks }}; ++k) {
        load(k, v[k]);
{%- if sum %}
        store_sum(k, v[k]);
{%- endif %}
    }
{%- endif %}
