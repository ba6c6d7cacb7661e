//! Tera rendering of `templates/*.cu.tera` from typed contexts. The templates are embedded
//! with `include_str!`; they only loop and branch, every number comes from the context.

use super::CodegenError;
use serde::Serialize;
use std::sync::OnceLock;

const TEMPLATES: &[(&str, &str)] = &[
    ("common.cuh", include_str!("../../../templates/common.cuh")),
    ("epilogue.cuh", include_str!("../../../templates/epilogue.cuh")),
    ("tables.cuh", include_str!("../../../templates/tables.cuh")),
    ("load4.cuh", include_str!("../../../templates/load4.cuh")),
    ("wgmma.cuh", include_str!("../../../templates/wgmma.cuh")),
    ("tf32.cuh", include_str!("../../../templates/tf32.cuh")),
    ("mbarrier.cuh", include_str!("../../../templates/mbarrier.cuh")),
    ("spmm_block_simt.cu.tera", include_str!("../../../templates/spmm_block_simt.cu.tera")),
    ("block_simt_rowsum.cuh", include_str!("../../../templates/block_simt_rowsum.cuh")),
    ("block_simt_general.cuh", include_str!("../../../templates/block_simt_general.cuh")),
    ("spmm_block_mma.cu.tera", include_str!("../../../templates/spmm_block_mma.cu.tera")),
    ("spmm_block_wgmma_ws.cu.tera", include_str!("../../../templates/spmm_block_wgmma_ws.cu.tera")),
    ("spmm_fine.cu.tera", include_str!("../../../templates/spmm_fine.cu.tera")),
    ("spmm_fine_dismantled.cu.tera", include_str!("../../../templates/spmm_fine_dismantled.cu.tera")),
    ("spmm_fine_tf32.cu.tera", include_str!("../../../templates/spmm_fine_tf32.cu.tera")),
    ("epilogue_rows.cu.tera", include_str!("../../../templates/epilogue_rows.cu.tera")),
    ("spmm_block_int8.cu.tera", include_str!("../../../templates/spmm_block_int8.cu.tera")),
    ("spmm_block_wgmma.cu.tera", include_str!("../../../templates/spmm_block_wgmma.cu.tera")),
    ("spmm_block_tf32.cu.tera", include_str!("../../../templates/spmm_block_tf32.cu.tera")),
    ("transpose.cu.tera", include_str!("../../../templates/transpose.cu.tera")),
    ("widen.cu.tera", include_str!("../../../templates/widen.cu.tera")),
    ("rows_load.cu.tera", include_str!("../../../templates/rows_load.cu.tera")),
    ("spmm_few_rows.cu.tera", include_str!("../../../templates/spmm_few_rows.cu.tera")),
    ("spmm_row_scatter.cu.tera", include_str!("../../../templates/spmm_row_scatter.cu.tera")),
    ("spmm_dense_stream.cu.tera", include_str!("../../../templates/spmm_dense_stream.cu.tera")),
    ("spmm_two_four.cu.tera", include_str!("../../../templates/spmm_two_four.cu.tera")),
    ("spmm_two_four_wgmma.cu.tera", include_str!("../../../templates/spmm_two_four_wgmma.cu.tera")),
    ("rows_compact.cu.tera", include_str!("../../../templates/rows_compact.cu.tera")),
    ("rows_permute.cu.tera", include_str!("../../../templates/rows_permute.cu.tera")),
    ("rows_drop.cu.tera", include_str!("../../../templates/rows_drop.cu.tera")),
    ("rows_merge_hash.cu.tera", include_str!("../../../templates/rows_merge_hash.cu.tera")),
    ("rows_merge_pack.cu.tera", include_str!("../../../templates/rows_merge_pack.cu.tera")),
    ("rows_resolve.cu.tera", include_str!("../../../templates/rows_resolve.cu.tera")),
    ("rows_tail.cu.tera", include_str!("../../../templates/rows_tail.cu.tera")),
    ("rows_gather.cu.tera", include_str!("../../../templates/rows_gather.cu.tera")),
    ("rows_mark.cu.tera", include_str!("../../../templates/rows_mark.cu.tera")),
    ("ops.cuh", include_str!("../../../templates/ops.cuh")),
    ("op_rows.cuh", include_str!("../../../templates/op_rows.cuh")),
    ("op_elementwise.cu.tera", include_str!("../../../templates/op_elementwise.cu.tera")),
    ("op_gather.cu.tera", include_str!("../../../templates/op_gather.cu.tera")),
    ("op_pool.cu.tera", include_str!("../../../templates/op_pool.cu.tera")),
    ("op_concat.cu.tera", include_str!("../../../templates/op_concat.cu.tera")),
    ("op_layernorm.cu.tera", include_str!("../../../templates/op_layernorm.cu.tera")),
    ("op_softmax.cu.tera", include_str!("../../../templates/op_softmax.cu.tera")),
    ("op_reduce.cu.tera", include_str!("../../../templates/op_reduce.cu.tera")),
    ("op_matmul.cu.tera", include_str!("../../../templates/op_matmul.cu.tera")),
    ("op_attention_wgmma_stage.cuh", include_str!("../../../templates/op_attention_wgmma_stage.cuh")),
    ("op_attention_wgmma_q.cuh", include_str!("../../../templates/op_attention_wgmma_q.cuh")),
    ("op_attention.cuh", include_str!("../../../templates/op_attention.cuh")),
    ("op_attention_softmax.cuh", include_str!("../../../templates/op_attention_softmax.cuh")),
    ("op_attention_flash.cu.tera", include_str!("../../../templates/op_attention_flash.cu.tera")),
    ("op_attention_flash_tf32.cu.tera", include_str!("../../../templates/op_attention_flash_tf32.cu.tera")),
    ("op_attention_wgmma.cu.tera", include_str!("../../../templates/op_attention_wgmma.cu.tera")),
    ("op_conv.cuh", include_str!("../../../templates/op_conv.cuh")),
    ("op_conv_depthwise.cu.tera", include_str!("../../../templates/op_conv_depthwise.cu.tera")),
    ("op_conv_depthwise_tile.cu.tera", include_str!("../../../templates/op_conv_depthwise_tile.cu.tera")),
    ("op_conv_direct.cu.tera", include_str!("../../../templates/op_conv_direct.cu.tera")),
    ("op_conv_igemm.cu.tera", include_str!("../../../templates/op_conv_igemm.cu.tera")),
];

/// The fused epilogue, shared by every family.
#[derive(Clone, Debug, Serialize)]
pub struct EpilogueCtx {
    pub bias: bool,
    /// `none`, `relu`, `clip` or `gelu`.
    pub activation: String,
    pub clip_lo: String,
    pub clip_hi: String,
    pub accumulate: bool,
}

/// What every kernel template starts from: the kernel's name, its element type, the problem
/// shape `C[m,n] = A[m,k] · W[k,n]` and the fused epilogue. Flattened into each context.
#[derive(Clone, Debug, Serialize)]
pub struct KernelHead {
    pub kernel_name: String,
    pub dtype: String,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub epilogue: EpilogueCtx,
    /// The kernel takes `const int* live_rows` last and skips row tiles past it.
    pub live_rows: bool,
    /// With `live_rows`: the kernel does nothing when at most this many rows are live.
    pub live_above: usize,
}

/// The sparsity pattern and values baked into the source: the index tables when unrolled
/// (empty otherwise), in `__constant__` memory when they fit, and the embedded values as raw
/// bits of `value_bits` each (empty when they stream). Flattened into each context.
#[derive(Clone, Debug, Serialize)]
pub struct Literals {
    pub unrolled: bool,
    pub tables_in_constant: bool,
    pub ptr: Vec<i32>,
    pub idx: Vec<i32>,
    pub values: Vec<String>,
    pub value_bits: usize,
}

/// Context of the block-sparse (and dense) templates.
#[derive(Clone, Debug, Serialize)]
pub struct BlockCtx {
    #[serde(flatten)]
    pub head: KernelHead,
    #[serde(flatten)]
    pub literals: Literals,
    pub bh: usize,
    pub bw: usize,
    /// Rows of C per CTA.
    pub bm: usize,
    /// SIMT: rows per thread.
    pub tm: usize,
    pub threads: usize,
    pub threads_n: usize,
    pub threads_m: usize,
    pub warps: usize,
    pub stages: usize,
    /// Shared-memory row strides (elements) of the A tile and the W block.
    pub a_ld: usize,
    pub w_ld: usize,
    /// 16-byte copies per A tile / W block, and per row of each.
    pub a_chunks: usize,
    pub w_chunks: usize,
    pub a_row_chunks: usize,
    pub w_row_chunks: usize,
    pub dense: bool,
    pub k_blocks: usize,
    /// mma: n8 tiles per warp.
    pub n_tiles: usize,
    /// fp32, right orientation: every live block is uniform; `block_values` holds one
    /// literal per block (table order) and the kernel loads no W.
    pub folded: bool,
    /// Some live blocks are uniform (values known): those fold, the others stay general.
    pub part_folded: bool,
    pub block_values: Vec<String>,
    /// The transposed form of a left-orientation matmul: A' tiles come from rows of B
    /// (k-major in shared memory, `a_ld` = BM + pad) and C' is stored transposed.
    pub left: bool,
    /// Left, tensor cores: row stride (fp32 words) of the staged `C'ᵀ` tile, its 16-byte
    /// output chunks (8 elements) in all and per row.
    pub cs_ld: usize,
    pub c_chunks: usize,
    pub c_row_chunks: usize,
}

/// Context of the int8 block-sparse (and dense) template. Sizes of the int8 operands are
/// in bytes (= elements).
#[derive(Clone, Debug, Serialize)]
pub struct Int8Ctx {
    #[serde(flatten)]
    pub head: KernelHead,
    #[serde(flatten)]
    pub literals: Literals,
    pub bh: usize,
    pub bw: usize,
    /// Rows of C per CTA (32 per warp).
    pub bm: usize,
    pub threads: usize,
    pub warps: usize,
    pub stages: usize,
    /// Shared-memory strides: bytes per A row, bytes per W column (the block is packed n-major).
    pub a_ld: usize,
    pub w_ld: usize,
    /// 16-byte copies per A tile / W block, per A row and per W column.
    pub a_chunks: usize,
    pub w_chunks: usize,
    pub a_row_chunks: usize,
    pub w_col_chunks: usize,
    pub dense: bool,
    pub k_blocks: usize,
    /// n8 tiles per warp.
    pub n_tiles: usize,
}

/// Context of the fine-grained template (both orientations). The kernel works in one frame:
/// dense rows `fr` × `k` times sparse columns `fc` (right: `fr = m`, `fc = n`; left: `fr = n`,
/// `fc = m`, the weight transposed).
#[derive(Clone, Debug, Serialize)]
pub struct FineCtx {
    #[serde(flatten)]
    pub head: KernelHead,
    #[serde(flatten)]
    pub literals: Literals,
    /// Left orientation (`C = W · B`).
    pub left: bool,
    pub fr: usize,
    pub fc: usize,
    /// Run positions per chunk in the tables: `fc` rounded up to whole tiles.
    pub fct: usize,
    /// Dense rows per lane (1, 2 or 4) and per CTA (`32 × rpl`).
    pub rpl: usize,
    pub bm: usize,
    /// Sparse columns per CTA, and per warp.
    pub nc: usize,
    pub cpw: usize,
    pub threads: usize,
    pub warps: usize,
    pub chunk: usize,
    pub chunks: usize,
    /// Row stride (floats) of the dense tile in shared memory.
    pub a_ld: usize,
    /// Four-element loads per thread per chunk.
    pub lpt: usize,
    /// D tiles by cp.async through a two-stage ring of `stage_words` each (left, fp32).
    pub async_d: bool,
    pub stage_words: usize,
    /// `__launch_bounds__` minimum CTAs per SM.
    pub min_blocks: usize,
    /// CTAs of the cluster that split K (1 = no cluster).
    pub split: usize,
    /// Entries of the largest tile range (rounded out to groups of four).
    pub emax: usize,
    /// Shared words of the dense tile (and of the C tile staged over it), and of the entry values.
    pub region_words: usize,
    pub w_words: usize,
    /// Vector (4-element) loads of the dense operand: its rows are a multiple of 4 long.
    pub vec: bool,
    /// The entry loop is software-pipelined across a warp's groups (long runs); otherwise one
    /// group at a time (short runs).
    pub pipelined: bool,
    /// Right orientation with the prepass: D is At = Aᵀ (`K × d_ld`, see `Prepass`), whose
    /// tiles are copied as the left orientation copies B's rows.
    pub prepass: bool,
    /// Row stride (elements) of D when its rows run along the dense rows (left: B; prepass: At).
    pub d_ld: usize,
}

/// Context of the widening prepass (`templates/widen.cu.tera`).
#[derive(Clone, Debug, Serialize)]
pub struct WidenCtx {
    pub kernel_name: String,
    /// B's element type (Bw is fp32).
    pub dtype: String,
    pub k: usize,
    pub n: usize,
    pub ld: usize,
    /// 8-byte loads along B's rows (N is a multiple of 4).
    pub vec: bool,
}

/// Context of the transpose prepass (`templates/transpose.cu.tera`).
#[derive(Clone, Debug, Serialize)]
pub struct TransposeCtx {
    pub kernel_name: String,
    /// A's element type (At is fp32).
    pub dtype: String,
    pub m: usize,
    pub k: usize,
    pub ld: usize,
    /// 16-byte loads along A's rows (K is a multiple of 4).
    pub vec: bool,
}

/// Context of the standalone epilogue kernel (after a library GEMM).
#[derive(Clone, Debug, Serialize)]
pub struct EpiRowsCtx {
    pub kernel_name: String,
    pub dtype: String,
    pub m: usize,
    pub n: usize,
    /// Elements per thread: 16 bytes' worth when a row is a multiple of that, else 1.
    pub vec: usize,
    pub threads: usize,
    /// Write `epilogue(0)` (the bias) without reading C.
    pub fill: bool,
    pub epilogue: EpilogueCtx,
}

fn engine() -> Result<&'static tera::Tera, CodegenError> {
    static ENGINE: OnceLock<Result<tera::Tera, String>> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let mut t = tera::Tera::default();
            t.autoescape_on(vec![]);
            t.add_raw_templates(TEMPLATES.iter().copied()).map_err(|e| error_chain(&e))?;
            Ok(t)
        })
        .as_ref()
        .map_err(|message| CodegenError::Template { template: "templates/".into(), message: message.clone() })
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        cur = s.source();
    }
    msg
}

/// Renders `template` with `ctx`.
pub fn render<C: Serialize>(template: &str, ctx: &C) -> Result<String, CodegenError> {
    let fail = |message: String| CodegenError::Template { template: template.to_string(), message };
    let context = tera::Context::from_serialize(ctx).map_err(|e| fail(error_chain(&e)))?;
    engine()?.render(template, &context).map_err(|e| fail(error_chain(&e)))
}

/// What both wgmma templates read alike: the tile, the swizzled layout, the ring's stage sizes
/// and the wgmma inline asm's operand numbers.
#[derive(Clone, Debug, Serialize)]
pub struct WgmmaTileCtx {
    pub bh: usize,
    pub bw: usize,
    /// Rows of C per work item (= 64 × warpgroups × m_tiles).
    pub bm: usize,
    /// Warpgroups running wgmma (the warp-specialized kernel's producer comes on top).
    pub warpgroups: usize,
    /// m64 tiles per warpgroup.
    pub m_tiles: usize,
    pub threads: usize,
    pub stages: usize,
    /// Block columns.
    pub n_blocks: usize,
    /// Work items (row tiles × block columns, or × column groups).
    pub items: usize,
    /// 16-byte chunks per row of a k-block (bh / 8).
    pub k_chunks: usize,
    /// Core-matrix strides of the shared-memory layout (bytes) and the descriptor's constant bits.
    pub lbo: usize,
    pub sbo: usize,
    /// Bytes per tile row = the swizzle width.
    pub row_bytes: usize,
    pub desc_const: String,
    pub a_stage_bytes: usize,
    pub stage_bytes: usize,
    /// Bytes of one 64-row slice of an A tile.
    pub m64_bytes: usize,
    /// fp32 accumulator registers per thread per m64 tile and block column (bw / 2).
    pub acc_regs: usize,
    /// Operand numbers of the wgmma inline asm after the accumulators.
    pub operand_a: usize,
    pub operand_b: usize,
    pub operand_one: usize,
}

/// Context of the first wgmma template (a CTA barrier per k-block).
#[derive(Clone, Debug, Serialize)]
pub struct WgmmaCtx {
    #[serde(flatten)]
    pub head: KernelHead,
    #[serde(flatten)]
    pub literals: Literals,
    #[serde(flatten)]
    pub tile: WgmmaTileCtx,
    /// CTAs per SM the launch bounds promise (caps registers).
    pub min_ctas: usize,
}

/// Context of the warp-specialized wgmma template (producer warpgroup, mbarrier ring, block
/// column groups).
#[derive(Clone, Debug, Serialize)]
pub struct WgmmaWsCtx {
    #[serde(flatten)]
    pub head: KernelHead,
    #[serde(flatten)]
    pub literals: Literals,
    #[serde(flatten)]
    pub tile: WgmmaTileCtx,
    /// Block columns per work item.
    pub group: usize,
    /// k-block rows per ring stage (step).
    pub kr: usize,
    /// Live blocks: the step schedule starts at this word of the index table.
    pub nnz: usize,
    pub n_groups: usize,
    /// Bytes of one W block slot (1024-aligned: each slot starts a swizzle period).
    pub w_block_bytes: usize,
    /// The staged epilogue: bytes per staging row, per consumer warpgroup, and 16-byte chunks
    /// per row of the item's columns.
    pub stg_stride: usize,
    pub stg_bytes: usize,
    pub stg_chunks: usize,
    /// Whether the epilogue goes through the staging rows.
    pub staged: bool,
    /// CTAs each SM holds at once (the launch bound's minimum: registers per thread capped so
    /// that they fit).
    pub min_ctas: usize,
    /// One straight-line wgmma path per nonempty set of live slots, each ending in its own
    /// commit (groups of up to `MASK_PATHS_MAX_GROUP` columns); empty for wider groups, which
    /// branch per slot.
    pub mask_paths: Vec<MaskPath>,
    /// LayerNorm work around the epilogue (`codegen::RowNorm`): whether there is any, the
    /// epsilons of the statistics it reads as float literals, and where its shared memory
    /// starts (bytes after the staging rows' start).
    pub row_norm: crate::codegen::RowNorm,
    pub norm_any: bool,
    pub in_eps: String,
    pub res_eps: String,
    pub norm_off: usize,
    /// The store loop's residual chunks are loaded before the main loop (at most two per
    /// thread).
    pub res_prefetch: bool,
}

/// A set of live slots of a warp-specialized step: its mask and the slots in it.
#[derive(Clone, Debug, Serialize)]
pub struct MaskPath {
    pub mask: u32,
    pub slots: Vec<usize>,
}

/// A hash of every embedded template (names and text): what generated sources depend on
/// besides their contexts. Caches of generated kernels put it in their keys, so a changed
/// template is never served from an entry rendered by the old one.
pub fn templates_hash() -> u64 {
    hash_templates(TEMPLATES)
}

fn hash_templates(templates: &[(&str, &str)]) -> u64 {
    let mut h = crate::hash::Fnv64::new();
    for (name, text) in templates {
        h.add(name.as_bytes());
        h.add(&[0]);
        h.add(text.as_bytes());
        h.add(&[0]);
    }
    h.finish()
}

#[cfg(test)]
mod hash_tests {
    use super::*;

    #[test]
    fn the_templates_hash_changes_with_any_template_byte() {
        assert_eq!(templates_hash(), hash_templates(TEMPLATES));
        let last = TEMPLATES.len() - 1;
        let edited: String = TEMPLATES[last].1.replacen(' ', "  ", 1);
        let mut changed: Vec<(&str, &str)> = TEMPLATES.to_vec();
        changed[last].1 = &edited;
        assert_ne!(hash_templates(&changed), templates_hash());
        // A byte moved between a name and its text is a different table too.
        assert_ne!(hash_templates(&[("ab", "c")]), hash_templates(&[("a", "bc")]));
    }
}
