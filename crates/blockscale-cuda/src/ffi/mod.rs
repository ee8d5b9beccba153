//! The bottom layer, what the kernels and the CUDA driver see, and the only place with
//! `unsafe` (the crate root denies `unsafe_code`; the modules below that need it are
//! marked `#[allow(unsafe_code)]`). It is laid out as cudarc's `sys` / `result` below its
//! safe API, and the op modules above it (quantize, dequantize, the GEMMs, the GEMVs)
//! are safe Rust:
//!
//! - [`params`]: the kernels' `#[repr(C)]` parameter structs, mirrors of
//!   `kernels/common/params.cuh`, and [`KernelArgs`], the unsafe trait that passes each
//!   kernel's parameter list to a launch;
//! - [`names`]: the kernels' names, one constructor per kernel family, each typed by
//!   the parameters its kernels take (no `unsafe`);
//! - [`launch`]: [`launch()`](launch::launch), the one launch of a kernel (serial, or a
//!   programmatic dependent launch, in clusters where asked);
//! - [`cutlass`]: the `extern "C"` CUTLASS shims, behind [`Shim`](cutlass::Shim)'s query
//!   and launch;
//! - [`driver`]: the driver calls cudarc's safe API lacks (unset allocations, the
//!   cluster occupancy query, copies and memsets on device addresses, TMA tensor maps);
//! - [`host`]: page-locked staging memory, the queued copies between it and device
//!   addresses, and byte views of the element types (the host-to-host pipeline).
//!
//! Every `unsafe` block here carries a `// SAFETY:` line.
//!
//! # The launch contract
//!
//! The functions here are safe to call from the crate (they are `pub(crate)`, never
//! public) because every caller keeps one rule, checked in the op modules before they
//! call, each of which says at its call what it checked ("the launch contract"):
//!
//! - every device address handed down (in a parameter struct, a CUTLASS argument block,
//!   a tensor map, a copy or a memset) points into a live allocation that covers all
//!   the work reads or writes there (shape, row stride, alignment and length checked
//!   against the buffer), and the buffer's cudarc guard (`device_ptr` /
//!   `device_ptr_mut`) stays alive until the work is queued, so that with event tracking
//!   on the recorded accesses cover it; a host buffer a queued copy reads or writes is
//!   page-locked memory that stays allocated, and untouched by the host, until the
//!   stream has run the copy;
//! - the launch shape (grid, block, dynamic shared memory, cluster) is the one the
//!   kernel is written for;
//! - a dependent launch's kernel reads nothing before its `griddepcontrol.wait` that
//!   earlier work on the stream may still write.
//!
//! That a kernel gets the parameters it takes is not the callers' business but the
//! types': a kernel is loaded from a [`KernelName<P>`](names::KernelName) and launched
//! only with a `P`.
//!
//! [`KernelArgs`]: params::KernelArgs

#[allow(unsafe_code)]
pub(crate) mod cutlass;
#[allow(unsafe_code)]
pub(crate) mod driver;
#[allow(unsafe_code)]
pub(crate) mod host;
#[allow(unsafe_code)]
pub(crate) mod launch;
pub(crate) mod names;
#[allow(unsafe_code)]
pub(crate) mod params;
