//! The hardware profile of a target GPU: which number formats and widths its kernels can
//! run, the tensor-core tile shapes, whether 2:4 sparse tensor cores exist, and the
//! throughput leads the analytic cost model starts from. Only `sm_90` (H100/H200) so far:
//! f32 on SIMT, tf32, f16/bf16, fp8 (e4m3, e5m2), int8 and int4 through `mma.sync`, 2:4
//! through `mma.sp`.

use crate::tesa::Format;

/// A (bit width, format) pair a kernel can compute in, with its tensor-core tile.
#[derive(Clone, Debug, PartialEq)]
pub struct NumberFormat {
    /// Short dtype name the kernel generator understands: `f32`, `tf32`, `f16`, `bf16`,
    /// `fp8e4m3`, `fp8e5m2`, `i8`, `i4`.
    pub dtype: &'static str,
    pub bits: u8,
    pub format: Format,
    /// `mma.sync` shape (m, n, k) for this format, `None` when it runs on SIMT cores only.
    pub mma_tile: Option<(usize, usize, usize)>,
    /// `mma.sp` (2:4 structured sparsity along k) exists for this format.
    pub sparse_2_4: bool,
    /// Effective dense throughput in TFLOP/s (or TOP/s) that the cost model assumes.
    pub tflops: f64,
}

/// Everything the planner knows about a target.
#[derive(Clone, Debug, PartialEq)]
pub struct HardwareProfile {
    pub arch: &'static str,
    pub formats: Vec<NumberFormat>,
    /// DRAM bandwidth in bytes per second.
    pub dram_bytes_per_s: f64,
    /// L2 bandwidth in bytes per second (activation rows re-read per weight block).
    pub l2_bytes_per_s: f64,
    /// Fixed cost of one kernel launch, in seconds.
    pub launch_s: f64,
    /// Streaming multiprocessors (132 on the H100 SXM and the H200): how many CTAs run at once.
    pub sms: usize,
}

impl HardwareProfile {
    /// NVIDIA Hopper, sm_90 (H100 SXM numbers; H200 has 4.8 TB/s of HBM3e).
    ///
    /// Facts and their sources:
    /// - `mma.sync` on f16/bf16 (m16n8k16), tf32 (m16n8k8), s8/u8 (m16n8k32) and s4/u4
    ///   (m16n8k64) needs sm_80 or higher, so it exists on sm_90 (PTX ISA 8.4, `mma`
    ///   instruction, "Target ISA notes"). Hopper's `wgmma` has no 4-bit integer type, and
    ///   the H100 datasheet lists no INT4 rate, so int4 is kept (it is valid PTX) but at the
    ///   int8 rate: no speed-up is assumed from it.
    /// - fp8 e4m3/e5m2 `mma.sync` m16n8k32 needs sm_89 or higher (PTX ISA 8.4, `mma`).
    /// - `mma.sp` (2:4 sparsity on operand A along k) needs sm_80 or higher for f16, bf16,
    ///   tf32, s8, u8 (and s4/u4), and sm_89 for e4m3/e5m2 (PTX ISA 8.4, `mma.sp`).
    /// - Rates are leads, not measurements: fp32 SIMT about 50 TFLOP/s effective (67 peak),
    ///   f16/bf16 tensor cores through `mma.sync` about 600 (989 peak with `wgmma`), tf32
    ///   about 300, int8/fp8 about 1200; HBM3 3.35 TB/s; L2 about 10 TB/s. A per-arch cost
    ///   DB (`costdb/sm_90.json`) replaces them once measured.
    pub fn sm_90() -> HardwareProfile {
        let f = |dtype, bits, format, mma_tile, sparse_2_4, tflops| NumberFormat {
            dtype,
            bits,
            format,
            mma_tile,
            sparse_2_4,
            tflops,
        };
        HardwareProfile {
            arch: "sm_90",
            formats: vec![
                f("f32", 32, Format::Float, None, false, 50.0),
                f("tf32", 32, Format::Float, Some((16, 8, 8)), true, 300.0),
                f("f16", 16, Format::Float, Some((16, 8, 16)), true, 600.0),
                f("bf16", 16, Format::BFloat, Some((16, 8, 16)), true, 600.0),
                f("fp8e4m3", 8, Format::Fp8E4M3, Some((16, 8, 32)), true, 1200.0),
                f("fp8e5m2", 8, Format::Fp8E5M2, Some((16, 8, 32)), true, 1200.0),
                f("i8", 8, Format::Int, Some((16, 8, 32)), true, 1200.0),
                f("u8", 8, Format::UInt, Some((16, 8, 32)), true, 1200.0),
                f("i4", 4, Format::Int, Some((16, 8, 64)), true, 1200.0),
                f("u4", 4, Format::UInt, Some((16, 8, 64)), true, 1200.0),
            ],
            dram_bytes_per_s: 3.35e12,
            l2_bytes_per_s: 10e12,
            launch_s: 3e-6,
            sms: 132,
        }
    }

    /// The profile of a named arch (`sm_90` only so far).
    pub fn for_arch(arch: &str) -> Option<HardwareProfile> {
        (arch == "sm_90").then(HardwareProfile::sm_90)
    }

    /// The supported widths, ascending, without duplicates.
    pub fn widths(&self) -> Vec<u8> {
        let mut w: Vec<u8> = self.formats.iter().map(|f| f.bits).collect();
        w.sort_unstable();
        w.dedup();
        w
    }

    /// The format a kernel computes `bits`-wide `format` elements in. Float widths map to
    /// the plain type (f32 stays SIMT: tf32 changes results, so it is never chosen
    /// silently); an unknown pair falls back to f32.
    pub fn number_format(&self, bits: u8, format: Format) -> &NumberFormat {
        let dtype = match (bits, format) {
            (32, _) => "f32",
            (16, Format::BFloat) => "bf16",
            (16, _) => "f16",
            (8, Format::Int) => "i8",
            (8, Format::UInt) => "u8",
            (8, Format::Fp8E5M2) => "fp8e5m2",
            (8, _) => "fp8e4m3",
            (4, Format::UInt) => "u4",
            (4, _) => "i4",
            _ => "f32",
        };
        self.by_dtype(dtype).unwrap_or(&self.formats[0])
    }

    pub fn by_dtype(&self, dtype: &str) -> Option<&NumberFormat> {
        self.formats.iter().find(|f| f.dtype == dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sm_90_has_int4_fp8_and_2_4() {
        let hw = HardwareProfile::sm_90();
        assert_eq!(hw.widths(), vec![4, 8, 16, 32]);
        assert_eq!(hw.number_format(8, Format::Int).dtype, "i8");
        assert_eq!(hw.number_format(16, Format::BFloat).dtype, "bf16");
        assert_eq!(hw.number_format(32, Format::Float).mma_tile, None);
        assert!(hw.number_format(16, Format::Float).sparse_2_4);
        assert_eq!(hw.number_format(4, Format::Int).mma_tile, Some((16, 8, 64)));
    }
}
