//! Block-scaled GEMM and GEMV: `D = act(alpha * A . B^T + bias)` with both operands
//! K-major, as the tensor cores take them.
//!
//! - Quantized x quantized ([`gemm`], [`gemm_reference`]): NVFP4 x NVFP4, any MX x
//!   any MX (MXFP4, MXFP6 x MXFP8 in either order, MXFP8 E4M3 / E5M2), FP8 block x FP8
//!   block (DeepSeek-V3's 1x128 activations x 128x128 weights, or any other tiling).
//! - Weight-only ([`gemm_weight_only`], [`gemm_weight_only_reference`], [`gemv`]): f32,
//!   f16 or bf16 activations x quantized weights (up to 16 activation rows: NVFP4,
//!   MXFP4 and INT4 take the 4-bit kernels, MXFP8, MXFP6 and FP8 block the streaming
//!   minifloat kernels; more rows go through the GEMM kernels).
//!
//! Two paths. `*_reference` is exact: every block sum is an integer, blocks are
//! accumulated without rounding, `alpha` and the bias are applied exactly and the
//! result is rounded once (docs/NUMERICS.md proves it); golden files and GPU kernels
//! are checked against it. The fast path multiplies exactly pre-scaled bf16 values with
//! AVX-512 BF16 dot products where that is exact, and otherwise sums blocks in int8 or
//! f32 SIMD; it accumulates in f32. Its error against the reference is bounded (see
//! [`ActivationPrecision`] and docs/NUMERICS.md), and it is bit-identical to the
//! reference when every partial sum is exactly representable in f32.
//! (The crate docs have an example.)

#[cfg(target_arch = "x86_64")]
mod bf16;
mod bytes;
mod epilogue;
pub(crate) mod exact;
mod fast;
#[cfg(target_arch = "x86_64")]
mod lanes;
mod nibble;
mod operand;
mod panel;
mod reference;

use blockscale_formats::QuantizedMatrix;
#[cfg(doc)]
use blockscale_formats::Scheme;
use blockscale_formats::Source;
use ndarray::{Array2, ArrayView2};

pub use epilogue::{Activation, Epilogue};
pub use panel::{vbmi_available, vnni_available};

use crate::kernels::Isa;
use crate::{CpuError, Input, Simd};
use operand::Decoded;

/// How the fast weight-only path treats the activations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum ActivationPrecision {
    /// Activations are used as given (f32 accumulation). Error bound against the
    /// reference before the epilogue: `n u / (1 - n u) * sum_k |x_k w_k s_k|` with
    /// `u = 2^-24`, `n = K + K/B + B + 8` for block size `B` (docs/NUMERICS.md).
    #[default]
    Exact,
    /// Activations are quantized on the fly to int8 per 32 values (`d = amax / 127`,
    /// `q = round(x / d)`, as llama.cpp's Q8_0 does) and multiplied with the 4-bit
    /// weight codes in integer arithmetic. Faster; adds up to `d / 2` of error per
    /// activation (about 0.4% of the block's largest value). 4-bit weights in
    /// `gemm_weight_only`/`gemv` (other weights ignore it), and every [`PanelWeights`]
    /// product; rows holding NaN or infinity use [`Self::Exact`].
    Int8Blocks,
}

/// Options of the fast path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct GemmOptions {
    /// Use one thread instead of rayon's pool.
    pub single_threaded: bool,
    /// Implementation choice (`Simd::Auto`: the best this CPU has).
    pub simd: Simd,
    /// Activation handling of the weight-only path.
    pub activations: ActivationPrecision,
}

blockscale_formats::setters!(GemmOptions {
    with_single_thread(single_threaded: bool),
    with_simd(simd: Simd),
    with_activations(activations: ActivationPrecision),
});

/// The epilogue with `alpha` resolved and the bias checked.
pub(crate) struct Resolved<'a> {
    pub alpha: f32,
    pub bias: Option<&'a [f32]>,
    pub activation: Activation,
}

/// Which quantized pairs multiply (see [`Scheme::pairs_with`]) with equal K.
fn check_pair(a: &QuantizedMatrix, b: &QuantizedMatrix) -> Result<(), CpuError> {
    let (sa, sb) = (a.scheme(), b.scheme());
    sa.pairs_with(sb).map_err(|hint| CpuError::UnsupportedPair { a: sa, b: sb, hint })?;
    if a.k() != b.k() {
        return Err(CpuError::KMismatch { a: a.k(), b: b.k() });
    }
    Ok(())
}

fn resolve<'e>(
    epilogue: &Epilogue<'e>,
    a: Option<&QuantizedMatrix>,
    b: &QuantizedMatrix,
) -> Result<Resolved<'e>, CpuError> {
    let alpha = epilogue::resolve_alpha(epilogue, a, b, b.rows())?;
    Ok(Resolved { alpha, bias: epilogue.bias, activation: epilogue.activation })
}

fn to_array<O: Source>(m: usize, n: usize, v: Vec<f64>) -> Array2<O> {
    // Each value is already rounded to O's precision, so this conversion is exact.
    let data: Vec<O> = v.into_iter().map(|x| O::from_f32(x as f32)).collect();
    Array2::from_shape_vec((m, n), data).unwrap_or_else(|_| unreachable!("m * n values"))
}

/// The exact reference GEMM: `D[i, j] = act(alpha * sum_k A[i, k] B[j, k] + bias[j])`
/// over the dequantized values of `a` (`M x K`) and `b` (`N x K`), with every block
/// sum and the whole accumulation exact and one final rounding to `O`.
///
/// # Errors
/// [`CpuError::UnsupportedPair`] for schemes that do not multiply (see the module
/// docs); [`CpuError::KMismatch`]; [`CpuError::BiasLength`], [`CpuError::NonFiniteBias`],
/// [`CpuError::InvalidAlpha`] for a bad epilogue.
pub fn gemm_reference<O: Source>(
    a: &QuantizedMatrix,
    b: &QuantizedMatrix,
    epilogue: &Epilogue<'_>,
) -> Result<Array2<O>, CpuError> {
    check_pair(a, b)?;
    let r = resolve(epilogue, Some(a), b)?;
    // The reference decodes on the portable path, the definition every SIMD path must
    // match: it never depends on the SIMD setting.
    let (da, db) = (Decoded::new(a, Isa::Portable, true), Decoded::new(b, Isa::Portable, true));
    let out = reference::gemm_qq(&da, &db, &r, reference::format_of::<O>(), true);
    Ok(to_array(a.rows(), b.rows(), out))
}

/// Checks weight-only activations and converts them to f32 (exactly).
fn activations<I: Input>(x: ArrayView2<'_, I>, wk: usize) -> Result<Vec<f32>, CpuError> {
    let (m, k) = x.dim();
    if k != wk {
        return Err(CpuError::KMismatch { a: k, b: wk });
    }
    if m == 0 {
        return Err(CpuError::Format(blockscale_formats::FormatError::EmptyShape { rows: m, cols: k }));
    }
    Ok(x.iter().map(|v| v.to_f32_exact()).collect())
}

/// The exact reference of the weight-only product: `x` (`M x K`, f32/f16/bf16, any
/// strides) times the dequantized `w` (`N x K`), accumulated exactly, one rounding.
///
/// # Errors
/// [`CpuError::KMismatch`] if `x` has a different K (which also catches a K that is
/// not a multiple of `w`'s block); [`CpuError::Format`] for an empty `x`; the epilogue
/// errors of [`gemm_reference`].
pub fn gemm_weight_only_reference<I: Input, O: Source>(
    x: ArrayView2<'_, I>,
    w: &QuantizedMatrix,
    epilogue: &Epilogue<'_>,
) -> Result<Array2<O>, CpuError> {
    let xs = activations(x, w.k())?;
    let r = resolve(epilogue, None, w)?;
    let dw = Decoded::new(w, Isa::Portable, true);
    let m = x.nrows();
    let out = reference::gemm_wq(&xs, m, &dw, &r, reference::format_of::<O>(), true);
    Ok(to_array(m, w.rows(), out))
}

/// The fast GEMM of two quantized matrices (same operands, epilogue and errors as
/// [`gemm_reference`], plus [`CpuError::SimdUnavailable`] for a forced missing path).
///
/// Row-major NVFP4 x NVFP4 and MXFP4 x MXFP4 go through the int8 panel kernels
/// (AVX-512 VNNI, or AVX2): A's codes are exact int8 operands, B is packed into 16-row
/// panels, block sums are exact in i32. Elsewhere, where every element times its block
/// scale is exact in bf16 (NVFP4, MX, power-of-two FP8 scales) and the CPU has AVX-512
/// BF16, a packed-panel BF16 dot-product kernel multiplies the pre-scaled values;
/// otherwise NVFP4, MXFP4 and MXFP6-E2M3 pairs use int8 SIMD with exact block sums and
/// the rest sum each block in f32. Accumulation is
/// f32; error bound in docs/NUMERICS.md; bit-identical to the reference when every
/// partial sum is exactly representable in f32.
///
/// # Errors
/// As [`gemm_reference`].
pub fn gemm<O: Source>(
    a: &QuantizedMatrix,
    b: &QuantizedMatrix,
    epilogue: &Epilogue<'_>,
    options: &GemmOptions,
) -> Result<Array2<O>, CpuError> {
    check_pair(a, b)?;
    let r = resolve(epilogue, Some(a), b)?;
    let isa = Isa::select(options.simd)?;
    let out = fast::gemm_qq(a, b, isa, !options.single_threaded);
    Ok(fast::finish(out, a.rows(), b.rows(), &r, !options.single_threaded))
}

/// The fast weight-only product: `x` (`M x K`, f32/f16/bf16, any strides) times the
/// quantized weights `w` (`N x K`). For `M <= 16` (the GEMV case) and row-major weights
/// the weights are streamed once per call, each decoded block serving every activation
/// row: 4-bit weights (NVFP4, MXFP4, INT4) through table lookups (AVX-512 BF16 dot
/// products when the activations are exact in bf16, else AVX2 f32 or, with
/// [`ActivationPrecision::Int8Blocks`], int8), 6- and 8-bit weights (MXFP6, MXFP8, FP8
/// block) as exact f16 values times a power of two with f32 FMAs, the same bits on
/// every SIMD path (docs/NUMERICS.md). Larger `M` and block-interleaved weights go
/// through the GEMM kernels, which first decode the weights: keep GEMV weights
/// row-major.
///
/// # Errors
/// As [`gemm_weight_only_reference`], plus [`CpuError::SimdUnavailable`].
pub fn gemm_weight_only<I: Input, O: Source>(
    x: ArrayView2<'_, I>,
    w: &QuantizedMatrix,
    epilogue: &Epilogue<'_>,
    options: &GemmOptions,
) -> Result<Array2<O>, CpuError> {
    let xs = activations(x, w.k())?;
    let r = resolve(epilogue, None, w)?;
    let isa = Isa::select(options.simd)?;
    let m = x.nrows();
    let out = fast::gemm_wq(&xs, m, w, isa, options);
    Ok(fast::finish(out, m, w.rows(), &r, !options.single_threaded))
}

/// Matrix-vector product: one activation vector `x` (`K` values) times the quantized
/// weights (`N x K`), `N` outputs. The fast path of [`gemm_weight_only`] with `M = 1`.
///
/// ```
/// use blockscale_cpu::{Epilogue, GemmOptions, QuantizeOptions, gemv, quantize};
/// use blockscale_formats::Scheme;
/// use half::bf16;
/// use ndarray::Array2;
///
/// let w = Array2::from_shape_fn((32, 128), |(n, k)| ((n * 5 + k) % 7) as f32 - 3.0);
/// let qw = quantize(w.view(), Scheme::MxFp4, &QuantizeOptions::default()).unwrap();
/// let x: Vec<bf16> = (0..128).map(|k| bf16::from_f32((k % 3) as f32)).collect();
/// let y: Vec<f32> = gemv(&x, &qw, &Epilogue::default(), &GemmOptions::default()).unwrap();
/// assert_eq!(y.len(), 32);
/// ```
///
/// # Errors
/// As [`gemm_weight_only`].
pub fn gemv<I: Input, O: Source>(
    x: &[I],
    w: &QuantizedMatrix,
    epilogue: &Epilogue<'_>,
    options: &GemmOptions,
) -> Result<Vec<O>, CpuError> {
    let view = ArrayView2::from_shape((1, x.len()), x).map_err(|_| CpuError::KMismatch { a: x.len(), b: w.k() })?;
    Ok(gemm_weight_only(view, w, epilogue, options)?.into_raw_vec_and_offset().0)
}

/// 4-bit weights (NVFP4, MXFP4, INT4-G32 and G128), MXFP6 E2M3 and E4M3 weights (MXFP8
/// E4M3, FP8 block) rearranged once, for a model's lifetime, into the 16-row panels the
/// int8 kernels stream: on CPUs with AVX-512 VNNI each 64-byte load feeds two
/// `vpdpbusd` of 16 rows x 4 elements (AVX2: the same with `vpmaddubsw`), with no
/// per-call repacking. E2M3 values are integers times 1/8 (at most 60 in magnitude), so
/// they take the same exact int8 products: their codes' low four bits are laid out as the
/// 4-bit codes, followed per 64 bytes by 32 bytes of their top two bits (AVX-512 VBMI
/// reassembles them with `vpmultishiftqb` and maps them with `vpermb`). E4M3 values are
/// integers below 2^18 times 2^-9: each is split exactly into three 7-bit parts (three
/// `vpermt2b` lookups, three `vpdpbusd`). The values and scales are those of the matrix
/// they were built from; they take the same memory (plus padding of the last panel to
/// 16 rows; FP8 block's scales once per 16 rows and 128 columns). Multiply them with
/// [`gemm_weight_only_panels`] or [`gemv_panels`], which quantize the activations to
/// int8 per 32 values ([`ActivationPrecision::Int8Blocks`], llama.cpp's Q8_0 rule, with
/// the same error bound as the row-major kernels in that mode).
///
/// Six- and eight-bit panels run their AVX-512 kernel on CPUs with VNNI and VBMI (Ice
/// Lake, Zen 4 and later); six-bit ones also have an AVX2 kernel, but eight-bit ones then
/// take the portable kernel, about 16 times slower than `gemm_weight_only` on the
/// row-major matrix: build E4M3 panels only where [`vbmi_available`] says so.
///
/// ```
/// use blockscale_cpu::{ActivationPrecision, Epilogue, GemmOptions, PanelWeights, QuantizeOptions, gemv_panels, quantize};
/// use blockscale_formats::Scheme;
///
/// let w = ndarray::Array2::from_shape_fn((40, 256), |(n, k)| ((n * 5 + k) % 7) as f32 - 3.0);
/// let qw = quantize(w.view(), Scheme::MxFp4, &QuantizeOptions::default()).unwrap();
/// let panels = PanelWeights::new(&qw).unwrap(); // once, at load time
/// let opts = GemmOptions::default().with_activations(ActivationPrecision::Int8Blocks);
/// let x = vec![0.5f32; 256];
/// let y: Vec<f32> = gemv_panels(&x, &panels, &Epilogue::default(), &opts).unwrap();
/// assert_eq!(y.len(), 40);
/// ```
pub struct PanelWeights {
    scheme: blockscale_formats::Scheme,
    global: Option<crate::GlobalScale>,
    panels: panel::Panels,
}

impl PanelWeights {
    /// Builds the panels of `w` (any scale layout; row-major data).
    ///
    /// # Errors
    /// [`CpuError::UnsupportedPanel`] for a scheme other than NVFP4, MXFP4, INT4 (G32
    /// or G128), MXFP6 E2M3, MXFP8 E4M3 and FP8 block, or block-interleaved data.
    pub fn new(w: &QuantizedMatrix) -> Result<Self, CpuError> {
        let format = w.scheme().scale_format();
        let lut = fast::scale_lut(format);
        let unsupported = || CpuError::UnsupportedPanel { scheme: w.scheme(), layout: w.data_layout() };
        // E2M3 and E4M3: the streamed kernels' view of row-major byte-coded weights.
        if let Some(bw) = bytes::ByteWeights::new(w).filter(|b| matches!(b.elem, bytes::Elem::E2M3 | bytes::Elem::E4M3))
        {
            let (n, k) = (w.rows(), w.k());
            let scales = match bw.scales {
                bytes::ByteScales::Ue8m0 { data, index } => panel::panel_scales(
                    &nibble::Scales::Bytes { data, lut: &lut, index },
                    Some(format),
                    n,
                    k / bw.block,
                ),
                bytes::ByteScales::F32 { data, cols, block_rows } => {
                    let rows = |r: usize, dst: &mut [f32]| dst.copy_from_slice(&data[r / block_rows * cols..][..cols]);
                    panel::panel_scales_f32(n, cols, rows)
                }
            };
            let panels = if bw.elem == bytes::Elem::E2M3 {
                panel::Panels::pack_e2m3(bw.data, n, k, scales)
            } else {
                panel::Panels::pack_e4m3(bw.data, n, k, scales, bw.block)
            };
            return Ok(Self { scheme: w.scheme(), global: None, panels });
        }
        let g128 = fast::int4_g128_as_g32_scales(w);
        let nw = fast::nibble_weights(w, &lut, g128.as_deref()).ok_or_else(unsupported)?;
        let byte_format = matches!(w.scales(), blockscale_formats::ScaleData::Bytes(_)).then_some(format);
        Ok(Self { scheme: w.scheme(), global: w.global_scale(), panels: panel::Panels::pack(&nw, byte_format) })
    }

    /// The scheme of the matrix they were built from.
    pub fn scheme(&self) -> blockscale_formats::Scheme {
        self.scheme
    }

    /// Rows (N, output features).
    pub fn rows(&self) -> usize {
        self.panels.n
    }

    /// K, the reduction length.
    pub fn k(&self) -> usize {
        self.panels.k
    }

    /// Bytes of codes and scales held.
    pub fn storage_bytes(&self) -> usize {
        self.panels.storage_bytes()
    }
}

impl core::fmt::Debug for PanelWeights {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PanelWeights")
            .field("scheme", &self.scheme)
            .field("rows", &self.rows())
            .field("k", &self.k())
            .finish()
    }
}

/// The weight-only product on panel weights: `x` (`M x K`, f32/f16/bf16, any strides)
/// times `w` (`N x K`), with the activations quantized to int8 per 32 values (rows
/// holding NaN or infinity are computed in f32 instead, so those propagate). The
/// AVX-512 VNNI kernel runs where the instruction set is AVX-512 and the CPU has VNNI,
/// else the AVX2 one, else a portable one (`BLOCKSCALE_SIMD` or `options.simd` can ask
/// for a lesser one); all give the same bits. Error bound:
/// [`ActivationPrecision::Int8Blocks`]'s.
///
/// # Errors
/// [`CpuError::PanelNeedsInt8`] unless `options.activations` is
/// [`ActivationPrecision::Int8Blocks`]; [`CpuError::SimdUnavailable`] for a forced
/// instruction set this CPU lacks; otherwise as
/// [`gemm_weight_only`].
pub fn gemm_weight_only_panels<I: Input, O: Source>(
    x: ArrayView2<'_, I>,
    w: &PanelWeights,
    epilogue: &Epilogue<'_>,
    options: &GemmOptions,
) -> Result<Array2<O>, CpuError> {
    if options.activations != ActivationPrecision::Int8Blocks {
        return Err(CpuError::PanelNeedsInt8);
    }
    let xs = activations(x, w.k())?;
    let (m, n) = (x.nrows(), w.rows());
    let alpha = epilogue::resolve_weight_only(epilogue, w.scheme, w.global, n)?;
    let r = Resolved { alpha, bias: epilogue.bias, activation: epilogue.activation };
    let kernel = panel::Kernel::of(Isa::select(options.simd)?, w.panels.width);
    let mut out = vec![0f32; m * n];
    panel::gemm_panels(kernel, &xs, m, &w.panels, !options.single_threaded, &mut out);
    Ok(fast::finish(out, m, n, &r, !options.single_threaded))
}

/// [`gemm_weight_only_panels`] with one activation vector `x` (`K` values): `N` outputs.
///
/// # Errors
/// As [`gemm_weight_only_panels`].
pub fn gemv_panels<I: Input, O: Source>(
    x: &[I],
    w: &PanelWeights,
    epilogue: &Epilogue<'_>,
    options: &GemmOptions,
) -> Result<Vec<O>, CpuError> {
    let view = ArrayView2::from_shape((1, x.len()), x).map_err(|_| CpuError::KMismatch { a: x.len(), b: w.k() })?;
    Ok(gemm_weight_only_panels(view, w, epilogue, options)?.into_raw_vec_and_offset().0)
}
