//! What a specialized sparse-matmul kernel is: its family, launch, tables, prepass and
//! source ([`Kernel`]), and how its weight is packed for the device. Every family starts from
//! the neutral kernel of `Kernel::new` and sets only the fields it fills.

use super::families;
use crate::codegen::{Dtype, Mode, Orientation};
use crate::sparse::WeightLookup;
use serde::Serialize;

pub use crate::kernel_choice::Family;

/// Launch geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Launch {
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
    pub smem_bytes: u32,
}

/// A specialized kernel: source, entry point, launch geometry and the tables its arguments
/// take. Every family has the signature
/// `(const T* A, const T* W, const int* ptr, const int* idx, const T* bias, T* C)`;
/// `W` is the weight packed by [`Kernel::pack_weight`]; in unrolled mode `ptr`/`idx` (and `W`
/// when the values are embedded) are ignored and may be null. A fine kernel with a
/// [`Kernel::prepass`] takes the prepass's fp32 output in place of `A` (`const float*`); the
/// caller launches the prepass on `A` first. A kernel with [`Kernel::tma_a`] takes one more,
/// last parameter: the tensor map of `A` the caller encodes (the warp-specialized wgmma kernel).
///
/// The int8 family ([`Family::BlockInt8`], dtype [`Dtype::I8`]) extends it additively:
/// `(const int8* A_q, const int8* W_q, const int* ptr, const int* idx, const f16* bias,
/// f16* C, const float* scale_w, float scale_a)`, with `A_q` row-major, `W_q` packed by
/// [`Kernel::pack_weight_i8`], `scale_w` one dequantization scale per output column and
/// `scale_a` the activation's (see [`crate::codegen::quant`]): `C = epilogue(scale_a · scale_w[col] ·
/// Σ A_q·W_q)`. The int8 2:4 kernel ([`Family::TwoFourWgmma`] on [`Dtype::I8`]) has this
/// signature too, then A's tensor map last.
#[derive(Clone, Debug, Serialize)]
pub struct Kernel {
    pub name: String,
    pub family: Family,
    /// `Unrolled` or `IndexStream`, never `Auto`.
    pub mode: Mode,
    pub source: String,
    pub launch: Launch,
    pub spec_shape: (usize, usize, usize),
    pub dtype: Dtype,
    pub block: (usize, usize),
    /// Where the sparse weight sits. Left-orientation block kernels run on the transposed
    /// problem `Cᵀ = Bᵀ·Wᵀ`: their `ptr`/`idx` are the tables of `Wᵀ` (one run per block
    /// row of W, block columns of W as the k-blocks), in blocks of `Wᵀ`.
    pub orientation: Orientation,
    /// Block kernels: start of each block column's run in `idx` (`N/bw + 1`).
    /// Fine kernel: start of each (k-chunk, column) run (`chunks × N + 1`); left: each
    /// (k-chunk, row of W) run (`chunks × M + 1`). Dismantled: each column segment's first
    /// entry (the code holds the pattern; the kernel does not read the tables).
    pub ptr: Vec<i32>,
    /// Block kernels: block row of each live block. Fine kernels: the entry's offset in the
    /// kernel's shared D tile (see [`FineTable`]). Dismantled: `k × N + col` of each FFMA in
    /// code order, -1 for padding (what `pack_weight` gathers). 2:4: the `mma.sp` metadata
    /// words (`spmm::two_four::pack`).
    pub idx: Vec<i32>,
    /// Fine kernels: how `idx` maps to k (`None` for the other families).
    pub fine: Option<FineTable>,
    pub live_instances: usize,
    pub dead_instances: usize,
    pub literal_words: usize,
    pub values_embedded: bool,
    /// A kernel to launch before this one, whose output this one reads as its dense operand
    /// (see [`Prepass`]).
    pub prepass: Option<Prepass>,
    /// Words the kernel reads after `idx` in its index table (see [`Kernel::device_idx`]):
    /// the warp-specialized wgmma kernel's step schedule (`spmm::wgmma::schedule`); empty for
    /// the other kernels.
    pub steps: Vec<i32>,
    /// A kernel that loads its dense operand `A` by the Tensor Memory Accelerator takes a
    /// tensor map of it as one more, last parameter (`const __grid_constant__` 128 bytes),
    /// which the caller encodes for the `A` it launches on (see [`TmaBox`]).
    pub tma_a: Option<TmaBox>,
    /// Block wgmma kernels: each live block of W packed as its shared-memory image (the
    /// swizzled K-major layout), so one bulk copy lands it (the warp-specialized kernel).
    pub w_smem_image: bool,
}

/// The tensor map a kernel wants of its dense operand `A` (row-major `M × K` of the kernel's
/// dtype, `K` innermost): boxes of `rows` × `cols` elements landing in shared memory with the
/// `swizzle_bytes` swizzle (32, 64 or 128; the wgmma layouts' swizzle), rows past `M` filled
/// with zeros. The compiler only describes it; the runtime encodes it
/// (`cuTensorMapEncodeTiled`) with the device address of `A`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct TmaBox {
    pub rows: u32,
    pub cols: u32,
    pub swizzle_bytes: u32,
}

/// A fine kernel's prepass over its dense operand, into an fp32 scratch buffer of
/// `scratch_bytes` that the kernel then reads instead, copying its rows 16 bytes at a time into
/// its fp32 tile (pad columns zeroed). Right orientation: `At = Aᵀ`, A row-major `M × K` (any
/// float dtype), At `K × ld`, `ld = M` rounded up to 4. Left orientation, 16-bit B: `Bw = B`
/// widened, B row-major `K × N`, Bw `K × ld`, `ld = N` rounded up to 4. Signature
/// `(const T* D, float* Dw)`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Prepass {
    pub name: String,
    pub source: String,
    pub launch: Launch,
    /// Bytes of the scratch buffer (`4 × K × ld`).
    pub scratch_bytes: usize,
}

/// How a fine kernel's entries address its shared D tile: an entry's `idx` is
/// `k_in_chunk × ld`; every (chunk, column) run is padded to a multiple of 4 entries whose
/// offset is the tile's zero row (`k_in_chunk = chunk`) and whose weight is 0.
/// Runs are in (chunk, position) order: the sparse columns are numbered tile by tile (`cols`
/// per CTA, the last tile completed with empty runs) and, inside a tile, warp by warp, each
/// warp owning every `warps`-th column, so the runs one warp walks in a chunk are contiguous.
/// The 3xTF32 fine kernel ([`Family::FineTf32`]) keeps its own layout (see
/// `spmm/fine_tf32/`): `chunk` its k-chunk, `ld` the rows of an A box, `cols` its columns per
/// CTA, `warps` its consumer warps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct FineTable {
    /// Depth of a k-chunk.
    pub chunk: usize,
    /// Row stride (elements) of the D tile.
    pub ld: usize,
    /// Sparse columns per CTA tile.
    pub cols: usize,
    /// Warps per CTA.
    pub warps: usize,
}

impl FineTable {
    /// Run positions per chunk for `fc` sparse columns (whole tiles).
    pub fn positions(&self, fc: usize) -> usize {
        fc.next_multiple_of(self.cols)
    }
    /// The sparse column at run position `pos` (it may lie past the last column: an empty run).
    pub fn column(&self, pos: usize) -> usize {
        let (tile, p) = (pos / self.cols, pos % self.cols);
        let per_warp = self.cols / self.warps;
        tile * self.cols + p / per_warp + (p % per_warp) * self.warps
    }
    /// The k inside its chunk of the entry with offset `idx`; `None` for a padding entry.
    pub fn k_in_chunk(&self, idx: i32) -> Option<usize> {
        Some(idx as usize / self.ld).filter(|&kk| kk < self.chunk)
    }
    /// The offset padding entries carry.
    pub(crate) fn pad(&self) -> i32 {
        (self.chunk * self.ld) as i32
    }
}

impl Kernel {
    /// A kernel with its identity and geometry, every other field at its neutral value:
    /// - `source` empty (most families render it once the kernel's tables are built);
    /// - `orientation` [`Orientation::Right`], what the families build (a left-orientation
    ///   block kernel is built on the transposed problem and marked `Left` afterwards);
    /// - `ptr`, `idx` and `steps` empty, `fine`, `prepass` and `tma_a` `None`;
    /// - `live_instances`, `dead_instances` and `literal_words` 0;
    /// - `values_embedded` and `w_smem_image` false.
    ///
    /// A family sets the fields that differ by struct update:
    /// `Kernel { ptr, idx, ..Kernel::new(name, family, mode, launch, (m, k, n), dtype, block) }`.
    pub(crate) fn new(
        name: String,
        family: Family,
        mode: Mode,
        launch: Launch,
        spec_shape: (usize, usize, usize),
        dtype: Dtype,
        block: (usize, usize),
    ) -> Kernel {
        Kernel {
            name,
            family,
            mode,
            source: String::new(),
            launch,
            spec_shape,
            dtype,
            block,
            orientation: Orientation::Right,
            ptr: vec![],
            idx: vec![],
            fine: None,
            live_instances: 0,
            dead_instances: 0,
            literal_words: 0,
            values_embedded: false,
            prepass: None,
            steps: vec![],
            tma_a: None,
            w_smem_image: false,
        }
    }

    /// Packs a row-major `K × N` weight (left orientation: `M × K`) into the order the
    /// kernel reads it, by its family's entry in the family table (`spmm/families.rs`):
    /// block kernels store each live block row-major, blocks in `idx` order; the fine kernel
    /// one value per entry in `idx` order; dense: the same as block kernels with every block
    /// live; the int8 family each live block column-major (n-major, the block's k
    /// contiguous), blocks in `idx` order. Left-orientation block kernels read the blocks of
    /// `Wᵀ` (`K × M`), each stored row-major. The 3xTF32 family stores each live block's TF32
    /// big part, then its small part (both row-major). The 2:4 family stores the kept values in
    /// `mma.sp`'s register layout, chosen by the metadata in its `idx` (`spmm::two_four::pack`).
    pub fn pack_weight<W: WeightLookup<f32> + ?Sized>(&self, w: &W) -> Vec<f32> {
        let w = Lookup(w);
        if let Some(packed) = self.pack_left(&w) {
            return packed;
        }
        self.check_size(&w);
        (families::ops(self.family).pack.f32)(self, &w)
    }

    /// [`Kernel::pack_weight`] on quantized values (the int8 family's `W_q` argument).
    pub fn pack_weight_i8(&self, w: &[i8]) -> Vec<i8> {
        if let Some(packed) = self.pack_left(w) {
            return packed;
        }
        self.check_size(w);
        (families::ops(self.family).pack.i8)(self, &Lookup(w))
    }

    /// Left-orientation block kernels: the blocks of `Wᵀ`, each row-major (`None` for the
    /// other kernels).
    fn pack_left<T: Copy + Default, W: WeightLookup<T> + ?Sized>(&self, w: &W) -> Option<Vec<T>> {
        if self.orientation != Orientation::Left || matches!(self.family, Family::Fine | Family::FineLeft) {
            return None;
        }
        let (m, k, _) = self.spec_shape;
        assert_eq!(w.numel(), m * k, "weight has the wrong size");
        let mut wt = vec![T::default(); k * m];
        for r in 0..m {
            for c in 0..k {
                wt[c * m + r] = w.at(r * k + c);
            }
        }
        Some(pack_blocks(&self.ptr, &self.idx, (self.block.1, self.block.0), m, &wt))
    }

    fn check_size<T, W: WeightLookup<T> + ?Sized>(&self, w: &W) {
        let (_, k, n) = self.spec_shape;
        if self.family != Family::FineLeft {
            assert_eq!(w.numel(), k * n, "weight has the wrong size");
        }
    }

    /// The `idx` table as the kernel reads it: fine kernels take their entry offsets in bytes;
    /// the others take `idx` as it is.
    pub fn device_idx(&self) -> Vec<i32> {
        match self.family {
            // Byte offsets into the shared D tile: the kernel adds each to the lane's address
            // as it is (one add per entry, no unpacking).
            Family::Fine | Family::FineLeft => self.idx.iter().map(|&e| 4 * e).collect(),
            _ => self.idx.iter().chain(&self.steps).copied().collect(),
        }
    }

    /// The k8 steps of a 3xTF32 fine kernel (each an `M × 8·n_tiles × 8` TF32 product on gathered k;
    /// what the planner's cost model counts), `None` for other families.
    pub fn tensor_steps(&self) -> Option<usize> {
        (self.family == Family::FineTf32).then(|| self.ptr.last().map_or(0, |&p| p as usize))
    }

    /// The n8 tiles per step of a 3xTF32 fine kernel (1 or 2), `None` for other families.
    pub fn tensor_n_tiles(&self) -> Option<usize> {
        let t = self.fine.filter(|_| self.family == Family::FineTf32)?;
        Some(t.cols / (8 * t.warps).max(1))
    }

    /// Multiply-adds the kernel executes (live blocks or entries only) times 2, as its
    /// family's entry counts them.
    pub fn flops(&self) -> f64 {
        let (m, _, n) = self.spec_shape;
        // The dense operand's other dimension: rows of A, or columns of B (left).
        let m = if self.orientation == Orientation::Left { n } else { m };
        (families::ops(self.family).flops)(self, m)
    }
}

/// What the shared kernel code asks of a kernel family, beside its `specialize`: one entry per
/// [`Family`] in the family table (`spmm/families.rs`), each defined in the family's module.
pub(crate) struct FamilyOps {
    /// Packs the weight in the order the kernel reads it (after the shared left-orientation
    /// and size checks of [`Kernel::pack_weight`]).
    pub pack: Packer,
    /// Multiply-adds the kernel executes times 2; `m` the dense operand's other dimension.
    pub flops: fn(&Kernel, usize) -> f64,
}

/// A family's weight packer for each element type a kernel takes (`f32` values, the int8
/// family's quantized `i8`); [`packer!`] makes one from a function generic over both.
pub(crate) struct Packer {
    pub f32: fn(&Kernel, &dyn WeightLookup<f32>) -> Vec<f32>,
    pub i8: fn(&Kernel, &dyn WeightLookup<i8>) -> Vec<i8>,
}

/// `packer!(f)`: the [`Packer`] of `f<T, W>(&Kernel, &W) -> Vec<T>`.
macro_rules! packer {
    ($pack:path) => {
        $crate::codegen::spmm::kernel::Packer { f32: |k, w| $pack(k, w), i8: |k, w| $pack(k, w) }
    };
}
pub(crate) use packer;

/// The block families' entry: live blocks row-major ([`pack_blocks`]), two flops per
/// multiply-add of every live block.
pub(crate) const BLOCK_OPS: FamilyOps = FamilyOps { pack: packer!(blocks), flops: block_flops };

/// Two flops per multiply-add of every live block (`idx` lists them) over `m` dense rows.
pub(crate) fn block_flops(kernel: &Kernel, m: usize) -> f64 {
    2.0 * m as f64 * (kernel.idx.len() * kernel.block.0 * kernel.block.1) as f64
}

/// Two flops per live entry (`live_instances`) over `m` dense rows: the fine families.
pub(crate) fn entry_flops(kernel: &Kernel, m: usize) -> f64 {
    2.0 * m as f64 * kernel.live_instances as f64
}

/// Every live block row-major, in table order ([`pack_blocks`] on the kernel's tables).
pub(crate) fn blocks<T: Copy, W: WeightLookup<T> + ?Sized>(kernel: &Kernel, w: &W) -> Vec<T> {
    pack_blocks(&kernel.ptr, &kernel.idx, kernel.block, kernel.spec_shape.2, w)
}

/// Each live block column-major (n-major, the block's k contiguous), in table order: the int8
/// B fragments via plain ldmatrix, and wgmma's K-major B operand.
pub(crate) fn blocks_column_major<T: Copy, W: WeightLookup<T> + ?Sized>(kernel: &Kernel, w: &W) -> Vec<T> {
    let (bh, bw) = kernel.block;
    let n = kernel.spec_shape.2;
    let mut out = Vec::with_capacity(kernel.idx.len() * bh * bw);
    for j in 0..kernel.ptr.len() - 1 {
        for e in kernel.ptr[j]..kernel.ptr[j + 1] {
            let kb = kernel.idx[e as usize] as usize;
            for c in 0..bw {
                for r in 0..bh {
                    out.push(w.at((kb * bh + r) * n + j * bw + c));
                }
            }
        }
    }
    out
}

/// A weight lookup behind a reference, sized (so `&W` of any `W`, a slice too, becomes a
/// `&dyn WeightLookup`).
struct Lookup<'a, W: ?Sized>(&'a W);

impl<T, W: WeightLookup<T> + ?Sized> WeightLookup<T> for Lookup<'_, W> {
    fn numel(&self) -> usize {
        self.0.numel()
    }
    fn at(&self, i: usize) -> T {
        self.0.at(i)
    }
}

/// The live `(bh, bw)` blocks of a row-major weight with `n` columns, row-major each, in
/// the order of the block-column tables `ptr`/`idx`.
pub(crate) fn pack_blocks<T: Copy, W: WeightLookup<T> + ?Sized>(
    ptr: &[i32],
    idx: &[i32],
    (bh, bw): (usize, usize),
    n: usize,
    w: &W,
) -> Vec<T> {
    let mut out = Vec::with_capacity(idx.len() * bh * bw);
    for j in 0..ptr.len() - 1 {
        for e in ptr[j]..ptr[j + 1] {
            let kb = idx[e as usize] as usize;
            for r in 0..bh {
                for c in 0..bw {
                    out.push(w.at((kb * bh + r) * n + j * bw + c));
                }
            }
        }
    }
    out
}
