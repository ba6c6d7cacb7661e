//! The cost model: predicted time of a dense GEMM, of one weight block, of a block-sparse
//! sub-operator and of a 2:4 sub-operator, from a per-arch cost DB (`costdb/<arch>.json`,
//! format in `costdb/README.md`) and an analytic model where the DB has no entry.
//!
//! All times are seconds on the whole GPU. `m` is the number of activation rows (the
//! product of the activation's leading dims); the weight is `k × n`.
//!
//! Two kernels have entries of their own, because their time does not follow the
//! per-shape table: the 3xTF32 fine kernel ([`FineTf32Entry`]: time from its k8 steps and the
//! re-reads of A, which `kernel_choice::fine_tf32::auto_work` counts on the part's pattern,
//! not from its element count), and the 3xTF32 block kernel ([`BlockTf32Entry`]: one entry for
//! every shape it takes, chosen by [`block_tf32::auto_takes`], so a block's time depends on
//! the orientation). Which kernel would run a part comes from [`crate::kernel_choice`], whose
//! rules the specializer's dispatcher calls too, so the model and the specializer agree.

use super::cover::BlockShape;
use super::hardware::{HardwareProfile, NumberFormat};
use crate::kernel_choice::{block_tf32, Dtype, FineTf32Work, Orientation as KernelOrientation};
use crate::Error;
use serde::{Deserialize, Serialize};

/// The `mma.sp` 2:4 kernel's throughput as a fraction of the dense tensor-core rate (the DB's
/// dense entry, cuBLAS's), counting the dense product's flops: `kernels bench --two-four` on an
/// H200 measured 0.44-0.90× cuBLAS dense fp16 on 4096³ and the MiniLM / BERT-base linears
/// (0.50× at 4096³), where the hardware allows 2×. It runs only where K is not whole 64-deep
/// stages (see [`two_four_dense_equivalent`]).
pub const TWO_FOUR_DENSE_EQUIVALENT: f64 = 0.5;
/// The same for the Hopper 2:4 kernel (`wgmma.mma_async.sp`): 1,171 dense-equivalent TFLOP/s at
/// 4096³ against the DB's 900 (1.50× cuBLASLt with the bias fused in the same call, 1.12-1.41×
/// on the MiniLM and BERT-base linears; H200, call c62, `benches/results/spmm_gpu.md`).
pub const TWO_FOUR_WGMMA_DENSE_EQUIVALENT: f64 = 1.3;

/// The dense-equivalent rate factor of the 2:4 kernel that runs a `K`-deep part: the Hopper
/// kernel where the kernel choice takes it (a 2:4 part is its operator's first launch, so it
/// never accumulates), else the `mma.sp` kernel.
pub fn two_four_dense_equivalent(k: usize) -> f64 {
    if crate::kernel_choice::two_four::takes_wgmma(crate::kernel_choice::Engine::Auto, k, false) {
        TWO_FOUR_WGMMA_DENSE_EQUIVALENT
    } else {
        TWO_FOUR_DENSE_EQUIVALENT
    }
}

/// Which side the sparse weight is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Orientation {
    /// `Y = X·W`, `W` is `k × n`.
    WeightRight,
    /// `Y = W·X`, `W` is `m × k`.
    WeightLeft,
}

/// The cost DB compiled in for sm_90.
pub const SM_90_COSTDB: &str = include_str!("../../../costdb/sm_90.json");

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct DenseEntry {
    pub dtype: String,
    pub tflops: f64,
    /// The dense kernel this rate is for: absent, the one the planner's dense alternative runs
    /// (the library's); `tf32x3` or `simt`, our own dense kernels (see [`DenseKernel`]), which
    /// the tune times.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
    /// Fixed time a call takes on top of the DB's `launch_us`, µs (absent: none). The library's
    /// 16-bit GEMMs at transformer sizes (M 4096, K and N 384-1536) took 1.6-3.8 µs more than
    /// their flops at the fitted rate, their bytes and a launch (session 18, 24 cuBLASLt calls
    /// with the bias timed by `tune` on MiniLM-L6): without it the planner sent pruned linears
    /// to the library that the block kernel runs faster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overhead_us: Option<f64>,
}

/// Our own dense kernels (every block of the block kernels live), each with its own dense rate:
/// on fp32 the 3xTF32 block kernel runs at several times the SIMT one's rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DenseKernel {
    Tf32x3,
    Simt,
}

impl DenseKernel {
    /// The name in the DB's `dense[].kernel`.
    pub fn name(self) -> &'static str {
        match self {
            DenseKernel::Tf32x3 => "tf32x3",
            DenseKernel::Simt => "simt",
        }
    }
}

/// Per-wave terms of a kernel (optional in every entry; 0 without). Per round of CTAs the GPU
/// runs (`Geometry::waves`): `wave_ns`, plus the critical path of its heaviest CTA:
/// `critical_ns` per unit it does in sequence and `critical_ps_per_fma` per multiply-add of
/// those units. At the sizes of a transformer's matmuls a block kernel's CTAs each walk one
/// block column, and the longest column, not the block count, sets the time.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct WaveTerms {
    #[serde(default)]
    pub wave_ns: f64,
    #[serde(default)]
    pub critical_ns: f64,
    #[serde(default)]
    pub critical_ps_per_fma: f64,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct BlockEntry {
    pub block: [usize; 2],
    pub dtype: String,
    pub tflops: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overhead_ns: Option<f64>,
    /// Fixed cost of a sub-operator of this shape per 1024 activation elements (`m·k`) it
    /// streams, ns: kernels that stage the whole activation pay it regardless of density.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activation_ns_per_k: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waves: Option<WaveTerms>,
}

/// The 3xTF32 fine kernel (fp32 element-sparse weights on tensor cores): its time is a
/// launch and the output, plus A re-read once per CTA column tile, plus its k8 steps
/// ([`FineTf32Work`]). Fitted by `spartac costdb fit`; without it the model assumes
/// half a third of the TF32 rate (three products per step, issue-bound) and A at the L2 rate.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct FineTf32Entry {
    /// Rate of the steps, counted as `2 · M · 8 · 8` flops each (one product, not three), TFLOP/s.
    pub step_tflops: f64,
    /// Rate at which the column tiles read A (`col_tiles · M · K · 4` bytes), TB/s.
    pub a_tb_s: f64,
    /// Fixed cost beyond the launch and the output, ns.
    pub fixed_ns: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waves: Option<WaveTerms>,
}

/// The 3xTF32 block kernel (fp32 blocks on tensor cores, the kernel `Engine::Auto` runs for
/// right-orientation fp32 blocks of 8..=128 × 8..=32, powers of two): one block against `M`
/// rows costs `2·M·h·w / tflops` (one product of three counted) plus its A slice
/// (`M·h·4` bytes, re-read for every block) at `a_tb_s`, plus `overhead_ns`; a sub-operator
/// adds `fixed_ns` to its launch and output. One entry for
/// every shape the kernel takes, so no measured shape is weighed against an analytic one of
/// the same kernel. Fitted by `spartac costdb fit`; without it the model assumes a third of
/// the TF32 rate and A at the L2 rate.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct BlockTf32Entry {
    pub tflops: f64,
    pub a_tb_s: f64,
    pub overhead_ns: f64,
    #[serde(default)]
    pub fixed_ns: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waves: Option<WaveTerms>,
}

/// A kernel's launch as the model's per-wave terms see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Geometry {
    /// CTAs in the grid.
    pub ctas: usize,
    /// CTAs one SM holds at once (by threads and shared memory).
    pub per_sm: usize,
    /// Units of work the heaviest CTA does in sequence: a block kernel's longest block column
    /// (its blocks, which every row tile of the column walks), the 3xTF32 fine kernel's steps
    /// (per k-chunk those of its busiest warp); 0 where the kernel's tables do not say.
    pub heaviest: usize,
    /// Multiply-adds of one unit (tile rows × block area; tile rows × 8 × 8 per n8 tile of a step).
    pub unit_fmas: usize,
}

impl Geometry {
    /// Rounds of CTAs on a GPU of `sms` SMs: `ceil(ctas / (sms · per_sm))`, at least 1.
    pub fn waves(&self, sms: usize) -> usize {
        self.ctas.div_ceil((sms * self.per_sm).max(1)).max(1)
    }
}

/// Which of the model's block terms prices a part: the per-(shape, dtype) table (a DB entry or
/// the analytic model), or the 3xTF32 block kernel's entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockKernel {
    Table,
    Tf32x3,
}

/// A parsed cost DB.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CostDb {
    pub version: u32,
    pub arch: String,
    pub source: String,
    pub dram_tb_s: f64,
    pub l2_tb_s: f64,
    pub launch_us: f64,
    pub block_overhead_ns: f64,
    pub dense: Vec<DenseEntry>,
    pub blocks: Vec<BlockEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fine_tf32: Option<FineTf32Entry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_tf32: Option<BlockTf32Entry>,
    /// The Hopper 2:4 kernel's measured rate per dtype (`tune` fits it from the 2:4 parts it
    /// timed); without one, [`TWO_FOUR_WGMMA_DENSE_EQUIVALENT`] times the dense rate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub two_four: Vec<TwoFourEntry>,
}

/// The Hopper 2:4 kernel's rate on one dtype: the dense product's flops per second (TFLOP/s),
/// measured on its own, not relative to the library's dense rate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TwoFourEntry {
    pub dtype: String,
    pub tflops: f64,
}

impl CostDb {
    pub const VERSION: u32 = 1;

    pub fn parse(text: &str) -> Result<CostDb, Error> {
        let db: CostDb =
            serde_json::from_str(text).map_err(|e| Error::Unsupported(format!("cost db: not valid: {e}")))?;
        if db.version != Self::VERSION {
            return Err(Error::Unsupported(format!(
                "cost db: version {} not supported (expected {})",
                db.version,
                Self::VERSION
            )));
        }
        db.validate()?;
        Ok(db)
    }

    /// Every rate finite and positive, every fixed cost finite and not negative, every block
    /// shape non-empty; the error names the field. A DB that fails it never prices anything.
    pub fn validate(&self) -> Result<(), Error> {
        let bad =
            |field: String, v: f64, what: &str| Err(Error::Unsupported(format!("cost db: {field} is {v}: {what}")));
        let rate = |field: String, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                bad(field, v, "a rate must be positive")
            }
        };
        let cost = |field: String, v: f64| {
            if v.is_finite() && v >= 0.0 {
                Ok(())
            } else {
                bad(field, v, "a fixed cost must be zero or more")
            }
        };
        for e in &self.two_four {
            rate(format!("two_four[{}].tflops", e.dtype), e.tflops)?;
        }
        rate("dram_tb_s".into(), self.dram_tb_s)?;
        rate("l2_tb_s".into(), self.l2_tb_s)?;
        cost("launch_us".into(), self.launch_us)?;
        cost("block_overhead_ns".into(), self.block_overhead_ns)?;
        for (i, d) in self.dense.iter().enumerate() {
            rate(format!("dense[{i}] ({}).tflops", d.dtype), d.tflops)?;
        }
        for (i, b) in self.blocks.iter().enumerate() {
            let at = format!("blocks[{i}] ({}x{} {})", b.block[0], b.block[1], b.dtype);
            if b.block[0] == 0 || b.block[1] == 0 {
                return Err(Error::Unsupported(format!("cost db: {at}.block is empty")));
            }
            rate(format!("{at}.tflops"), b.tflops)?;
            if let Some(v) = b.overhead_ns {
                cost(format!("{at}.overhead_ns"), v)?;
            }
            if let Some(v) = b.activation_ns_per_k {
                cost(format!("{at}.activation_ns_per_k"), v)?;
            }
        }
        let waves = |at: &str, w: &Option<WaveTerms>| {
            w.map_or(Ok(()), |w| {
                cost(format!("{at}.waves.wave_ns"), w.wave_ns)?;
                cost(format!("{at}.waves.critical_ns"), w.critical_ns)?;
                cost(format!("{at}.waves.critical_ps_per_fma"), w.critical_ps_per_fma)
            })
        };
        for (i, b) in self.blocks.iter().enumerate() {
            waves(&format!("blocks[{i}] ({}x{} {})", b.block[0], b.block[1], b.dtype), &b.waves)?;
        }
        if let Some(f) = &self.fine_tf32 {
            waves("fine_tf32", &f.waves)?;
        }
        if let Some(b) = &self.block_tf32 {
            waves("block_tf32", &b.waves)?;
        }
        if let Some(f) = &self.fine_tf32 {
            rate("fine_tf32.step_tflops".into(), f.step_tflops)?;
            rate("fine_tf32.a_tb_s".into(), f.a_tb_s)?;
            cost("fine_tf32.fixed_ns".into(), f.fixed_ns)?;
        }
        if let Some(b) = &self.block_tf32 {
            rate("block_tf32.tflops".into(), b.tflops)?;
            rate("block_tf32.a_tb_s".into(), b.a_tb_s)?;
            cost("block_tf32.overhead_ns".into(), b.overhead_ns)?;
            cost("block_tf32.fixed_ns".into(), b.fixed_ns)?;
        }
        Ok(())
    }
}

/// Hardware profile plus cost DB: everything needed to predict kernel times.
#[derive(Clone, Debug)]
pub struct CostModel {
    pub hw: HardwareProfile,
    pub db: CostDb,
}

impl CostModel {
    /// sm_90 with its compiled-in DB.
    pub fn sm_90() -> CostModel {
        CostModel { hw: HardwareProfile::sm_90(), db: CostDb::parse(SM_90_COSTDB).expect("bundled cost db parses") }
    }

    /// `hw` with `db`; the DB's arch must match.
    pub fn new(hw: HardwareProfile, db: CostDb) -> Result<CostModel, Error> {
        if db.arch != hw.arch {
            return Err(Error::Unsupported(format!("cost db is for {}, the target is {}", db.arch, hw.arch)));
        }
        Ok(CostModel { hw, db })
    }

    fn bytes(nf: &NumberFormat) -> f64 {
        nf.bits as f64 / 8.0
    }

    fn dram(&self) -> f64 {
        self.db.dram_tb_s * 1e12
    }

    fn launch(&self) -> f64 {
        self.db.launch_us * 1e-6
    }

    pub(crate) fn dense_rate(&self, nf: &NumberFormat) -> f64 {
        self.db.dense.iter().find(|d| d.dtype == nf.dtype).map_or(nf.tflops, |d| d.tflops) * 1e12
    }

    /// Dense `m × k` by `k × n` GEMM.
    pub fn dense_time(&self, nf: &NumberFormat, m: usize, k: usize, n: usize) -> f64 {
        self.dense_time_on(None, nf, m, k, n)
    }

    /// [`CostModel::dense_time`] on one of our own dense kernels: its DB rate where the DB has
    /// one, else the dtype's.
    pub fn dense_time_on(&self, kernel: Option<DenseKernel>, nf: &NumberFormat, m: usize, k: usize, n: usize) -> f64 {
        let own = kernel.and_then(|kern| {
            self.db.dense.iter().find(|d| d.dtype == nf.dtype && d.kernel.as_deref() == Some(kern.name()))
        });
        let entry = own.or_else(|| self.db.dense.iter().find(|d| d.dtype == nf.dtype && d.kernel.is_none()));
        let rate = own.map_or_else(|| self.dense_rate(nf), |d| d.tflops * 1e12);
        let overhead = if Self::streamed(kernel, nf, k, n) {
            0.0
        } else {
            entry.and_then(|d| d.overhead_us).unwrap_or(0.0) * 1e-6
        };
        // The models' library GEMM applies the bias itself (cuBLASLt, `codegen::library_gemm_fused`):
        // no prefill pass. (Charging one made `tune` fit fp16 cuBLAS at 1,943 TFLOP/s, twice
        // the H200's peak: call c72.)
        let (m, k, n) = (m as f64, k as f64, n as f64);
        2.0 * m * k * n / rate + (k * n + m * k + m * n) * Self::bytes(nf) / self.dram() + self.launch() + overhead
    }

    /// Whether a dense product priced for the library (`kernel` None) runs on our streaming
    /// kernel instead and so does not pay the library's fixed overhead: a skinny 16-bit product
    /// (K or N under 64) that `codegen::library_takes` leaves to it.
    pub fn streamed(kernel: Option<DenseKernel>, nf: &NumberFormat, k: usize, n: usize) -> bool {
        kernel.is_none()
            && (k < 64 || n < 64)
            && [Dtype::F16, Dtype::Bf16]
                .into_iter()
                .find(|d| d.name() == nf.dtype)
                .is_some_and(|d| crate::kernel_choice::stream::auto_takes(d, KernelOrientation::Right, k, n))
    }

    /// The per-wave terms of a kernel launched as `geometry`: `waves · (wave_ns + heaviest ·
    /// (critical_ns + unit_fmas · critical_ps_per_fma))`; 0 without terms or without a geometry.
    pub fn wave_time(&self, terms: Option<WaveTerms>, geometry: Option<&Geometry>) -> f64 {
        match (terms, geometry) {
            (Some(t), Some(g)) => {
                let path =
                    g.heaviest as f64 * (t.critical_ns * 1e-9 + g.unit_fmas as f64 * t.critical_ps_per_fma * 1e-12);
                g.waves(self.hw.sms) as f64 * t.wave_ns * 1e-9 + path
            }
            _ => 0.0,
        }
    }

    /// The per-wave terms of the block kernel `kernel` for `shape` in `nf`.
    pub fn block_waves(&self, kernel: BlockKernel, nf: &NumberFormat, shape: BlockShape) -> Option<WaveTerms> {
        match kernel {
            BlockKernel::Tf32x3 => self.block_tf32_entry().waves,
            BlockKernel::Table => self.table_waves(nf, shape),
        }
    }

    /// The planner's view of a block kernel's launch over the blocks at `positions` (block row,
    /// block column) in `orientation`: the heaviest CTA walks the longest block column (left:
    /// block row of W, the column of the transposed problem), on tiles of 128 rows (64 below
    /// 128 rows: the block kernels' default); one CTA per SM is assumed, as the shared memory a
    /// kernel takes is the specializer's to decide (the block fits leave the per-wave term out
    /// for that reason).
    pub fn block_geometry(shape: BlockShape, orientation: Orientation, positions: &[(u32, u32)], m: usize) -> Geometry {
        let mut cols: Vec<u32> =
            positions.iter().map(|&(r, c)| if orientation == Orientation::WeightRight { c } else { r }).collect();
        cols.sort_unstable();
        let runs: Vec<usize> = cols.chunk_by(|a, b| a == b).map(<[u32]>::len).collect();
        let tile_rows = if m >= 128 { 128 } else { 64 };
        Geometry {
            ctas: runs.len().max(1) * m.div_ceil(tile_rows),
            per_sm: 1,
            heaviest: runs.iter().copied().max().unwrap_or(0),
            unit_fmas: tile_rows * shape.area(),
        }
    }

    /// The depth of the activation a right-orientation block part streams: its live block rows
    /// of W times their height, at most the weight's `k` (the left orientation keeps `k`).
    /// The block kernels load an activation tile only where a block is live, so a
    /// weight whose pruning emptied whole block rows reads that much less of it (Swin-T's
    /// stage-2 MLP output weight: 8 live 32×32 blocks in 24 block rows read a third of its
    /// 25,088 × 768 activation; priced on all of it, the 32×32 cover lost to a 1×1 one that then
    /// ran 58 µs on the fine kernel).
    pub fn streamed_k(shape: BlockShape, orientation: Orientation, positions: &[(u32, u32)], k: usize) -> usize {
        if orientation != Orientation::WeightRight {
            return k;
        }
        let mut rows: Vec<u32> = positions.iter().map(|&(r, _)| r).collect();
        rows.sort_unstable();
        rows.dedup();
        (rows.len() * shape.h).min(k)
    }

    /// The per-wave terms of the table's `shape` in `nf` (its DB entry's), of the 3xTF32 block
    /// kernel's entry, or of the 3xTF32 fine kernel's.
    pub fn table_waves(&self, nf: &NumberFormat, shape: BlockShape) -> Option<WaveTerms> {
        self.db.blocks.iter().find(|e| e.block == [shape.h, shape.w] && e.dtype == nf.dtype).and_then(|e| e.waves)
    }

    /// The kernel that runs blocks of `shape` in `orientation` under `Engine::Auto`: the 3xTF32
    /// block kernel for the fp32 shapes it takes (the specializer's own rule), else the table.
    pub fn block_kernel(nf: &NumberFormat, shape: BlockShape, orientation: Orientation) -> BlockKernel {
        let o = match orientation {
            Orientation::WeightRight => KernelOrientation::Right,
            Orientation::WeightLeft => KernelOrientation::Left,
        };
        if nf.dtype == "f32" && block_tf32::auto_takes(Dtype::F32, o, (shape.h, shape.w)) {
            BlockKernel::Tf32x3
        } else {
            BlockKernel::Table
        }
    }

    /// The rates of the 3xTF32 block kernel: the DB's entry, or the analytic lead.
    pub fn block_tf32_entry(&self) -> BlockTf32Entry {
        self.db.block_tf32.clone().unwrap_or_else(|| {
            let tf32 = self.db.dense.iter().find(|d| d.dtype == "tf32").map_or(300.0, |d| d.tflops);
            BlockTf32Entry {
                tflops: tf32 / 3.0,
                a_tb_s: self.db.l2_tb_s,
                overhead_ns: self.db.block_overhead_ns,
                fixed_ns: 0.0,
                waves: None,
            }
        })
    }

    /// Effective compute rate (FLOP/s) for blocks of `shape` in `orientation`, and whether
    /// tensor cores run them.
    pub fn block_rate(&self, nf: &NumberFormat, shape: BlockShape, orientation: Orientation) -> (f64, bool) {
        if Self::block_kernel(nf, shape, orientation) == BlockKernel::Tf32x3 {
            return (self.block_tf32_entry().tflops * 1e12, true);
        }
        self.table_rate(nf, shape)
    }

    /// The table's rate for `shape`: its DB entry, else the analytic model.
    fn table_rate(&self, nf: &NumberFormat, shape: BlockShape) -> (f64, bool) {
        if let Some(e) = self.db.blocks.iter().find(|e| e.block == [shape.h, shape.w] && e.dtype == nf.dtype) {
            return (e.tflops * 1e12, nf.mma_tile.is_some());
        }
        let area = shape.area() as f64;
        match nf.mma_tile {
            Some((_, tn, tk)) if shape.h >= tk && shape.w >= tn => {
                let padded = (shape.h.div_ceil(tk) * tk * shape.w.div_ceil(tn) * tn) as f64;
                (self.dense_rate(nf) * (area / padded) * area / (area + 256.0), true)
            }
            _ => {
                let simt = self.hw.formats[0].tflops * 1e12;
                let slack = if shape.w == 1 && shape.h > 1 { 16.0 } else { 8.0 };
                (simt * area / (area + slack), false)
            }
        }
    }

    /// Time of one weight block of `shape` in `orientation` against `m` activation rows. A
    /// measured DB entry's rate already includes the kernel's re-reads of activations, so the
    /// analytic L2 term applies only to shapes without one; the 3xTF32 block kernel's entry
    /// prices its A slice on its own.
    pub fn block_time(&self, nf: &NumberFormat, shape: BlockShape, m: usize, orientation: Orientation) -> f64 {
        self.block_time_on(Self::block_kernel(nf, shape, orientation), nf, shape, m)
    }

    /// [`CostModel::block_time`] on a given kernel.
    pub fn block_time_on(&self, kernel: BlockKernel, nf: &NumberFormat, shape: BlockShape, m: usize) -> f64 {
        if kernel == BlockKernel::Tf32x3 {
            let e = self.block_tf32_entry();
            let (area, m) = (shape.area() as f64, m as f64);
            return 2.0 * m * area / (e.tflops * 1e12)
                + m * shape.h as f64 * 4.0 / (e.a_tb_s * 1e12)
                + area * 4.0 / self.dram()
                + e.overhead_ns * 1e-9;
        }
        let (rate, _) = self.table_rate(nf, shape);
        let entry = self.db.blocks.iter().find(|e| e.block == [shape.h, shape.w] && e.dtype == nf.dtype);
        let overhead = entry.and_then(|e| e.overhead_ns).unwrap_or(self.db.block_overhead_ns) * 1e-9;
        let (area, m, b) = (shape.area() as f64, m as f64, Self::bytes(nf));
        let l2 = if entry.is_some() { 0.0 } else { m * (shape.h + shape.w) as f64 * b / (self.db.l2_tb_s * 1e12) };
        2.0 * m * area / rate + l2 + area * b / self.dram() + overhead
    }

    /// Fixed cost of one sub-operator over an `m × n` output: a launch and the output's
    /// traffic (16-bit: one write; otherwise one read-accumulate-write in fp32).
    pub fn suboperator_fixed(&self, nf: &NumberFormat, m: usize, n: usize) -> f64 {
        // 16-bit kernels write their output once, in its own format (fp32 ones read and write
        // it in fp32, as a part accumulating onto another does).
        let per_element = if nf.bits == 16 { 2.0 } else { 8.0 };
        self.launch() + (m * n) as f64 * per_element / self.dram()
    }

    /// A block-sparse sub-operator of `n_blocks` blocks of `shape` in `orientation` over a
    /// `k`-deep weight.
    #[allow(clippy::too_many_arguments)]
    pub fn sparse_time(
        &self,
        nf: &NumberFormat,
        shape: BlockShape,
        orientation: Orientation,
        n_blocks: usize,
        m: usize,
        k: usize,
        n: usize,
    ) -> f64 {
        self.sparse_time_on(Self::block_kernel(nf, shape, orientation), nf, shape, n_blocks, m, k, n)
    }

    /// [`CostModel::sparse_time`] on a given kernel.
    #[allow(clippy::too_many_arguments)]
    pub fn sparse_time_on(
        &self,
        kernel: BlockKernel,
        nf: &NumberFormat,
        shape: BlockShape,
        n_blocks: usize,
        m: usize,
        k: usize,
        n: usize,
    ) -> f64 {
        let block = self.block_time_on(kernel, nf, shape, m);
        if kernel == BlockKernel::Tf32x3 {
            let fixed = self.block_tf32_entry().fixed_ns * 1e-9;
            return block * n_blocks as f64 + self.suboperator_fixed(nf, m, n) + fixed;
        }
        let streamed = self.activation_ns_per_k(nf, shape).map_or(0.0, |ns| ns * 1e-9 * (m * k) as f64 / 1024.0);
        block * n_blocks as f64 + self.suboperator_fixed(nf, m, n) + streamed
    }

    /// The activation-streaming term of blocks of `shape` in `nf` (ns per 1,024 elements of the
    /// `m × k` activation): the shape's DB entry's; for a 16-bit shape without one that the
    /// warp-specialized wgmma kernel runs, the term of that kernel's fitted entry of the same
    /// dtype (the kernel streams the activation tiles of its items alike for every block shape:
    /// left out, 64×64 and 16×16 covers were priced 20-40% below 32×32 ones that measured
    /// faster, session 18's MiniLM-L6 tune).
    fn activation_ns_per_k(&self, nf: &NumberFormat, shape: BlockShape) -> Option<f64> {
        let own = self.db.blocks.iter().find(|e| e.block == [shape.h, shape.w] && e.dtype == nf.dtype);
        if let Some(e) = own {
            return e.activation_ns_per_k;
        }
        if nf.bits != 16 || !crate::kernel_choice::block_wgmma::supports(shape.h, shape.w) {
            return None;
        }
        self.db.blocks.iter().filter(|e| e.dtype == nf.dtype).find_map(|e| e.activation_ns_per_k)
    }

    /// The rate (dense-product flops per second) of the 2:4 kernel that runs a `K`-deep part
    /// on `nf`: the DB's fitted entry for the Hopper kernel where it runs and has one, else
    /// [`two_four_dense_equivalent`] times the dense rate.
    pub fn two_four_rate(&self, nf: &NumberFormat, k: usize) -> f64 {
        let hopper = crate::kernel_choice::two_four::takes_wgmma(crate::kernel_choice::Engine::Auto, k, false);
        let fitted = self.db.two_four.iter().find(|e| e.dtype == nf.dtype).map(|e| e.tflops * 1e12);
        match fitted {
            Some(rate) if hopper => rate,
            _ => two_four_dense_equivalent(k) * self.dense_rate(nf),
        }
    }

    /// A 2:4 sub-operator on our 2:4 kernels: the dense product's flops at
    /// [`Self::two_four_rate`] (what the kernel
    /// measures, not the hardware's 2×), half the weight bytes plus 2 bits of metadata per
    /// kept element. `None` when the format has no sparse tensor cores.
    pub fn two_four_time(&self, nf: &NumberFormat, m: usize, k: usize, n: usize) -> Option<f64> {
        if !nf.sparse_2_4 {
            return None;
        }
        let (mf, kf, nf64) = (m as f64, k as f64, n as f64);
        let weight_bytes = kf * nf64 / 2.0 * (Self::bytes(nf) + 0.25);
        Some(
            2.0 * mf * kf * nf64 / self.two_four_rate(nf, k)
                + (weight_bytes + mf * kf * Self::bytes(nf)) / self.dram()
                + self.suboperator_fixed(nf, m, n),
        )
    }

    /// The rates of the 3xTF32 fine kernel: the DB's entry, or the analytic lead.
    pub fn fine_tf32_entry(&self) -> FineTf32Entry {
        self.db.fine_tf32.clone().unwrap_or_else(|| {
            let tf32 = self.db.dense.iter().find(|d| d.dtype == "tf32").map_or(300.0, |d| d.tflops);
            FineTf32Entry { step_tflops: tf32 / 3.0 * 0.5, a_tb_s: self.db.l2_tb_s, fixed_ns: 0.0, waves: None }
        })
    }

    /// The 3xTF32 fine kernel over `m` rows of a `k × n` weight doing `work`.
    pub fn fine_tf32_time(&self, nf: &NumberFormat, m: usize, k: usize, n: usize, work: &FineTf32Work) -> f64 {
        let e = self.fine_tf32_entry();
        let (mf, kf) = (m as f64, k as f64);
        self.suboperator_fixed(nf, m, n)
            + work.col_tiles as f64 * mf * kf * 4.0 / (e.a_tb_s * 1e12)
            + work.step_units() * mf * 128.0 / (e.step_tflops * 1e12)
            + e.fixed_ns * 1e-9
    }

    /// One read of an `m × k` activation from device memory.
    pub fn activation_read_time(&self, nf: &NumberFormat, m: usize, k: usize) -> f64 {
        (m * k) as f64 * Self::bytes(nf) / self.dram()
    }

    /// Elementwise epilogue (bias, activation) as its own kernel over `m × n`.
    pub fn epilogue_time(&self, m: usize, n: usize) -> f64 {
        self.launch() + 2.0 * (m * n) as f64 * 4.0 / self.dram()
    }

    /// `(shape, block weight)` for the greedy cover: the predicted time of one block.
    pub fn shape_weights(
        &self,
        nf: &NumberFormat,
        shapes: &[BlockShape],
        m: usize,
        orientation: Orientation,
    ) -> Vec<(BlockShape, f64)> {
        shapes.iter().map(|s| (*s, self.block_time(nf, *s, m, orientation))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_overhead_adds_to_its_dense_time_only() {
        let mut cm = CostModel::sm_90();
        let f16 = cm.hw.by_dtype("f16").unwrap().clone();
        let f32 = cm.hw.by_dtype("f32").unwrap().clone();
        let with = cm.dense_time(&f16, 4096, 384, 384);
        let skinny = cm.dense_time(&f16, 6000, 43, 11);
        let own = cm.dense_time_on(Some(DenseKernel::Tf32x3), &f32, 4096, 384, 384);
        let f32_library = cm.dense_time(&f32, 4096, 384, 384);
        let over = cm.db.dense.iter().find(|d| d.dtype == "f16" && d.kernel.is_none()).unwrap().overhead_us.unwrap();
        assert!(over > 1.0, "the bundled DB prices the 16-bit library's overhead");
        for d in cm.db.dense.iter_mut() {
            d.overhead_us = None;
        }
        assert!((with - cm.dense_time(&f16, 4096, 384, 384) - over * 1e-6).abs() < 1e-12);
        // A skinny product runs on our streaming kernel, not the library: no overhead.
        assert_eq!(cm.dense_time(&f16, 6000, 43, 11), skinny);
        // fp32 has no overhead entry: unchanged.
        assert_eq!(cm.dense_time_on(Some(DenseKernel::Tf32x3), &f32, 4096, 384, 384), own);
        assert_eq!(cm.dense_time(&f32, 4096, 384, 384), f32_library);
    }

    #[test]
    fn sixteen_bit_shapes_without_an_entry_stream_activations_like_the_wgmma_kernels_entry() {
        let cm = CostModel::sm_90();
        let f16 = cm.hw.by_dtype("f16").unwrap().clone();
        let f32 = cm.hw.by_dtype("f32").unwrap().clone();
        let o = Orientation::WeightRight;
        let term = cm.activation_ns_per_k(&f16, BlockShape::new(32, 32)).expect("the fitted 32x32 entry");
        // 64x64 and 16x16 have no entry of their own: the wgmma kernel's term.
        assert_eq!(cm.activation_ns_per_k(&f16, BlockShape::new(64, 64)), Some(term));
        assert_eq!(cm.activation_ns_per_k(&f16, BlockShape::new(16, 16)), Some(term));
        // Shapes the wgmma kernel does not take, and fp32, stream nothing extra.
        assert_eq!(cm.activation_ns_per_k(&f16, BlockShape::new(1, 1)), None);
        assert_eq!(cm.activation_ns_per_k(&f32, BlockShape::new(64, 64)), None);
        // The streaming grows a sub-operator's time with m · k.
        let t = |k: usize| cm.sparse_time(&f16, BlockShape::new(64, 64), o, 8, 4096, k, 384);
        let want = term * 1e-9 * 4096.0 * 384.0 / 1024.0;
        assert!(((t(768) - t(384)) - want).abs() < 1e-12);
    }

    #[test]
    fn bundled_db_parses_and_bigger_blocks_are_cheaper_per_element() {
        let cm = CostModel::sm_90();
        let f32 = cm.hw.by_dtype("f32").unwrap().clone();
        for o in [Orientation::WeightRight, Orientation::WeightLeft] {
            let per_elem = |s: BlockShape| cm.block_time(&f32, s, 128, o) / s.area() as f64;
            assert!(per_elem(BlockShape::new(32, 32)) < per_elem(BlockShape::new(8, 8)));
            assert!(per_elem(BlockShape::new(8, 8)) < per_elem(BlockShape::new(1, 1)));
            assert!(per_elem(BlockShape::new(1, 32)) < per_elem(BlockShape::new(1, 1)));
        }
        let f16 = cm.hw.by_dtype("f16").unwrap().clone();
        assert!(cm.block_rate(&f16, BlockShape::new(32, 32), Orientation::WeightRight).1, "f16 32x32 on tensor cores");
        assert!(!cm.block_rate(&f16, BlockShape::new(1, 32), Orientation::WeightRight).1);
        assert!(cm.two_four_time(&f32, 128, 1024, 1024).is_none());
        // Priced as measured: the Hopper kernel beats dense at 4096³; where K is not whole
        // 64-deep stages the mma.sp kernel runs, slower than dense where the math dominates.
        assert!(cm.two_four_time(&f16, 4096, 4096, 4096).unwrap() < cm.dense_time(&f16, 4096, 4096, 4096));
        assert!(cm.two_four_time(&f16, 4096, 4128, 4096).unwrap() > cm.dense_time(&f16, 4096, 4128, 4096));
    }

    #[test]
    fn db_entries_override_and_bad_versions_fail() {
        let mut db = CostDb::parse(SM_90_COSTDB).unwrap();
        let base = CostModel::sm_90();
        let f32 = base.hw.by_dtype("f32").unwrap().clone();
        db.blocks.push(BlockEntry {
            block: [32, 32],
            dtype: "f32".into(),
            tflops: 5.0,
            overhead_ns: Some(10.0),
            activation_ns_per_k: None,
            waves: None,
        });
        let slow = CostModel::new(HardwareProfile::sm_90(), db).unwrap();
        let s = BlockShape::new(32, 32);
        let left = Orientation::WeightLeft;
        assert!(slow.block_time(&f32, s, 128, left) > 5.0 * base.block_time(&f32, s, 128, left));
        let bad = SM_90_COSTDB.replace("\"version\": 1", "\"version\": 9");
        assert!(CostDb::parse(&bad).unwrap_err().to_string().contains("version 9"));
        // Negative, zero or missing (null) rates and negative overheads: one error naming the field.
        let good: serde_json::Value = serde_json::from_str(SM_90_COSTDB).unwrap();
        for (pointer, value, field) in [
            ("/dram_tb_s", serde_json::json!(-1.0), "dram_tb_s is -1"),
            ("/dense/0/tflops", serde_json::json!(0.0), "dense[0]"),
            ("/fine_tf32/step_tflops", serde_json::json!(null), "not valid"),
            ("/block_tf32/a_tb_s", serde_json::json!(-0.5), "block_tf32.a_tb_s"),
            ("/launch_us", serde_json::json!(-3.0), "launch_us is -3"),
        ] {
            let mut v = good.clone();
            *v.pointer_mut(pointer).unwrap() = value;
            let err = CostDb::parse(&v.to_string()).unwrap_err().to_string();
            assert!(err.contains(field) && !err.contains('\n'), "{pointer}: {err}");
        }
        let mut v = good.clone();
        v["blocks"] = serde_json::json!([{ "block": [32, 32], "dtype": "f16", "tflops": 100.0, "overhead_ns": -5.0 }]);
        assert!(CostDb::parse(&v.to_string()).unwrap_err().to_string().contains("blocks[0]"));
    }

    /// The planner's launch of a block part: its longest block column (left: block row), and
    /// the wave terms it prices only where the DB has them.
    #[test]
    fn a_block_part_streams_only_the_activation_depth_of_its_live_block_rows() {
        let right = Orientation::WeightRight;
        let b = BlockShape::new(32, 32);
        // 3 live blocks in 2 distinct block rows of a 768-deep weight: 64 of the 768.
        assert_eq!(CostModel::streamed_k(b, right, &[(0, 0), (0, 3), (5, 1)], 768), 64);
        // Every block row live: the whole depth, never more (the last row clipped).
        let all: Vec<(u32, u32)> = (0..24).map(|r| (r, 0)).collect();
        assert_eq!(CostModel::streamed_k(b, right, &all, 760), 760);
        assert_eq!(CostModel::streamed_k(b, Orientation::WeightLeft, &[(0, 0)], 768), 768);
        // The streamed term follows: fewer live rows, a cheaper part.
        let cm = CostModel::sm_90();
        let f16 = cm.hw.by_dtype("f16").unwrap().clone();
        let t = |k| cm.sparse_time(&f16, b, right, 8, 25_088, k, 192);
        assert!(t(256) < t(768), "{} vs {}", t(256), t(768));
    }

    #[test]
    fn block_geometry_counts_the_longest_column() {
        let blocks = [(0, 1), (1, 1), (2, 1), (0, 3), (5, 0), (5, 3)];
        let s = BlockShape::new(32, 32);
        let right = CostModel::block_geometry(s, Orientation::WeightRight, &blocks, 4096);
        assert_eq!((right.heaviest, right.ctas, right.unit_fmas), (3, 3 * 32, 128 * 1024));
        let left = CostModel::block_geometry(s, Orientation::WeightLeft, &blocks, 64);
        assert_eq!((left.heaviest, left.ctas, left.unit_fmas), (2, 4, 64 * 1024));
        let base = CostModel::sm_90();
        assert_eq!(base.wave_time(None, Some(&right)), 0.0);
        let terms = WaveTerms { wave_ns: 100.0, critical_ns: 1000.0, critical_ps_per_fma: 1.0 };
        let want = 100e-9 + 3.0 * (1000e-9 + 128.0 * 1024.0 * 1e-12);
        assert!((base.wave_time(Some(terms), Some(&right)) - want).abs() < 1e-15);
    }

    /// fp32 blocks the 3xTF32 kernel takes (right orientation, 8..=128 × 8..=32) are priced by
    /// its entry, on tensor cores; other shapes, and the left orientation, stay on the SIMT model.
    #[test]
    fn fp32_blocks_the_tf32_kernel_takes_use_its_entry() {
        let base = CostModel::sm_90();
        let f32 = base.hw.by_dtype("f32").unwrap().clone();
        let (right, left) = (Orientation::WeightRight, Orientation::WeightLeft);
        let b = BlockShape::new(32, 32);
        assert!((CostModel::block_kernel(&f32, b, right) == BlockKernel::Tf32x3));
        assert!(!(CostModel::block_kernel(&f32, b, left) == BlockKernel::Tf32x3));
        assert!(
            !(CostModel::block_kernel(&f32, BlockShape::new(64, 64), right) == BlockKernel::Tf32x3),
            "64 columns stay SIMT"
        );
        assert!(!(CostModel::block_kernel(&f32, BlockShape::new(1, 32), right) == BlockKernel::Tf32x3));
        let f16 = base.hw.by_dtype("f16").unwrap().clone();
        assert!(!(CostModel::block_kernel(&f16, b, right) == BlockKernel::Tf32x3));
        assert!(base.block_rate(&f32, b, right).1 && !base.block_rate(&f32, b, left).1);
        let mut db = base.db.clone();
        db.block_tf32 =
            Some(BlockTf32Entry { tflops: 50.0, a_tb_s: 5.0, overhead_ns: 10.0, fixed_ns: 1500.0, waves: None });
        let cm = CostModel::new(base.hw.clone(), db).unwrap();
        let m = 4096;
        let want = 2.0 * 4096.0 * 1024.0 / 50e12 + 4096.0 * 32.0 * 4.0 / 5e12 + 1024.0 * 4.0 / cm.dram() + 10e-9;
        assert!((cm.block_time(&f32, b, m, right) - want).abs() < 1e-15);
        assert_eq!(cm.block_time(&f32, b, m, left), base.block_time(&f32, b, m, left), "left ignores the entry");
        let t = cm.sparse_time(&f32, b, right, 100, m, 4096, 4096);
        assert!((t - 100.0 * want - cm.suboperator_fixed(&f32, m, 4096) - 1.5e-6).abs() < 1e-12);
    }
}
