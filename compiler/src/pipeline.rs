//! The compile pipeline's stages as named passes: each runs, is timed, leaves a verified graph
//! (checked after every graph pass in debug builds, so in the test suite), reports one line, and
//! may print the IR it leaves (`spartac compile --print-ir-after PASS|all`, or the environment
//! variable [`PRINT_IR_ENV`]).
//!
//! [`PASSES`] lists them in order. The graph passes (`frontend` to `to_half`) leave a [`Graph`]
//! whose text form ([`print_graph`]) is what `--print-ir-after` prints; the later stages (`plan`
//! to `write`) make the plan, the program and the artifact, and are listed for their times.
//! [`Pipeline`] is the driver: a caller runs each pass through [`Pipeline::run`] (or reports one
//! it ran itself with [`Pipeline::record`]); [`crate::rewrite::prepare_in`] runs the rewrite
//! passes through it.

use crate::ir::{print_graph, verify, Graph};
use crate::Error;
use std::time::Instant;

/// Environment variable read like `--print-ir-after` when the flag is absent.
pub const PRINT_IR_ENV: &str = "SPARTAC_PRINT_IR_AFTER";

/// A pass: its name (as `--print-ir-after` takes it), whether it leaves an IR graph, and what
/// it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PassInfo {
    pub name: &'static str,
    pub graph: bool,
    pub summary: &'static str,
}

const fn pass(name: &'static str, graph: bool, summary: &'static str) -> PassInfo {
    PassInfo { name, graph, summary }
}

/// Every pass of `spartac compile`, in order.
pub const PASSES: &[PassInfo] = &[
    pass("frontend", true, "ONNX to IR: static shapes, shape inference, constant folding"),
    pass("propagate", true, "TeSA attributes applied, then propagated to a fixpoint (or from the cache)"),
    pass(
        "narrow_broadcasts",
        true,
        "identity ops that only broadcast dropped (a mask's all-true And), in-order GatherNDs as views",
    ),
    pass("fold_batchnorm", true, "BatchNorms after a Conv folded into its weight and bias"),
    pass("shrink_channels", true, "channels pruned in a whole channel class cut out"),
    pass("channels_last", true, "convolutions to NHWC, 1x1 convolutions as MatMuls"),
    pass("fold_scales", true, "per-column scales after a MatMul folded into its weight and bias"),
    pass("merge_matmuls", true, "Q, K and V projections as one MatMul"),
    pass("sink_transposes", true, "row transposes moved below the projections attentions read in place, and above output projections into the head merge"),
    pass("to_half", true, "values between kernels in fp16/bf16 (--dtype)"),
    pass("plan", false, "execution plan: sub-operators and kernel choices per sparse operator"),
    pass("lower", false, "the program: steps, buffers, fusions, specialized kernels"),
    pass("ptx", false, "kernels compiled to PTX with NVRTC (when present)"),
    pass("write", false, "the artifact written"),
];

/// Which passes print the IR they leave.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum PrintIrAfter {
    #[default]
    None,
    All,
    Passes(Vec<&'static str>),
}

impl PrintIrAfter {
    /// `all`, or graph pass names separated by commas; an unknown name (or a pass that leaves
    /// no IR) is an error naming the ones there are.
    pub fn parse(text: &str) -> Result<PrintIrAfter, String> {
        let text = text.trim();
        if text == "all" {
            return Ok(PrintIrAfter::All);
        }
        let graph_passes: Vec<&'static str> = PASSES.iter().filter(|p| p.graph).map(|p| p.name).collect();
        let mut names = vec![];
        for part in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let Some(&name) = graph_passes.iter().find(|&&n| n == part) else {
                return Err(format!(
                    "no graph pass {part:?}: --print-ir-after takes `all` or some of {}",
                    graph_passes.join(", ")
                ));
            };
            names.push(name);
        }
        if names.is_empty() {
            return Err("--print-ir-after takes `all` or pass names separated by commas".into());
        }
        Ok(PrintIrAfter::Passes(names))
    }

    /// The flag's value when given, else [`PRINT_IR_ENV`]'s, else nothing.
    pub fn from_flag_or_env(flag: Option<&str>) -> Result<PrintIrAfter, String> {
        match flag {
            Some(f) => PrintIrAfter::parse(f),
            None => match std::env::var(PRINT_IR_ENV) {
                Ok(v) if !v.trim().is_empty() => PrintIrAfter::parse(&v).map_err(|e| format!("{PRINT_IR_ENV}: {e}")),
                _ => Ok(PrintIrAfter::None),
            },
        }
    }

    pub fn wants(&self, pass: &str) -> bool {
        match self {
            PrintIrAfter::None => false,
            PrintIrAfter::All => PASSES.iter().any(|p| p.graph && p.name == pass),
            PrintIrAfter::Passes(names) => names.contains(&pass),
        }
    }
}

/// One pass as it ran: its time and its one-line result.
#[derive(Clone, Debug, PartialEq)]
pub struct PassRecord {
    pub name: &'static str,
    pub seconds: f64,
    pub result: String,
}

/// The driver: runs passes, keeps their records, prints the IR where asked (through `print`,
/// which gets the pass name and the text form).
pub struct Pipeline<'a> {
    pub records: Vec<PassRecord>,
    print_ir: PrintIrAfter,
    print: PrintFn<'a>,
}

/// What prints the IR: gets the pass name and the text form.
type PrintFn<'a> = Box<dyn FnMut(&str, &str) + 'a>;

impl<'a> Pipeline<'a> {
    pub fn new(print_ir: PrintIrAfter, print: impl FnMut(&str, &str) + 'a) -> Pipeline<'a> {
        Pipeline { records: vec![], print_ir, print: Box::new(print) }
    }

    /// A pipeline that prints nothing (the passes still run, timed and verified).
    pub fn quiet() -> Pipeline<'static> {
        Pipeline::new(PrintIrAfter::None, |_, _| {})
    }

    /// Runs graph pass `name` (one of [`PASSES`]): `f` changes the graph and returns its report
    /// and a one-line result.
    pub fn run<T>(
        &mut self,
        name: &'static str,
        graph: &mut Graph,
        f: impl FnOnce(&mut Graph) -> Result<(T, String), Error>,
    ) -> Result<T, Error> {
        debug_assert!(PASSES.iter().any(|p| p.name == name && p.graph), "unknown graph pass {name}");
        let t = Instant::now();
        let (report, result) = f(graph)?;
        let seconds = t.elapsed().as_secs_f64();
        self.record(name, seconds, result, Some(graph))?;
        Ok(report)
    }

    /// Records pass `name`, run by the caller in `seconds`; with the graph it left, verifies it
    /// (debug builds) and prints it where asked.
    pub fn record(
        &mut self,
        name: &'static str,
        seconds: f64,
        result: String,
        graph: Option<&Graph>,
    ) -> Result<(), Error> {
        if let Some(g) = graph {
            if cfg!(debug_assertions) {
                verify(g).map_err(|e| Error::Invalid(format!("the IR after pass {name} is invalid: {e}")))?;
            }
            if self.print_ir.wants(name) {
                (self.print)(name, &print_graph(g));
            }
        }
        self.records.push(PassRecord { name, seconds, result });
        Ok(())
    }

    /// The records as a table a person reads: pass, milliseconds, result.
    pub fn table(&self) -> String {
        let width = self.records.iter().map(|r| r.name.len()).max().unwrap_or(4).max(4);
        let mut out = format!("{:<width$}  {:>10}  result\n", "pass", "ms");
        for r in &self.records {
            out.push_str(&format!("{:<width$}  {:>10.1}  {}\n", r.name, r.seconds * 1e3, r.result));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn print_ir_after_takes_all_or_graph_pass_names() {
        assert_eq!(PrintIrAfter::parse("all").unwrap(), PrintIrAfter::All);
        let some = PrintIrAfter::parse("frontend, merge_matmuls").unwrap();
        assert_eq!(some, PrintIrAfter::Passes(vec!["frontend", "merge_matmuls"]));
        assert!(some.wants("merge_matmuls") && !some.wants("to_half"));
        assert!(PrintIrAfter::All.wants("to_half") && !PrintIrAfter::All.wants("plan"));
        let e = PrintIrAfter::parse("fronted").unwrap_err();
        assert!(e.contains("\"fronted\"") && e.contains("narrow_broadcasts"), "{e}");
        assert!(PrintIrAfter::parse("plan").is_err(), "plan leaves no IR");
        assert!(PrintIrAfter::parse(" , ").is_err());
    }

    #[test]
    fn the_pipeline_times_records_and_prints_what_was_asked() {
        let mut printed = vec![];
        let mut graph = Graph::default();
        {
            let mut p = Pipeline::new(PrintIrAfter::Passes(vec!["fold_batchnorm"]), |name, ir| {
                printed.push((name.to_string(), ir.to_string()))
            });
            let n = p.run("narrow_broadcasts", &mut graph, |_| Ok((3, "three".to_string()))).unwrap();
            assert_eq!(n, 3);
            p.run("fold_batchnorm", &mut graph, |_| Ok(((), "none".to_string()))).unwrap();
            p.record("plan", 0.5, "2 operators".into(), None).unwrap();
            let names: Vec<_> = p.records.iter().map(|r| r.name).collect();
            assert_eq!(names, ["narrow_broadcasts", "fold_batchnorm", "plan"]);
            let table = p.table();
            assert!(table.contains("plan") && table.contains("500.0") && table.contains("2 operators"), "{table}");
        }
        assert_eq!(printed.len(), 1);
        assert_eq!(printed[0].0, "fold_batchnorm");
    }
}
