//! [`PreparedWeights`]: a weight matrix rearranged once, at load time, into the layout
//! the fast GEMV kernels stream (`kernels/gemv/prepared.cu`): every lane loads 16 bytes
//! that a few bit operations turn into its tensor-core fragments. The checkpoint /
//! quantize layout ([`DeviceQuantized`], [`QuantizedMatrix`]) stays the interchange
//! format; this is what an engine keeps on the GPU for decode.
//!
//! ```no_run
//! use blockscale_cuda::{Device, DeviceEpilogue, DeviceMatrix, PreparedWeights, gemv};
//! # fn f(dev: &Device, q: &blockscale_formats::QuantizedMatrix, x: &blockscale_cuda::cudarc::driver::CudaSlice<half::bf16>) -> Result<(), blockscale_cuda::CudaError> {
//! let w = PreparedWeights::from_host(dev, q)?; // once, when the model loads
//! let y = gemv::<half::bf16, half::bf16>(dev, DeviceMatrix::new(x, 1, q.k()), &w, &DeviceEpilogue::default())?;
//! # Ok(()) }
//! ```
//!
//! Matrices the fast kernels cannot take exactly (NaN or infinite codes, NaN scales,
//! subnormal NVFP4 scales on nonzero blocks, MX scales over more binades than bf16
//! holds; [`Unpreparable`] says which) keep their checkpoint layout inside the value,
//! and the GEMV runs its general kernel on them: same results, less speed.

mod layout;

use blockscale_formats::{GlobalScale, QuantizedMatrix, Scheme};
use cudarc::driver::CudaSlice;

pub use layout::{GROUP_ROWS, PreparedLayout, SLAB_K, ScaleOrder, Unpreparable};
pub(crate) use layout::{NVFP4_SHIFT, scale_add};

use crate::{CudaError, Device, DeviceQuantized};

/// Where the kernels on prepared weights (the GEMV, pgemm, the wgmma GEMM) take their
/// activations from.
#[derive(Clone, Copy)]
pub(crate) enum Acts<'a> {
    /// bf16 or f16 (`f16`) rows at `ptr`, `stride` elements apart, already checked.
    Plain { ptr: u64, stride: usize, f16: bool },
    /// NVFP4 or MX activations in their checkpoint layout (the pairs on prepared
    /// weights), decoded to bf16 on the way: by the wgmma GEMM's tiling, or into bf16
    /// rows in the workspace for the GEMV and pgemm.
    Quantized(&'a crate::DeviceQuantized),
}

impl Acts<'_> {
    /// Whether the kernels read f16.
    pub(crate) fn f16(self) -> bool {
        matches!(self, Self::Plain { f16: true, .. })
    }

    /// Workspace bytes the activations take as bf16 rows (`m x k`) for the GEMV and
    /// pgemm: [`decoded_rows_bytes`] for quantized ones, none for plain ones (read in
    /// place).
    pub(crate) fn decoded_bytes(self, m: usize, k: usize) -> usize {
        match self {
            Self::Quantized(_) => decoded_rows_bytes(m, k),
            Self::Plain { .. } => 0,
        }
    }
}

/// Bytes of `m x k` bf16 rows in the workspace, rounded up to 256.
pub(crate) fn decoded_rows_bytes(m: usize, k: usize) -> usize {
    (m * k * 2).next_multiple_of(256)
}

/// A weight matrix ready for the fast GEMV: the prepared layout on the device, or, for
/// the rare matrix it cannot hold exactly, the checkpoint layout (see the module docs).
#[derive(Debug)]
pub struct PreparedWeights {
    pub(crate) inner: Inner,
}

#[derive(Debug)]
pub(crate) enum Inner {
    Fast(Fast),
    Plain { w: DeviceQuantized, reason: Unpreparable },
}

/// The prepared buffers and what the kernel needs besides them.
#[derive(Debug)]
pub(crate) struct Fast {
    pub(crate) scheme: Scheme,
    pub(crate) rows: usize,
    pub(crate) k: usize,
    pub(crate) row_groups: usize,
    pub(crate) slabs: usize,
    pub(crate) codes: CudaSlice<u8>,
    pub(crate) scales: CudaSlice<u8>,
    pub(crate) shift: i32,
    pub(crate) global_scale: Option<GlobalScale>,
}

impl Fast {
    /// The factor the kernels' sums take besides the epilogue's alpha: 2^c for the
    /// pre-scaled layouts, 1/8 for INT4 (decoded as 8 (c - 8)), 1 for FP8 block.
    pub(crate) fn layout_factor(&self) -> f32 {
        match self.scheme {
            Scheme::Int4G32 | Scheme::Int4G128 => 0.125,
            Scheme::Fp8Block(_) => 1.0,
            Scheme::NvFp4 => (NVFP4_SHIFT as f32).exp2(),
            _ => (self.shift as f32).exp2(),
        }
    }

    /// The factor the bf16 weights `pgemm_dequant` writes carry: 2^c for the pre-scaled
    /// layouts (the exact products w x scale x 2^-c), 1 for INT4 and FP8 block.
    pub(crate) fn dequant_factor(&self) -> f32 {
        match self.scheme {
            Scheme::Int4G32 | Scheme::Int4G128 | Scheme::Fp8Block(_) => 1.0,
            _ => self.layout_factor(),
        }
    }
}

/// Scale bytes a kernel stage holds per row group and slab (`stage_scale_bytes` in
/// prepared.cuh): FP8 128x128 tile scales are read from global memory instead.
pub(crate) fn stage_scale_bytes(scheme: Scheme) -> usize {
    match scheme {
        Scheme::Fp8Block(blockscale_formats::Fp8Tile::Tile128x128) => 0,
        s => ScaleOrder::of(s).step_bytes(),
    }
}

impl PreparedWeights {
    /// Prepares a host matrix and copies it to the device.
    ///
    /// # Errors
    /// [`CudaError::TooLarge`] for more rows or K than the kernels address,
    /// [`CudaError::OutOfMemory`], [`CudaError::Driver`].
    pub fn from_host(dev: &Device, q: &QuantizedMatrix) -> Result<Self, CudaError> {
        crate::checks::check_limits(q.scheme(), q.rows(), q.k())?;
        check_prepared_limits(q.rows(), q.k())?;
        match PreparedLayout::new(q) {
            Ok(layout) => Self::from_layout(dev, &layout),
            Err(reason) => Ok(Self { inner: Inner::Plain { w: DeviceQuantized::from_host(dev, q)?, reason } }),
        }
    }

    /// Prepares a matrix already on the device (quantized there, say): copies it to the
    /// host, rearranges it and copies the result back, waiting for the queued work. A
    /// load-time step; `w` is kept as it is when it cannot be prepared.
    ///
    /// # Errors
    /// As [`Self::from_host`].
    pub fn from_device(dev: &Device, w: DeviceQuantized) -> Result<Self, CudaError> {
        let host = w.to_host(dev)?;
        check_prepared_limits(host.rows(), host.k())?;
        match PreparedLayout::new(&host) {
            Ok(layout) => Self::from_layout(dev, &layout),
            Err(reason) => Ok(Self { inner: Inner::Plain { w, reason } }),
        }
    }

    /// Copies a host-prepared layout to the device.
    ///
    /// # Errors
    /// [`CudaError::OutOfMemory`], [`CudaError::Driver`].
    pub fn from_layout(dev: &Device, layout: &PreparedLayout) -> Result<Self, CudaError> {
        check_prepared_limits(layout.rows(), layout.k())?;
        let s = dev.stream();
        let codes = s.clone_htod(layout.codes()).map_err(CudaError::alloc("prepared codes", layout.codes().len()))?;
        let scales =
            s.clone_htod(layout.scales()).map_err(CudaError::alloc("prepared scales", layout.scales().len()))?;
        Ok(Self {
            inner: Inner::Fast(Fast {
                scheme: layout.scheme(),
                rows: layout.rows(),
                k: layout.k(),
                row_groups: layout.row_groups(),
                slabs: layout.slabs(),
                codes,
                scales,
                shift: layout.shift(),
                global_scale: layout.global_scale(),
            }),
        })
    }

    /// The scheme.
    pub fn scheme(&self) -> Scheme {
        match &self.inner {
            Inner::Fast(f) => f.scheme,
            Inner::Plain { w, .. } => w.scheme(),
        }
    }

    /// Rows (N) and K.
    pub fn shape(&self) -> (usize, usize) {
        match &self.inner {
            Inner::Fast(f) => (f.rows, f.k),
            Inner::Plain { w, .. } => (w.shape().rows, w.shape().k),
        }
    }

    /// NVFP4's per-tensor scale.
    pub fn global_scale(&self) -> Option<GlobalScale> {
        match &self.inner {
            Inner::Fast(f) => f.global_scale,
            Inner::Plain { w, .. } => w.global_scale(),
        }
    }

    /// Why the matrix kept its checkpoint layout, or `None` when it is prepared.
    pub fn unprepared_reason(&self) -> Option<Unpreparable> {
        match &self.inner {
            Inner::Fast(_) => None,
            Inner::Plain { reason, .. } => Some(*reason),
        }
    }

    /// Device bytes held (codes and scales).
    pub fn device_bytes(&self) -> usize {
        match &self.inner {
            Inner::Fast(f) => f.codes.len() + f.scales.len(),
            Inner::Plain { w, .. } => {
                w.data().len()
                    + match w.scales() {
                        crate::DeviceScales::Bytes(v) => v.len(),
                        crate::DeviceScales::F16(v) => 2 * v.len(),
                        crate::DeviceScales::F32(v) => 4 * v.len(),
                    }
            }
        }
    }

    /// Back to a host [`QuantizedMatrix`] with the exact codes and scales the matrix was
    /// prepared from (row-major codes, `Linear` scales when it was prepared), waiting
    /// for the queued work.
    ///
    /// # Errors
    /// [`CudaError::Driver`] if a copy fails.
    pub fn to_host(&self, dev: &Device) -> Result<QuantizedMatrix, CudaError> {
        match &self.inner {
            Inner::Plain { w, .. } => w.to_host(dev),
            Inner::Fast(f) => {
                let s = dev.stream();
                let codes = s.clone_dtoh(&f.codes).map_err(CudaError::driver("copying prepared codes"))?;
                let scales = s.clone_dtoh(&f.scales).map_err(CudaError::driver("copying prepared scales"))?;
                let layout = PreparedLayout::from_parts(
                    f.scheme,
                    (f.rows, f.k),
                    (f.row_groups, f.slabs),
                    codes,
                    scales,
                    f.shift,
                    f.global_scale,
                );
                Ok(layout.to_quantized())
            }
        }
    }
}

/// The prepared kernel's 32-bit addressing: N below 2^26 and K below 2^28, as the
/// general GEMV.
fn check_prepared_limits(rows: usize, k: usize) -> Result<(), CudaError> {
    if rows >= 1 << 26 || k >= 1 << 28 {
        return Err(CudaError::TooLarge { rows, k, limit: "N must be below 2^26 and K below 2^28" });
    }
    Ok(())
}
