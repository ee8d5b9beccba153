//! # blockscale-golden
//!
//! Golden files: one set of truths every backend is checked against, and that kernel
//! authors outside the project can use (docs/GOLDEN.md). Each file in `tests/golden/`
//! is one case, written by `cargo xtask golden` from the CPU reference with a seeded
//! generator: the inputs, the quantized codes and scales (both layouts), the
//! dequantized values, or a GEMM's operands, epilogue and exact result.
//!
//! - [`GoldenFile`] reads and validates a file; everything wrong with a file is a typed
//!   [`GoldenError`], never a numeric mismatch or a panic.
//! - [`verify::verify_file`] recomputes a case with the facade's [`blockscale::Backend`]
//!   and reports one [`verify::Outcome`] per check.
//! - The `blockscale-golden` binary (what `cargo xtask verify` runs) does that for a
//!   directory, printing one line per case and a summary.

mod error;

pub mod case;
pub mod file;
pub mod verify;

pub use error::GoldenError;
pub use file::{GoldenFile, Writer};
