//! The `spartac` binary: [`spartac_cli::execute`] on the process's command line; a failure
//! prints as one `error: ...` line (exit status 1, or 2 for arguments), a panic as one
//! "internal error" line.

use std::process::ExitCode;

fn main() -> ExitCode {
    spartac_cli::install_panic_hook();
    spartac_runtime::host_memory::retain_freed_memory();
    match spartac_cli::execute(std::env::args_os()) {
        Ok(code) => code,
        Err(failure) => {
            eprintln!("{}", failure.message);
            ExitCode::from(failure.status)
        }
    }
}
