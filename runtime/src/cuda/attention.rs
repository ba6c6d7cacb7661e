//! Fused attention ([`spartac::codegen::graph_ops::attention`]) on the GPU against an f64
//! reference: `spartac kernels attention`. Each [`AttentionCase`] is a BERT-style layer
//! (q, k, v split into heads out of `[batch, s, heads · d]` projections, Kᵀ folded, the heads
//! merged back through the output's strides, `scores · 1/√d`, optionally an additive
//! `[batch, 1, 1, keys]` padding mask of `-inf`); inputs come from a seeded SplitMix64 and are
//! rounded to the element type, the output is poisoned with NaN bytes before the launch, and the
//! reference is computed in f64 from the rounded inputs. The case list and the reference are
//! GPU-free (the compile test builds every case's kernel; a unit test checks the reference).

use cudarc::driver::{LaunchConfig, PushKernelArg};
use half::{bf16, f16};
use spartac::codegen::graph_ops::{attention_with, AttentionEngine, Binary, Expr, OpKernel, TensorDesc};
use spartac::ir::DType;
use spartac::rng::SplitMix64;

use super::{CudaDevice, CudaError, DriverContext};

/// Which keys the additive mask hides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mask {
    /// No mask operand: the score expression is the scale alone.
    None,
    /// Batch entry `b` keeps its first [`AttentionCase::valid_keys`] keys, the rest are `-inf`.
    Padding,
    /// As `Padding`, and batch entry 1 has every key masked: its rows are NaN, as the reference
    /// softmax makes them (`exp(-inf - -inf)`).
    EntryMasked,
    /// A `[batch, 1, queries, keys]` mask that varies along the queries (a decoder's): query
    /// `i` sees key `j` when `j ≤ i + keys - queries` and `j` is among the entry's valid keys;
    /// the others get `-inf`.
    Causal,
    /// As `Causal` with the type's lowest finite value instead of `-inf` (what transformers'
    /// exports add, `finfo.min`), every key of batch entry 1's first query masked: that row
    /// is the reference's near-uniform average, not NaN.
    CausalMin,
}

#[derive(Clone, Debug, PartialEq)]
pub struct AttentionCase {
    pub dtype: DType,
    pub batch: usize,
    pub heads: usize,
    /// Queries and keys.
    pub sq: usize,
    pub sk: usize,
    /// Widths of q/k and of v.
    pub d: usize,
    pub dv: usize,
    pub mask: Mask,
    /// The 16-bit kernel (`Auto`: what a compiled model runs).
    pub engine: AttentionEngine,
}

/// Normwise relative error a case may have: f32 in 3xTF32, 16-bit with the probabilities
/// rounded to the element type before ·V.
pub fn attention_tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 1e-2,
        DType::BF16 => 2e-2,
        _ => 1e-4,
    }
}

/// Every case: f32, f16 and bf16 at 64, 197, 256, 384 and 512 keys, heads 32, 64 and 128 wide,
/// with and without a padding mask; then per type a fully masked batch entry, a single key,
/// 4096 keys, and a ragged shape (queries ≠ keys, d = 40, dv = 24, V loaded plainly).
pub fn attention_cases() -> Vec<AttentionCase> {
    let mut cases = vec![];
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let base = AttentionCase {
            dtype,
            batch: 2,
            heads: 3,
            sq: 64,
            sk: 64,
            d: 64,
            dv: 64,
            mask: Mask::Padding,
            engine: AttentionEngine::Auto,
        };
        for s in [64, 197, 256, 384, 512] {
            for d in [32, 64, 128] {
                for mask in [Mask::None, Mask::Padding] {
                    cases.push(AttentionCase { sq: s, sk: s, d, dv: d, mask, ..base.clone() });
                }
            }
        }
        cases.push(AttentionCase { sq: 100, sk: 197, mask: Mask::EntryMasked, ..base.clone() });
        // Masks along the queries (GPT-2's causal one): square, more keys than queries, and
        // the finite lowest value of the type.
        for (sq, sk, d) in [(512, 512, 64), (197, 197, 32), (100, 300, 128)] {
            cases.push(AttentionCase { sq, sk, d, dv: d, mask: Mask::Causal, ..base.clone() });
        }
        cases.push(AttentionCase { sq: 256, sk: 256, mask: Mask::CausalMin, ..base.clone() });
        cases.push(AttentionCase { sq: 70, sk: 1, ..base.clone() });
        cases.push(AttentionCase { batch: 1, heads: 2, sq: 130, sk: 4096, mask: Mask::Padding, ..base.clone() });
        cases.push(AttentionCase { sq: 77, sk: 300, d: 40, dv: 24, ..base.clone() });
        if dtype != DType::F32 {
            // Enough heads that a CTA of the wgmma kernel takes several query tiles (the keys
            // staged once): MiniLM-L6's layer (two a CTA) and ViT-B/16's (197 keys: four, the
            // last query and key tiles ragged); and a window of 49 keys (Swin-T) in one key tile of 64.
            cases.push(AttentionCase { batch: 32, heads: 12, sq: 128, sk: 128, d: 32, dv: 32, ..base.clone() });
            cases.push(AttentionCase { batch: 32, heads: 12, sq: 197, sk: 197, mask: Mask::None, ..base.clone() });
            cases.push(AttentionCase { batch: 64, heads: 3, sq: 49, sk: 49, d: 32, dv: 32, ..base.clone() });
            // The other 16-bit kernels at a ragged key count with a mask, each head width.
            for engine in [
                AttentionEngine::MmaSync,
                AttentionEngine::Wgmma { bk: 64, ctas: 1 },
                AttentionEngine::Wgmma { bk: 128, ctas: 1 },
            ] {
                for d in [32, 64, 128] {
                    cases.push(AttentionCase { sq: 197, sk: 197, d, dv: d, engine, ..base.clone() });
                }
            }
        }
    }
    cases
}

impl AttentionCase {
    pub fn label(&self) -> String {
        let mask = match self.mask {
            Mask::None => "",
            Mask::Padding => " mask",
            Mask::EntryMasked => " mask+masked-entry",
            Mask::Causal => " causal",
            Mask::CausalMin => " causal-min",
        };
        let engine = match self.engine.label() {
            e if e.is_empty() => e,
            e => format!(" {e}"),
        };
        format!(
            "attention {} {}x{} q{} k{} d{} dv{}{mask}{engine}",
            self.dtype, self.batch, self.heads, self.sq, self.sk, self.d, self.dv
        )
    }

    /// Keys batch entry `b` keeps under a mask (all of them without one).
    pub fn valid_keys(&self, b: usize) -> usize {
        match (self.mask, b) {
            (Mask::None, _) | (_, 0) => self.sk,
            (Mask::EntryMasked, 1) => 0,
            _ => (self.sk - self.sk / (b + 2)).max(1),
        }
    }

    /// `1/√d` rounded to the element type (the score expression's constant).
    fn scale(&self) -> f64 {
        round(self.dtype, 1.0 / (self.d as f64).sqrt())
    }

    /// The kernel, with q `[b, s, h, d]`, k `[b, s, h, d]` and v `[b, s, h, dv]` in memory and
    /// the output written `[b, sq, h, dv]`: parameters q, k, v, (mask,) out.
    pub fn kernel(&self) -> Result<OpKernel, CudaError> {
        let t = self.dtype;
        let (b, h) = (self.batch, self.heads);
        let q = TensorDesc::contiguous(t, &[b, self.sq, h, self.d]).permuted(&[0, 2, 1, 3]);
        let kt = TensorDesc::contiguous(t, &[b, self.sk, h, self.d]).permuted(&[0, 2, 3, 1]);
        let v = TensorDesc::contiguous(t, &[b, self.sk, h, self.dv]).permuted(&[0, 2, 1, 3]);
        let out = TensorDesc::contiguous(t, &[b, self.sq, h, self.dv]).permuted(&[0, 2, 1, 3]);
        let scaled = Expr::binary(Binary::Mul, Expr::input(0), Expr::constant(self.scale(), t));
        let (extra, expr) = match self.mask {
            Mask::None => (vec![], scaled),
            Mask::Causal | Mask::CausalMin => (
                vec![TensorDesc::contiguous(t, &[b, 1, self.sq, self.sk])],
                Expr::binary(Binary::Add, scaled, Expr::input(1)),
            ),
            _ => (
                vec![TensorDesc::contiguous(t, &[b, 1, 1, self.sk])],
                Expr::binary(Binary::Add, scaled, Expr::input(1)),
            ),
        };
        let name = format!("attn_{}_{}x{}_d{}{}", t, self.sq, self.sk, self.d, self.engine.label());
        // A causal mask is structural: each query's keys past its diagonal are masked in every
        // batch entry, so the kernel may stop there (the padding on top of it is not).
        let key_ends: Option<Vec<usize>> = matches!(self.mask, Mask::Causal | Mask::CausalMin)
            .then(|| (0..self.sq).map(|i| (i + self.sk - self.sq.min(self.sk) + 1).min(self.sk)).collect());
        attention_with(&name, &q, &kt, &v, t, &extra, &expr, &out, self.engine, key_ends.as_deref())
            .map_err(|e| CudaError::Kernel(name, e.to_string()))
    }

    /// Random q, k, v (uniform in ±1.5, rounded to the element type) and the mask (0 or -inf),
    /// as f64 in their memory layouts.
    pub fn inputs(&self, seed: u64) -> [Vec<f64>; 4] {
        let mut rng = SplitMix64::new(seed);
        let mut fill =
            |n: usize| -> Vec<f64> { (0..n).map(|_| round(self.dtype, (rng.next_f64() * 2.0 - 1.0) * 1.5)).collect() };
        let (b, h) = (self.batch, self.heads);
        let q = fill(b * self.sq * h * self.d);
        let k = fill(b * self.sk * h * self.d);
        let v = fill(b * self.sk * h * self.dv);
        let mask = match self.mask {
            Mask::Causal | Mask::CausalMin => (0..b * self.sq * self.sk)
                .map(|x| self.mask_at(x / (self.sq * self.sk), x / self.sk % self.sq, x % self.sk))
                .collect(),
            _ => (0..b * self.sk).map(|x| self.mask_at(x / self.sk, 0, x % self.sk)).collect(),
        };
        [q, k, v, mask]
    }

    /// The additive mask of batch entry `b`, query `i`, key `j`.
    fn mask_at(&self, b: usize, i: usize, j: usize) -> f64 {
        let hidden = match self.mask {
            Mask::None => return 0.0,
            Mask::Padding | Mask::EntryMasked => j >= self.valid_keys(b),
            Mask::Causal => j >= self.valid_keys(b) || j > i + self.sk - self.sq.min(self.sk),
            Mask::CausalMin => j >= self.valid_keys(b) || j > i + self.sk - self.sq.min(self.sk) || (b == 1 && i == 0),
        };
        match (hidden, self.mask) {
            (false, _) => 0.0,
            (true, Mask::CausalMin) => match self.dtype {
                DType::F16 => f16::MIN.to_f64(),
                DType::BF16 => bf16::MIN.to_f64(),
                _ => f32::MIN as f64,
            },
            (true, _) => f64::NEG_INFINITY,
        }
    }

    /// The f64 reference `[b, sq, h, dv]` of the inputs (NaN for a row with every key masked);
    /// the masked, scaled score is rounded to the element type, as the graph's value is (a row
    /// masked whole by the type's lowest finite value ties, and is uniform).
    pub fn reference(&self, inputs: &[Vec<f64>; 4]) -> Vec<f64> {
        let [q, k, v, mask] = inputs;
        let (hn, d, dv) = (self.heads, self.d, self.dv);
        let masked = self.mask != Mask::None;
        let mut out = vec![0.0; self.batch * self.sq * hn * dv];
        let mut p = vec![0.0; self.sk];
        for b in 0..self.batch {
            for h in 0..hn {
                for i in 0..self.sq {
                    let qr = &q[((b * self.sq + i) * hn + h) * d..][..d];
                    for (j, pj) in p.iter_mut().enumerate() {
                        let kr = &k[((b * self.sk + j) * hn + h) * d..][..d];
                        let s: f64 = qr.iter().zip(kr).map(|(x, y)| x * y).sum();
                        let at = match self.mask {
                            Mask::Causal | Mask::CausalMin => (b * self.sq + i) * self.sk + j,
                            _ => b * self.sk + j,
                        };
                        // The score value is of the element type in the graph: rounded to it.
                        *pj = round(self.dtype, s * self.scale() + if masked { mask[at] } else { 0.0 });
                    }
                    let mx = p.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x));
                    p.iter_mut().for_each(|x| *x = (*x - mx).exp());
                    let sum: f64 = p.iter().sum();
                    let o = &mut out[((b * self.sq + i) * hn + h) * dv..][..dv];
                    for (j, pj) in p.iter().enumerate() {
                        let vr = &v[((b * self.sk + j) * hn + h) * dv..][..dv];
                        o.iter_mut().zip(vr).for_each(|(o, x)| *o += pj / sum * x);
                    }
                }
            }
        }
        out
    }
}

/// `x` rounded to `dtype` (f32, f16 or bf16).
fn round(dtype: DType, x: f64) -> f64 {
    match dtype {
        DType::F16 => f16::from_f64(x).to_f64(),
        DType::BF16 => bf16::from_f64(x).to_f64(),
        _ => x as f32 as f64,
    }
}

/// `values` stored as `dtype` (every value already representable).
fn to_bytes(dtype: DType, values: &[f64]) -> Vec<u8> {
    match dtype {
        DType::F16 => values.iter().flat_map(|&x| f16::from_f64(x).to_le_bytes()).collect(),
        DType::BF16 => values.iter().flat_map(|&x| bf16::from_f64(x).to_le_bytes()).collect(),
        _ => values.iter().flat_map(|&x| (x as f32).to_le_bytes()).collect(),
    }
}

fn from_bytes(dtype: DType, bytes: &[u8]) -> Vec<f64> {
    match dtype {
        DType::F16 => bytes.chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]]).to_f64()).collect(),
        DType::BF16 => bytes.chunks_exact(2).map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f64()).collect(),
        _ => bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64).collect(),
    }
}

/// How far a result is from the reference.
#[derive(Clone, Debug, serde::Serialize)]
pub struct AttentionReport {
    pub label: String,
    /// Largest absolute difference over the largest reference magnitude.
    pub rel_norm_err: f64,
    pub max_abs_err: f64,
    /// Elements NaN in exactly one of result and reference (the poison left, or a NaN the
    /// reference does not have, or a finite value where every key is masked).
    pub nan_mismatches: usize,
    /// Elements NaN in both (rows of a fully masked batch entry).
    pub nan_rows_elements: usize,
}

impl AttentionReport {
    pub fn passes(&self, dtype: DType) -> bool {
        self.nan_mismatches == 0 && self.rel_norm_err <= attention_tolerance(dtype)
    }
}

/// Compares `got` with `want` element by element (NaN in both counts as agreement).
pub fn compare(label: String, got: &[f64], want: &[f64]) -> AttentionReport {
    let scale = want.iter().filter(|x| x.is_finite()).fold(0.0f64, |m, x| m.max(x.abs())).max(f64::MIN_POSITIVE);
    let (mut max_abs_err, mut nan_mismatches, mut nan_rows_elements) = (0.0f64, 0, 0);
    for (a, b) in got.iter().zip(want) {
        match (a.is_nan(), b.is_nan()) {
            (true, true) => nan_rows_elements += 1,
            (false, false) => max_abs_err = max_abs_err.max((a - b).abs()),
            _ => nan_mismatches += 1,
        }
    }
    nan_mismatches += got.len().abs_diff(want.len());
    AttentionReport { label, rel_norm_err: max_abs_err / scale, max_abs_err, nan_mismatches, nan_rows_elements }
}

/// The attention layers of the transformers the end-to-end benchmarks run (fp16, the padding
/// mask their exports carry), then longer sequences: `(model, case)`.
pub fn attention_model_cases() -> Vec<(&'static str, AttentionCase)> {
    let c = |batch, heads, s, d| AttentionCase {
        dtype: DType::F16,
        batch,
        heads,
        sq: s,
        sk: s,
        d,
        dv: d,
        mask: Mask::Padding,
        engine: AttentionEngine::Auto,
    };
    vec![
        ("MiniLM-L6 b32x128", c(32, 12, 128, 32)),
        ("ViT-B/16 b32x197", AttentionCase { mask: Mask::None, ..c(32, 12, 197, 64) }),
        ("Swin-T windows b2048x49", AttentionCase { mask: Mask::None, ..c(2048, 3, 49, 32) }),
        ("BERT-512 b16x256", c(16, 8, 256, 64)),
        ("BERT-base b8x384", c(8, 12, 384, 64)),
        ("BERT-base b8x384 bf16", AttentionCase { dtype: DType::BF16, ..c(8, 12, 384, 64) }),
        ("BERT-large b8x512", c(8, 16, 512, 64)),
        ("d128 b4x1024", c(4, 16, 1024, 128)),
        ("long b1x4096", c(1, 16, 4096, 64)),
    ]
}

/// A case's useful floating-point work: the two products, `4 · b · h · sq · sk · d` (d and dv
/// averaged).
pub fn attention_flops(case: &AttentionCase) -> f64 {
    2.0 * (case.batch * case.heads * case.sq * case.sk) as f64 * (case.d + case.dv) as f64
}

/// Runs one case on the GPU with inputs from `seed` and compares it with the f64 reference.
pub fn run_attention_case(dev: &CudaDevice, case: &AttentionCase, seed: u64) -> Result<AttentionReport, CudaError> {
    Ok(run_and_time(dev, case, seed, 0)?.0)
}

/// As [`run_attention_case`], then times `reps` launches on the same inputs (CUDA events, ten
/// launches between a pair, no L2 flush: a layer's q, k and v come from the projection just
/// before it). Returns the report and the median milliseconds of one launch.
pub fn time_attention_case(
    dev: &CudaDevice,
    case: &AttentionCase,
    seed: u64,
    reps: usize,
) -> Result<(AttentionReport, f64), CudaError> {
    run_and_time(dev, case, seed, reps.max(1))
}

fn run_and_time(
    dev: &CudaDevice,
    case: &AttentionCase,
    seed: u64,
    reps: usize,
) -> Result<(AttentionReport, f64), CudaError> {
    let kernel = case.kernel()?;
    let inputs = case.inputs(seed);
    let want = case.reference(&inputs);
    let func = dev.function(&kernel.name, &kernel.source, &kernel.name)?;
    if kernel.smem_bytes > 48 * 1024 {
        func.set_attribute(
            cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            kernel.smem_bytes as i32,
        )
        .ctx("cuFuncSetAttribute")?;
    }
    let bufs = inputs.iter().map(|x| dev.upload(&to_bytes(case.dtype, x))).collect::<Result<Vec<_>, _>>()?;
    let out_bytes = want.len() * if case.dtype == DType::F32 { 4 } else { 2 };
    let mut out = dev.upload(&vec![0xffu8; out_bytes])?;
    let cfg = LaunchConfig { grid_dim: kernel.grid, block_dim: kernel.block, shared_mem_bytes: kernel.smem_bytes };
    let launch_once = |out: &mut cudarc::driver::CudaSlice<u8>| -> Result<(), CudaError> {
        let mut launch = dev.stream().launch_builder(&func);
        launch.arg(&bufs[0]).arg(&bufs[1]).arg(&bufs[2]);
        if case.mask != Mask::None {
            launch.arg(&bufs[3]);
        }
        launch.arg(out);
        // SAFETY: the parameters are the kernel's (q, k, v, mask when it has one, out), each
        // buffer as large as the tensor the kernel indexes through the strides it was generated for.
        unsafe { launch.launch(cfg) }.ctx("cuLaunchKernel (attention)")?;
        Ok(())
    };
    launch_once(&mut out)?;
    dev.synchronize()?;
    let got = from_bytes(case.dtype, &dev.download(&out)?);
    let report = compare(case.label(), &got, &want);
    if reps == 0 {
        return Ok((report, f64::NAN));
    }
    const PER_PAIR: usize = 10;
    let times = dev.time_ms(3, reps, None, |_| (0..PER_PAIR).try_for_each(|_| launch_once(&mut out)))?;
    Ok((report, super::median(&times) / PER_PAIR as f64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_case_list_covers_every_type_length_and_width_and_every_kernel_builds() {
        let cases = attention_cases();
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            for s in [64, 197, 256, 384, 512] {
                for d in [32, 64, 128] {
                    for mask in [Mask::None, Mask::Padding] {
                        let c = AttentionCase {
                            dtype,
                            batch: 2,
                            heads: 3,
                            sq: s,
                            sk: s,
                            d,
                            dv: d,
                            mask,
                            engine: AttentionEngine::Auto,
                        };
                        assert!(cases.contains(&c), "missing {}", c.label());
                    }
                }
            }
        }
        let mut labels: Vec<String> = cases.iter().map(|c| c.label()).collect();
        labels.sort();
        labels.dedup();
        assert_eq!(labels.len(), cases.len(), "labels are unique");
        for c in &cases {
            let k = c.kernel().unwrap_or_else(|e| panic!("{}: {e}", c.label()));
            let params = k.source.matches("__restrict__").count();
            assert_eq!(params, if c.mask == Mask::None { 4 } else { 5 }, "{}", c.label());
        }
    }

    #[test]
    fn the_reference_is_a_softmax_weighted_mean_of_v() {
        // One key: every query returns that key's v row.
        let one = AttentionCase {
            dtype: DType::F32,
            batch: 1,
            heads: 2,
            sq: 3,
            sk: 1,
            d: 4,
            dv: 2,
            mask: Mask::None,
            engine: AttentionEngine::Auto,
        };
        let inputs = one.inputs(5);
        let out = one.reference(&inputs);
        for i in 0..3 {
            for h in 0..2 {
                assert_eq!(&out[(i * 2 + h) * 2..][..2], &inputs[2][h * 2..][..2]);
            }
        }
        // Zero queries: uniform probabilities over the unmasked keys, the mean of their v rows;
        // a fully masked entry gives NaN rows.
        let case = AttentionCase { sq: 2, sk: 5, mask: Mask::EntryMasked, batch: 3, ..one };
        let mut inputs = case.inputs(9);
        inputs[0].iter_mut().for_each(|x| *x = 0.0);
        let out = case.reference(&inputs);
        for b in 0..3 {
            let n = case.valid_keys(b);
            for e in 0..2 {
                let got = out[((b * 2) * 2) * 2 + e];
                if n == 0 {
                    assert!(got.is_nan(), "entry {b} is fully masked");
                } else {
                    let mean = (0..n).map(|j| inputs[2][((b * 5 + j) * 2) * 2 + e]).sum::<f64>() / n as f64;
                    assert!((got - mean).abs() < 1e-12, "entry {b}: {got} vs {mean}");
                }
            }
        }
        assert_eq!((case.valid_keys(0), case.valid_keys(1), case.valid_keys(2)), (5, 0, 4));
        // The comparison: NaN in both agrees, NaN in one does not.
        let r = compare("x".into(), &[1.0, f64::NAN, 2.5], &[1.0, f64::NAN, 2.0]);
        assert_eq!((r.nan_mismatches, r.nan_rows_elements, r.rel_norm_err), (0, 1, 0.25));
        assert!(!r.passes(DType::F32) && compare("y".into(), &[f64::NAN], &[1.0]).nan_mismatches == 1);
    }
}
