//! [`Device`]: a CUDA context, a stream, the loaded kernels and the architecture check.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DeviceRepr, LaunchConfig, ValidAsZeroBits,
};
use cudarc::nvrtc::Ptx;

use crate::CudaError;
use crate::ffi::driver;
use crate::ffi::launch::{Kernel, MAX_CLUSTER};
use crate::ffi::names::KernelName;

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/kernels.rs"));
}

/// The kernel tier a device runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arch {
    /// Hopper (compute capability 9.0): sm_90a kernels, software FP4/FP6 conversion.
    Sm90,
    /// Blackwell GeForce and RTX PRO (12.x): sm_120a kernels, hardware conversions.
    Sm120,
}

/// One GPU, ready to run blockscale's kernels: a context, the stream every operation is
/// queued on, and the kernel modules (SASS for sm_90a and sm_120a; the driver picks the
/// one matching the device). A module is loaded the first time one of its kernels is
/// looked up, so opening a device costs the context and no module loads, and a program
/// that only quantizes never loads the GEMM modules.
///
/// ```no_run
/// let dev = blockscale_cuda::Device::new(0)?;
/// println!("{} ({:?}, {} SMs)", dev.name(), dev.arch(), dev.sm_count());
/// # Ok::<(), blockscale_cuda::CudaError>(())
/// ```
pub struct Device {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    arch: Arch,
    name: String,
    sm_count: u32,
    /// The kernel modules loaded so far and the kernels looked up in them, behind one
    /// lock: the first lookup of a module's kernel loads the module.
    loaded: Mutex<Loaded>,
    /// Scratch memory of the GEMMs and GEMVs, grown by the allocating calls and
    /// [`Device::reserve_workspace`]; every use is ordered on `stream`. (Boxed: a
    /// `Device` stays small enough to sit in enums such as the facade's `Backend`.)
    scratch: Box<Mutex<Scratch>>,
    /// The device's own host-to-host pipeline ([`Device::with_host_pipeline`]), made on
    /// its first use: pinned staging is allocated only by programs that convert host
    /// arrays.
    host: Box<Mutex<Option<crate::HostPipeline>>>,
}

// A Device is shared between threads (an engine's workers, rayon tasks): its lazily
// loaded modules and kernels sit behind a lock, so it stays Send and Sync.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Device>();
};

/// What a [`Device`] has loaded: the kernel modules by name (each loaded on the first
/// lookup of one of its kernels) and the kernels by name, with how many of their CTAs
/// fit on one SM.
#[derive(Default)]
struct Loaded {
    modules: HashMap<&'static str, Arc<CudaModule>>,
    functions: HashMap<String, (CudaFunction, u32)>,
    /// What [`Device::spread_smem`] knows, from its first call on (boxed: a `Device`
    /// stays small).
    spread: Option<Box<Spread>>,
}

/// The device's shared memory sizes in bytes (an SM's, the most a CTA may take, what the
/// driver reserves on an SM for every CTA) and, per kernel by its driver handle, its
/// static shared memory and the dynamic limit raised so far.
struct Spread {
    per_sm: usize,
    per_block: usize,
    reserved: usize,
    kernels: HashMap<usize, (usize, usize)>,
}

/// A device's scratch memory, behind one lock.
#[derive(Default)]
pub(crate) struct Scratch {
    /// The GEMMs' and GEMVs' workspace (dequantized operands, staged outputs, split-K
    /// partial sums, CUTLASS's own).
    pub(crate) workspace: Option<CudaSlice<u8>>,
    /// The split-K GEMV's arrival counters, one per row tile, zero between launches
    /// (allocated zeroed with the workspace; every launch leaves them zero).
    pub(crate) counters: Option<CudaSlice<u32>>,
}

/// The device address of a scratch buffer for a launch that uses it (`used`), with the
/// guard that records the kernel's access on `stream`; 0 and no guard otherwise.
pub(crate) fn scratch_ptr<'a, T>(
    buf: &'a mut Option<CudaSlice<T>>,
    used: bool,
    stream: &'a CudaStream,
) -> (u64, Option<cudarc::driver::SyncOnDrop<'a>>) {
    match buf.as_mut() {
        Some(b) if used => {
            let (p, g) = cudarc::driver::DevicePtrMut::device_ptr_mut(b, stream);
            (p, Some(g))
        }
        _ => (0, None),
    }
}

/// The device address of an optional buffer a kernel reads (an epilogue's bias), with
/// the guard that records the read on `stream`; 0 and no guard without one.
pub(crate) fn optional_ptr<'a, T>(
    buf: Option<&'a CudaSlice<T>>,
    stream: &'a CudaStream,
) -> (u64, Option<cudarc::driver::SyncOnDrop<'a>>) {
    match buf {
        Some(b) => {
            let (p, g) = cudarc::driver::DevicePtr::device_ptr(b, stream);
            (p, Some(g))
        }
        None => (0, None),
    }
}

/// Row tiles the GEMV's split-K counters cover.
pub(crate) const GEMV_COUNTERS: usize = 1 << 16;

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("name", &self.name)
            .field("arch", &self.arch)
            .field("sm_count", &self.sm_count)
            .finish()
    }
}

impl Device {
    /// Number of CUDA devices visible, or an error if there is no driver.
    ///
    /// # Errors
    /// [`CudaError::NoDriver`] without libcuda; [`CudaError::Driver`] if it fails.
    pub fn count() -> Result<usize, CudaError> {
        ensure_driver()?;
        CudaContext::device_count().map(|n| n as usize).map_err(CudaError::driver("counting devices"))
    }

    /// Opens device `ordinal`: creates its context and stream. The kernels are loaded
    /// when first used.
    ///
    /// # Errors
    /// [`CudaError::NoDriver`], [`CudaError::NoDevice`], [`CudaError::Unsupported`] for
    /// a compute capability other than 9.0 and 12.x, [`CudaError::Driver`] otherwise.
    pub fn new(ordinal: usize) -> Result<Self, CudaError> {
        let count = Self::count()?;
        if ordinal >= count {
            return Err(CudaError::NoDevice { ordinal, count });
        }
        let ctx = CudaContext::new(ordinal).map_err(CudaError::driver("creating a context"))?;
        let stream = ctx.new_stream().map_err(CudaError::driver("creating a stream"))?;
        Self::from_stream(stream)
    }

    /// Runs blockscale's work on a stream the caller owns (an engine's own stream and
    /// context): every operation is queued on it, ordered with the caller's other work,
    /// and cudarc's cross-stream event tracking stays as the caller configured the
    /// context. Checks the architecture; the kernels are loaded when first used.
    ///
    /// ```no_run
    /// use blockscale_cuda::{Device, cudarc::driver::CudaContext};
    /// let ctx = CudaContext::new(0).unwrap();
    /// let stream = ctx.new_stream().unwrap();
    /// let dev = Device::from_stream(stream.clone())?;
    /// # Ok::<(), blockscale_cuda::CudaError>(())
    /// ```
    ///
    /// # Errors
    /// [`CudaError::Unsupported`] for a compute capability other than 9.0 and 12.x,
    /// [`CudaError::Driver`] otherwise.
    pub fn from_stream(stream: Arc<CudaStream>) -> Result<Self, CudaError> {
        let ctx = stream.context().clone();
        let name = ctx.name().map_err(CudaError::driver("reading the device name"))?;
        let (major, minor) = ctx.compute_capability().map_err(CudaError::driver("reading the compute capability"))?;
        let arch = match (major, minor) {
            (9, 0) => Arch::Sm90,
            (12, _) => Arch::Sm120,
            _ => return Err(CudaError::Unsupported { name, major, minor }),
        };
        let sm_count = ctx
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(CudaError::driver("reading the SM count"))? as u32;
        Ok(Self {
            ctx,
            stream,
            arch,
            name,
            sm_count,
            loaded: Mutex::new(Loaded::default()),
            scratch: Box::new(Mutex::new(Scratch::default())),
            host: Box::new(Mutex::new(None)),
        })
    }

    /// Runs `f` with this device's own [`crate::HostPipeline`] (made on the first call,
    /// with the default chunk size, and kept: 104 MB of pinned staging), one caller at a
    /// time. The facade's host-array conversions (`Backend::quantize_into`,
    /// `Backend::dequantize_into`) go through it; a program that wants its own chunk
    /// size or one pipeline per thread makes its own.
    ///
    /// # Errors
    /// Making the pipeline's ([`crate::HostPipeline::new`]), or `f`'s.
    pub fn with_host_pipeline<R>(
        &self,
        f: impl FnOnce(&mut crate::HostPipeline) -> Result<R, CudaError>,
    ) -> Result<R, CudaError> {
        let mut slot = match self.host.lock() {
            Ok(slot) => slot,
            Err(poisoned) => {
                // A panic inside an earlier `f` may have left copies queued on the
                // pipeline's streams: wait for all of the context's work, then start
                // over with a new pipeline.
                let mut slot = poisoned.into_inner();
                self.ctx.synchronize().map_err(CudaError::driver("synchronizing after a panic"))?;
                *slot = None;
                self.host.clear_poison();
                slot
            }
        };
        if slot.is_none() {
            *slot = Some(crate::HostPipeline::new(self)?);
        }
        f(slot.as_mut().expect("made above"))
    }

    /// Loads every kernel module now rather than on first use (what opening a device
    /// did before modules were loaded lazily): for a program that wants no module load
    /// inside its first calls, say before capturing them in a CUDA graph. All of them
    /// took 16-22 ms on an H100 machine, one a few milliseconds.
    ///
    /// # Errors
    /// [`CudaError::Driver`] if a module fails to load.
    pub fn load_kernels(&self) -> Result<(), CudaError> {
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        for &(name, _) in embedded::MODULES {
            self.module(&mut loaded, name)?;
        }
        Ok(())
    }

    /// The device's kernel tier.
    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Streaming multiprocessors.
    pub fn sm_count(&self) -> u32 {
        self.sm_count
    }

    /// The cudarc context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The stream every blockscale operation on this device is queued on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Waits for all queued work.
    ///
    /// # Errors
    /// [`CudaError::Driver`] if a queued kernel failed.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        self.stream.synchronize().map_err(CudaError::driver("synchronizing the stream"))
    }

    /// Makes sure the GEMM workspace holds at least `bytes`, allocating (in stream order)
    /// if it must grow. Call it once before capturing `gemm_into` /
    /// `gemm_weight_only_into` in a CUDA graph or running them in a loop that must not
    /// allocate; the allocating `gemm` functions grow it themselves. A
    /// [`CudaError::WorkspaceTooSmall`] error names the size to reserve.
    ///
    /// # Errors
    /// [`CudaError::OutOfMemory`] or [`CudaError::Driver`].
    pub fn reserve_workspace(&self, bytes: usize) -> Result<(), CudaError> {
        let mut scratch = self.scratch();
        if scratch.counters.is_none() {
            scratch.counters = Some(
                self.stream
                    .alloc_zeros::<u32>(GEMV_COUNTERS)
                    .map_err(CudaError::alloc("the GEMV counters", 4 * GEMV_COUNTERS))?,
            );
        }
        let ws = &mut scratch.workspace;
        if ws.as_ref().is_some_and(|w| w.len() >= bytes) {
            return Ok(());
        }
        // Free the old buffer first (in stream order), then allocate the larger one: left
        // unset, since the workspace is scratch that every GEMM writes before reading.
        *ws = None;
        *ws = Some(
            driver::alloc_unset::<u8>(&self.stream, bytes).map_err(CudaError::alloc("the GEMM workspace", bytes))?,
        );
        Ok(())
    }

    /// A new buffer of `len` values of `T` that a kernel writes in full before anything
    /// reads it: allocated in stream order and left unset (no memset) for the element
    /// types (u8, f32, f16, bf16). `what` names it in an out-of-memory error.
    ///
    /// # Errors
    /// [`CudaError::OutOfMemory`] or [`CudaError::Driver`].
    pub(crate) fn alloc_unset<T: DeviceRepr + ValidAsZeroBits + 'static>(
        &self,
        len: usize,
        what: &'static str,
    ) -> Result<CudaSlice<T>, CudaError> {
        driver::alloc_unset(&self.stream, len).map_err(CudaError::alloc(what, len * size_of::<T>()))
    }

    /// Bytes the GEMM workspace holds now.
    pub fn workspace_bytes(&self) -> usize {
        self.scratch().workspace.as_ref().map_or(0, |w| w.len())
    }

    /// The workspace and the GEMV's split-K counters, locked for one launch's queuing.
    pub(crate) fn scratch(&self) -> std::sync::MutexGuard<'_, Scratch> {
        self.scratch.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// [`Self::scratch`] for a launch that needs `needed` workspace bytes: with `grow`
    /// (the allocating calls) the workspace grows first; without it (the `_into` calls,
    /// which allocate nothing) it must hold them already.
    ///
    /// # Errors
    /// [`CudaError::WorkspaceTooSmall`]; [`CudaError::OutOfMemory`] or
    /// [`CudaError::Driver`] when growing.
    pub(crate) fn scratch_for(
        &self,
        needed: usize,
        grow: bool,
    ) -> Result<std::sync::MutexGuard<'_, Scratch>, CudaError> {
        if grow {
            self.reserve_workspace(needed)?;
        }
        let scratch = self.scratch();
        let available = scratch.workspace.as_ref().map_or(0, |w| w.len());
        if available < needed {
            return Err(CudaError::WorkspaceTooSmall { needed, available });
        }
        Ok(scratch)
    }

    /// A kernel by name, loaded once and cached with its occupancy.
    pub(crate) fn function<P>(&self, name: &KernelName<P>) -> Result<Kernel<P>, CudaError> {
        self.function_with_smem(name, 0)
    }

    /// As [`Self::function`] for a kernel of 128 threads that always runs with `smem`
    /// bytes of dynamic shared memory (the GEMVs): on first use its limit is raised to
    /// `smem` and its occupancy counted with it, so a launch costs no driver query.
    pub(crate) fn function_with_smem<P>(&self, name: &KernelName<P>, smem: usize) -> Result<Kernel<P>, CudaError> {
        // The grid-stride kernels run 256 threads per block; the GEMVs (their own grid
        // and shared memory) the 128 they are built for.
        self.function_with_threads(name, if smem > 0 { 128 } else { 256 }, smem)
    }

    /// A kernel by name, its occupancy counted for blocks of `threads` with `smem` bytes
    /// of dynamic shared memory (its limit raised to that on first use).
    pub(crate) fn function_with_threads<P>(
        &self,
        name: &KernelName<P>,
        threads: u32,
        smem: usize,
    ) -> Result<Kernel<P>, CudaError> {
        // One lock over the lookup and any module load, so that two threads asking for
        // kernels of the same module load it once.
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((func, blocks_per_sm)) = loaded.functions.get(name.as_str()) {
            return Ok(Kernel::new(name, func.clone(), *blocks_per_sm));
        }
        let module = self.module(&mut loaded, name.module())?;
        let func = module.load_function(name.as_str()).map_err(CudaError::driver("finding a kernel in its module"))?;
        if smem > 0 {
            func.set_attribute(
                cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                smem as i32,
            )
            .map_err(CudaError::driver("raising a kernel's shared memory limit"))?;
        }
        let blocks_per_sm = func
            .occupancy_max_active_blocks_per_multiprocessor(threads, smem, None)
            .map_err(CudaError::driver("querying a kernel's occupancy"))?
            .max(1);
        loaded.functions.insert(name.as_str().to_string(), (func.clone(), blocks_per_sm));
        Ok(Kernel::new(name, func, blocks_per_sm))
    }

    /// Dynamic shared memory for a launch of `kernel` (loaded for `smem` bytes) with which
    /// at most `per_sm` of its CTAs share an SM: `smem` padded until one more would not
    /// fit, the kernel's limit raised to it. A one-wave grid of c CTAs on s SMs launched
    /// with `per_sm` = ceil(c / s) has its CTAs spread evenly, where the scheduler would
    /// otherwise fill some SMs to the occupancy limit and leave others near empty (their
    /// slots taken by the kernel before, under programmatic dependent launch): the
    /// crowded SMs then set the grid's time. `smem` itself where `per_sm` CTAs of that
    /// size do not fit or the padding would pass a CTA's limit.
    ///
    /// # Errors
    /// The driver's error when a query or the limit fails.
    pub(crate) fn spread_smem<P>(&self, kernel: &Kernel<P>, smem: usize, per_sm: u32) -> Result<usize, CudaError> {
        use cudarc::driver::sys::CUfunction_attribute as A;
        let func = kernel.function();
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        let spread: &mut Spread = match loaded.spread {
            Some(ref mut known) => known,
            None => {
                let read = |attribute, context| {
                    self.ctx.attribute(attribute).map(|v| v as usize).map_err(CudaError::driver(context))
                };
                loaded.spread.insert(Box::new(Spread {
                    per_sm: read(
                        CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
                        "reading the shared memory of an SM",
                    )?,
                    per_block: read(
                        CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                        "reading the shared memory of a CTA",
                    )?,
                    reserved: read(
                        CUdevice_attribute::CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK,
                        "reading the shared memory reserved per CTA",
                    )?,
                    kernels: HashMap::new(),
                }))
            }
        };
        let key = func.cu_function() as usize;
        let (fixed, limit) = match spread.kernels.get(&key) {
            Some(&known) => known,
            None => {
                let fixed = func
                    .get_attribute(A::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)
                    .map_err(CudaError::driver("reading a kernel's static shared memory"))?;
                (fixed as usize, smem)
            }
        };
        let share = (spread.per_sm / per_sm.max(1) as usize).saturating_sub(fixed + spread.reserved) / 128 * 128;
        let padded = share.min(spread.per_block.saturating_sub(fixed));
        let footprint = padded + fixed + spread.reserved;
        if padded <= smem || (per_sm as usize + 1) * footprint <= spread.per_sm {
            return Ok(smem);
        }
        if padded > limit {
            func.set_attribute(A::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, padded as i32)
                .map_err(CudaError::driver("raising a kernel's shared memory limit"))?;
        }
        spread.kernels.insert(key, (fixed, padded.max(limit)));
        Ok(padded)
    }

    /// The embedded module `module_name`, loaded into the context now unless an earlier
    /// lookup loaded it (the caller holds the lock over `loaded`).
    fn module(&self, loaded: &mut Loaded, module_name: &'static str) -> Result<Arc<CudaModule>, CudaError> {
        if let Some(module) = loaded.modules.get(module_name) {
            return Ok(module.clone());
        }
        let (name, image) = embedded::MODULES.iter().find(|(n, _)| *n == module_name).ok_or(CudaError::Driver {
            context: "finding the kernel module",
            source: cudarc::driver::DriverError(cudarc::driver::sys::CUresult::CUDA_ERROR_NOT_FOUND),
        })?;
        let module = self
            .ctx
            .load_module(Ptx::from_binary(image.to_vec()))
            .map_err(CudaError::driver("loading the kernel fatbin"))?;
        loaded.modules.insert(name, module.clone());
        Ok(module)
    }

    /// The launch of a grid-stride kernel over `work` items, one per thread per step:
    /// blocks of 256 threads, one full wave (every SM holding as many blocks as fit), no
    /// more than the work needs.
    pub(crate) fn grid_stride<P>(&self, work: u64, kernel: &Kernel<P>) -> LaunchConfig {
        let needed = work.div_ceil(256).max(1);
        let blocks = needed.min(self.sm_count as u64 * kernel.blocks_per_sm as u64) as u32;
        LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 }
    }
}

/// Fails with [`CudaError::NoDriver`] unless libcuda can be loaded (cudarc would panic).
fn ensure_driver() -> Result<(), CudaError> {
    if driver::library_present() { Ok(()) } else { Err(CudaError::NoDriver) }
}

/// How many clusters of s CTAs of `kernel` (named `name`, CTAs of `threads` threads and
/// `smem` bytes of shared memory) the device holds at once, for s up to [`MAX_CLUSTER`] (index s; the driver's occupancy
/// query, made once per device name, SM count and kernel; 0 where the query fails, which
/// keeps that size out of the plan).
pub(crate) fn active_clusters<P>(
    dev: &Device,
    kernel: &Kernel<P>,
    name: &KernelName<P>,
    (threads, smem): (u32, usize),
) -> [usize; MAX_CLUSTER + 1] {
    type Key = (String, u32, String);
    static CACHE: std::sync::Mutex<Vec<(Key, [usize; MAX_CLUSTER + 1])>> = std::sync::Mutex::new(Vec::new());
    let key = (dev.name().to_string(), dev.sm_count(), name.as_str().to_string());
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, n)) = cache.iter().find(|(k, _)| *k == key) {
        return *n;
    }
    let mut counts = [0usize; MAX_CLUSTER + 1];
    for (size, count) in counts.iter_mut().enumerate().skip(1) {
        let n = driver::max_active_clusters(dev.stream(), kernel.function(), size as u32, (threads, smem));
        *count = n.map_or(0, |n| n.max(0) as usize);
    }
    cache.push((key, counts));
    counts
}
