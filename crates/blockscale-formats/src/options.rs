//! Quantization options, shared by the CPU and cuda backends.

use crate::{DataLayout, GlobalScaleSource, NonFinite, NvFp4Recipe, ScaleLayout, ScaleRule};

/// Which CPU implementation runs the hot loops. Every path gives identical bytes; the
/// cuda backend ignores it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Simd {
    /// The fastest this CPU supports (`BLOCKSCALE_SIMD=portable|avx2|avx512` overrides
    /// it).
    #[default]
    Auto,
    /// Plain Rust, no explicit SIMD.
    Portable,
    /// x86-64 AVX2 (with F16C and FMA); an error where unavailable.
    Avx2,
    /// x86-64 AVX-512 (F and BW, with AVX2, F16C and FMA); its kernels also use BF16
    /// and VNNI where the CPU has them, and the kernel families written for AVX2 only
    /// (quantization, dequantization) run their AVX2 code under it. An error where
    /// AVX-512 F or BW is missing.
    Avx512,
}

/// Options for every backend's `quantize`. `QuantizeOptions::default()` gives linear
/// scales, `Rceil` MX scales, the LightX2V NVFP4 recipe with the tensor's own amax,
/// row-major data, an error on NaN/Inf, all cores and the fastest SIMD path. The same
/// choices give the same bytes on every backend; `single_threaded` and `simd` steer the
/// CPU backend only.
///
/// ```
/// use blockscale_formats::{NonFinite, QuantizeOptions, ScaleLayout, ScaleRule};
/// let opts = QuantizeOptions::default()
///     .with_scale_layout(ScaleLayout::Swizzled128x4)
///     .with_scale_rule(ScaleRule::Floor)
///     .with_non_finite(NonFinite::Poison);
/// assert_eq!(opts.scale_layout, ScaleLayout::Swizzled128x4);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct QuantizeOptions {
    /// Layout of the output scales (NVFP4 and MX only may be swizzled).
    pub scale_layout: ScaleLayout,
    /// UE8M0 scale rule of the MX schemes.
    pub scale_rule: ScaleRule,
    /// NVFP4 block recipe.
    pub nvfp4_recipe: NvFp4Recipe,
    /// NVFP4 per-tensor scale.
    pub global_scale: GlobalScaleSource,
    /// Layout of the packed data (block-interleaved for 4-bit schemes with K % 32 == 0).
    pub data_layout: DataLayout,
    /// NaN / ±Inf handling. On the cuda backend `Error` reads a flag back after the
    /// kernel (a stream synchronisation); `Poison` does not.
    pub non_finite: NonFinite,
    /// CPU backend: use one thread instead of rayon's pool.
    pub single_threaded: bool,
    /// CPU backend: implementation choice.
    pub simd: Simd,
}

crate::setters!(QuantizeOptions {
    with_scale_layout(scale_layout: ScaleLayout),
    with_scale_rule(scale_rule: ScaleRule),
    with_nvfp4_recipe(nvfp4_recipe: NvFp4Recipe),
    with_global_scale(global_scale: GlobalScaleSource),
    with_data_layout(data_layout: DataLayout),
    with_non_finite(non_finite: NonFinite),
    with_single_thread(single_threaded: bool),
    with_simd(simd: Simd),
});

/// Builder-style setters, `fn with_x(self, field: T) -> Self`, one per listed field:
/// the options structs of every crate use them.
#[doc(hidden)]
#[macro_export]
macro_rules! setters {
    ($Type:ident { $($name:ident($field:ident: $T:ty)),* $(,)? }) => {
        impl $Type {
            $(
                #[doc = concat!("Sets [`Self::", stringify!($field), "`].")]
                pub fn $name(mut self, $field: $T) -> Self {
                    self.$field = $field;
                    self
                }
            )*
        }
    };
}
