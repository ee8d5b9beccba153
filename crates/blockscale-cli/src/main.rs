//! `blockscale`: quantize safetensors checkpoints to block-scaled formats, read the
//! formats in the wild, and report accuracy and speed. docs/CLI.md is the manual; the
//! commands live in the library (src/lib.rs).

use std::process::ExitCode;

use blockscale::checkpoint;
use blockscale_cli::cli::{Cli, Command};
use blockscale_cli::error;
use clap::Parser;

fn main() -> ExitCode {
    let cli = Cli::parse();
    checkpoint::interrupt::install();
    let json = match &cli.command {
        Command::Quantize(a) => a.out.json,
        Command::Dequantize(a) => a.out.json,
        Command::Inspect(a) => a.json,
        Command::Eval(a) => a.json,
        Command::Bench(a) => a.json,
    };
    match blockscale_cli::run(cli.command) {
        Ok(()) => ExitCode::from(error::exit::OK),
        Err(e) => {
            if json {
                println!("{}", e.to_json());
            }
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
