//! `blockscale`: quantize safetensors checkpoints to block-scaled formats, read the
//! formats in the wild, and report accuracy and speed. docs/CLI.md is the manual.

mod checkpoint;
mod cli;
mod commands;
mod convention;
mod demo;
mod error;
mod plot;
mod progress;
mod report;
mod scheme_arg;
mod select;
mod values;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};
use crate::error::CliError;

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
    match run(cli.command) {
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

fn run(command: Command) -> Result<(), CliError> {
    match command {
        Command::Quantize(a) => commands::quantize::run(&a),
        Command::Dequantize(a) => commands::dequantize::run(&a),
        Command::Inspect(a) => commands::inspect::run(&a),
        Command::Bench(a) => commands::bench::run(&a),
        Command::Eval(a) => commands::eval::run(&a),
    }
}
