//! `blockscale quantize`: shard by shard, tensor by tensor, through memory maps, into a
//! temporary output renamed into place at the end. Three stages:
//!
//! 1. [`plan`]: every option checked, the checkpoint opened, every output tensor named
//!    and shaped, the convention's configs made; a weight the scheme cannot hold is an
//!    error before anything is written.
//! 2. [`job`]: one weight quantized on the backend (poisoned blocks warned about) and
//!    encoded as the convention's tensors; on the CPU, codes and scales are quantized
//!    into reused buffers and written from there when the convention stores them as
//!    they are.
//! 3. [`write`]: the output shards written as planned, each weight through the job as
//!    its turn comes, then the folder's index and side files, and the [`report`].

mod job;
mod plan;
mod report;
#[cfg(test)]
mod testing;
mod write;

use crate::cli::QuantizeArgs;
use crate::error::CliError;

/// Runs `quantize`.
///
/// # Errors
/// Every [`CliError`]: bad options, unreadable input, a weight that cannot be
/// quantized (named), an output that exists or cannot be written.
pub fn run(args: &QuantizeArgs) -> Result<(), CliError> {
    let (job, plan) = plan::plan(args)?;
    let report = write::write(args, plan, job.quantizes_into(), |weight, progress, buffers| match buffers {
        Some((data, scales)) => job.run_into(weight, progress, data, scales),
        None => job.run(weight, progress),
    })?;
    report.print(args.out.json);
    Ok(())
}
