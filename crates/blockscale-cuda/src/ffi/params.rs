//! Kernel parameter structs: `#[repr(C)]` mirrors of `kernels/common/params.cuh`, with
//! their sizes checked at compile time, and [`KernelArgs`], which says how each kernel's
//! parameter list is passed to a launch.

use std::ffi::c_void;

use blockscale_formats::{DataLayout, QuantRequest, ScaleLayout};

/// The five fields by which the C structs `bs::QuantParams`, `bs::DequantParams` and
/// `bs::GemvParams` describe a quantized matrix, in their order: `rows` (`n` in
/// `GemvParams`), `k`, `scale_cols`, `swizzled`, `interleaved`. Nested here, flat there:
/// five 4-byte fields with no padding, so the bytes are the same.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct MatrixFields {
    pub rows: u32,
    pub k: u32,
    pub scale_cols: u32,
    pub swizzled: u32,
    pub interleaved: u32,
}

impl MatrixFields {
    /// The fields of a matrix of `request`'s shape and layouts.
    pub(crate) fn of(request: &QuantRequest) -> Self {
        let shape = request.shape();
        Self {
            rows: shape.rows as u32,
            k: shape.k as u32,
            scale_cols: shape.scale_cols as u32,
            swizzled: (request.scale_layout() == ScaleLayout::Swizzled128x4) as u32,
            interleaved: (request.data_layout() == DataLayout::BlockInterleaved) as u32,
        }
    }
}

/// `bs::QuantParams`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct QuantParams {
    pub input: u64,
    pub data: u64,
    pub scales: u64,
    pub bad: u64,
    pub row_stride: u64,
    pub matrix: MatrixFields,
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
    pub matrix: MatrixFields,
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
    /// `n` (the weights' rows), `k`, `scale_cols`, `swizzled`, `interleaved`.
    pub matrix: MatrixFields,
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
    /// 1: every CTA of the grid is resident at once, so the next kernel on the stream may
    /// launch (and queue its weights) from this one's start.
    pub early_dependents: u32,
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
    /// The wgmma kernel's stream-K counters, one per stream-K tile, zero between launches
    /// (the device's GEMV counters).
    pub counters: u64,
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
    /// The wgmma kernel's split tail: its last `tail` tiles take two K halves each, in
    /// clusters of two (`splits` = 1), else 0 (wgmma.cuh `tile_at`).
    pub tail: u32,
    /// The wgmma kernel's stream-K: its last `sk_tiles` tiles' slabs spread over the
    /// grid, `sk_slabs` (even) a CTA (wgmma.cuh `sk_setup`), else 0.
    pub sk_tiles: u32,
    pub sk_slabs: u32,
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
    /// Pairs of activation tiles share each weight tile (multicast; fgemm.cu).
    pub pair: u32,
    /// The outputs are stored by TMA through the third tensor map (fgemm.cu).
    pub store_map: u32,
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
const _: () = assert!(size_of::<PgemmParams>() == 128 && align_of::<PgemmParams>() == 8);
const _: () = assert!(size_of::<FgemmParams>() == 168 && align_of::<FgemmParams>() == 8);
const _: () = assert!(size_of::<TensorMap>() == 128 && align_of::<TensorMap>() == 64);

/// The parameters a kernel takes, as a launch passes them: one pointer per parameter.
///
/// # Safety
/// [`pointers`](Self::pointers) gives, in order, one pointer per parameter of every kernel
/// whose [`KernelName`](super::names::KernelName) names `Self`, each to a value with that
/// parameter's C layout, valid while `self` is borrowed.
pub(crate) unsafe trait KernelArgs {
    /// An array of as many pointers as the kernels take parameters.
    type Pointers: AsMut<[*mut c_void]>;
    /// The pointers to `self`'s parameters, in order.
    fn pointers(&self) -> Self::Pointers;
}

/// The pointer a launch takes for a parameter.
fn pointer<T>(value: &T) -> *mut c_void {
    (value as *const T).cast_mut().cast()
}

/// The wgmma GEMM's tiling of quantized activations (`wgemm_acts_{scheme}`): the
/// activations' `DequantParams`, then the tiles' `PgemmParams`.
pub(crate) type TilingArgs = (DequantParams, PgemmParams);

/// The FP8 wgmma GEMM (`fgemm_*`): its `FgemmParams`, then the tensor maps of A, B and
/// the output.
pub(crate) type FgemmArgs = (FgemmParams, TensorMap, TensorMap, TensorMap);

/// [`KernelArgs`] for kernels of one parameter struct.
macro_rules! one_struct {
    ($($params:ty),* $(,)?) => {$(
        // SAFETY: a #[repr(C)] struct of integers and floats whose size and alignment are
        // asserted above and are the C struct's (the .cuh asserts the same sizes); the
        // kernels it is named with (names.rs) take it by value as their one parameter.
        unsafe impl KernelArgs for $params {
            type Pointers = [*mut c_void; 1];
            fn pointers(&self) -> Self::Pointers {
                [pointer(self)]
            }
        }
    )*};
}

one_struct!(
    QuantParams,
    DequantParams,
    AmaxParams,
    SplitParams,
    CopyParams,
    Fp8ScaleParams,
    GemvParams,
    PgemvParams,
    PgemmParams,
);

// SAFETY: `wgemm_acts_{scheme}` takes `(bs::DequantParams, bs::PgemmParams)` by value; both
// are #[repr(C)] mirrors of the C structs (sizes asserted above and in params.cuh), and
// each pointer is to the tuple's own field.
unsafe impl KernelArgs for TilingArgs {
    type Pointers = [*mut c_void; 2];
    fn pointers(&self) -> Self::Pointers {
        [pointer(&self.0), pointer(&self.1)]
    }
}

// SAFETY: the `fgemm_*` kernels take `(bs::FgemmParams, bs::fgemm::TensorMap,
// bs::fgemm::TensorMap, bs::fgemm::TensorMap)` by value: FgemmParams mirrors the C struct,
// TensorMap is the 128 bytes of a CUtensorMap with its 64-byte alignment (sizes asserted
// above), and each pointer is to the tuple's own field.
unsafe impl KernelArgs for FgemmArgs {
    type Pointers = [*mut c_void; 4];
    fn pointers(&self) -> Self::Pointers {
        [pointer(&self.0), pointer(&self.1), pointer(&self.2), pointer(&self.3)]
    }
}
