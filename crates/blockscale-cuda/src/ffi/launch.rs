//! The one kernel launch: [`launch`] queues a loaded [`Kernel<P>`] with its parameters `P`
//! on a stream, after the stream's previous work or as a programmatic dependent launch
//! (in clusters where asked).

use std::marker::PhantomData;

use cudarc::driver::{CudaFunction, CudaStream, DriverError, LaunchConfig, result, sys};

use super::names::KernelName;
use super::params::KernelArgs;

/// The largest cluster the kernels are launched in (the portable limit).
pub(crate) const MAX_CLUSTER: usize = 8;

/// A loaded kernel that takes the parameters `P`, and how many of its CTAs fit on one SM
/// (for the block size and shared memory it was loaded for).
pub(crate) struct Kernel<P> {
    func: CudaFunction,
    pub(crate) blocks_per_sm: u32,
    params: PhantomData<fn(&P)>,
}

impl<P> Clone for Kernel<P> {
    fn clone(&self) -> Self {
        Self { func: self.func.clone(), blocks_per_sm: self.blocks_per_sm, params: PhantomData }
    }
}

impl<P> Kernel<P> {
    /// The kernel `func`, loaded from its module under `_name` (which gives it its type).
    pub(crate) fn new(_name: &KernelName<P>, func: CudaFunction, blocks_per_sm: u32) -> Self {
        Self { func, blocks_per_sm, params: PhantomData }
    }

    /// The cudarc function (for occupancy queries).
    pub(crate) fn function(&self) -> &CudaFunction {
        &self.func
    }
}

/// How a launch is ordered after the work queued before it on its stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Order {
    /// After that work completes: `cuLaunchKernel`, as cudarc's `LaunchArgs::launch`.
    Serial,
    /// A programmatic dependent launch (`cuLaunchKernelEx` with programmatic stream
    /// serialization): the kernel may start while the previous kernel finishes, and waits
    /// (`griddepcontrol.wait`) before it touches memory that kernel writes. In clusters of
    /// `cluster` CTAs along x (1: no clusters; at most [`MAX_CLUSTER`]).
    Dependent { cluster: u32 },
}

impl Order {
    /// A dependent launch without clusters.
    pub(crate) const DEPENDENT: Self = Self::Dependent { cluster: 1 };
}

/// Queues `kernel` on `stream` with `params`, in the grid, blocks and dynamic shared
/// memory of `config`, ordered as `order`.
///
/// Safe to call inside the crate under the launch contract of the [`ffi`](super) module:
/// the caller checked every device address in `params` against the extent the kernel
/// uses and holds the buffers' guards until this returns, `config` (and a cluster) is the
/// shape the kernel is written for, and a dependent kernel reads nothing before its
/// `griddepcontrol.wait` that earlier work on the stream may still write. That `params`
/// is what the kernel takes is the types' part: a `Kernel<P>` is loaded from a
/// `KernelName<P>`, and names.rs gives a kernel only the `P` it takes.
///
/// # Errors
/// The driver's error when the launch (or binding the context, for a serial one) fails.
pub(crate) fn launch<P: KernelArgs>(
    stream: &CudaStream,
    kernel: &Kernel<P>,
    config: LaunchConfig,
    order: Order,
    params: &P,
) -> Result<(), DriverError> {
    let mut pointers = params.pointers();
    let args = pointers.as_mut();
    let func = kernel.func.cu_function();
    match order {
        Order::Serial => {
            stream.context().bind_to_thread()?;
            // SAFETY: the launch contract (above): `args` points at `params`, the kernel's
            // parameters in its C layout ([`KernelArgs`]); every address in them covers
            // what the kernel touches and stays valid, the guards ordering the kernel
            // after the buffers' earlier uses; `config` is the kernel's launch shape.
            // `params` outlives the call, which copies the parameters.
            unsafe {
                result::launch_kernel(
                    func,
                    config.grid_dim,
                    config.block_dim,
                    config.shared_mem_bytes,
                    stream.cu_stream(),
                    args,
                )
            }
        }
        Order::Dependent { cluster } => {
            let mut serialization =
                attribute(sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION);
            serialization.value.programmaticStreamSerializationAllowed = 1;
            let mut attrs = [serialization, cluster_attribute(cluster)];
            let used = if cluster > 1 { 2 } else { 1 };
            let cfg = config_ex(stream, config, &mut attrs[..used]);
            // SAFETY: as for a serial launch; in addition the kernel reads nothing before
            // its griddepcontrol.wait that earlier work may still write, and with clusters
            // the grid's x is a multiple of `cluster` (at most MAX_CLUSTER) and the kernel
            // expects them (the launch contract). `cfg`, `attrs` and `params` outlive the
            // call, which copies them.
            unsafe { sys::cuLaunchKernelEx(&cfg, func, args.as_mut_ptr(), std::ptr::null_mut()) }.result()
        }
    }
}

/// A launch attribute: `id`, its value all zero (for the caller to set).
fn attribute(id: sys::CUlaunchAttributeID) -> sys::CUlaunchAttribute {
    // SAFETY: CUlaunchAttribute is plain data (an id, padding and a union of integers);
    // all zero is a valid value.
    let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attr.id = id;
    attr
}

/// The attribute of a launch in clusters of `cluster` CTAs along x.
pub(super) fn cluster_attribute(cluster: u32) -> sys::CUlaunchAttribute {
    let mut attr = attribute(sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION);
    attr.value.clusterDim = sys::CUlaunchAttributeValue_union__bindgen_ty_1 { x: cluster, y: 1, z: 1 };
    attr
}

/// The `cuLaunchKernelEx` description of a launch of shape `config` on `stream` with
/// `attrs` (which must outlive its use).
pub(super) fn config_ex(
    stream: &CudaStream,
    config: LaunchConfig,
    attrs: &mut [sys::CUlaunchAttribute],
) -> sys::CUlaunchConfig {
    sys::CUlaunchConfig {
        gridDimX: config.grid_dim.0,
        gridDimY: config.grid_dim.1,
        gridDimZ: config.grid_dim.2,
        blockDimX: config.block_dim.0,
        blockDimY: config.block_dim.1,
        blockDimZ: config.block_dim.2,
        sharedMemBytes: config.shared_mem_bytes,
        hStream: stream.cu_stream(),
        attrs: attrs.as_mut_ptr(),
        numAttrs: attrs.len() as u32,
    }
}
