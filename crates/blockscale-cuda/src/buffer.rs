//! Device-side data: element types the kernels take and give, and [`DeviceQuantized`],
//! the device twin of [`QuantizedMatrix`].

use blockscale_formats::{
    DataLayout, FloatKind, GlobalScale, QuantRequest, QuantShape, QuantizeOptions, QuantizedMatrix, ScaleData,
    ScaleFormat, ScaleLayout, Scheme, Source,
};
use cudarc::driver::{CudaSlice, CudaStream, DeviceRepr, SyncOnDrop, ValidAsZeroBits};
use half::{bf16, f16};

use crate::{CudaError, Device};

/// f32, f16 or bf16 (the formats crate's [`Source`], which seals it): what the kernels
/// read (quantization) and write (dequantization), with cudarc's device representation.
pub trait DeviceElement: Source + DeviceRepr + ValidAsZeroBits {
    /// The kernel name suffix.
    #[doc(hidden)]
    const SUFFIX: &'static str = Self::KIND.name();
    /// The kernels' `out_kind` code for this output type (0 bf16, 1 f16, 2 f32).
    #[doc(hidden)]
    const OUT_KIND: u32 = match Self::KIND {
        FloatKind::Bf16 => 0,
        FloatKind::F16 => 1,
        FloatKind::F32 => 2,
    };
}

impl DeviceElement for f32 {}
impl DeviceElement for f16 {}
impl DeviceElement for bf16 {}

/// A quantized matrix's scales on the device, in the scheme's scale format.
#[derive(Debug)]
pub enum DeviceScales {
    /// UE4M3 (NVFP4) or UE8M0 (MX) bytes.
    Bytes(CudaSlice<u8>),
    /// f32 (FP8 block).
    F32(CudaSlice<f32>),
    /// f16 (INT4-G32).
    F16(CudaSlice<f16>),
}

impl DeviceScales {
    /// The device address for a kernel that reads the scales, with cudarc's guard:
    /// keep it alive until the launch is queued, so the read is recorded after it.
    pub(crate) fn ptr<'a>(&'a self, stream: &'a CudaStream) -> (u64, SyncOnDrop<'a>) {
        use cudarc::driver::DevicePtr;
        match self {
            Self::Bytes(v) => v.device_ptr(stream),
            Self::F32(v) => v.device_ptr(stream),
            Self::F16(v) => v.device_ptr(stream),
        }
    }

    /// As [`Self::ptr`], for a kernel that writes them.
    pub(crate) fn ptr_mut<'a>(&'a mut self, stream: &'a CudaStream) -> (u64, SyncOnDrop<'a>) {
        use cudarc::driver::DevicePtrMut;
        match self {
            Self::Bytes(v) => v.device_ptr_mut(stream),
            Self::F32(v) => v.device_ptr_mut(stream),
            Self::F16(v) => v.device_ptr_mut(stream),
        }
    }
}

/// A quantized matrix on the device: packed codes and scales in device memory, with the
/// same shape, layouts and per-tensor scale a [`QuantizedMatrix`] has.
#[derive(Debug)]
pub struct DeviceQuantized {
    /// The scheme, shape and layouts, checked.
    pub(crate) request: QuantRequest,
    pub(crate) data: CudaSlice<u8>,
    pub(crate) scales: DeviceScales,
    pub(crate) global_scale: Option<GlobalScale>,
    /// The NaN/Inf flag the kernels set: `!flat_index` of the first one, 0 for none.
    pub(crate) bad: CudaSlice<u64>,
}

impl DeviceQuantized {
    /// Allocates the buffers of a `rows x k` matrix of `scheme` (codes uninitialised
    /// until a quantization writes them; scales zeroed, so swizzle padding is zero), for
    /// [`crate::quantize_into`].
    ///
    /// # Errors
    /// Shape and layout errors as [`CudaError::Format`]; [`CudaError::TooLarge`]; [`CudaError::OutOfMemory`].
    pub fn alloc(
        dev: &Device,
        scheme: Scheme,
        rows: usize,
        k: usize,
        scale_layout: ScaleLayout,
        data_layout: DataLayout,
    ) -> Result<Self, CudaError> {
        let options = QuantizeOptions::default().with_scale_layout(scale_layout).with_data_layout(data_layout);
        Self::alloc_for(dev, &crate::checks::check_quantize(scheme, rows, k, &options)?)
    }

    /// [`Self::alloc`] for a checked request.
    pub(crate) fn alloc_for(dev: &Device, request: &QuantRequest) -> Result<Self, CudaError> {
        let (shape, scale_len) = (request.shape(), request.scale_len());
        let s = dev.stream();
        // Left unset: the codes are only meaningful after a quantization writes every byte
        // (quantize_into), and reading them earlier reads arbitrary but valid bytes.
        let data = dev.alloc_unset::<u8>(shape.data_bytes, "quantized codes")?;
        let scales = match shape.scheme.scale_format() {
            ScaleFormat::UE4M3 | ScaleFormat::UE8M0 => {
                DeviceScales::Bytes(s.alloc_zeros::<u8>(scale_len).map_err(CudaError::alloc("scales", scale_len))?)
            }
            ScaleFormat::F32 => {
                DeviceScales::F32(s.alloc_zeros::<f32>(scale_len).map_err(CudaError::alloc("scales", scale_len * 4))?)
            }
            ScaleFormat::F16 => {
                DeviceScales::F16(s.alloc_zeros::<f16>(scale_len).map_err(CudaError::alloc("scales", scale_len * 2))?)
            }
        };
        let global_scale = shape.scheme.has_global_scale().then(|| GlobalScale::from_encode(1.0)).transpose()?;
        let bad = s.alloc_zeros::<u64>(1).map_err(CudaError::alloc("a flag", 8))?;
        Ok(Self { request: *request, data, scales, global_scale, bad })
    }

    /// The scheme.
    pub fn scheme(&self) -> Scheme {
        self.request.scheme()
    }

    /// The storage shape.
    pub fn shape(&self) -> &QuantShape {
        self.request.shape()
    }

    /// The packed codes.
    pub fn data(&self) -> &CudaSlice<u8> {
        &self.data
    }

    /// The scales.
    pub fn scales(&self) -> &DeviceScales {
        &self.scales
    }

    /// Order of the codes.
    pub fn data_layout(&self) -> DataLayout {
        self.request.data_layout()
    }

    /// Order of the scales.
    pub fn scale_layout(&self) -> ScaleLayout {
        self.request.scale_layout()
    }

    /// NVFP4's per-tensor scale.
    pub fn global_scale(&self) -> Option<GlobalScale> {
        self.global_scale
    }

    /// Copies to the host (waiting for the queued work). The buffers were sized by the
    /// checked request, so nothing is checked again (debug builds assert).
    ///
    /// # Errors
    /// [`CudaError::Driver`] if a copy (or an earlier kernel) fails.
    pub fn to_host(&self, dev: &Device) -> Result<QuantizedMatrix, CudaError> {
        let s = dev.stream();
        let data = s.clone_dtoh(&self.data).map_err(CudaError::driver("copying codes to the host"))?;
        let scales = match &self.scales {
            DeviceScales::Bytes(v) => ScaleData::Bytes(s.clone_dtoh(v).map_err(CudaError::driver("copying scales"))?),
            DeviceScales::F32(v) => ScaleData::F32(s.clone_dtoh(v).map_err(CudaError::driver("copying scales"))?),
            DeviceScales::F16(v) => ScaleData::F16(s.clone_dtoh(v).map_err(CudaError::driver("copying scales"))?),
        };
        Ok(QuantizedMatrix::from_request(&self.request, data, scales, self.global_scale))
    }

    /// Copies a host matrix to the device.
    ///
    /// # Errors
    /// [`CudaError::TooLarge`], [`CudaError::OutOfMemory`] or [`CudaError::Driver`].
    pub fn from_host(dev: &Device, q: &QuantizedMatrix) -> Result<Self, CudaError> {
        crate::checks::check_limits(q.scheme(), q.shape().rows, q.shape().k)?;
        let s = dev.stream();
        let data = s.clone_htod(q.data()).map_err(CudaError::alloc("quantized codes", q.data().len()))?;
        let scales = match q.scales() {
            ScaleData::Bytes(v) => DeviceScales::Bytes(s.clone_htod(v).map_err(CudaError::alloc("scales", v.len()))?),
            ScaleData::F32(v) => DeviceScales::F32(s.clone_htod(v).map_err(CudaError::alloc("scales", v.len() * 4))?),
            ScaleData::F16(v) => DeviceScales::F16(s.clone_htod(v).map_err(CudaError::alloc("scales", v.len() * 2))?),
        };
        let bad = s.alloc_zeros::<u64>(1).map_err(CudaError::alloc("a flag", 8))?;
        Ok(Self { request: q.request(), data, scales, global_scale: q.global_scale(), bad })
    }
}
