//! `explain`: the plan in words. Per sparse operator: shape, density, the chosen cover
//! (shapes, block counts, covered zeros), predicted sparse and dense times, the expected
//! speedup and why. Deterministic text (fixed precision), snapshot-tested.

use super::egraph::SplitKind;
use super::suboperator::SubOpKind;
use super::{OperatorPlan, Plan};
use std::fmt::Write as _;

/// Seconds as microseconds with three decimals (a sum that rounds to zero prints `0.000`, not
/// `-0.000`).
pub fn micros(s: f64) -> String {
    let us = s * 1e6;
    let us = if us.abs() < 5e-4 { 0.0 } else { us };
    format!("{us:.3} µs")
}

fn explain_operator(out: &mut String, o: &OperatorPlan) {
    let kept = (o.density * (o.rows * o.cols) as f64).round() as usize;
    let trans = if o.transposed { ", transposed" } else { "" };
    let _ = writeln!(
        out,
        "{} ({}): weight {} [{} × {}]{trans}, other dim {}, {}",
        o.node, o.op_type, o.weight, o.rows, o.cols, o.m, o.dtype
    );
    let _ = writeln!(out, "  density     {:.4} ({kept} of {} kept)", o.density, o.rows * o.cols);
    // The multi-shape cover, whether or not it was chosen.
    let cover = o.considered.iter().find(|c| matches!(c.split, SplitKind::ByShape | SplitKind::ByBits));
    if let Some(c) = cover {
        let _ = writeln!(out, "  cover       {} ({})", c.label, micros(c.predicted_s));
    }
    for s in o.suboperators.iter().filter(|s| s.kind != SubOpKind::Dense) {
        let _ = writeln!(
            out,
            "    part      {:<22} owns {:>8}, covered zeros {:>8}, tile {:?}, {}{}",
            s.label(),
            s.owned.len(),
            s.covered_zeros,
            s.hints.tile,
            if s.hints.tensor_cores { "tensor cores" } else { "SIMT" },
            if s.blocks.is_empty() { String::new() } else { format!(", {:?}", s.hints.mode).to_lowercase() }
        );
    }
    let chosen = o.chosen.map(|c| o.considered[c].split.name()).unwrap_or("nothing");
    let sparse = o
        .considered
        .iter()
        .filter(|c| c.split != SplitKind::Dense)
        .map(|c| c.predicted_s)
        .fold(f64::INFINITY, f64::min);
    let _ = writeln!(
        out,
        "  predicted   best sparse {}, dense {}, plan {} (expected speedup {:.2}×)",
        if sparse.is_finite() { micros(sparse) } else { "-".into() },
        micros(o.dense_s),
        micros(o.planned_s),
        o.speedup()
    );
    let epi = match (&o.epilogue.bias, &o.epilogue.activation) {
        (None, None) => String::new(),
        (b, a) => {
            let parts: Vec<String> = b.iter().map(|b| format!("bias {b}")).chain(a.iter().cloned()).collect();
            format!(", epilogue {} {}", parts.join(" + "), if o.epilogue.fused { "fused" } else { "separate" })
        }
    };
    let _ = writeln!(out, "  chosen      {chosen} {}{epi}", o.expr);
    let _ = writeln!(out, "  why         {}", o.reason);
    let considered: Vec<String> = o
        .considered
        .iter()
        .filter(|c| c.split == SplitKind::OneShape)
        .map(|c| format!("{} {}", c.label.split(' ').next().unwrap_or(""), micros(c.predicted_s)))
        .collect();
    if !considered.is_empty() {
        let _ = writeln!(out, "  one shape   {}", considered.join(", "));
    }
    if let Some(tf) = o.considered.iter().find(|c| c.split == SplitKind::TwoFourRest) {
        let _ = writeln!(out, "  2:4 + rest  {} ({})", tf.label, micros(tf.predicted_s));
    }
}

/// The explanation of every sparse operator, then a one-line total.
pub fn explain(plan: &Plan) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "plan for {} (predicted times from the cost model)", plan.arch);
    let sparse: Vec<&OperatorPlan> = plan.operators.iter().filter(|o| o.is_sparse()).collect();
    for o in &sparse {
        out.push('\n');
        explain_operator(&mut out, o);
    }
    let dense: f64 = plan.operators.iter().map(|o| o.dense_s).sum();
    let planned: f64 = plan.operators.iter().map(|o| o.planned_s).sum();
    let n_sparse_chosen =
        sparse.iter().filter(|o| o.chosen.is_some_and(|c| o.considered[c].split != SplitKind::Dense)).count();
    let _ = writeln!(
        out,
        "\n{} operators with a constant weight, {} sparse, {} planned sparse; total {} vs dense {} ({:.2}×)",
        plan.operators.len(),
        sparse.len(),
        n_sparse_chosen,
        micros(planned),
        micros(dense),
        dense / planned.max(1e-15)
    );
    out
}

#[cfg(test)]
mod micros_tests {
    #[test]
    fn zero_and_negative_zero_print_as_zero() {
        assert_eq!(super::micros(-0.0), "0.000 µs");
        assert_eq!(super::micros(-1e-12), "0.000 µs");
        assert_eq!(super::micros(1.5e-6), "1.500 µs");
    }
}
