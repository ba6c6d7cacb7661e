//! Helpers every kernel family shares (the families import them from here, never from the
//! dispatcher): errors, the table mode, template contexts (head, literals, epilogue), value
//! literals, warp and pipeline settings, block tables.

use super::kernel::*;
use crate::codegen::loopnest::{Level, LoopNest};
use crate::codegen::render::{EpilogueCtx, KernelHead, Literals};
use crate::codegen::{CodegenError, Dtype, Mode, SpmmSpec};

pub(crate) fn spec_err(msg: String) -> CodegenError {
    CodegenError::Spec(msg)
}

/// Resolves `Auto` against the budget.
pub(crate) fn resolve_mode(spec: &SpmmSpec, words: usize) -> Mode {
    match spec.mode {
        Mode::Auto if words <= spec.code_budget => Mode::Unrolled,
        Mode::Auto => Mode::IndexStream,
        m => m,
    }
}

/// The head of a kernel's template context: name, element type, shape and epilogue of `spec`.
pub(crate) fn kernel_head(name: &str, dtype: Dtype, spec: &SpmmSpec) -> KernelHead {
    KernelHead {
        kernel_name: name.to_string(),
        dtype: dtype.name().to_string(),
        m: spec.m,
        k: spec.k,
        n: spec.n,
        epilogue: epilogue_ctx(spec),
        live_rows: spec.live_rows,
        live_above: spec.live_above,
    }
}

/// The literals of a kernel's template context: `kernel`'s tables when it is unrolled (`idx`
/// as the kernel reads it), in `__constant__` memory when they and `extra_words` more fit in
/// 16384 words, and the embedded `values`.
pub(crate) fn kernel_literals(
    kernel: &Kernel,
    idx: Vec<i32>,
    values: Vec<String>,
    value_bits: usize,
    extra_words: usize,
) -> Literals {
    let unrolled = kernel.mode == Mode::Unrolled;
    Literals {
        unrolled,
        tables_in_constant: kernel.ptr.len() + kernel.idx.len() + extra_words <= 16384,
        ptr: if unrolled { kernel.ptr.clone() } else { vec![] },
        idx: if unrolled { idx } else { vec![] },
        values,
        value_bits,
    }
}

pub(crate) fn epilogue_ctx(spec: &SpmmSpec) -> EpilogueCtx {
    epilogue_ctx_of(spec.epilogue, spec.accumulate)
}

/// The template context of `epilogue` (`templates/epilogue.cuh`), adding the previous output
/// first when `accumulate`.
pub(crate) fn epilogue_ctx_of(epilogue: crate::codegen::Epilogue, accumulate: bool) -> EpilogueCtx {
    use crate::codegen::Activation::*;
    let (act, lo, hi) = match epilogue.activation {
        None => ("none", 0.0, 0.0),
        Relu => ("relu", 0.0, 0.0),
        Clip { lo, hi } => ("clip", lo, hi),
        Gelu => ("gelu", 0.0, 0.0),
        GeluErf => ("gelu_erf", 0.0, 0.0),
    };
    EpilogueCtx {
        bias: epilogue.bias,
        activation: act.to_string(),
        clip_lo: float_literal(lo),
        clip_hi: float_literal(hi),
        accumulate,
    }
}

/// A C float literal that round-trips `x` (infinities as the CUDA constants).
pub(crate) fn float_literal(x: f32) -> String {
    if x == f32::INFINITY {
        "__int_as_float(0x7f800000)".into()
    } else if x == f32::NEG_INFINITY {
        "__int_as_float(0xff800000)".into()
    } else {
        format!("{x:e}f")
    }
}

/// Raw bits of the packed values in the kernel's dtype, as hex literals.
pub(crate) fn value_bits(dtype: Dtype, packed: &[f32]) -> Vec<String> {
    packed
        .iter()
        .map(|v| match dtype {
            Dtype::F32 => format!("0x{:08x}u", v.to_bits()),
            Dtype::F16 => format!("0x{:04x}u", half::f16::from_f32(*v).to_bits()),
            Dtype::Bf16 => format!("0x{:04x}u", half::bf16::from_f32(*v).to_bits()),
            // Not reached: the int8 family refuses embedded values (see `spmm::int8`).
            Dtype::I8 => format!("0x{:02x}u", (*v as i8) as u8),
        })
        .collect()
}

/// Warps of a warp-per-32-rows block kernel (mma.sync, int8, 3xTF32): the tile override's
/// rows / 32 (32 to 256 rows), else 4 (2 under 128 rows of M).
pub(crate) fn warp_rows(spec: &SpmmSpec, what: &str) -> Result<usize, CodegenError> {
    match spec.tile {
        Some(t) if t.rows % 32 == 0 && (32..=256).contains(&t.rows) => Ok(t.rows / 32),
        Some(t) => Err(spec_err(format!("{what} tiles hold 32 to 256 rows in steps of 32, not {}", t.rows))),
        None if spec.m >= 128 => Ok(4),
        None => Ok(2),
    }
}

/// cp.async pipeline stages of a block kernel: the tile override's (2 to 8), else `default`.
pub(crate) fn pipeline_stages(spec: &SpmmSpec, default: usize) -> Result<usize, CodegenError> {
    match spec.tile {
        Some(t) if (2..=8).contains(&t.stages) => Ok(t.stages),
        Some(t) => Err(spec_err(format!("pipelines have 2 to 8 stages, not {}", t.stages))),
        None => Ok(default),
    }
}

/// The block-column tables of a block kernel: the loop nest (block columns, their k-blocks,
/// then rows and the k inside a block as loops) dismantled at the k-block level against the
/// live blocks; `ptr[j]..ptr[j + 1]` are block column `j`'s live k-blocks in `idx`.
pub(crate) struct BlockTables {
    pub ptr: Vec<i32>,
    pub idx: Vec<i32>,
    pub live_instances: usize,
    pub dead_instances: usize,
}

impl Kernel {
    /// A block-table kernel (the block, 3xTF32 block, int8 and wgmma families): `Kernel::new`
    /// with the `tables`, and `literal_words` and the embedded values counted only when the
    /// kernel is unrolled (`embeds_values`: the family embeds the spec's values then).
    pub(crate) fn with_block_tables(self, tables: BlockTables, literal_words: usize, embeds_values: bool) -> Kernel {
        let unrolled = self.mode == Mode::Unrolled;
        Kernel {
            ptr: tables.ptr,
            idx: tables.idx,
            live_instances: tables.live_instances,
            dead_instances: tables.dead_instances,
            literal_words: if unrolled { literal_words } else { 0 },
            values_embedded: unrolled && embeds_values,
            ..self
        }
    }
}

pub(crate) fn block_tables(
    m: usize,
    (kbs, nbs): (usize, usize),
    (bh, bw): (usize, usize),
    bm: usize,
    live: &[bool],
) -> Result<BlockTables, CodegenError> {
    let nest = LoopNest::new(vec![
        Level::new("n_block", nbs, bw),
        Level::new("k_block", kbs, bh),
        Level::new("m", m, bm),
        Level::new("k", bh, 1),
    ]);
    let d = nest.dismantle(nest.level("k_block")?, |p| match p {
        // Column blocks always live: their output must be written even when empty.
        [_] => true,
        [j, kb] => live[kb * nbs + j],
        _ => false,
    })?;
    let mut ptr = vec![0i32; nbs + 1];
    let mut idx = Vec::with_capacity(d.instances.len());
    for inst in &d.instances {
        ptr[inst[0] + 1] += 1;
        idx.push(inst[1] as i32);
    }
    for j in 0..nbs {
        ptr[j + 1] += ptr[j];
    }
    Ok(BlockTables { ptr, idx, live_instances: d.instances.len(), dead_instances: d.dead_instances() })
}

/// For every live block in table order, its value where it is uniform (all `bh × bw`
/// elements bitwise equal and finite), `None` where it is not.
pub(crate) fn uniform_block_values(
    ptr: &[i32],
    idx: &[i32],
    block: (usize, usize),
    n: usize,
    w: &[f32],
) -> Vec<Option<f32>> {
    let mut out = Vec::with_capacity(idx.len());
    for j in 0..ptr.len() - 1 {
        for e in ptr[j]..ptr[j + 1] {
            out.push(uniform_block(w, n, block, idx[e as usize] as usize, j));
        }
    }
    out
}

/// The value of block (`kb`, `j`) of the row-major `K × n` weight `w` when every element of
/// it has the same bits and is finite (the SIMT kernel folds such a block to one literal).
pub(crate) fn uniform_block(w: &[f32], n: usize, (bh, bw): (usize, usize), kb: usize, j: usize) -> Option<f32> {
    let first = w[kb * bh * n + j * bw];
    let uniform = first.is_finite()
        && (0..bh).all(|r| (0..bw).all(|c| w[(kb * bh + r) * n + j * bw + c].to_bits() == first.to_bits()));
    uniform.then_some(first)
}
