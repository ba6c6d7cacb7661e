//! The streaming dense kernel ([`Family::DenseStream`]) for skinny 16-bit products: which
//! shapes it takes and its tiling are in [`crate::kernel_choice::stream`]; here the spec is
//! checked, the template filled and the weight packed (each column slab as its shared-memory
//! image: the kernel copies its slab into shared memory once per CTA, by cp.async).

use super::kernel::*;
use super::shared::*;
use crate::codegen::render::{render, KernelHead};
use crate::codegen::{CodegenError, Mode, SpmmSpec};
use crate::kernel_choice::stream::{supports, tiling};
use crate::sparse::WeightLookup;
use serde::Serialize;

/// Multiprocessors the grid is sized for (H100/H200 SXM); the kernel strides over its row
/// tiles, so any count is correct and a different one costs only balance.
const SMS: usize = 132;

#[derive(Serialize)]
struct Ctx {
    #[serde(flatten)]
    head: KernelHead,
    kp: usize,
    bm: usize,
    bn: usize,
    warps: usize,
    stages: usize,
    per_sm: usize,
    a_ld: usize,
    w_ld: usize,
    wslot: usize,
    packed: bool,
    col_tiles: usize,
    /// N is a multiple of 8: a slab's rows copy out 16 bytes at a time.
    n_vec: bool,
}

/// The streaming kernel of `spec`: a dense (every block live), right-orientation 16-bit
/// weight the kernel supports, any epilogue, not accumulating (a dense part is a plan's only
/// part, so it always writes the output first).
pub(crate) fn specialize(spec: &SpmmSpec) -> Result<Kernel, CodegenError> {
    let (m, k, n) = (spec.m, spec.k, spec.n);
    if !supports(spec.dtype, spec.orientation, k, n) {
        return Err(spec_err(format!(
            "the streaming dense kernel takes 16-bit right-orientation weights with K ≤ {}, not {} {:?} {k}x{n}",
            crate::kernel_choice::stream::MAX_K,
            spec.dtype.name(),
            spec.orientation
        )));
    }
    let (bh, bw) = spec.block;
    if bh == 0 || bw == 0 || k % bh != 0 || n % bw != 0 || spec.blocks.len() * bh * bw != k * n {
        return Err(spec_err(format!("the streaming dense kernel needs every block of the {k}x{n} weight live")));
    }
    if spec.live_rows || spec.accumulate || m == 0 {
        return Err(spec_err(
            "the streaming dense kernel takes a fixed, nonzero row count and overwrites its output".into(),
        ));
    }
    if m > i32::MAX as usize {
        return Err(spec_err(format!("{m} rows exceed the kernel's 32-bit row index")));
    }
    let t = tiling(k, n);
    let name = format!("spmm_dense_stream_{}_{m}x{k}x{n}", spec.dtype.name());
    let ctx = Ctx {
        head: kernel_head(&name, spec.dtype, spec),
        kp: t.kp,
        bm: t.bm,
        bn: t.bn,
        warps: t.warps,
        stages: t.stages,
        per_sm: t.per_sm,
        a_ld: t.a_ld,
        w_ld: t.w_ld,
        wslot: t.wslot,
        packed: t.packed,
        col_tiles: t.col_tiles,
        n_vec: n.is_multiple_of(8),
    };
    let source = render("spmm_dense_stream.cu.tera", &ctx)?;
    let launch = Launch {
        grid: (t.grid_x(m, SMS) as u32, t.col_tiles as u32, 1),
        block: ((t.warps * 32) as u32, 1, 1),
        smem_bytes: t.smem_bytes() as u32,
    };
    Ok(Kernel {
        source,
        live_instances: 1,
        ..Kernel::new(name, Family::DenseStream, Mode::IndexStream, launch, (m, k, n), spec.dtype, (k, n))
    })
}

/// The weight as the kernel reads it: each column slab's shared-memory image without the row
/// pad, `KP × BN` row-major (zero past K and past N), slab after slab, so that a CTA copies its
/// slab as 16-byte pieces without a register round trip.
pub(crate) fn pack<T: Copy + Default, W: WeightLookup<T> + ?Sized>(kernel: &Kernel, w: &W) -> Vec<T> {
    let (_, k, n) = kernel.spec_shape;
    let t = tiling(k, n);
    let mut out = vec![T::default(); t.col_tiles * t.kp * t.bn];
    for y in 0..t.col_tiles {
        for r in 0..k {
            for c in 0..t.bn.min(n.saturating_sub(y * t.bn)) {
                out[(y * t.kp + r) * t.bn + c] = w.at(r * n + y * t.bn + c);
            }
        }
    }
    out
}

/// The streaming family's entry in the family table: every multiply-add of the dense weight.
pub(crate) const OPS: FamilyOps = FamilyOps {
    pack: packer!(pack),
    flops: |kernel, m| 2.0 * m as f64 * (kernel.spec_shape.1 * kernel.spec_shape.2) as f64,
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::{Activation, Dtype, Epilogue, Orientation};

    fn dense(m: usize, k: usize, n: usize, dtype: Dtype) -> SpmmSpec {
        let blocks = (0..k / 8).flat_map(|r| (0..n / 8).map(move |c| (r, c))).collect();
        SpmmSpec::new(m, k, n, dtype, (8, 8), blocks)
    }

    #[test]
    fn renders_the_tiling_and_packs_row_major() {
        let mut s = dense(1000, 24, 144, Dtype::F16);
        s.epilogue = Epilogue { bias: true, activation: Activation::Clip { lo: 0.0, hi: 6.0 } };
        let kern = specialize(&s).unwrap();
        assert_eq!(kern.family, Family::DenseStream);
        let t = tiling(24, 144);
        assert_eq!((kern.launch.grid.1, t.col_tiles), (2, 2), "144 columns: two slabs of 80");
        assert!(kern.source.contains("#define KP 32") && kern.source.contains("#define K 24"));
        assert!(kern.source.contains("pad columns K..KP"), "24 → 32: the pad is zeroed");
        assert!(kern.source.contains("f32.f16.f16.f32"));
        assert_eq!(kern.launch.grid.0, 8, "1000 rows: 8 row tiles of 128");
        let w: Vec<f32> = (0..24 * 144).map(|i| i as f32 + 1.0).collect();
        let packed = kern.pack_weight(&w);
        assert_eq!(packed.len(), 2 * 32 * 80, "two slabs of 32 × 80");
        assert_eq!((packed[0], packed[79], packed[80]), (1.0, 80.0, 145.0), "slab 0, rows of 80");
        assert_eq!(packed[24 * 80], 0.0, "rows past K are zero");
        assert_eq!(packed[32 * 80], 81.0, "slab 1 starts at column 80");
        assert_eq!((packed[32 * 80 + 63], packed[32 * 80 + 64]), (144.0, 0.0), "zero past N");
        assert_eq!(packed.iter().filter(|v| **v != 0.0).count(), w.len(), "every value once");
        let bf = specialize(&dense(64, 16, 16, Dtype::Bf16)).unwrap();
        assert!(bf.source.contains("f32.bf16.bf16.f32") && !bf.source.contains("pad columns K..KP"));
        // Odd shapes (channels left after pruning): the packed ring and one-element stores.
        let mut odd = SpmmSpec::new(5000, 11, 43, Dtype::F16, (11, 43), vec![(0, 0)]);
        odd.epilogue.bias = true;
        let kern = specialize(&odd).unwrap();
        assert!(kern.source.contains("pair_at(as, g, k0)") && !kern.source.contains("ldmatrix_x4(a,"));
        // K past 256: tiles of 64 rows (4 warps), the slab narrowed to fit.
        let deep = specialize(&SpmmSpec::new(1568, 346, 99, Dtype::F16, (346, 99), vec![(0, 0)])).unwrap();
        assert_eq!(deep.launch.block.0, 128);
        assert!(deep.source.contains("#define BM 64") && deep.launch.smem_bytes as usize <= 226 * 1024);
    }

    #[test]
    fn refuses_what_it_does_not_compute() {
        assert!(specialize(&dense(64, 520, 64, Dtype::F16)).is_err(), "K past the ring");
        assert!(specialize(&dense(64, 16, 16, Dtype::F32)).is_err());
        let mut sparse = dense(64, 16, 16, Dtype::F16);
        sparse.blocks.pop();
        assert!(specialize(&sparse).is_err(), "a missing block");
        let mut left = dense(64, 16, 16, Dtype::F16);
        left.orientation = Orientation::Left;
        assert!(specialize(&left).is_err());
        let mut acc = dense(64, 16, 16, Dtype::F16);
        acc.accumulate = true;
        assert!(specialize(&acc).is_err(), "a dense part writes the output first");
    }
}
