//! Runs on memory and streams the caller owns (the Python package's torch and DLPack path):
//! a model reads its inputs from the caller's device tensors and writes its outputs into the
//! caller's device tensors, the work queued on the caller's stream and nothing waited for.
//! One run is one graph launch: the program's graph as a child node between memcpy nodes, a
//! device-to-device copy per input into the program's buffers before it and per output after
//! it (the copy nodes updated in place when only the caller's addresses change): no host
//! copy, no synchronization, no stream operations besides the launch and an event.
//!
//! Ordering: the program's buffers are shared by every run, so a run queued on a stream other
//! than the previous run's first waits for that run (an event recorded after each run);
//! [`GpuModel::wait_stream_runs`] waits on the host for the last one, which the host paths
//! (writes and reads of the buffers) call before they touch them.

use super::cuda::drv;
use super::model::GpuModel;
use super::ExecError;
use crate::cuda::{CudaDevice, CudaError};
use cudarc::driver::sys;
use spartac::ir::DType;
use spartac::program::model::{check_signature, Signature};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A CUDA stream handle of the caller's (null: the legacy default stream).
pub type Stream = sys::CUstream;

/// A tensor in the caller's device memory on the model's GPU: dense, row-major.
#[derive(Clone, Debug)]
pub struct DeviceTensor {
    pub ptr: u64,
    pub dtype: DType,
    pub shape: Vec<usize>,
}

/// A CUDA event of one device's context (timing off), destroyed on drop.
pub struct Event {
    ev: sys::CUevent,
    dev: Arc<CudaDevice>,
}

impl Event {
    pub fn new(dev: &Arc<CudaDevice>) -> Result<Event, CudaError> {
        dev.bind()?;
        let mut ev: sys::CUevent = std::ptr::null_mut();
        // SAFETY: plain event creation in the bound context.
        drv("cuEventCreate", unsafe {
            sys::cuEventCreate(&mut ev, sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32)
        })?;
        Ok(Event { ev, dev: dev.clone() })
    }

    /// Records the event after the work queued on `stream` so far.
    ///
    /// # Safety
    /// `stream` must be null (the legacy default stream) or a live stream of this event's
    /// context.
    pub unsafe fn record(&self, stream: Stream) -> Result<(), CudaError> {
        // SAFETY: an event of this context; the caller vouches for the stream.
        drv("cuEventRecord", unsafe { sys::cuEventRecord(self.ev, stream) })
    }

    /// Makes work queued on `stream` from now on wait for the last record.
    ///
    /// # Safety
    /// As for [`Event::record`].
    pub unsafe fn wait_on(&self, stream: Stream) -> Result<(), CudaError> {
        // SAFETY: as above.
        drv("cuStreamWaitEvent", unsafe { sys::cuStreamWaitEvent(stream, self.ev, 0) })
    }

    /// Waits on the host for the last record.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        // SAFETY: an event of this context.
        drv("cuEventSynchronize", unsafe { sys::cuEventSynchronize(self.ev) })
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        let _ = self.dev.bind();
        // SAFETY: created by Event::new, destroyed once.
        unsafe {
            sys::cuEventDestroy_v2(self.ev);
        }
    }
}

/// Device memory allocated for a caller (an output handed out as a DLPack tensor), freed in
/// its device's context when dropped.
pub struct DeviceMemory {
    dev: Arc<CudaDevice>,
    ptr: u64,
    bytes: usize,
}

// SAFETY: a device address and the device it belongs to; every driver call on it binds the
// device's context first.
unsafe impl Send for DeviceMemory {}
unsafe impl Sync for DeviceMemory {}

impl DeviceMemory {
    pub fn alloc(dev: &Arc<CudaDevice>, bytes: usize) -> Result<DeviceMemory, CudaError> {
        dev.bind()?;
        let mut ptr = 0u64;
        // SAFETY: plain allocation in the bound context (at least one byte: a 0-element
        // tensor still gets a valid address).
        drv("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut ptr, bytes.max(1)) })?;
        Ok(DeviceMemory { dev: dev.clone(), ptr, bytes })
    }

    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The contents, copied to the host (after the work that writes them is done: the copy
    /// runs on the legacy stream, so the caller waits for other streams first).
    pub fn to_host(&self) -> Result<Vec<u8>, CudaError> {
        self.dev.bind()?;
        let mut out = vec![0u8; self.bytes];
        // SAFETY: out holds self.bytes bytes, the allocation as many.
        drv("memcpy device to host", unsafe {
            sys::cuMemcpyDtoH_v2(out.as_mut_ptr() as *mut _, self.ptr, self.bytes)
        })?;
        Ok(out)
    }
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        let _ = self.dev.bind();
        // SAFETY: allocated by cuMemAlloc_v2 in this context, freed once.
        unsafe {
            sys::cuMemFree_v2(self.ptr);
        }
    }
}

/// Checks that `given` names exactly the tensors of `sig` with their types and shapes.
fn check_tensors(what: &str, sig: &[Signature], given: &BTreeMap<String, DeviceTensor>) -> Result<(), ExecError> {
    check_signature(what, sig, given, |t| (t.dtype, t.shape.as_slice())).map_err(ExecError::Shape)
}

impl GpuModel {
    /// One run on the caller's `stream` (see the module docs): `inputs` are read and
    /// `outputs` written by device-to-device copies around one graph launch; returns once the
    /// work is queued. Both must name exactly the model's inputs and outputs, with their
    /// types and shapes, in memory of this model's GPU that stays valid until the stream has
    /// run the work.
    ///
    /// # Safety
    /// `stream` must be null (the legacy default stream) or a live stream of this model's
    /// device context, and every tensor's address must hold its bytes there until the stream
    /// has run the work.
    pub unsafe fn run_on_stream(
        &mut self,
        inputs: &BTreeMap<String, DeviceTensor>,
        outputs: &BTreeMap<String, DeviceTensor>,
        stream: Stream,
    ) -> Result<(), ExecError> {
        check_tensors("input", &self.model_inputs, inputs)?;
        check_tensors("output", &self.model_outputs, outputs)?;
        let dev = self.program.device().clone();
        dev.bind()?;
        if let Some((last, ev)) = &self.last_stream_run {
            if *last != stream as usize {
                // SAFETY: the caller's stream, as this function requires.
                unsafe { ev.wait_on(stream)? };
            }
        }
        let mut ins = Vec::with_capacity(self.model_inputs.len());
        for s in &self.model_inputs {
            ins.push((s.buf, inputs[&s.name].ptr, tensor_bytes(s)));
        }
        let mut outs = Vec::with_capacity(self.model_outputs.len());
        for s in &self.model_outputs {
            outs.push((s.buf, outputs[&s.name].ptr, tensor_bytes(s)));
        }
        // SAFETY: the stream and the tensors' memory are as this function requires.
        unsafe { self.program.launch_with_io(&ins, &outs, stream)? };
        let ev = match self.last_stream_run.take() {
            Some((_, ev)) => ev,
            None => Event::new(&dev)?,
        };
        // SAFETY: as above.
        unsafe { ev.record(stream)? };
        self.last_stream_run = Some((stream as usize, ev));
        Ok(())
    }

    /// Waits on the host until the last [`GpuModel::run_on_stream`] is done.
    pub fn wait_stream_runs(&self) -> Result<(), ExecError> {
        if let Some((_, ev)) = &self.last_stream_run {
            self.program.device().bind()?;
            ev.synchronize()?;
        }
        Ok(())
    }

    /// Back-to-back launches of the program's own graph on its stream (no copies): each
    /// launch's milliseconds, as `spartac run --repeat` times a model.
    pub fn time_graph(&mut self, runs: usize) -> Result<Vec<f64>, ExecError> {
        self.wait_stream_runs()?;
        let times = self.program.time_launches(&[], runs)?;
        self.program.synchronize()?;
        Ok(times)
    }
}

/// The bytes of a signature's tensor.
fn tensor_bytes(s: &Signature) -> usize {
    s.shape.iter().product::<usize>() * s.dtype.size_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use spartac::program::BufferId;

    fn sig(name: &str, dtype: DType, shape: &[usize]) -> Signature {
        Signature { name: name.into(), dtype, shape: shape.to_vec(), buf: BufferId(0), bound: 0 }
    }

    fn tensor(dtype: DType, shape: &[usize]) -> DeviceTensor {
        DeviceTensor { ptr: 0x1000, dtype, shape: shape.to_vec() }
    }

    #[test]
    fn caller_tensors_must_name_every_input_with_its_type_and_shape() {
        let inputs = [sig("ids", DType::I64, &[2, 8]), sig("mask", DType::I64, &[2, 8])];
        let mut given = BTreeMap::new();
        given.insert("ids".to_string(), tensor(DType::I64, &[2, 8]));
        let missing = check_tensors("input", &inputs, &given).unwrap_err().to_string();
        assert_eq!(missing, "input \"mask\" is missing");
        given.insert("mask".to_string(), tensor(DType::I32, &[2, 8]));
        let typed = check_tensors("input", &inputs, &given).unwrap_err().to_string();
        assert_eq!(typed, "input \"mask\": expects i64[2,8] but got i32[2,8]");
        given.insert("mask".to_string(), tensor(DType::I64, &[2, 8]));
        assert!(check_tensors("input", &inputs, &given).is_ok());
        given.insert("extra".to_string(), tensor(DType::F32, &[1]));
        let unknown = check_tensors("input", &inputs, &given).unwrap_err().to_string();
        assert_eq!(unknown, "unknown input \"extra\" (the model's inputs: ids, mask)");
        let outputs = [sig("y", DType::F32, &[2, 8, 4])];
        let mut out = BTreeMap::new();
        out.insert("y".to_string(), tensor(DType::F32, &[2, 8, 5]));
        let shaped = check_tensors("output", &outputs, &out).unwrap_err().to_string();
        assert_eq!(shaped, "output \"y\": expects f32[2,8,4] but got f32[2,8,5]");
        assert_eq!(tensor_bytes(&outputs[0]), 2 * 8 * 4 * 4);
    }
}
