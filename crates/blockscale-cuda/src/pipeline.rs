//! Host-to-host quantization and dequantization on the GPU: [`HostPipeline`], reusable
//! page-locked staging buffers and a second stream, and the calls that use it
//! ([`quantize_host_into`], [`dequantize_host_into`] and their allocating forms).
//!
//! The matrix goes through in row chunks. For chunk `i` the host copies the rows from the
//! caller's (pageable) memory into a pinned buffer, on all cores, and queues its upload on
//! the pipeline's upload stream; the device's stream waits for it, runs the kernel and
//! copies the result back into a second pinned buffer, from which the host copies it into
//! the caller's buffers. Two sets of buffers alternate, so that while the host copies
//! chunk `i + 1` in and chunk `i - 1` out, the GPU uploads, converts and downloads chunk
//! `i` (three sets measured the same on an H100 host). Events order the two streams and
//! the host's reuse of each buffer; cudarc's own event tracking, where the context has
//! it on, adds the same waits.
//!
//! NVFP4 with the tensor's own amax (`GlobalScaleSource::TensorAmax`) needs the amax of
//! the whole matrix before any chunk is quantized. There the chunks are uploaded into one
//! device buffer holding the whole input, the amax kernel runs over it (the bytes and
//! the NaN/Inf error of [`crate::quantize`]; one wait for the GPU), and then the chunks
//! are quantized and copied back, the next chunk's kernel and download overlapping this
//! one's copy out; only the copy out no longer overlaps the uploads.
//!
//! Chunks are whole multiples of 128 rows wherever the scales are swizzled
//! (`Swizzled128x4` stores 128-row tiles one after another) or a scale covers 128 rows
//! (FP8 128x128), so that each chunk's scales are one contiguous run of the whole
//! matrix's; elsewhere any row count works, and chunks are still rounded to 128 rows
//! when that fits the staging size. Codes in the block-interleaved layout (`[k/32, rows,
//! 4]` words) are gathered and scattered per 32-column block.

use std::sync::Arc;

use blockscale_formats::{
    DataLayout, GlobalScale, GlobalScaleSource, NonFinite, QuantRequest, QuantizeOptions, QuantizedMatrix, ScaleData,
    ScaleFormat, ScaleLayout, Scheme,
};
use cudarc::driver::{CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, PinnedHostSlice};
use half::f16;
use ndarray::{Array2, ArrayView2};
use rayon::prelude::*;

use crate::buffer::DeviceElement;
use crate::checks::{check_limits, check_quantize};
use crate::dequantize::launch_dequantize_at;
use crate::ffi::host::{alloc_pinned, bytes_of, bytes_of_mut, copy_to_device, copy_to_host};
use crate::quantize::{bad_position, launch_amax, launch_quantize};
use crate::{CudaError, Device};

/// Rows a chunk is a multiple of where the layout asks it (and where it fits anyway).
const ROW_TILE: usize = 128;

/// Sets of staging buffers chunks rotate through: up to this many chunks are in flight.
const SLOTS: usize = 2;

/// Bytes one task of a parallel host copy moves.
const COPY_PIECE: usize = 256 << 10;

/// Reusable page-locked staging buffers, device buffers and a second stream for
/// host-to-host conversions on one [`Device`]: make one per device and pass it to every
/// [`quantize_host_into`] / [`dequantize_host_into`] call, so that a checkpoint of many
/// weights allocates its pinned memory once, when the pipeline is made (a row tile
/// larger than a chunk grows the buffers, which then stay).
///
/// A chunk holds about [`HostPipeline::chunk_bytes`] bytes of f32/f16/bf16 values (at
/// least 128 rows where the layout needs whole row tiles, or one row), and the pipeline
/// keeps two: 2 x 1.56 x `chunk_bytes` of pinned host memory (the values, and room for
/// their codes and scales) and as much device memory, plus, for NVFP4 with the tensor
/// amax, a device copy of the largest input matrix. Making one takes tens of
/// milliseconds (pinned allocation): a program can make it beside other work, e.g. on
/// the thread that opens the device while the main one maps its input files.
///
/// ```no_run
/// use blockscale_cuda::{Device, HostPipeline, QuantizeOptions, quantize_host_into};
/// use blockscale_formats::{QuantRequest, Scheme};
/// use ndarray::Array2;
///
/// let dev = Device::new(0)?;
/// let mut pipe = HostPipeline::new(&dev)?;
/// let w = Array2::from_shape_fn((4096, 10240), |(r, c)| half::bf16::from_f32((r as f32 - c as f32) / 97.0));
/// let opts = QuantizeOptions::default();
/// let request = QuantRequest::new(Scheme::NvFp4, 4096, 10240, &opts)?;
/// let mut data = vec![0u8; request.shape().data_bytes];
/// let mut scales = vec![0u8; request.scale_bytes()];
/// let global = quantize_host_into(&dev, &mut pipe, w.view(), Scheme::NvFp4, &opts, &mut data, &mut scales)?;
/// # Ok::<(), blockscale_cuda::CudaError>(())
/// ```
pub struct HostPipeline {
    lanes: Lanes,
    chunk_bytes: usize,
    slots: Vec<Slot>,
}

/// What every chunk shares: the two streams and the whole-input buffer.
struct Lanes {
    /// The stream of the device the pipeline serves (kernels and downloads run on it).
    stream: Arc<CudaStream>,
    /// The stream uploads run on.
    upload: Arc<CudaStream>,
    /// The whole input on the device, for NVFP4 with the tensor amax.
    whole: Option<CudaSlice<u8>>,
}

/// One of the [`SLOTS`] sets of buffers chunks rotate through.
struct Slot {
    /// Pinned f32/f16/bf16 values: quantization's input, dequantization's output.
    values: Option<PinnedHostSlice<u8>>,
    /// Pinned codes, then scales, then the 8-byte NaN/Inf flag: quantization's output,
    /// dequantization's input.
    packed: Option<PinnedHostSlice<u8>>,
    /// The device's twins of those (values; codes; scales; the flag).
    dev_values: Option<CudaSlice<u8>>,
    dev_codes: Option<CudaSlice<u8>>,
    dev_scales: Option<CudaSlice<u8>>,
    bad: CudaSlice<u64>,
    /// Recorded on the upload stream after this slot's upload: the device stream waits
    /// for it before the kernel, the host before writing the pinned input again.
    uploaded: CudaEvent,
    /// Recorded on the device stream after the kernel that read this slot's device
    /// input: the next upload into it waits for it.
    consumed: CudaEvent,
    /// Recorded on the device stream after the download into this slot's pinned output:
    /// the host waits for it before reading that.
    downloaded: CudaEvent,
}

impl Slot {
    fn new(ctx: &Arc<CudaContext>, stream: &Arc<CudaStream>) -> Result<Self, CudaError> {
        let event = || ctx.new_event(None).map_err(CudaError::driver("creating an event"));
        Ok(Self {
            values: None,
            packed: None,
            dev_values: None,
            dev_codes: None,
            dev_scales: None,
            bad: stream.alloc_zeros::<u64>(1).map_err(CudaError::alloc("a flag", 8))?,
            uploaded: event()?,
            consumed: event()?,
            downloaded: event()?,
        })
    }
}

// A pipeline moves between threads with its owner (one call at a time: `&mut`).
const _: () = {
    const fn send<T: Send>() {}
    send::<HostPipeline>();
};

impl std::fmt::Debug for HostPipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostPipeline")
            .field("chunk_bytes", &self.chunk_bytes)
            .field("pinned_bytes", &self.pinned_bytes())
            .finish()
    }
}

impl HostPipeline {
    /// The chunk size [`HostPipeline::new`] takes: 32 MiB of values. On the H100
    /// machine, over 84 MB weights, 8 MiB chunks took 1.4-1.6 times as long, 16 MiB
    /// 1.05-1.1 times and 64 MiB 1.2 times (docs/BENCHMARKS.md).
    pub const DEFAULT_CHUNK_BYTES: usize = 32 << 20;

    /// A pipeline for `dev` with chunks of [`Self::DEFAULT_CHUNK_BYTES`]: allocates the
    /// second stream, the events and the staging buffers.
    ///
    /// # Errors
    /// [`CudaError::PinnedAlloc`], [`CudaError::OutOfMemory`] or [`CudaError::Driver`].
    pub fn new(dev: &Device) -> Result<Self, CudaError> {
        Self::with_chunk_bytes(dev, Self::DEFAULT_CHUNK_BYTES)
    }

    /// A pipeline for `dev` whose chunks hold about `chunk_bytes` bytes of values (at
    /// least one row, or one 128-row tile where the layout needs whole tiles).
    ///
    /// # Errors
    /// As [`Self::new`].
    pub fn with_chunk_bytes(dev: &Device, chunk_bytes: usize) -> Result<Self, CudaError> {
        let stream = dev.stream().clone();
        let ctx = stream.context().clone();
        let upload = ctx.new_stream().map_err(CudaError::driver("creating the upload stream"))?;
        let slots = (0..SLOTS).map(|_| Slot::new(&ctx, &stream)).collect::<Result<_, _>>()?;
        let chunk_bytes = chunk_bytes.max(1);
        let mut pipe = Self { lanes: Lanes { stream, upload, whole: None }, chunk_bytes, slots };
        // Staging for a chunk of `chunk_bytes` of values now, so that the first call
        // does not allocate (a caller can make the pipeline beside other work): codes
        // take at most half the bytes of the values (FP8 codes of bf16), scales at most
        // a thirty-second, swizzle padding aside. A chunk that needs more grows them.
        pipe.reserve(Sizes { values: chunk_bytes, codes: chunk_bytes / 2, scales: chunk_bytes / 16, whole: 0 })?;
        Ok(pipe)
    }

    /// Bytes of values a chunk holds at most (unless one row tile is larger).
    pub fn chunk_bytes(&self) -> usize {
        self.chunk_bytes
    }

    /// Page-locked host memory the pipeline holds now.
    pub fn pinned_bytes(&self) -> usize {
        let len = |b: &Option<PinnedHostSlice<u8>>| b.as_ref().map_or(0, |b| b.len());
        self.slots.iter().map(|s| len(&s.values) + len(&s.packed)).sum()
    }

    /// Refuses a device other than the pipeline's.
    fn check_device(&self, dev: &Device) -> Result<(), CudaError> {
        if Arc::ptr_eq(dev.stream(), &self.lanes.stream) { Ok(()) } else { Err(CudaError::ForeignPipeline) }
    }

    /// Grows every slot's buffers to the sizes `need` gives, then orders the upload
    /// stream after the allocations (queued on the device's stream).
    fn reserve(&mut self, need: Sizes) -> Result<(), CudaError> {
        let lanes = &mut self.lanes;
        let ctx = lanes.stream.context().clone();
        for slot in &mut self.slots {
            pinned(&mut slot.values, &ctx, (need.values, "staged values"))?;
            pinned(&mut slot.packed, &ctx, (need.codes + need.scales + 8, "staged codes and scales"))?;
            device(&mut slot.dev_values, &lanes.stream, (need.values, "staged values"))?;
            device(&mut slot.dev_codes, &lanes.stream, (need.codes, "staged codes"))?;
            device(&mut slot.dev_scales, &lanes.stream, (need.scales, "staged scales"))?;
        }
        device(&mut lanes.whole, &lanes.stream, (need.whole, "the whole input"))?;
        lanes.upload.join(&lanes.stream).map_err(CudaError::driver("ordering the upload stream"))
    }

    /// Runs `steps` over the chunks of `chunking` (see [`drive`]), then waits for both
    /// streams whatever happened, so that nothing queued still touches the pinned
    /// buffers when the call returns.
    fn run(&mut self, chunking: &Chunking, steps: &mut impl Steps) -> Result<(), CudaError> {
        let result = drive(&mut self.lanes, &mut self.slots, chunking, steps);
        let settled = self.lanes.settle();
        result.and(settled)
    }
}

impl Lanes {
    /// Waits for both streams.
    fn settle(&self) -> Result<(), CudaError> {
        self.upload.synchronize().map_err(CudaError::driver("synchronizing the upload stream"))?;
        self.stream.synchronize().map_err(CudaError::driver("synchronizing the stream"))
    }
}

impl Drop for HostPipeline {
    fn drop(&mut self) {
        // Every call waits for its copies before it returns; this only guards against
        // one that unwound, so that no copy still runs into pinned memory being freed.
        let _ = self.lanes.settle();
    }
}

/// A buffer's bytes and what it holds (for the error).
type Need = (usize, &'static str);

/// Grows a pinned buffer to at least `len` bytes (dropping the old one: nothing queued
/// uses it between calls).
fn pinned(buf: &mut Option<PinnedHostSlice<u8>>, ctx: &Arc<CudaContext>, (len, what): Need) -> Result<(), CudaError> {
    grow(buf, len, PinnedHostSlice::len, || {
        alloc_pinned(ctx, len, false).map_err(|source| CudaError::PinnedAlloc { what, bytes: len, source })
    })
}

/// Grows a device buffer to at least `len` bytes (allocated in `stream`'s order, left
/// unset: every use writes before it reads).
fn device(buf: &mut Option<CudaSlice<u8>>, stream: &Arc<CudaStream>, (len, what): Need) -> Result<(), CudaError> {
    if len == 0 {
        return Ok(());
    }
    grow(buf, len, CudaSlice::len, || {
        crate::ffi::driver::alloc_unset::<u8>(stream, len).map_err(CudaError::alloc(what, len))
    })
}

/// Replaces `buf` with `alloc()` unless it already holds `len` bytes (the old buffer is
/// dropped first, so the two are never held at once).
fn grow<B>(
    buf: &mut Option<B>,
    len: usize,
    size: impl Fn(&B) -> usize,
    alloc: impl FnOnce() -> Result<B, CudaError>,
) -> Result<(), CudaError> {
    if buf.as_ref().is_some_and(|b| size(b) >= len) {
        return Ok(());
    }
    *buf = None;
    *buf = Some(alloc()?);
    Ok(())
}

/// Byte sizes of one slot's buffers, and of the whole-input buffer.
#[derive(Clone, Copy, Debug, Default)]
struct Sizes {
    values: usize,
    codes: usize,
    scales: usize,
    whole: usize,
}

/// How a matrix is cut into row chunks, and where each chunk's codes and scales sit in
/// the whole matrix's.
#[derive(Clone, Copy, Debug)]
struct Chunking {
    /// The whole matrix's request.
    request: QuantRequest,
    /// Rows per chunk (the last may have fewer).
    rows: usize,
}

/// One chunk: rows `r0 .. r0 + rows` and the request of that sub-matrix.
#[derive(Clone, Copy, Debug)]
struct Chunk {
    r0: usize,
    rows: usize,
    request: QuantRequest,
}

impl Chunking {
    /// Chunks of about `chunk_bytes` bytes of values of `elem` bytes each.
    fn new(request: QuantRequest, elem: usize, chunk_bytes: usize) -> Self {
        let shape = request.shape();
        let row = shape.k * elem;
        let fit = (chunk_bytes / row).max(1);
        let tiles_needed =
            request.scale_layout() == ScaleLayout::Swizzled128x4 || shape.scheme.block_rows() == ROW_TILE;
        // Whole tiles where the layout needs them or the budget holds one: as many as
        // fit, at least one.
        let rows = if fit >= ROW_TILE || tiles_needed { (fit / ROW_TILE).max(1) * ROW_TILE } else { fit };
        Self { request, rows: rows.min(shape.rows) }
    }

    fn count(&self) -> usize {
        self.request.shape().rows.div_ceil(self.rows)
    }

    fn chunk(&self, i: usize) -> Result<Chunk, CudaError> {
        let total = self.request.shape().rows;
        let r0 = i * self.rows;
        let rows = self.rows.min(total - r0);
        let shape = self.request.shape();
        let options = QuantizeOptions::default()
            .with_scale_layout(self.request.scale_layout())
            .with_data_layout(self.request.data_layout());
        let request = QuantRequest::new(shape.scheme, rows, shape.k, &options)?;
        Ok(Chunk { r0, rows, request })
    }

    /// Buffer sizes for the largest chunk, values of `elem` bytes; with `whole`, room
    /// for the whole input on the device.
    fn sizes(&self, elem: usize, whole: bool) -> Result<Sizes, CudaError> {
        let first = self.chunk(0)?;
        let shape = self.request.shape();
        Ok(Sizes {
            values: first.rows * shape.k * elem,
            codes: first.request.shape().data_bytes,
            scales: first.request.scale_bytes(),
            whole: if whole { shape.rows * shape.k * elem } else { 0 },
        })
    }

    /// Where chunk `c`'s scales start in the whole matrix's, in bytes: the scales of
    /// the `c.r0` rows before it (a multiple of 128 rows wherever the layout needs it).
    fn scale_offset(&self, c: &Chunk) -> Result<usize, CudaError> {
        if c.r0 == 0 {
            return Ok(0);
        }
        let shape = self.request.shape();
        let before = shape.scheme.shape(c.r0, shape.k)?.scale_len(self.request.scale_layout())?;
        Ok(before * shape.scheme.scale_format().bytes())
    }
}

/// How codes are laid out by rows: `groups` runs of `unit` bytes per row each (one run
/// of a whole row for row-major codes; one 16-byte unit per 32-column block for the
/// block-interleaved layout, `[k/32, rows, 16 bytes]`).
#[derive(Clone, Copy, Debug)]
struct CodeRuns {
    groups: usize,
    unit: usize,
}

impl CodeRuns {
    fn of(request: &QuantRequest) -> Self {
        let shape = request.shape();
        match request.data_layout() {
            DataLayout::RowMajor => Self { groups: 1, unit: shape.row_bytes },
            DataLayout::BlockInterleaved => Self { groups: shape.k / 32, unit: 16 },
        }
    }

    /// Copies chunk `c`'s codes (`packed`, laid out for its own rows) into the whole
    /// matrix's `all` of `rows` rows.
    fn scatter(&self, all: &mut [u8], rows: usize, c: &Chunk, packed: &[u8]) {
        let (from, to) = (c.r0 * self.unit, (c.r0 + c.rows) * self.unit);
        if self.groups == 1 {
            par_copy(&mut all[from..to], packed);
        } else {
            all.par_chunks_mut(rows * self.unit)
                .zip(packed.par_chunks(c.rows * self.unit))
                .for_each(|(dst, src)| dst[from..to].copy_from_slice(src));
        }
    }

    /// The inverse of [`Self::scatter`]: chunk `c`'s codes out of the whole matrix's.
    fn gather(&self, packed: &mut [u8], rows: usize, c: &Chunk, all: &[u8]) {
        let (from, to) = (c.r0 * self.unit, (c.r0 + c.rows) * self.unit);
        if self.groups == 1 {
            par_copy(packed, &all[from..to]);
        } else {
            packed
                .par_chunks_mut(c.rows * self.unit)
                .zip(all.par_chunks(rows * self.unit))
                .for_each(|(dst, src)| dst.copy_from_slice(&src[from..to]));
        }
    }
}

/// `dst.copy_from_slice(src)` on all cores, in pieces of [`COPY_PIECE`] bytes.
fn par_copy(dst: &mut [u8], src: &[u8]) {
    debug_assert_eq!(dst.len(), src.len());
    dst.par_chunks_mut(COPY_PIECE).zip(src.par_chunks(COPY_PIECE)).for_each(|(d, s)| d.copy_from_slice(s));
}

/// The rows of a quantization's input as the host copies them: one flat row-major
/// slice, or rows that are each contiguous at some row stride.
enum Rows<'a, T> {
    Flat(&'a [T]),
    Strided(ArrayView2<'a, T>),
}

impl<T: DeviceElement> Rows<'_, T> {
    /// Copies rows `c.r0 .. c.r0 + c.rows` into `dst` as row-major bytes.
    fn copy(&self, c: &Chunk, k: usize, dst: &mut [u8]) {
        match self {
            Self::Flat(v) => par_copy(dst, bytes_of(&v[c.r0 * k..(c.r0 + c.rows) * k])),
            Self::Strided(view) => {
                let row_bytes = k * size_of::<T>();
                dst.par_chunks_mut(row_bytes).enumerate().for_each(|(i, d)| {
                    let row = view.row(c.r0 + i);
                    d.copy_from_slice(bytes_of(row.as_slice().expect("rows are contiguous")));
                })
            }
        }
    }

    fn value(&self, row: usize, col: usize, k: usize) -> f32 {
        match self {
            Self::Flat(v) => v[row * k + col].to_f32_exact(),
            Self::Strided(view) => view[(row, col)].to_f32_exact(),
        }
    }
}

/// The steps of one conversion, which [`drive`] interleaves over the chunks.
trait Steps {
    /// Copies chunk `c` into the slot's pinned input and queues its upload.
    fn upload(&mut self, lanes: &mut Lanes, slot: &mut Slot, c: &Chunk) -> Result<(), CudaError>;
    /// Whether chunks are converted as soon as they are uploaded (else after all are,
    /// and after [`Steps::uploaded`]).
    fn streaming(&self) -> bool;
    /// Runs once every chunk is uploaded, when not streaming.
    fn uploaded(&mut self, lanes: &mut Lanes) -> Result<(), CudaError>;
    /// Queues chunk `c`'s kernel and its download into the slot's pinned output.
    fn launch(&mut self, lanes: &mut Lanes, slot: &mut Slot, c: &Chunk) -> Result<(), CudaError>;
    /// Waits for chunk `c`'s download and copies it to the caller.
    fn finish(&mut self, lanes: &mut Lanes, slot: &mut Slot, c: &Chunk) -> Result<(), CudaError>;
}

/// Runs `steps` over the chunks of `chunking`, chunk `i` in slot `i % SLOTS`: chunk
/// `i`'s upload is queued (and, streaming, its kernel and download) before chunk
/// `i - SLOTS + 1` is finished, so the GPU works on the chunks queued ahead while the
/// host copies the next one in and an earlier one out.
fn drive(lanes: &mut Lanes, slots: &mut [Slot], chunking: &Chunking, steps: &mut impl Steps) -> Result<(), CudaError> {
    let n = chunking.count();
    let ahead = slots.len() - 1;
    let chunks = (0..n).map(|i| chunking.chunk(i)).collect::<Result<Vec<_>, _>>()?;
    let count = slots.len();
    let slot = |i: usize| i % count;
    let (mut launched, mut finished) = (0, 0);
    for (i, c) in chunks.iter().enumerate() {
        steps.upload(lanes, &mut slots[slot(i)], c)?;
        if steps.streaming() {
            steps.launch(lanes, &mut slots[slot(i)], c)?;
            launched = i + 1;
            if i >= ahead {
                steps.finish(lanes, &mut slots[slot(i - ahead)], &chunks[i - ahead])?;
                finished = i - ahead + 1;
            }
        }
    }
    if !steps.streaming() {
        steps.uploaded(lanes)?;
    }
    while finished < n {
        // At most SLOTS chunks in flight: the GPU converts those queued ahead while the
        // host copies the oldest out.
        while launched < n && launched < finished + count {
            steps.launch(lanes, &mut slots[slot(launched)], &chunks[launched])?;
            launched += 1;
        }
        steps.finish(lanes, &mut slots[slot(finished)], &chunks[finished])?;
        finished += 1;
    }
    Ok(())
}

/// The pinned buffer a reserved slot holds.
fn staged(buf: &mut Option<PinnedHostSlice<u8>>) -> Result<&mut [u8], CudaError> {
    buf.as_mut()
        .expect("reserve allocated the staging buffers")
        .as_mut_slice()
        .map_err(CudaError::driver("waiting for a staging buffer"))
}

/// The device buffer a reserved slot holds.
fn reserved(buf: &mut Option<CudaSlice<u8>>) -> &mut CudaSlice<u8> {
    buf.as_mut().expect("reserve allocated the device buffers")
}

/// Host-to-host quantization's steps.
struct Quantize<'a, T> {
    dev: &'a Device,
    input: Rows<'a, T>,
    options: &'a QuantizeOptions,
    /// NVFP4's per-tensor scale: given, or (with `whole`) found once every chunk is up.
    global: Option<GlobalScale>,
    /// NVFP4 with the tensor amax: the chunks go into one device buffer holding the
    /// whole input, and are quantized once its amax is known.
    whole: bool,
    chunking: Chunking,
    runs: CodeRuns,
    data: &'a mut [u8],
    scales: &'a mut [u8],
}

impl<T: DeviceElement> Quantize<'_, T> {
    fn k(&self) -> usize {
        self.chunking.request.shape().k
    }

    fn error(&self) -> bool {
        self.options.non_finite == NonFinite::Error
    }

    /// The error for the first NaN/Inf at (row, col) of the whole input.
    fn non_finite(&self, (row, col): (usize, usize)) -> CudaError {
        CudaError::NonFinite { row, col, value: self.input.value(row, col, self.k()) }
    }
}

impl<T: DeviceElement> Steps for Quantize<'_, T> {
    fn upload(&mut self, lanes: &mut Lanes, slot: &mut Slot, c: &Chunk) -> Result<(), CudaError> {
        let k = self.k();
        let bytes = c.rows * k * size_of::<T>();
        // The pinned input is free again once the upload that read it last has run.
        slot.uploaded.synchronize().map_err(CudaError::driver("waiting for an upload"))?;
        let pinned = &mut staged(&mut slot.values)?[..bytes];
        self.input.copy(c, k, pinned);
        let upload = &lanes.upload;
        let (dst, guard) = if self.whole {
            let (base, guard) = reserved(&mut lanes.whole).device_ptr_mut(upload);
            (base + (c.r0 * k * size_of::<T>()) as u64, guard)
        } else {
            // The slot's device input is free again once the kernel that read it last
            // has run.
            upload.wait(&slot.consumed).map_err(CudaError::driver("ordering an upload after a kernel"))?;
            reserved(&mut slot.dev_values).device_ptr_mut(upload)
        };
        // The launch contract (ffi), for a copy from the host: `reserve` sized the device
        // buffer for this chunk (the whole buffer for every row), and `pinned` is the
        // slot's page-locked input, which nothing writes before `uploaded` (recorded
        // next) has passed and which the pipeline frees only after waiting for it.
        copy_to_device(upload, dst, pinned).map_err(CudaError::driver("queuing an upload"))?;
        drop(guard);
        slot.uploaded.record(upload).map_err(CudaError::driver("recording an upload"))
    }

    fn streaming(&self) -> bool {
        !self.whole
    }

    fn uploaded(&mut self, lanes: &mut Lanes) -> Result<(), CudaError> {
        let stream = &lanes.stream;
        let shape = *self.chunking.request.shape();
        stream.join(&lanes.upload).map_err(CudaError::driver("ordering the kernels after the uploads"))?;
        let mut amax = stream.alloc_zeros::<u32>(1).map_err(CudaError::alloc("the amax", 4))?;
        let mut bad = stream.alloc_zeros::<u64>(1).map_err(CudaError::alloc("a flag", 8))?;
        let (input, g_in) = reserved(&mut lanes.whole).device_ptr(stream);
        let (amax_ptr, g_amax) = amax.device_ptr_mut(stream);
        let (bad_ptr, g_bad) = bad.device_ptr_mut(stream);
        // The launch contract (ffi): `whole` holds the rows x k input (row stride k, a
        // multiple of 16 elements, so every row is 16-byte aligned), `amax` one u32 and
        // `bad` one u64, all freed in stream order after the kernel.
        launch_amax(self.dev, T::SUFFIX, (input, shape.rows, shape.k, shape.k), (amax_ptr, bad_ptr))?;
        drop((g_in, g_amax, g_bad));
        if self.error() {
            let flag = stream.clone_dtoh(&bad).map_err(CudaError::driver("reading the NaN/Inf flag"))?[0];
            if let Some(at) = bad_position(flag, shape.k) {
                return Err(self.non_finite(at));
            }
        }
        let bits = stream.clone_dtoh(&amax).map_err(CudaError::driver("reading the amax"))?[0];
        self.global = Some(GlobalScale::from_amax(f32::from_bits(bits))?);
        Ok(())
    }

    fn launch(&mut self, lanes: &mut Lanes, slot: &mut Slot, c: &Chunk) -> Result<(), CudaError> {
        let stream = &lanes.stream;
        let k = self.k();
        let (codes_len, scales_len) = (c.request.shape().data_bytes, c.request.scale_bytes());
        if !self.whole {
            stream.wait(&slot.uploaded).map_err(CudaError::driver("ordering a kernel after its upload"))?;
        }
        if self.error() {
            stream.memset_zeros(&mut slot.bad).map_err(CudaError::driver("clearing the NaN/Inf flag"))?;
        }
        let dev_scales = reserved(&mut slot.dev_scales);
        if c.request.scale_layout() == ScaleLayout::Swizzled128x4 {
            // The kernel writes the real scales only; the swizzle's padding is zero.
            stream
                .memset_zeros(&mut dev_scales.slice_mut(..scales_len))
                .map_err(CudaError::driver("clearing the scales"))?;
        }
        let (source, offset) = if self.whole {
            (reserved(&mut lanes.whole), c.r0 * k * size_of::<T>())
        } else {
            (reserved(&mut slot.dev_values), 0)
        };
        let (input, g_in) = source.device_ptr(stream);
        let (codes, g_codes) = reserved(&mut slot.dev_codes).device_ptr_mut(stream);
        let (scales, g_scales) = dev_scales.device_ptr_mut(stream);
        let (bad, g_bad) = slot.bad.device_ptr_mut(stream);
        // The launch contract (ffi): the input holds the chunk's rows x k values at row
        // stride k from `offset` (k is a multiple of 16, so rows are 16-byte aligned);
        // `reserve` sized the codes and scales for the largest chunk, and `bad` holds one
        // u64. The guards are held until the copies below are queued, and the buffers
        // live in the pipeline, which waits for its streams before it frees anything.
        launch_quantize(
            self.dev,
            &c.request,
            self.options,
            self.global,
            T::SUFFIX,
            (input + offset as u64, k),
            (codes, scales, bad),
        )?;
        slot.consumed.record(stream).map_err(CudaError::driver("recording a kernel"))?;
        let packed = staged(&mut slot.packed)?;
        let (p_codes, rest) = packed.split_at_mut(codes_len);
        let (p_scales, p_flag) = rest.split_at_mut(scales_len);
        // The launch contract (ffi), for copies to the host: the device buffers hold
        // what the kernel wrote for this chunk; the pinned ones are the slot's output,
        // which the host reads only after `downloaded` (recorded next) has passed.
        copy_to_host(stream, p_codes, codes).map_err(CudaError::driver("queuing a download"))?;
        copy_to_host(stream, p_scales, scales).map_err(CudaError::driver("queuing a download"))?;
        if self.error() {
            copy_to_host(stream, &mut p_flag[..8], bad).map_err(CudaError::driver("queuing a download"))?;
        }
        drop((g_in, g_codes, g_scales, g_bad));
        slot.downloaded.record(stream).map_err(CudaError::driver("recording a download"))
    }

    fn finish(&mut self, _lanes: &mut Lanes, slot: &mut Slot, c: &Chunk) -> Result<(), CudaError> {
        let (codes_len, scales_len) = (c.request.shape().data_bytes, c.request.scale_bytes());
        slot.downloaded.synchronize().map_err(CudaError::driver("waiting for a download"))?;
        let packed = staged(&mut slot.packed)?;
        if self.error() {
            let flag = &packed[codes_len + scales_len..codes_len + scales_len + 8];
            let flag = u64::from_le_bytes(flag.try_into().expect("8 bytes"));
            if let Some((row, col)) = bad_position(flag, self.k()) {
                return Err(self.non_finite((c.r0 + row, col)));
            }
        }
        let rows = self.chunking.request.shape().rows;
        self.runs.scatter(self.data, rows, c, &packed[..codes_len]);
        let at = self.chunking.scale_offset(c)?;
        debug_assert!(c.r0 + c.rows < rows || at + scales_len == self.scales.len(), "the chunks tile the scales");
        self.scales[at..at + scales_len].copy_from_slice(&packed[codes_len..codes_len + scales_len]);
        Ok(())
    }
}

/// Host-to-host dequantization's steps.
struct Dequantize<'a, O> {
    dev: &'a Device,
    /// The codes and the scales (as bytes) of the matrix.
    codes: &'a [u8],
    scales: &'a [u8],
    /// NVFP4's per-tensor factor, 1 otherwise.
    post: f32,
    chunking: Chunking,
    runs: CodeRuns,
    out: &'a mut [O],
}

impl<O: DeviceElement> Steps for Dequantize<'_, O> {
    fn upload(&mut self, lanes: &mut Lanes, slot: &mut Slot, c: &Chunk) -> Result<(), CudaError> {
        let (codes_len, scales_len) = (c.request.shape().data_bytes, c.request.scale_bytes());
        slot.uploaded.synchronize().map_err(CudaError::driver("waiting for an upload"))?;
        let packed = staged(&mut slot.packed)?;
        let (p_codes, rest) = packed.split_at_mut(codes_len);
        let p_scales = &mut rest[..scales_len];
        let rows = self.chunking.request.shape().rows;
        self.runs.gather(p_codes, rows, c, self.codes);
        let at = self.chunking.scale_offset(c)?;
        p_scales.copy_from_slice(&self.scales[at..at + scales_len]);
        let upload = &lanes.upload;
        upload.wait(&slot.consumed).map_err(CudaError::driver("ordering an upload after a kernel"))?;
        let (codes, g_codes) = reserved(&mut slot.dev_codes).device_ptr_mut(upload);
        let (scales, g_scales) = reserved(&mut slot.dev_scales).device_ptr_mut(upload);
        // The launch contract (ffi), for copies from the host: `reserve` sized the device
        // codes and scales for the largest chunk; the pinned bytes are the slot's input,
        // which nothing writes before `uploaded` (recorded next) has passed.
        copy_to_device(upload, codes, p_codes).map_err(CudaError::driver("queuing an upload"))?;
        copy_to_device(upload, scales, p_scales).map_err(CudaError::driver("queuing an upload"))?;
        drop((g_codes, g_scales));
        slot.uploaded.record(upload).map_err(CudaError::driver("recording an upload"))
    }

    fn streaming(&self) -> bool {
        true
    }

    fn uploaded(&mut self, _lanes: &mut Lanes) -> Result<(), CudaError> {
        Ok(())
    }

    fn launch(&mut self, lanes: &mut Lanes, slot: &mut Slot, c: &Chunk) -> Result<(), CudaError> {
        let stream = &lanes.stream;
        let k = c.request.shape().k;
        let bytes = c.rows * k * size_of::<O>();
        stream.wait(&slot.uploaded).map_err(CudaError::driver("ordering a kernel after its upload"))?;
        let (codes, g_codes) = reserved(&mut slot.dev_codes).device_ptr(stream);
        let (scales, g_scales) = reserved(&mut slot.dev_scales).device_ptr(stream);
        let (values, g_values) = reserved(&mut slot.dev_values).device_ptr_mut(stream);
        // The launch contract (ffi): the codes and scales are the chunk's (uploaded
        // above, sized by its request); `reserve` sized the values for the largest chunk
        // (rows x k at row stride k, a multiple of 16, from a fresh allocation, so
        // 16-byte aligned). The guards are held until the copy below is queued.
        launch_dequantize_at(self.dev, &c.request, (codes, scales), values, k, O::SUFFIX, self.post)?;
        slot.consumed.record(stream).map_err(CudaError::driver("recording a kernel"))?;
        let pinned = &mut staged(&mut slot.values)?[..bytes];
        // The launch contract (ffi), for a copy to the host: the device values are what
        // the kernel wrote; the pinned ones are the slot's output, which the host reads
        // only after `downloaded` (recorded next) has passed.
        copy_to_host(stream, pinned, values).map_err(CudaError::driver("queuing a download"))?;
        drop((g_codes, g_scales, g_values));
        slot.downloaded.record(stream).map_err(CudaError::driver("recording a download"))
    }

    fn finish(&mut self, _lanes: &mut Lanes, slot: &mut Slot, c: &Chunk) -> Result<(), CudaError> {
        let k = c.request.shape().k;
        let bytes = c.rows * k * size_of::<O>();
        slot.downloaded.synchronize().map_err(CudaError::driver("waiting for a download"))?;
        let pinned = &staged(&mut slot.values)?[..bytes];
        let out = bytes_of_mut(&mut self.out[c.r0 * k..(c.r0 + c.rows) * k]);
        par_copy(out, pinned);
        Ok(())
    }
}

/// [`crate::quantize_host`] through a [`HostPipeline`] into caller buffers, the GPU
/// counterpart of blockscale-cpu's `quantize_into` (the same arguments after the
/// device and pipeline, the same bytes): the codes go into `data`
/// ([`QuantShape::data_bytes`](blockscale_formats::QuantShape::data_bytes) long) and the
/// scales, as little-endian bytes of the scheme's scale format in `options.scale_layout`,
/// into `scales` ([`QuantRequest::scale_bytes`] long). Returns NVFP4's per-tensor scale.
///
/// Rows whose elements are contiguous are copied from where they are (any row stride);
/// another layout is copied into a row-major array first. The matrix goes through the
/// GPU in row chunks, the copies of one chunk overlapping the kernel of the next (the
/// module docs of `pipeline.rs` say how); the call returns when everything is in `data`
/// and `scales`. On an error the buffers may hold part of the result.
///
/// # Errors
/// As [`crate::quantize`] (the first NaN/Inf under `NonFinite::Error`, by row and
/// column of the whole input), [`CudaError::BufferLength`] for a buffer of the wrong
/// length, [`CudaError::ForeignPipeline`] for a pipeline made for another device,
/// [`CudaError::PinnedAlloc`] when the staging buffers cannot be allocated.
pub fn quantize_host_into<T: DeviceElement>(
    dev: &Device,
    pipe: &mut HostPipeline,
    input: ArrayView2<'_, T>,
    scheme: Scheme,
    options: &QuantizeOptions,
    data: &mut [u8],
    scales: &mut [u8],
) -> Result<Option<GlobalScale>, CudaError> {
    let (rows, k) = input.dim();
    let request = check_quantize(scheme, rows, k, options)?;
    pipe.check_device(dev)?;
    let length = |what, expected, actual| {
        if expected == actual { Ok(()) } else { Err(CudaError::BufferLength { what, expected, actual }) }
    };
    length("the codes buffer (bytes)", request.shape().data_bytes, data.len())?;
    length("the scales buffer (bytes)", request.scale_bytes(), scales.len())?;

    let standard;
    let source = match input.to_slice() {
        Some(flat) => Rows::Flat(flat),
        None if input.strides()[1] == 1 => Rows::Strided(input),
        None => {
            standard = input.as_standard_layout();
            Rows::Flat(standard.as_slice().expect("standard layout is contiguous"))
        }
    };
    let whole = scheme == Scheme::NvFp4 && options.global_scale == GlobalScaleSource::TensorAmax;
    let global = match (scheme, options.global_scale) {
        (Scheme::NvFp4, GlobalScaleSource::Amax(a)) => Some(GlobalScale::from_amax(a)?),
        (Scheme::NvFp4, GlobalScaleSource::Given(g)) => Some(g),
        _ => None,
    };
    let chunking = Chunking::new(request, size_of::<T>(), pipe.chunk_bytes);
    pipe.reserve(chunking.sizes(size_of::<T>(), whole)?)?;
    let mut steps =
        Quantize { dev, input: source, options, global, whole, chunking, runs: CodeRuns::of(&request), data, scales };
    pipe.run(&chunking, &mut steps)?;
    Ok(steps.global)
}

/// [`quantize_host_into`] into a new [`QuantizedMatrix`]: the same bytes as
/// [`crate::quantize_host`] and blockscale-cpu's `quantize`.
///
/// # Errors
/// As [`quantize_host_into`].
pub fn quantize_host_with<T: DeviceElement>(
    dev: &Device,
    pipe: &mut HostPipeline,
    input: ArrayView2<'_, T>,
    scheme: Scheme,
    options: &QuantizeOptions,
) -> Result<QuantizedMatrix, CudaError> {
    let request = check_quantize(scheme, input.nrows(), input.ncols(), options)?;
    let mut data = vec![0u8; request.shape().data_bytes];
    let len = request.scale_len();
    let mut scales = match scheme.scale_format() {
        ScaleFormat::UE4M3 | ScaleFormat::UE8M0 => ScaleData::Bytes(vec![0; len]),
        ScaleFormat::F32 => ScaleData::F32(vec![0.0; len]),
        ScaleFormat::F16 => ScaleData::F16(vec![f16::ZERO; len]),
    };
    let bytes = match &mut scales {
        ScaleData::Bytes(v) => &mut v[..],
        ScaleData::F32(v) => bytes_of_mut(v),
        ScaleData::F16(v) => bytes_of_mut(v),
    };
    let global = quantize_host_into(dev, pipe, input, scheme, options, &mut data, bytes)?;
    Ok(QuantizedMatrix::from_request(&request, data, scales, global))
}

/// [`crate::dequantize_host`] through a [`HostPipeline`] into a caller buffer, the GPU
/// counterpart of blockscale-cpu's `dequantize_slice`: `out` is the row-major `rows x
/// k` values, the same ones the CPU writes. The matrix goes through the GPU in row
/// chunks as in [`quantize_host_into`].
///
/// # Errors
/// [`CudaError::BufferLength`] unless `out` holds `rows x k` values;
/// [`CudaError::TooLarge`]; [`CudaError::ForeignPipeline`]; [`CudaError::PinnedAlloc`];
/// [`CudaError::OutOfMemory`] and [`CudaError::Driver`].
pub fn dequantize_host_into<O: DeviceElement>(
    dev: &Device,
    pipe: &mut HostPipeline,
    q: &QuantizedMatrix,
    out: &mut [O],
) -> Result<(), CudaError> {
    let (rows, k) = (q.rows(), q.k());
    check_limits(q.scheme(), rows, k)?;
    pipe.check_device(dev)?;
    if out.len() != rows * k {
        return Err(CudaError::BufferLength { what: "the output", expected: rows * k, actual: out.len() });
    }
    let scales = match q.scales() {
        ScaleData::Bytes(v) => &v[..],
        ScaleData::F32(v) => bytes_of(v),
        ScaleData::F16(v) => bytes_of(v),
    };
    let request = q.request();
    let chunking = Chunking::new(request, size_of::<O>(), pipe.chunk_bytes);
    pipe.reserve(chunking.sizes(size_of::<O>(), false)?)?;
    let mut steps = Dequantize {
        dev,
        codes: q.data(),
        scales,
        post: q.global_scale().map_or(1.0, |g| g.decode()),
        chunking,
        runs: CodeRuns::of(&request),
        out,
    };
    pipe.run(&chunking, &mut steps)
}

/// [`dequantize_host_into`] into a new array.
///
/// # Errors
/// As [`dequantize_host_into`].
pub fn dequantize_host_with<O: DeviceElement>(
    dev: &Device,
    pipe: &mut HostPipeline,
    q: &QuantizedMatrix,
) -> Result<Array2<O>, CudaError> {
    let mut out = vec![O::default(); q.rows() * q.k()];
    dequantize_host_into(dev, pipe, q, &mut out)?;
    Ok(Array2::from_shape_vec((q.rows(), q.k()), out).expect("rows x k values"))
}
