//! Kernel choice: which kernel family runs a sparse × dense matmul and how much work it is,
//! the one place both the planner and the specializer take it from.
//!
//! Layering: [`crate::plan`] (its cost model prices each part on the kernel that will run it)
//! and [`crate::codegen`] (its dispatcher builds that kernel) both depend on this module and
//! on nothing of each other's for it; `plan` never imports `codegen`. So the model and the
//! specializer cannot disagree: they call the same functions.
//!
//! What lives here:
//! - the plain description of one matmul, [`SpmmSpec`], and the types of its fields
//!   ([`Dtype`], [`Orientation`], [`Epilogue`], [`Activation`], [`Mode`], [`Tile`],
//!   [`Engine`], [`DenseCopy`]) in `spec.rs`, and the names of the kernel families
//!   ([`Family`]);
//! - the rules `Engine::Auto` applies where the cost model needs the answer too:
//!   [`block_tf32::auto_takes`] (fp32 blocks on the 3xTF32 block kernel),
//!   [`block_wgmma::supports`] (16-bit block shapes on the wgmma kernels),
//!   [`fine_tf32::auto_prefers`] (element-sparse fp32 on the 3xTF32 fine kernel),
//!   [`dismantled::applies`] (the fine weight dismantled to the element),
//!   [`stream::auto_takes`] (skinny dense 16-bit products on the streaming kernel) and
//!   [`two_four::supports`] (2:4 parts on the sparse tensor cores, with its tiling);
//! - the work the 3xTF32 fine kernel does on a pattern, counted as the kernel counts it
//!   ([`fine_tf32::auto_work`], [`FineTf32Work`]): its tiling and its runs of k8 steps, which
//!   the specializer turns into tables and the cost model prices.
//!
//! Everything here is plain data and pure functions of a spec and its pattern: no rendering,
//! no tables, no CUDA. Rules that need the weight's values (the SIMT block kernel folding
//! uniform blocks) or no planner answer stay in `codegen`. [`crate::codegen`] re-exports the
//! types, so `codegen::SpmmSpec` and the rest keep their paths.

pub mod block_tf32;
pub mod block_wgmma;
pub mod dismantled;
pub mod fine_tf32;
mod spec;
pub mod stream;
pub mod two_four;

pub use fine_tf32::FineTf32Work;
pub use spec::{
    tf32_exact, Activation, DenseCopy, Dtype, Engine, Epilogue, Mode, Orientation, RowNorm, RowStatsIn, SpmmSpec, Tile,
    DEFAULT_UNROLL_BUDGET,
};

use serde::Serialize;

/// A spec the rules refuse (a forced tile no kernel takes, a tiling that does not fit). The
/// specializer reports it as `CodegenError::Spec` with the same message.
#[derive(Debug, thiserror::Error)]
#[error("invalid kernel spec: {0}")]
pub struct SpecError(pub String);

/// Kernel families.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Family {
    /// fp32 block-sparse on CUDA cores (FFMA), cp.async pipeline.
    BlockSimt,
    /// fp16/bf16 block-sparse on tensor cores (ldmatrix + mma.sync m16n8k16, fp32 accumulate).
    BlockMma,
    /// Element-wise sparse weight (block 1×1): chunked CSC, A tile transposed in shared memory.
    Fine,
    /// Element-wise sparse weight on the left (`C = W · B`): chunked CSR of W, B rows in shared memory.
    FineLeft,
    /// Every block present: the block kernels without tables.
    Dense,
    /// Bias and activation in place, after a library GEMM (see `codegen::library_gemm`).
    Epilogue,
    /// int8 block-sparse, or dense with every block present, on tensor cores (ldmatrix +
    /// mma.sync m16n8k32 s8, int32 accumulate, dequantizing epilogue, fp16 output).
    BlockInt8,
    /// fp16/bf16 block-sparse on Hopper tensor cores (wgmma from shared memory, persistent grid);
    /// W blocks packed transposed. See `codegen/spmm/wgmma/`.
    BlockWgmma,
    /// Element-wise sparse fp32 weight dismantled to the element: one FFMA per nonzero in the
    /// code, W values as immediates or packed in code order. See `codegen/spmm/dismantled.rs`.
    FineDismantled,
    /// fp32 block-sparse (or dense) on tensor cores at fp32 accuracy (3xTF32: mma.sync
    /// m16n8k8 on the operands split into TF32 big and small parts); W blocks packed as their
    /// big part then their small part. See `codegen/spmm/tf32.rs`.
    BlockTf32,
    /// Element-sparse fp32 weight on tensor cores at fp32 accuracy (3xTF32): columns in
    /// groups of 8, each multiplying the gathered k where any of them is nonzero. See
    /// `codegen/spmm/fine_tf32/`.
    FineTf32,
    /// Element-sparse fp32 weight for a few live rows: a thread per output element over its
    /// column's nonzeros in ELL slots. See `codegen/spmm/few_rows.rs`.
    FineRows,
    /// Very sparse fp32 weight read row by row where the activation is nonzero, summed in
    /// 64-bit fixed point in shared memory (order-independent). See `codegen/spmm/row_scatter.rs`.
    RowScatter,
    /// Dense 16-bit weight with a small K (a 1×1 convolution): the weight slab resident in
    /// shared memory, A streamed once through a cp.async ring, mma.sync m16n8k16, the
    /// epilogue in registers. See `codegen/spmm/stream.rs` and [`stream`].
    DenseStream,
    /// A 16-bit weight 2:4-sparse along K on the sparse tensor cores (`mma.sp` m16n8k32 on
    /// `Cᵀ = Wᵀ·Aᵀ`, fp32 accumulate): W compressed to half its values plus 2 bits of metadata
    /// per kept value, packed in the instruction's register layout. See
    /// `codegen/spmm/two_four/` and [`two_four`].
    TwoFour,
    /// The same on Hopper: `wgmma.mma_async.sp` m64nNk32 (m64nNk64 on int8 operands, with the
    /// int8 family's dequantizing epilogue), warp-specialized (TMA for A, bulk copies for W's
    /// shared-memory image and metadata), persistent. See
    /// `codegen/spmm/two_four/wgmma.rs` and [`two_four::wgmma_tiling`].
    TwoFourWgmma,
}

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::BlockSimt => "block_simt",
            Family::BlockMma => "block_mma",
            Family::Fine => "fine",
            Family::FineLeft => "fine_left",
            Family::Dense => "dense",
            Family::Epilogue => "epilogue",
            Family::BlockInt8 => "block_int8",
            Family::BlockWgmma => "block_wgmma",
            Family::FineDismantled => "fine_dismantled",
            Family::BlockTf32 => "block_tf32",
            Family::FineTf32 => "fine_tf32",
            Family::FineRows => "fine_rows",
            Family::RowScatter => "row_scatter",
            Family::DenseStream => "dense_stream",
            Family::TwoFour => "two_four",
            Family::TwoFourWgmma => "two_four_wgmma",
        }
    }
}
