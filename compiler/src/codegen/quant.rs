//! Symmetric int8 quantization for the int8 kernels: `x ≈ scale · q`, `q ∈ [-127, 127]`,
//! zero stays exactly zero (so a pruned element stays pruned). Activations get one scale
//! per tensor, weights one per output channel (column `n` of the `K × N` weight); the
//! kernel computes `C = scale_a · scale_w[n] · Σₖ A_q · W_q` with an exact int32 sum.

/// Largest magnitude of a quantized value (symmetric: -128 is never used).
pub const QMAX: f32 = 127.0;

/// The scale that maps the largest magnitude of `x` onto 127; 1 when `x` is all zero (or
/// holds no finite value), so that dividing by it is always safe.
pub fn scale_of(x: impl IntoIterator<Item = f32>) -> f32 {
    let max = x.into_iter().filter(|v| v.is_finite()).fold(0.0f32, |m, v| m.max(v.abs()));
    if max > 0.0 {
        max / QMAX
    } else {
        1.0
    }
}

/// `round(x / scale)` clamped to [-127, 127] (ties away from zero, as `f32::round`).
pub fn quantize_value(x: f32, scale: f32) -> i8 {
    (x / scale).round().clamp(-QMAX, QMAX) as i8
}

/// One scale for the whole tensor: `(q, scale)`.
pub fn quantize_per_tensor(x: &[f32]) -> (Vec<i8>, f32) {
    let scale = scale_of(x.iter().copied());
    (x.iter().map(|v| quantize_value(*v, scale)).collect(), scale)
}

/// One scale per column of a row-major `k × n` weight (per output channel): `(q, scales)`.
pub fn quantize_per_column(w: &[f32], k: usize, n: usize) -> (Vec<i8>, Vec<f32>) {
    assert_eq!(w.len(), k * n, "weight has the wrong size");
    let scales: Vec<f32> = (0..n).map(|c| scale_of((0..k).map(|r| w[r * n + c]))).collect();
    (quantize_with_column_scales(w, n, &scales), scales)
}

/// Quantizes a row-major `? × n` weight with given per-column scales (the parts of one
/// weight split over several kernels share the scales of the whole weight).
pub fn quantize_with_column_scales(w: &[f32], n: usize, scales: &[f32]) -> Vec<i8> {
    assert_eq!(scales.len(), n, "one scale per column");
    w.iter().enumerate().map(|(i, v)| quantize_value(*v, scales[i % n])).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_tensor_maps_the_largest_magnitude_to_127_and_keeps_zeros() {
        let x = [0.0, 0.5, -2.0, 1.0, -0.0];
        let (q, s) = quantize_per_tensor(&x);
        assert_eq!(s, 2.0 / 127.0);
        assert_eq!(q, vec![0, 32, -127, 64, 0]);
        // Round trip within half a step.
        for (v, qv) in x.iter().zip(&q) {
            assert!((v - s * *qv as f32).abs() <= s / 2.0 + 1e-7, "{v} -> {qv}");
        }
    }

    #[test]
    fn per_column_scales_follow_each_column_and_an_empty_column_gets_1() {
        // 2 × 3: column 0 max 4, column 1 all zero, column 2 max 0.1.
        let w = [4.0, 0.0, -0.1, -1.0, 0.0, 0.06];
        let (q, s) = quantize_per_column(&w, 2, 3);
        assert_eq!(s, vec![4.0 / 127.0, 1.0, 0.1 / 127.0]);
        assert_eq!(q, vec![127, 0, -127, -32, 0, 76]);
        assert_eq!(quantize_with_column_scales(&w[3..], 3, &s), q[3..].to_vec());
    }

    #[test]
    fn values_beyond_the_scale_clamp_instead_of_wrapping() {
        assert_eq!(quantize_value(1000.0, 1.0), 127);
        assert_eq!(quantize_value(-1000.0, 1.0), -127);
        assert_eq!(quantize_value(f32::NAN, 1.0), 0);
        assert_eq!(scale_of([f32::INFINITY, -2.54]), 2.54 / 127.0);
    }
}
