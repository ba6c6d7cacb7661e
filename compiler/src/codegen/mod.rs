//! Code specialization (SparTA §3.3): CUDA kernels specialized to one sparse matmul and its
//! sparsity pattern, rendered from `templates/*.cu.tera` with typed contexts.
//!
//! The input is a plain [`SpmmSpec`] (shape, dtype, block shape, orientation, epilogue, the
//! nonzero blocks of the weight, optional values, mode, code budget, tile, engine; defined in
//! [`crate::kernel_choice`] with the family rules the planner's cost model shares);
//! [`specialize`] picks a kernel family,
//! builds the loop nest, [`dismantle`](LoopNest::dismantle)s it against the pattern, and either
//! embeds the live instances as literal tables (`Mode::Unrolled`) or emits a kernel that reads
//! them from device memory (`Mode::IndexStream`); `Mode::Auto` switches on a code-size budget.
//! The result is a [`Kernel`]: CUDA source, launch geometry, the host-side tables and
//! [`Kernel::pack_weight`] (the weight in the order the kernel reads it); this crate never
//! compiles or runs it (the runtime does, through NVRTC).
//!
//! The sparse-matmul families live in `spmm/`, one module each under the dispatcher
//! `spmm/mod.rs`; [`Kernel`] (`spmm/kernel.rs`) and the helpers every family imports
//! (`spmm/shared.rs`) sit beside them, so no family imports back from the dispatcher: fp32 SIMT and fp16/bf16 mma.sync block kernels (`spmm/block.rs`)
//! and the fine (element-sparse) loop kernel (`spmm/fine.rs`), the Hopper wgmma block
//! kernels (`spmm/wgmma/`), fp32 blocks and fine weights on tensor cores at fp32 accuracy
//! (`spmm/tf32.rs`, `spmm/fine_tf32/`), the fine weight dismantled to the element
//! (`spmm/dismantled.rs`), int8 (`spmm/int8.rs`, with [`quant`]), 2:4 weights on the sparse
//! tensor cores (`spmm/two_four/`, its packing and CPU emulation [`two_four`], the CPU replay of its
//! launch's every access [`two_four_replay`]) and the dense fallback on the
//! vendor library (`library.rs`). [`Engine`] forces a family where several apply;
//! `Engine::Auto` is the specializer's measured choice. Around them: [`from_plan`] turns a
//! plan into specs, [`graph_ops`] generates the kernels of every other op a compiled model
//! runs, [`rows`] the HPEC row kernels, and `render.rs` fills `templates/` from typed contexts.
//!
//! A kernel that needs a driver object (a TMA tensor map of its dense operand) only describes
//! it ([`TmaBox`]); the runtime encodes it. Generated kernels are deterministic: no
//! floating-point atomics, and every sum has a fixed order (a K split over a cluster adds the
//! partials in rank order), so a kernel gives the same bits on every run.

pub mod from_plan;
pub mod graph_ops;
mod library;
pub mod loopnest;
pub mod quant;
mod render;
pub use render::templates_hash;
pub mod rows;
mod spmm;

// The spec, its field types and the kernel families live below both `plan` and `codegen`
// (`kernel_choice`); their `codegen::` paths stay.
pub use crate::kernel_choice::{
    tf32_exact, Activation, DenseCopy, Dtype, Engine, Epilogue, Family, FineTf32Work, Mode, Orientation, RowNorm,
    RowStatsIn, SpmmSpec, Tile, DEFAULT_UNROLL_BUDGET,
};
pub use library::{library_gemm, library_gemm_fused, library_takes, library_takes_dense, LibraryEpilogue, LibraryGemm};
pub use loopnest::{Dismantled, Level, LoopNest};
pub use spmm::two_four::pack as two_four;
pub use spmm::two_four::replay as two_four_replay;
pub use spmm::wgmma::CoreLayout;
pub use spmm::{few_rows, row_scatter, specialize, stride_live_rows, FineTable, Kernel, Launch, Prepass, TmaBox};

use crate::kernel_choice::SpecError;

/// Errors of the specializer; the spec is user input, so none of these panic.
#[derive(Debug, thiserror::Error)]
pub enum CodegenError {
    #[error("invalid kernel spec: {0}")]
    Spec(String),
    #[error("template {template}: {message}")]
    Template { template: String, message: String },
}

/// A spec the shared kernel-choice rules refuse is a spec error, with the same message.
impl From<SpecError> for CodegenError {
    fn from(e: SpecError) -> CodegenError {
        CodegenError::Spec(e.0)
    }
}

/// Launch order of a cover's kernels: whether the fine kernel goes first (writing C) and the
/// block kernels accumulate onto it. fp32 (3xTF32 block kernels): yes, 4096³ mixed 90% + 1%
/// 0.663 ms against 0.701 the other way (the fine kernel's accumulate read of its whole C tile
/// cost more than the block kernel's few loads per thread); fp16 (mma.sync): no, 0.816 against
/// 0.804 and 1024³ 0.0256 against 0.0229 (run 14; `benches/results/spmm_gpu.md`).
pub fn fine_first(dtype: Dtype) -> bool {
    dtype == Dtype::F32
}

/// FNV-1a 64 of a kernel source: the module cache key (with the arch).
pub fn source_hash(source: &str) -> u64 {
    crate::hash::checksum(source.as_bytes())
}
