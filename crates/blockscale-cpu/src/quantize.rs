//! Quantization: validate, pick the per-tensor scale, then quantize 128-row bands (in
//! parallel with rayon, never splitting a block across threads, so the bytes do not
//! depend on the thread count), and assemble the [`QuantizedMatrix`].

use blockscale_formats::{
    DataLayout, ElementFormat, GlobalScale, QuantRequest, QuantShape, QuantizedMatrix, ScaleData, ScaleFormat,
    ScaleLayout, ScaleRule, Scheme, layout::SWIZZLE_TILE, pack,
};
use half::f16;
use ndarray::ArrayView2;
use rayon::prelude::*;

use crate::kernels::{self, Isa, RowBlocks, Target};
use crate::scale::{self, Op};
use crate::{CpuError, GlobalScaleSource, Input, NonFinite, NvFp4Recipe, QuantizeOptions};

/// Rows per band: the swizzle's row tile and the FP8 weight tile.
pub(crate) const BAND: usize = 128;

/// How one block's scale is computed.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Kind {
    NvFp4 { g: f32, recipe: NvFp4Recipe },
    Mx { element: ElementFormat, rule: ScaleRule },
    Fp8,
    Int4,
}

/// Everything a band worker needs, fixed for one call.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plan {
    pub(crate) shape: QuantShape,
    pub(crate) kind: Kind,
    pub(crate) target: Target,
    pub(crate) op: Op,
    pub(crate) scale_layout: ScaleLayout,
    pub(crate) poison: bool,
    pub(crate) isa: Isa,
}

impl Plan {
    pub(crate) fn block(&self) -> usize {
        self.shape.scheme.block_size()
    }

    /// Encodes one row with its blocks' factors (`kernels::encode_row` on this plan's
    /// path, format and scaling op).
    fn encode_row<T: Input>(&self, row: &[T], factors: &[f32], out: &mut [u8]) {
        let blocks = RowBlocks { block: self.block(), factors, target: self.target };
        kernels::encode_row(self.isa, row, blocks, self.op, out);
    }
}

/// One band's slice of the scale buffer.
pub(crate) enum ScaleChunk<'a> {
    Bytes(&'a mut [u8]),
    F32(&'a mut [f32]),
    F16(&'a mut [f16]),
}

/// The element type of a scale buffer, and how a band's slice of it is wrapped.
pub(crate) trait ScaleElem: Send + Sized {
    fn chunk(s: &mut [Self]) -> ScaleChunk<'_>;
}

impl ScaleElem for u8 {
    fn chunk(s: &mut [Self]) -> ScaleChunk<'_> {
        ScaleChunk::Bytes(s)
    }
}

impl ScaleElem for f32 {
    fn chunk(s: &mut [Self]) -> ScaleChunk<'_> {
        ScaleChunk::F32(s)
    }
}

impl ScaleElem for f16 {
    fn chunk(s: &mut [Self]) -> ScaleChunk<'_> {
        ScaleChunk::F16(s)
    }
}

/// A non-finite input value: (row, column, value).
pub(crate) type Bad = (usize, usize, f32);

fn earlier(a: Option<Bad>, b: Option<Bad>) -> Option<Bad> {
    match (a, b) {
        (Some(x), Some(y)) => Some(if (y.0, y.1) < (x.0, x.1) { y } else { x }),
        (x, y) => x.or(y),
    }
}

/// Row `r` of `input` as a slice: borrowed when its elements are contiguous, else
/// copied into `buf`.
pub(crate) fn row_of<'a, T: Input>(input: &'a ArrayView2<'_, T>, r: usize, buf: &'a mut Vec<T>) -> &'a [T] {
    let row = input.row(r);
    match row.to_slice() {
        Some(s) => s,
        None => {
            buf.clear();
            buf.extend(row.iter().copied());
            buf
        }
    }
}

/// The first non-finite value of block `c` of `row`.
fn first_bad_in_block<T: Input>(row: &[T], block: usize, c: usize) -> Option<(usize, f32)> {
    row[c * block..(c + 1) * block]
        .iter()
        .enumerate()
        .map(|(i, &x)| (c * block + i, x.to_f32_exact()))
        .find(|(_, x)| !x.is_finite())
}

/// Per-thread scratch buffers of a band worker.
pub(crate) struct Scratch<T> {
    row: Vec<T>,
    amax: Vec<u32>,
    tile_amax: Vec<u32>,
    factors: Vec<f32>,
    codes: Vec<u8>,
}

impl<T> Scratch<T> {
    pub(crate) fn new(shape: &QuantShape) -> Self {
        Self {
            row: Vec::new(),
            amax: vec![0; shape.scale_cols],
            tile_amax: vec![0; shape.scale_cols],
            factors: vec![0.0; shape.scale_cols],
            codes: Vec::new(),
        }
    }
}

/// Quantizes rows `r0 .. r0 + data.len() / row_bytes` into `data` (their packed bytes)
/// and `scales` (their part of the scale buffer). Returns the first non-finite value met
/// under [`NonFinite::Error`] (the band is then left unfinished).
pub(crate) fn quantize_band<T: Input>(
    plan: &Plan,
    input: &ArrayView2<'_, T>,
    r0: usize,
    data: &mut [u8],
    scales: ScaleChunk<'_>,
    s: &mut Scratch<T>,
) -> Option<Bad> {
    let isa = plan.isa;
    match (plan.kind, scales) {
        (Kind::NvFp4 { g, recipe }, ScaleChunk::Bytes(buf)) => {
            band_rows(plan, input, r0, data, buf, s, |a, e, f| kernels::nvfp4_scales(isa, a, g, recipe, e, f))
        }
        (Kind::Mx { element, rule }, ScaleChunk::Bytes(buf)) => band_rows(plan, input, r0, data, buf, s, |a, e, f| {
            scale::each(a, e, f, |x| scale::mx_entry(x, element, rule))
        }),
        (Kind::Fp8, ScaleChunk::F32(buf)) => {
            band_rows(plan, input, r0, data, buf, s, |a, e, f| scale::each(a, e, f, scale::fp8_entry))
        }
        (Kind::Int4, ScaleChunk::F16(buf)) => {
            band_rows(plan, input, r0, data, buf, s, |a, e, f| scale::each(a, e, f, scale::int4_entry))
        }
        _ => unreachable!("the scale buffer is allocated in the scheme's scale format"),
    }
}

/// Index of row `i` (within a band), block `c` in a band's scale chunk.
#[inline(always)]
fn scale_index(layout: ScaleLayout, i: usize, c: usize, cols: usize) -> usize {
    match layout {
        ScaleLayout::Linear => i * cols + c,
        // The band starts at a 128-row boundary: its chunk holds rows i < 128.
        ScaleLayout::Swizzled128x4 => blockscale_formats::layout::swizzled_offset(i, c, cols),
    }
}

/// [`quantize_band`] for one scale type; `entries(amax, scales, factors)` maps a row of
/// block amax bit patterns to stored scales and element factors.
fn band_rows<T: Input, S: Copy + Default>(
    plan: &Plan,
    input: &ArrayView2<'_, T>,
    r0: usize,
    data: &mut [u8],
    scales: &mut [S],
    s: &mut Scratch<T>,
    entries: impl Fn(&[u32], &mut [S], &mut [f32]),
) -> Option<Bad> {
    let shape = &plan.shape;
    let (block, cols, row_bytes) = (plan.block(), shape.scale_cols, shape.row_bytes);
    let rows = data.len() / row_bytes;
    let mut row_scales = vec![S::default(); cols];
    let fp6 = matches!(plan.target, Target::E2M3 | Target::E3M2);
    if fp6 {
        s.codes.resize(shape.k, 0);
    }

    if shape.scheme.block_rows() == BAND {
        // FP8 128x128 tiles: the tile amax spans the band's rows.
        s.tile_amax.fill(0);
        let mut bad = None;
        for i in 0..rows {
            let row = row_of(input, r0 + i, &mut s.row);
            kernels::block_amax_bits(plan.isa, row, block, &mut s.amax);
            for (c, (&a, t)) in s.amax.iter().zip(s.tile_amax.iter_mut()).enumerate() {
                *t = (*t).max(a);
                if a >= scale::NON_FINITE && bad.is_none() {
                    bad = first_bad_in_block(row, block, c).map(|(col, v)| (r0 + i, col, v));
                }
            }
        }
        if bad.is_some() && !plan.poison {
            return bad;
        }
        entries(&s.tile_amax, &mut scales[..cols], &mut s.factors);
        for i in 0..rows {
            let row = row_of(input, r0 + i, &mut s.row);
            let out = &mut data[i * row_bytes..(i + 1) * row_bytes];
            plan.encode_row(row, &s.factors, out);
        }
        return None;
    }

    let layout = plan.scale_layout;
    for i in 0..rows {
        let row = row_of(input, r0 + i, &mut s.row);
        let out = &mut data[i * row_bytes..(i + 1) * row_bytes];
        // Three passes over a row that stays in L1: block amaxes (SIMD), block scales
        // (scalar, shared by every path), elements (SIMD).
        kernels::block_amax_bits(plan.isa, row, block, &mut s.amax);
        if !plan.poison
            && let Some(c) = s.amax.iter().position(|&a| a >= scale::NON_FINITE)
        {
            return first_bad_in_block(row, block, c).map(|(col, v)| (r0 + i, col, v));
        }
        entries(&s.amax, &mut row_scales, &mut s.factors);
        for (c, &e) in row_scales.iter().enumerate() {
            scales[scale_index(layout, i, c, cols)] = e;
        }
        if fp6 {
            plan.encode_row(row, &s.factors, &mut s.codes);
            kernels::pack_fp6(plan.isa, &s.codes, out);
        } else {
            plan.encode_row(row, &s.factors, out);
        }
    }
    None
}

/// Quantizes a 2-D array along its last dimension (K). Any strides: rows whose elements
/// are contiguous are read in place, others are copied one row at a time.
///
/// ```
/// use blockscale_cpu::{QuantizeOptions, dequantize, quantize};
/// use blockscale_formats::Scheme;
/// use ndarray::Array2;
///
/// let x = Array2::from_shape_fn((4, 64), |(r, c)| (r as f32 - 1.5) * (c as f32 / 16.0));
/// let q = quantize(x.view(), Scheme::MxFp8E4M3, &QuantizeOptions::default()).unwrap();
/// assert_eq!(q.data().len(), 4 * 64);
/// let y = dequantize::<f32>(&q);
/// // E4M3 keeps 4 significant bits: every value within 2^-4 of itself.
/// assert!(y.iter().zip(x.iter()).all(|(a, b)| (a - b).abs() <= 0.0625 * b.abs()));
/// ```
///
/// # Errors
/// - shape errors ([`blockscale_formats::FormatError`]): an empty input, K not a
///   multiple of the scheme's block;
/// - [`CpuError::NonFinite`] for NaN/Inf under [`NonFinite::Error`];
/// - [`blockscale_formats::FormatError::OptionNotApplicable`] for a per-tensor scale
///   with a scheme that has none or a layout the scheme cannot use, and
///   [`blockscale_formats::FormatError::InvalidGlobalScale`] for an invalid amax;
/// - [`CpuError::SimdUnavailable`] if a missing SIMD path was forced.
pub fn quantize<T: Input>(
    input: ArrayView2<'_, T>,
    scheme: Scheme,
    options: &QuantizeOptions,
) -> Result<QuantizedMatrix, CpuError> {
    let (rows, k) = input.dim();
    let request = QuantRequest::new(scheme, rows, k, options)?;
    let (shape, scale_len) = (*request.shape(), request.scale_len());
    let plan = plan(&input, &request, options)?;

    let mut data = vec![0u8; shape.data_bytes];
    let chunk = band_scale_chunk(scheme, options.scale_layout, &shape);
    let bad;
    let scales = match scheme.scale_format() {
        ScaleFormat::UE4M3 | ScaleFormat::UE8M0 => {
            let mut v = vec![0u8; scale_len];
            bad = run_bands(&plan, &input, &mut data, &mut v, chunk, options.single_threaded);
            ScaleData::Bytes(v)
        }
        ScaleFormat::F32 => {
            let mut v = vec![0f32; scale_len];
            bad = run_bands(&plan, &input, &mut data, &mut v, chunk, options.single_threaded);
            ScaleData::F32(v)
        }
        ScaleFormat::F16 => {
            let mut v = vec![f16::ZERO; scale_len];
            bad = run_bands(&plan, &input, &mut data, &mut v, chunk, options.single_threaded);
            ScaleData::F16(v)
        }
    };
    if let Some((row, col, value)) = bad {
        return Err(CpuError::NonFinite { row, col, value });
    }
    if options.data_layout == DataLayout::BlockInterleaved {
        data = interleave(&data, rows, k)?;
    }
    let global_scale = match plan.kind {
        Kind::NvFp4 { g, .. } => Some(GlobalScale::from_encode(g)?),
        _ => None,
    };
    Ok(QuantizedMatrix::from_request(&request, data, scales, global_scale))
}

/// [`quantize`] into caller-provided buffers (a memory-mapped output file, say), without
/// allocating the quantized matrix: the same bytes [`quantize`] would put in
/// [`QuantizedMatrix::data`] go into `data`, and its scales, as little-endian bytes of
/// the scheme's scale format (one byte per UE4M3/UE8M0 scale, four per F32, two per
/// F16) in `options.scale_layout`, go into `scales`. Returns the per-tensor scale (NVFP4
/// only).
///
/// `data` must be [`QuantShape::data_bytes`] long and `scales`
/// [`QuantShape::scale_len`] times the scale format's bytes. On an error the buffers may
/// hold part of the result.
///
/// ```
/// use blockscale_cpu::{QuantizeOptions, quantize, quantize_into};
/// use blockscale_formats::{ScaleData, Scheme};
/// use ndarray::Array2;
///
/// let x = Array2::from_shape_fn((4, 64), |(r, c)| (r as f32 - 1.5) * (c as f32 / 16.0));
/// let o = QuantizeOptions::default();
/// let (mut data, mut scales) = (vec![0u8; 4 * 64], vec![0u8; 4 * 2]);
/// let global = quantize_into(x.view(), Scheme::MxFp8E4M3, &o, &mut data, &mut scales).unwrap();
/// let q = quantize(x.view(), Scheme::MxFp8E4M3, &o).unwrap();
/// assert_eq!((q.data(), q.scales(), global), (&data[..], &ScaleData::Bytes(scales), None));
/// ```
///
/// # Errors
/// As [`quantize`], and [`CpuError::BufferLength`] for a buffer of the wrong length.
pub fn quantize_into<T: Input>(
    input: ArrayView2<'_, T>,
    scheme: Scheme,
    options: &QuantizeOptions,
    data: &mut [u8],
    scales: &mut [u8],
) -> Result<Option<GlobalScale>, CpuError> {
    let (rows, k) = input.dim();
    let request = QuantRequest::new(scheme, rows, k, options)?;
    let (shape, scale_len) = (*request.shape(), request.scale_len());
    let length = |what, expected, actual: usize| {
        if actual == expected {
            Ok(())
        } else {
            Err(CpuError::BufferLength { what, scheme, rows, k, expected, actual })
        }
    };
    length("data", shape.data_bytes, data.len())?;
    length("scales", request.scale_bytes(), scales.len())?;
    let plan = plan(&input, &request, options)?;
    let chunk = band_scale_chunk(scheme, options.scale_layout, &shape);
    let single = options.single_threaded;
    let bad = match scheme.scale_format() {
        ScaleFormat::UE4M3 | ScaleFormat::UE8M0 => {
            if options.scale_layout == ScaleLayout::Swizzled128x4 {
                // The bands write real blocks only; the swizzle's padding is zero.
                scales.fill(0);
            }
            run_bands(&plan, &input, data, scales, chunk, single)
        }
        ScaleFormat::F32 => {
            let mut v = vec![0f32; scale_len];
            let bad = run_bands(&plan, &input, data, &mut v, chunk, single);
            for (b, x) in scales.chunks_exact_mut(4).zip(&v) {
                b.copy_from_slice(&x.to_le_bytes());
            }
            bad
        }
        ScaleFormat::F16 => {
            let mut v = vec![f16::ZERO; scale_len];
            let bad = run_bands(&plan, &input, data, &mut v, chunk, single);
            for (b, x) in scales.chunks_exact_mut(2).zip(&v) {
                b.copy_from_slice(&x.to_le_bytes());
            }
            bad
        }
    };
    if let Some((row, col, value)) = bad {
        return Err(CpuError::NonFinite { row, col, value });
    }
    if options.data_layout == DataLayout::BlockInterleaved {
        let inter = interleave(data, rows, k)?;
        data.copy_from_slice(&inter);
    }
    Ok(match plan.kind {
        Kind::NvFp4 { g, .. } => Some(GlobalScale::from_encode(g)?),
        _ => None,
    })
}

/// Scale entries per band: a row of tiles (FP8 128x128), 128 rows of scales, or a row
/// of 128x4 swizzle tiles.
fn band_scale_chunk(scheme: Scheme, layout: ScaleLayout, shape: &QuantShape) -> usize {
    match (layout, scheme.block_rows()) {
        (_, BAND) => shape.scale_cols,
        (ScaleLayout::Linear, _) => BAND * shape.scale_cols,
        (ScaleLayout::Swizzled128x4, _) => shape.scale_cols.div_ceil(4) * SWIZZLE_TILE,
    }
}

/// [`quantize`] for a flat row-major `rows x k` slice.
///
/// # Errors
/// [`CpuError::SliceLength`] unless `input.len() == rows * k`; otherwise as [`quantize`].
pub fn quantize_slice<T: Input>(
    input: &[T],
    rows: usize,
    k: usize,
    scheme: Scheme,
    options: &QuantizeOptions,
) -> Result<QuantizedMatrix, CpuError> {
    let view = flat_view(input, rows, k)?;
    quantize(view, scheme, options)
}

pub(crate) fn flat_view<T>(input: &[T], rows: usize, k: usize) -> Result<ArrayView2<'_, T>, CpuError> {
    let expected = rows.checked_mul(k);
    if expected != Some(input.len()) {
        return Err(CpuError::SliceLength {
            what: "input",
            rows,
            k,
            expected: expected.unwrap_or(usize::MAX),
            actual: input.len(),
        });
    }
    ArrayView2::from_shape((rows, k), input).map_err(|_| CpuError::SliceLength {
        what: "input",
        rows,
        k,
        expected: input.len(),
        actual: input.len(),
    })
}

/// Works out the per-tensor scale and the kernels of a checked request.
pub(crate) fn plan<T: Input>(
    input: &ArrayView2<'_, T>,
    request: &QuantRequest,
    options: &QuantizeOptions,
) -> Result<Plan, CpuError> {
    let shape = *request.shape();
    let scheme = shape.scheme;
    let isa = Isa::select(options.simd)?;
    let poison = options.non_finite == NonFinite::Poison;
    let element = scheme.element();
    let kind = match scheme {
        Scheme::NvFp4 => {
            let global = match options.global_scale {
                GlobalScaleSource::TensorAmax => GlobalScale::from_amax(tensor_amax(input, isa, poison, options)?)?,
                GlobalScaleSource::Amax(a) => GlobalScale::from_amax(a)?,
                GlobalScaleSource::Given(g) => g,
            };
            Kind::NvFp4 { g: global.encode(), recipe: options.nvfp4_recipe }
        }
        Scheme::Fp8Block(_) => Kind::Fp8,
        Scheme::Int4G32 | Scheme::Int4G128 => Kind::Int4,
        _ => Kind::Mx { element, rule: options.scale_rule },
    };
    let op = match kind {
        Kind::Fp8 | Kind::Int4 => Op::Div,
        _ => Op::Mul,
    };
    Ok(Plan { shape, kind, target: element, op, scale_layout: options.scale_layout, poison, isa })
}

/// The largest finite |x| of the whole input (an error on NaN/Inf unless poisoning).
fn tensor_amax<T: Input>(
    input: &ArrayView2<'_, T>,
    isa: Isa,
    poison: bool,
    options: &QuantizeOptions,
) -> Result<f32, CpuError> {
    let row_amax = |r: usize, buf: &mut Vec<T>| {
        let (a, bad) = kernels::finite_amax_bits(isa, row_of(input, r, buf));
        (a, bad.map(|c| (r, c, input[(r, c)].to_f32_exact())))
    };
    let merge = |x: (u32, Option<Bad>), y: (u32, Option<Bad>)| (x.0.max(y.0), earlier(x.1, y.1));
    let rows = input.nrows();
    let (amax, bad) = if options.single_threaded {
        let mut buf = Vec::new();
        (0..rows).map(|r| row_amax(r, &mut buf)).fold((0, None), merge)
    } else {
        (0..rows).into_par_iter().map_init(Vec::new, |buf, r| row_amax(r, buf)).reduce(|| (0, None), merge)
    };
    match bad {
        Some((row, col, value)) if !poison => Err(CpuError::NonFinite { row, col, value }),
        _ => Ok(f32::from_bits(amax)),
    }
}

/// Runs [`quantize_band`] over every band, in parallel unless `single`.
fn run_bands<T: Input, S: ScaleElem>(
    plan: &Plan,
    input: &ArrayView2<'_, T>,
    data: &mut [u8],
    scales: &mut [S],
    chunk: usize,
    single: bool,
) -> Option<Bad> {
    let band_bytes = BAND * plan.shape.row_bytes;
    let work = |s: &mut Scratch<T>, (b, (d, sc)): (usize, (&mut [u8], &mut [S]))| {
        quantize_band(plan, input, b * BAND, d, S::chunk(sc), s)
    };
    if single {
        let mut s = Scratch::new(&plan.shape);
        data.chunks_mut(band_bytes).zip(scales.chunks_mut(chunk)).enumerate().fold(None, |acc, item| {
            let bad = work(&mut s, item);
            earlier(acc, bad)
        })
    } else {
        data.par_chunks_mut(band_bytes)
            .zip(scales.par_chunks_mut(chunk))
            .enumerate()
            .map_init(|| Scratch::new(&plan.shape), work)
            .reduce(|| None, earlier)
    }
}

fn interleave(data: &[u8], rows: usize, k: usize) -> Result<Vec<u8>, CpuError> {
    let mut words = vec![0u32; data.len() / 4];
    pack::words_from_le_bytes(data, &mut words)?;
    let inter = pack::to_block_interleaved_vec(&words, rows, k)?;
    let mut out = vec![0u8; data.len()];
    pack::le_bytes_from_words(&inter, &mut out)?;
    Ok(out)
}
