//! `blockscale bench`.

use crate::cli::BenchArgs;
use crate::error::CliError;

/// Runs the benchmark.
pub fn run(_args: &BenchArgs) -> Result<(), CliError> {
    Err(CliError::Unsupported("bench: not yet".into()))
}
