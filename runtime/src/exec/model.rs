//! Running a compiled model ([`ModelProgram`]): named input tensors in, named output tensors
//! out, on the CPU executor ([`run_cpu`]) or as one CUDA graph ([`GpuModel`]). Both execute the
//! same program; only inputs and outputs cross between host and device. [`relative_error`] is
//! the comparison `spartac run --check` makes between the two.

use super::cpu::{bytes_of_tensor, tensor_of_bytes, CpuMemory};
use super::cuda::GpuProgram;
use super::ExecError;
use crate::cuda::CudaDevice;
use spartac::ir::Tensor;
use spartac::program::model::{check_model_inputs, ModelProgram};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Outputs in the model's output order.
pub type Outputs = Vec<(String, Tensor)>;

/// Runs the program on the host (the reference semantics of every op, f64 matmul sums).
pub fn run_cpu(model: &ModelProgram, inputs: &BTreeMap<String, Tensor>) -> Result<Outputs, ExecError> {
    check_model_inputs(&model.inputs, inputs).map_err(ExecError::Shape)?;
    let mut mem = CpuMemory::new(&model.program);
    for s in &model.inputs {
        let bytes = bytes_of_tensor(&inputs[&s.name]);
        mem.set_bytes(s.buf, bytes).map_err(ExecError::Shape)?;
    }
    super::cpu::run(&model.program, &mut mem, &[])?;
    model
        .outputs
        .iter()
        .map(|s| {
            let t = tensor_of_bytes(mem.bytes(s.buf), s.dtype, &s.shape).map_err(ExecError::Shape)?;
            Ok((s.name.clone(), t))
        })
        .collect()
}

/// A compiled model loaded on a GPU: kernels compiled (or taken from the PTX cache), constants
/// uploaded, the CUDA graph instantiated.
pub struct GpuModel {
    pub(super) model_inputs: Vec<spartac::program::model::Signature>,
    pub(super) model_outputs: Vec<spartac::program::model::Signature>,
    pub program: GpuProgram,
    /// The stream of the last [`GpuModel::run_on_stream`] and an event recorded after it.
    pub(super) last_stream_run: Option<(usize, super::external::Event)>,
}

impl GpuModel {
    pub fn load(dev: Arc<CudaDevice>, model: ModelProgram) -> Result<GpuModel, ExecError> {
        let ModelProgram { program, inputs, outputs, .. } = model;
        let program = GpuProgram::load(dev, &program)?;
        Ok(GpuModel { model_inputs: inputs, model_outputs: outputs, program, last_stream_run: None })
    }

    /// Copies the inputs to the device.
    pub fn set_inputs(&self, inputs: &BTreeMap<String, Tensor>) -> Result<(), ExecError> {
        check_model_inputs(&self.model_inputs, inputs).map_err(ExecError::Shape)?;
        self.wait_stream_runs()?;
        for s in &self.model_inputs {
            self.program.write(s.buf, &bytes_of_tensor(&inputs[&s.name]))?;
        }
        Ok(())
    }

    /// One run of the graph, waited for.
    pub fn run(&mut self) -> Result<(), ExecError> {
        self.wait_stream_runs()?;
        self.program.launch(&[])?;
        self.program.synchronize()
    }

    /// The outputs of the last run.
    pub fn outputs(&self) -> Result<Outputs, ExecError> {
        self.wait_stream_runs()?;
        self.model_outputs
            .iter()
            .map(|s| {
                let bytes = self.program.read(s.buf)?;
                Ok((s.name.clone(), tensor_of_bytes(&bytes, s.dtype, &s.shape).map_err(ExecError::Shape)?))
            })
            .collect()
    }
}

/// How far `got` is from `want`: the largest absolute difference over the largest magnitude of
/// `want`'s finite elements (normwise relative error). A NaN or an infinity must meet the same
/// in the other tensor (NaN, +inf, -inf), else the error is infinity: a NaN dropped or made up
/// is a wrong result. Integer tensors compare exactly (0 or infinity).
pub fn relative_error(got: &Tensor, want: &Tensor) -> f64 {
    if got.shape() != want.shape() || got.dtype() != want.dtype() {
        return f64::INFINITY;
    }
    let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
    if !want.dtype().is_float() {
        return if g == w { 0.0 } else { f64::INFINITY };
    }
    let scale = w.iter().filter(|x| x.is_finite()).fold(0.0f64, |m, x| m.max(x.abs())).max(f64::MIN_POSITIVE);
    let mut worst = 0.0f64;
    for (a, b) in g.iter().zip(&w) {
        if a.is_finite() && b.is_finite() {
            worst = worst.max((a - b).abs());
        } else if !(a.is_nan() && b.is_nan() || a == b) {
            return f64::INFINITY;
        }
    }
    worst / scale
}

/// Why a check against `want` says little, if it does: every float value zero (a model whose
/// output does not depend on its layers, such as a classifier head initialised to zero), or
/// values that are NaN or infinite (the model overflows its type: those compare equal to the
/// same non-finite value, whatever led there). `None` for a float output with finite, not all
/// zero values, and for integer outputs.
pub fn weak_reference(want: &Tensor) -> Option<String> {
    if !want.dtype().is_float() || want.is_empty() {
        return None;
    }
    let w = want.to_f64_vec();
    let nonfinite = w.iter().filter(|x| !x.is_finite()).count();
    if nonfinite > 0 {
        return Some(format!("{nonfinite} of {} values are NaN or infinite (the model overflows its type)", w.len()));
    }
    w.iter()
        .all(|&x| x == 0.0)
        .then(|| format!("all {} values are zero: the output does not show the layers' work", w.len()))
}

#[cfg(test)]
mod tests {
    use super::{relative_error, weak_reference};

    #[test]
    fn a_reference_of_zeros_or_non_finite_values_is_named() {
        let t = |v: &[f32]| Tensor::from_vec(vec![v.len()], v.to_vec());
        assert_eq!(weak_reference(&t(&[0.0, 0.5, -1.0])), None);
        let zeros = weak_reference(&t(&[0.0, -0.0, 0.0])).unwrap();
        assert!(zeros.contains("all 3 values are zero"), "{zeros}");
        let over = weak_reference(&t(&[1.0, f32::NAN, f32::INFINITY, 2.0])).unwrap();
        assert!(over.starts_with("2 of 4 values are NaN or infinite"), "{over}");
        // Integer outputs compare exactly: never weak.
        let ids = Tensor::from_vec(vec![2], vec![0i64, 0]);
        assert_eq!(weak_reference(&ids), None);
    }
    use spartac::ir::Tensor;

    #[test]
    fn nan_and_infinities_must_meet_their_own_kind() {
        let t = |v: &[f32]| Tensor::from_vec(vec![v.len()], v.to_vec());
        let (nan, inf) = (f32::NAN, f32::INFINITY);
        assert_eq!(relative_error(&t(&[1.0, nan, inf, -inf]), &t(&[1.0, nan, inf, -inf])), 0.0);
        assert!((relative_error(&t(&[1.0, 2.5, nan]), &t(&[1.0, 2.0, nan])) - 0.25).abs() < 1e-12);
        for (got, want) in
            [([0.0, 1.0], [nan, 1.0]), ([nan, 1.0], [0.0, 1.0]), ([inf, 1.0], [-inf, 1.0]), ([5.0, 1.0], [inf, 1.0])]
        {
            assert_eq!(relative_error(&t(&got), &t(&want)), f64::INFINITY, "{got:?} against {want:?}");
        }
    }
}
