//! A [`Timer`] without a GPU for the tuning tests: it times a candidate by a given function of
//! its plan and kernels, and counts what it was asked to do.

use spartac::codegen::from_plan::PlannedKernel;
use spartac::codegen::SpmmSpec;
use spartac::plan::OperatorPlan;
use spartac::tune::{Measurement, Target, Timer};

type TimeFn = dyn Fn(&OperatorPlan, &[PlannedKernel]) -> Result<Measurement, String>;

pub struct FakeTimer {
    pub target: Target,
    /// `measure` calls so far.
    pub calls: usize,
    /// Specs handed to `prepare` so far.
    pub prepared: usize,
    time: Box<TimeFn>,
}

impl FakeTimer {
    /// A timer on a GPU named "Fake GPU" (`sm_90a`) that times candidates by `time`.
    pub fn new(time: impl Fn(&OperatorPlan, &[PlannedKernel]) -> Result<Measurement, String> + 'static) -> FakeTimer {
        FakeTimer {
            target: Target { arch: "sm_90a".into(), device: "Fake GPU".into() },
            calls: 0,
            prepared: 0,
            time: Box::new(time),
        }
    }

    /// Every candidate correct; 10 µs per kernel, halved for the kernel choice `fast`.
    pub fn favoring(fast: spartac::plan::KernelChoice) -> FakeTimer {
        FakeTimer::new(move |op, kernels| {
            let t = 10e-6 * kernels.len() as f64 * if op.kernel == fast { 0.5 } else { 1.0 };
            Ok(Measurement { seconds: t, rel_err: 1e-7 })
        })
    }
}

impl Timer for FakeTimer {
    fn target(&self) -> Target {
        self.target.clone()
    }

    fn prepare(&mut self, specs: &[SpmmSpec]) {
        self.prepared += specs.len();
    }

    fn measure(&mut self, op: &OperatorPlan, kernels: &[PlannedKernel]) -> Result<Measurement, String> {
        self.calls += 1;
        (self.time)(op, kernels)
    }
}
