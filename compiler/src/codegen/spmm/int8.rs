//! The int8 block-sparse (and dense) kernel: tile choice, tables and rendering of
//! `templates/spmm_block_int8.cu.tera`. Same loop nest and tables as the float block
//! kernels (block columns, then the live k-blocks of each); the W blocks are packed
//! column-major ([`Kernel::pack_weight_i8`]) because ldmatrix cannot transpose int8.
//! `mma.sync` m16n8k32 on s8, int32 accumulation, a dequantizing epilogue and fp16 output;
//! the quantization its callers and the GPU reference share is `codegen::quant`.

use crate::codegen::render::{render, Int8Ctx};
use crate::codegen::spmm::kernel::{block_flops, blocks_column_major, packer, Family, FamilyOps, Kernel, Launch};
use crate::codegen::spmm::shared::{
    block_tables, kernel_head, kernel_literals, pipeline_stages, resolve_mode, spec_err, warp_rows,
};
use crate::codegen::{CodegenError, Dtype, Mode, SpmmSpec};

/// Block shapes the int8 kernel takes: `bh` a multiple of 32 (one m16n8k32 step), `bw` a
/// multiple of 16 (two n8 tiles per ldmatrix.x4) and at most 64 (accumulator registers).
pub fn int8_block_fits((bh, bw): (usize, usize)) -> bool {
    bh % 32 == 0 && bh > 0 && bw % 16 == 0 && bw > 0 && bw <= 64
}

pub(super) fn block_int8(spec: &SpmmSpec, live: &[bool], dense: bool) -> Result<Kernel, CodegenError> {
    let (m, k, n) = (spec.m, spec.k, spec.n);
    let (bh, bw) = spec.block;
    let (kbs, nbs) = (k / bh, n / bw);
    if !int8_block_fits((bh, bw)) {
        return Err(spec_err(format!(
            "int8 kernels need bh a multiple of 32, bw a multiple of 16 and bw <= 64, got {bh}x{bw}"
        )));
    }
    if spec.values.is_some() {
        return Err(spec_err("int8 kernels read the weight from device memory; embedded values are not built".into()));
    }
    let warps = warp_rows(spec, "int8")?;
    let stages = pipeline_stages(spec, 4)?;
    let (threads, bm) = (32 * warps, 32 * warps);
    // 16 bytes of padding per row / column: 8 consecutive ldmatrix rows hit distinct banks.
    let (a_ld, w_ld) = (bh + 16, bh + 16);
    let smem = stages * (bm * a_ld + bw * w_ld);
    if smem > 227 * 1024 {
        return Err(spec_err(format!("block {bh}x{bw} needs {smem} bytes of shared memory per CTA (at most 232448)")));
    }
    let tables = block_tables(m, (kbs, nbs), (bh, bw), bm, live)?;
    let (ptr, idx) = (&tables.ptr, &tables.idx);
    let literal_words = if dense { 0 } else { ptr.len() + idx.len() };
    let mode = if dense { Mode::IndexStream } else { resolve_mode(spec, literal_words) };
    let unrolled = mode == Mode::Unrolled;
    let name = format!(
        "spmm_{}_i8_{}_{}x{}_{}",
        if dense { "dense" } else { "block" },
        Dtype::I8.output().name(),
        bh,
        bw,
        if unrolled { "unrolled" } else { "stream" }
    );
    let launch =
        Launch { grid: (nbs as u32, m.div_ceil(bm) as u32, 1), block: (threads as u32, 1, 1), smem_bytes: smem as u32 };
    let kernel = Kernel::new(name, Family::BlockInt8, mode, launch, (m, k, n), Dtype::I8, (bh, bw)).with_block_tables(
        tables,
        literal_words,
        false,
    );
    let ctx = Int8Ctx {
        head: kernel_head(&kernel.name, Dtype::I8.output(), spec),
        literals: kernel_literals(&kernel, kernel.idx.clone(), vec![], 8, 0),
        bh,
        bw,
        bm,
        threads,
        warps,
        stages,
        a_ld,
        w_ld,
        a_chunks: bm * bh / 16,
        w_chunks: bh * bw / 16,
        a_row_chunks: bh / 16,
        w_col_chunks: bh / 16,
        dense,
        k_blocks: kbs,
        n_tiles: bw / 8,
    };
    let source = render("spmm_block_int8.cu.tera", &ctx)?;
    Ok(Kernel { source, ..kernel })
}

/// The int8 family's entry in the family table: each live block column-major (the B
/// fragments via plain ldmatrix, which cannot transpose int8).
pub(crate) const OPS: FamilyOps = FamilyOps { pack: packer!(blocks_column_major), flops: block_flops };

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::specialize;

    fn spec(blocks: Vec<(usize, usize)>) -> SpmmSpec {
        SpmmSpec::new(64, 64, 96, Dtype::I8, (32, 32), blocks)
    }

    #[test]
    fn int8_blocks_are_packed_column_major_in_table_order() {
        let k = specialize(&spec(vec![(1, 2), (0, 0), (1, 0)])).unwrap();
        assert_eq!(k.family, Family::BlockInt8);
        assert_eq!((k.ptr.clone(), k.idx.clone()), (vec![0, 2, 2, 3], vec![0, 1, 1]));
        let w: Vec<i8> = (0..64 * 96).map(|i| (i % 251) as i8).collect();
        let packed = k.pack_weight_i8(&w);
        assert_eq!(packed.len(), 3 * 32 * 32);
        // Block (0, 0): column 0 first, k contiguous.
        assert_eq!(packed[1], w[96]);
        assert_eq!(packed[32], w[1]);
        // Second packed block = block (1, 0): row 32, column 0 first; element (r 33, c 2).
        assert_eq!(packed[1024], w[32 * 96]);
        assert_eq!(packed[1024 + 2 * 32 + 1], w[33 * 96 + 2]);
        // Third = block (1, 2): columns 64.., rows 32...
        assert_eq!(packed[2048 + 5 * 32 + 7], w[39 * 96 + 69]);
        // The f32 packing follows the same order.
        let wf: Vec<f32> = w.iter().map(|v| *v as f32).collect();
        assert_eq!(k.pack_weight(&wf), packed.iter().map(|v| *v as f32).collect::<Vec<_>>());
        assert_eq!(k.flops(), 2.0 * 64.0 * 3.0 * 1024.0);
    }

    #[test]
    fn int8_kernel_uses_m16n8k32_dequantizes_and_takes_the_scales() {
        let mut s = spec(vec![(0, 0), (1, 1)]);
        s.mode = Mode::Unrolled;
        s.epilogue = crate::codegen::Epilogue { bias: true, activation: crate::codegen::Activation::Relu };
        let k = specialize(&s).unwrap();
        assert_eq!(k.mode, Mode::Unrolled);
        assert_eq!(k.name, "spmm_block_i8_f16_32x32_unrolled");
        assert!(k.source.contains("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32"));
        assert!(k.source.contains("const float* __restrict__ scale_w, float scale_a"));
        assert!(!k.source.contains(".trans"), "ldmatrix.trans cannot transpose int8");
        let all = (0..2).flat_map(|r| (0..3).map(move |c| (r, c))).collect();
        let d = specialize(&spec(all)).unwrap();
        assert_eq!((d.family, d.mode), (Family::BlockInt8, Mode::IndexStream));
        assert!(d.name.starts_with("spmm_dense_i8"));
    }

    #[test]
    fn int8_refuses_what_it_does_not_build() {
        let mut fine = spec(vec![(0, 0)]);
        fine.block = (1, 1);
        let cases = [
            (fine, "int8 fine-grained kernel not built"),
            (SpmmSpec::new(64, 64, 96, Dtype::I8, (16, 16), vec![]), "multiple of 32"),
            (
                {
                    let mut s = spec(vec![]);
                    s.values = Some(vec![0.0; 64 * 96]);
                    s
                },
                "embedded values",
            ),
        ];
        for (s, want) in cases {
            let e = specialize(&s).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(e.contains(want), "{e:?} should mention {want:?}");
        }
    }
}
