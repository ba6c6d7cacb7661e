mod hpec;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "spartac")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// HPEC Sparse DNN Challenge networks.
    Hpec(hpec::HpecArgs),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Hpec(args) => hpec::run(args),
    }
}
