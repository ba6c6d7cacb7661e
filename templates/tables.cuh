{%- if unrolled %}
// Dismantled pattern: the live instances of the unrolled loops, as literals.
{% if tables_in_constant %}__constant__{% else %}__device__{% endif %} const int PTR_LIT[] = { {% for v in ptr %}{{ v }},{% endfor %} };
{% if tables_in_constant %}__constant__{% else %}__device__{% endif %} const int IDX_LIT[] = { {% for v in idx %}{{ v }},{% endfor %} 0 };
{%- endif %}
{%- if values %}
// Embedded weight values (raw bits, packed in table order).
__device__ __align__(16) const unsigned {% if value_bits == 16 %}short{% else %}int{% endif %} W_LIT[] = { {% for v in values %}{{ v }},{% endfor %} };
{%- endif %}
