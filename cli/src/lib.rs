//! `spartac`: the command-line tool, as a library ([`execute`] runs one command line in this
//! process: the binary's `main.rs` and the Python package call it). Each subcommand lives in its own file (`plan.rs` holds
//! `plan` and `explain`; `run.rs` hands `.sparta` files to `run/artifact.rs`; `tune.rs` writes its
//! report through `tune_report.rs`); `model_args.rs` holds the arguments every model-loading
//! command shares.
//!
//! The binary is its own crate because it needs both the compiler and the runtime, and the
//! compiler must not depend on the runtime (which holds CUDA). An error prints as one
//! `error: ...` line (the cause chain joined, repeats skipped) and exits 1; a panic prints one
//! "internal error" line instead of a backtrace.
#![recursion_limit = "256"]

mod compile;
mod costdb;
mod costdb_tune;
mod hpec;
mod inspect;
mod kernels;
mod model_args;
mod outputs;
mod plan;
mod plot;
mod propagate;
mod run;
mod stages;
mod synth;
mod tune;
mod tune_report;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// spartac: a sparsity-aware deep-learning compiler for NVIDIA GPUs.
///
/// It reads a standard ONNX model, builds its own graph IR with static shapes, and runs
/// it. Every stage is checked against the CPU reference executor.
///
/// Examples:
///   spartac inspect model.onnx --input-shape input_ids=32,128
///   spartac run model.onnx --random 7 --output out.npz
///   spartac run model.onnx --inputs in.npz --output out.npz
#[derive(Parser)]
#[command(name = "spartac", version, verbatim_doc_comment, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    Inspect(inspect::InspectArgs),
    Compile(compile::CompileArgs),
    Run(run::RunArgs),
    Propagate(propagate::PropagateArgs),
    Plan(plan::PlanArgs),
    Explain(plan::ExplainArgs),
    /// HPEC Sparse DNN Challenge: run, generate networks.
    Hpec(hpec::HpecArgs),
    /// Specialized sparse-matmul kernels on the GPU: test, bench.
    Kernels(kernels::KernelsArgs),
    /// The planner's cost DB: fit it to measured kernel times.
    Costdb(costdb::CostdbArgs),
    Tune(tune::TuneArgs),
    /// Write synthetic models: one MatMul with a seeded sparse weight.
    Synth(synth::SynthArgs),
}

/// Prints a panic as one line ("internal error ... this is a bug") instead of a backtrace.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let at = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
        eprintln!("error: internal error{at}: {msg} (this is a bug in spartac; please report it)");
    }));
}

/// How a command line failed: its one-line message (`error: ...`) and exit status (2 for
/// arguments, 1 for the rest).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub message: String,
    pub status: u8,
}

/// Runs one command line (`argv[0]` first, as `std::env::args_os` gives it) in this process,
/// as the binary does: `Ok` with the exit status of a command that ran (help and version
/// included), `Err` with the one-line message of one that failed (not printed here).
pub fn execute<I, T>(argv: I) -> Result<ExitCode, Failure>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match Cli::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(e) => return argument_error(e),
    };
    let result = match cli.command {
        Command::Inspect(args) => inspect::run(args),
        Command::Compile(args) => compile::run(args),
        Command::Run(args) => run::run(args),
        Command::Propagate(args) => propagate::run(args),
        Command::Plan(args) => plan::run_plan(args),
        Command::Explain(args) => plan::run_explain(args),
        Command::Hpec(args) => hpec::run(args).map(|()| ExitCode::SUCCESS),
        Command::Kernels(args) => kernels::run(args).map(|()| ExitCode::SUCCESS),
        Command::Costdb(args) => costdb::run(args).map(|()| ExitCode::SUCCESS),
        Command::Tune(args) => tune::run(args),
        Command::Synth(args) => synth::run(args).map(|()| ExitCode::SUCCESS),
    };
    result.map_err(|e| {
        let chain: Vec<String> = e.chain().map(|c| c.to_string()).collect();
        Failure { message: format!("error: {}", dedup_chain(&chain)), status: 1 }
    })
}

/// Help and version print as clap writes them; an argument error is one `error:` line (the
/// message, clap's tips, the usage) with status 2.
fn argument_error(e: clap::Error) -> Result<ExitCode, Failure> {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = e.print();
        return Ok(ExitCode::from(if e.use_stderr() { 2 } else { 0 }));
    }
    Err(Failure { message: one_line_argument_error(&e.render().to_string()), status: 2 })
}

/// clap's rendered error (message, indented details, tips, usage, a pointer to --help) as one
/// line: `error: MESSAGE DETAILS; TIP (usage: USAGE; see --help)`.
fn one_line_argument_error(rendered: &str) -> String {
    let mut parts: Vec<String> = vec![];
    let mut usage = None;
    for line in rendered.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(u) = line.strip_prefix("Usage:") {
            usage = Some(u.trim().to_string());
        } else if line.starts_with("For more information") {
            continue;
        } else if let Some(tip) = line.strip_prefix("tip:") {
            parts.push(format!("; {}", tip.trim()));
        } else if parts.is_empty() {
            parts.push(line.strip_prefix("error:").unwrap_or(line).trim().to_string());
        } else {
            parts.push(format!(" {line}"));
        }
    }
    let usage = usage.map(|u| format!(" (usage: {u}; see --help)")).unwrap_or_default();
    format!("error: {}{usage}", parts.concat())
}

/// Joins an error chain on one line, skipping causes already quoted by their parent and a
/// cause's leading `PATH: ` when the line names that path already (`cannot load the network
/// x.tsv: x.tsv: No such file` reads `cannot load the network x.tsv: No such file`).
fn dedup_chain(chain: &[String]) -> String {
    let mut out: Vec<&str> = vec![];
    for c in chain {
        if out.iter().any(|prev| prev.contains(c.as_str())) {
            continue;
        }
        let mut c = c.as_str();
        while let Some((head, rest)) = c.split_once(": ") {
            if head.len() >= 2 && !rest.is_empty() && out.iter().any(|prev| prev.contains(head)) {
                c = rest;
            } else {
                break;
            }
        }
        out.push(c);
    }
    out.join(": ").replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::{dedup_chain, one_line_argument_error};

    #[test]
    fn a_chain_names_each_path_once() {
        let chain = |v: &[&str]| dedup_chain(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            chain(&["cannot load the network /x", "/x: No such file or directory (os error 2)"]),
            "cannot load the network /x: No such file or directory (os error 2)"
        );
        assert_eq!(chain(&["reading a.npz", "reading a.npz"]), "reading a.npz");
        // A cause that only shares words with its parent stays whole.
        assert_eq!(chain(&["layer 3", "row 7: bad value"]), "layer 3: row 7: bad value");
    }

    #[test]
    fn clap_errors_become_one_line() {
        let rendered = "error: unexpected argument '--out' found\n\n  tip: a similar argument exists: '--output'\n\nUsage: spartac compile --output <MODEL.sparta> <MODEL>\n\nFor more information, try '--help'.\n";
        assert_eq!(
            one_line_argument_error(rendered),
            "error: unexpected argument '--out' found; a similar argument exists: '--output' (usage: spartac compile --output <MODEL.sparta> <MODEL>; see --help)"
        );
    }
}
