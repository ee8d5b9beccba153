//! The `blockscale` command as a library: its modules, for the `blockscale` binary
//! (src/main.rs, a thin caller of [`run`]) and the fuzz targets (fuzz/ at the
//! repository root). Not a stable API: every module is an internal of the command and
//! hidden from the docs; docs/CLI.md is the manual of the command itself.

// The module docs link the private stages they describe, for readers of the source.
#![allow(rustdoc::private_intra_doc_links)]

/// Declares the command's modules, each public for the binary and the fuzz targets but
/// hidden from the docs.
macro_rules! internal_modules {
    ($($name:ident),*) => {$(
        #[doc(hidden)]
        pub mod $name;
    )*};
}
internal_modules!(cli, commands, convention, demo, error, plot, progress, report, scheme_arg, select, values);

use crate::cli::Command;
use crate::error::CliError;

/// Runs one parsed subcommand.
///
/// # Errors
/// Every [`CliError`] of the subcommand.
pub fn run(command: Command) -> Result<(), CliError> {
    match command {
        Command::Quantize(a) => commands::quantize::run(&a),
        Command::Dequantize(a) => commands::dequantize::run(&a),
        Command::Inspect(a) => commands::inspect::run(&a),
        Command::Bench(a) => commands::bench::run(&a),
        Command::Eval(a) => commands::eval::run(&a),
    }
}
