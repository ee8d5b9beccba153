//! # blockscale-kernel-build
//!
//! The one description of how blockscale's CUDA code is built, read by
//! `crates/blockscale-cuda/build.rs` (which compiles it) and by `cargo xtask kernels`
//! (which checks registers, spills and SASS in what build.rs compiled), so the two
//! cannot drift apart:
//!
//! - [`KernelBuild`]: the kernel sources under `kernels/` (module kernels and CUTLASS
//!   shims, [`sources`]), their nvcc flags ([`NvccFlags`], the one reader of
//!   `nvcc_flags.txt`) and the target architectures ([`Arch`], taken from the
//!   `-gencode` lines of `kernels/nvcc_flags.txt`, the only place they are listed);
//! - where things live: the target dir cargo builds into and what `cargo xtask
//!   setup-cuda` installs there ([`dirs`]), how nvcc and CUTLASS are found
//!   ([`toolchain`]), and the compile caches (CUTLASS objects; module fatbins, cubins
//!   and ptxas reports) that build.rs fills and `cargo xtask kernels` reads
//!   ([`cache`]).
//!
//! It has no CUDA dependency itself: it names files and command-line flags, it runs
//! nothing.

mod arch;
mod description;
mod error;
mod flags;

pub mod cache;
pub mod dirs;
pub mod sources;
pub mod toolchain;

pub use arch::Arch;
pub use description::KernelBuild;
pub use error::Error;
pub use flags::NvccFlags;
