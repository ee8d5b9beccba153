//! Kernel parameter structs: `#[repr(C)]` mirrors of `kernels/common/params.cuh`, with
//! their sizes checked at compile time.

use cudarc::driver::DeviceRepr;

/// `bs::QuantParams`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct QuantParams {
    pub input: u64,
    pub data: u64,
    pub scales: u64,
    pub bad: u64,
    pub row_stride: u64,
    pub rows: u32,
    pub k: u32,
    pub scale_cols: u32,
    pub swizzled: u32,
    pub interleaved: u32,
    pub rule: u32,
    pub recipe: u32,
    pub global_encode: f32,
    pub max_recip: f32,
    pub emax: i32,
    pub mbits: i32,
    pub pad: u32,
}

/// `bs::DequantParams`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct DequantParams {
    pub data: u64,
    pub scales: u64,
    pub out: u64,
    pub row_stride: u64,
    pub rows: u32,
    pub k: u32,
    pub scale_cols: u32,
    pub swizzled: u32,
    pub interleaved: u32,
    pub post: f32,
}

/// `bs::AmaxParams`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct AmaxParams {
    pub input: u64,
    pub amax_bits: u64,
    pub bad: u64,
    pub row_stride: u64,
    pub rows: u32,
    pub k: u32,
}

/// `bs::SplitParams`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct SplitParams {
    pub x: u64,
    pub out: u64,
    pub x_stride: u64,
    pub out_stride: u64,
    pub rows: u32,
    pub k: u32,
    pub pieces: u32,
    pub pad: u32,
}

/// `bs::CopyParams`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct CopyParams {
    pub src: u64,
    pub dst: u64,
    pub src_stride: u64,
    pub dst_stride: u64,
    pub rows: u32,
    pub cols: u32,
}

/// `bs::Fp8ScaleParams`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fp8ScaleParams {
    pub src: u64,
    pub dst: u64,
    pub rows: u32,
    pub kb: u32,
    pub tiles: u32,
    pub mn_major: u32,
}

/// `bs::GemvParams`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct GemvParams {
    pub x: u64,
    pub w: [u64; 2],
    pub s: [u64; 2],
    pub bias: [u64; 2],
    pub out: u64,
    pub partial: u64,
    pub x_stride: u64,
    pub out_stride: u64,
    pub alpha: [f32; 2],
    pub m: u32,
    pub n: u32,
    pub k: u32,
    pub scale_cols: u32,
    pub swizzled: u32,
    pub interleaved: u32,
    pub tiles: u32,
    pub act_f16: u32,
    pub out_kind: u32,
    pub activation: [u32; 2],
    pub gated: u32,
    pub splits: u32,
    pub steps_per_split: u32,
    pub ch16: u32,
    pub pad: u32,
}

/// `bs::PgemvParams`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PgemvParams {
    pub x: u64,
    pub w: [u64; 2],
    pub s: [u64; 2],
    pub bias: [u64; 2],
    pub out: u64,
    pub partial: u64,
    pub counters: u64,
    pub x_stride: u64,
    pub out_stride: u64,
    pub alpha: [f32; 2],
    pub scale_add: [u32; 2],
    pub m: u32,
    pub n: u32,
    pub k: u32,
    pub slabs: u32,
    pub chunks: u32,
    pub out_kind: u32,
    pub activation: [u32; 2],
    pub gated: u32,
    pub splits: u32,
    pub chunks_per_split: u32,
    pub pad: u32,
}

/// `bs::PgemmParams`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PgemmParams {
    pub x: u64,
    pub w: u64,
    pub s: u64,
    pub bias: u64,
    pub out: u64,
    pub partial: u64,
    pub x_stride: u64,
    pub out_stride: u64,
    pub alpha: f32,
    pub scale_add: u32,
    pub m: u32,
    pub n: u32,
    pub k: u32,
    pub slabs: u32,
    pub out_kind: u32,
    pub activation: u32,
    pub splits: u32,
    pub slabs_per_split: u32,
}

/// `bs::FgemmParams`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct FgemmParams {
    pub g: PgemmParams,
    pub sa: u64,
    pub sb: u64,
    pub a_tiles: u32,
    pub scale_cols: u32,
    pub swizzled: u32,
    pub pad: u32,
}

/// `bs::fgemm::TensorMap`: a `CUtensorMap` as `cuTensorMapEncodeTiled` writes it (128
/// opaque bytes, 64-byte aligned), passed to the kernel by value.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TensorMap(pub [u64; 16]);

// The C++ structs have the same fields in the same order with natural alignment; these
// sizes are what nvcc gives them (8-byte pointers, 4-byte scalars, tail padding to 8).
const _: () = assert!(size_of::<QuantParams>() == 88 && align_of::<QuantParams>() == 8);
const _: () = assert!(size_of::<DequantParams>() == 56 && align_of::<DequantParams>() == 8);
const _: () = assert!(size_of::<AmaxParams>() == 40 && align_of::<AmaxParams>() == 8);
const _: () = assert!(size_of::<SplitParams>() == 48 && align_of::<SplitParams>() == 8);
const _: () = assert!(size_of::<CopyParams>() == 40 && align_of::<CopyParams>() == 8);
const _: () = assert!(size_of::<Fp8ScaleParams>() == 32 && align_of::<Fp8ScaleParams>() == 8);
const _: () = assert!(size_of::<GemvParams>() == 160 && align_of::<GemvParams>() == 8);
const _: () = assert!(size_of::<PgemvParams>() == 160 && align_of::<PgemvParams>() == 8);
const _: () = assert!(size_of::<PgemmParams>() == 104 && align_of::<PgemmParams>() == 8);
const _: () = assert!(size_of::<FgemmParams>() == 136 && align_of::<FgemmParams>() == 8);
const _: () = assert!(size_of::<TensorMap>() == 128 && align_of::<TensorMap>() == 64);

// SAFETY: plain #[repr(C)] structs of integers and floats, passed by value to kernels
// whose parameter types have the identical layout (kernels/common/params.cuh).
unsafe impl DeviceRepr for QuantParams {}
// SAFETY: as above.
unsafe impl DeviceRepr for DequantParams {}
// SAFETY: as above.
unsafe impl DeviceRepr for AmaxParams {}
// SAFETY: as above.
unsafe impl DeviceRepr for SplitParams {}
// SAFETY: as above.
unsafe impl DeviceRepr for CopyParams {}
// SAFETY: as above.
unsafe impl DeviceRepr for Fp8ScaleParams {}
// SAFETY: as above.
unsafe impl DeviceRepr for GemvParams {}
// SAFETY: as above.
unsafe impl DeviceRepr for PgemvParams {}
// SAFETY: as above.
unsafe impl DeviceRepr for PgemmParams {}
// SAFETY: as above.
unsafe impl DeviceRepr for FgemmParams {}
// SAFETY: 128 bytes of plain data with the alignment CUtensorMap and the kernel's
// `bs::fgemm::TensorMap` have.
unsafe impl DeviceRepr for TensorMap {}
