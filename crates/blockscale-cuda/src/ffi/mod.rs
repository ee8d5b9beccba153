//! The bottom layer, what the kernels and the CUDA driver see, laid out as cudarc's
//! `sys` / `result` below its safe API:
//!
//! - [`params`]: the kernels' `#[repr(C)]` parameter structs and [`KernelArgs`], which
//!   passes each kernel's parameter list to a launch;
//! - [`names`]: the kernels' names, each typed by the parameters its kernel takes;
//! - [`launch`]: the one launch of a kernel;
//! - [`cutlass`]: the `extern "C"` CUTLASS shims, behind [`Shim`](cutlass::Shim)'s query
//!   and launch.
//!
//! # The launch contract
//!
//! The functions here are safe to call from the crate (they are `pub(crate)`, never
//! public) because every caller keeps one rule, checked in the op modules before they
//! call: every device address handed down (inside a parameter struct or a CUTLASS
//! argument block) points into a live
//! allocation that covers all the kernel reads or writes there (shape, row stride,
//! alignment and length checked against the buffer), and the buffer's cudarc guard
//! (`device_ptr` / `device_ptr_mut`) stays alive until the work is queued, so that with
//! event tracking on the recorded accesses cover it; the launch shape (grid, block,
//! dynamic shared memory, cluster) is the one the kernel is written for; and a
//! dependent launch's kernel reads nothing before its `griddepcontrol.wait` that earlier
//! work on the stream may still write. Each op module says at its call what it checked;
//! the `// SAFETY:` comments here rest on it.
//!
//! [`KernelArgs`]: params::KernelArgs

pub(crate) mod cutlass;
pub(crate) mod driver;
pub(crate) mod launch;
pub(crate) mod names;
pub(crate) mod params;
