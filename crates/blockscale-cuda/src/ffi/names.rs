//! The kernels' names: one constructor per kernel family, each giving the symbol
//! (`{op}_{scheme}{variant}`, as `extern "C"` in `kernels/`) as a [`KernelName<P>`] whose
//! `P` is the parameter list that family takes. [`Device::function`](crate::Device) loads
//! a name as a [`Kernel<P>`](super::launch::Kernel), which
//! [`launch`](super::launch::launch) queues only with a `P`: a kernel cannot be handed
//! another kernel's parameters.

use std::borrow::Cow;
use std::marker::PhantomData;

use blockscale_formats::Scheme;

use super::params::{
    AmaxParams, CopyParams, DequantParams, FgemmArgs, Fp8ScaleParams, GemvParams, PgemmParams, PgemvParams,
    QuantParams, SplitParams, TilingArgs,
};

/// The name of a kernel that takes the parameters `P`.
pub(crate) struct KernelName<P> {
    name: Cow<'static, str>,
    params: PhantomData<fn(&P)>,
}

impl<P> KernelName<P> {
    fn new(name: impl Into<Cow<'static, str>>) -> Self {
        Self { name: name.into(), params: PhantomData }
    }

    /// The symbol.
    pub(crate) fn as_str(&self) -> &str {
        &self.name
    }

    /// The fatbin module the kernel is in, the one named after its operation: quantize_*
    /// and amax_* in quantize.fatbin, dequantize_* in dequantize.fatbin, gemm_* (operand
    /// preparation) in prepare.fatbin, gemv_* in gemv.fatbin, pgemv_* in prepared.fatbin,
    /// pgemm_* in pgemm.fatbin, wgemm_* in wgemm.fatbin, fgemm_* in fgemm.fatbin.
    pub(crate) fn module(&self) -> &'static str {
        let name = self.as_str();
        if name.starts_with("dequantize_") {
            "dequantize"
        } else if name.starts_with("gemm_") {
            "prepare"
        } else if name.starts_with("gemv_") {
            "gemv"
        } else if name.starts_with("pgemv_") {
            "prepared"
        } else if name.starts_with("pgemm_") {
            "pgemm"
        } else if name.starts_with("wgemm_") {
            "wgemm"
        } else if name.starts_with("fgemm_") {
            "fgemm"
        } else {
            "quantize"
        }
    }
}

/// The kernel-name fragment of a scheme: its name ([`Scheme::name`]) as a C identifier
/// (`mxfp6-e2m3` -> `mxfp6_e2m3`), written straight into the name being formatted.
fn scheme_name(scheme: Scheme) -> SchemeIdent {
    SchemeIdent(scheme.name())
}

/// A scheme's name with `-` written as `_`.
struct SchemeIdent(&'static str);

impl std::fmt::Display for SchemeIdent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, part) in self.0.split('-').enumerate() {
            if i > 0 {
                f.write_str("_")?;
            }
            f.write_str(part)?;
        }
        Ok(())
    }
}

/// The suffix of the kernels' f16-activation variants.
fn f16_suffix(f16: bool) -> &'static str {
    if f16 { "_f16" } else { "" }
}

impl KernelName<QuantParams> {
    /// `quantize_{scheme}_{input}`: quantizes `input` elements (`f32`, `f16`, `bf16`).
    pub(crate) fn quantize(scheme: Scheme, input: &str) -> Self {
        Self::new(format!("quantize_{}_{input}", scheme_name(scheme)))
    }
}

impl KernelName<AmaxParams> {
    /// `amax_{input}`: the NVFP4 tensor amax of `input` elements.
    pub(crate) fn amax(input: &str) -> Self {
        Self::new(format!("amax_{input}"))
    }
}

impl KernelName<DequantParams> {
    /// `dequantize_{scheme}_{output}`: writes `output` elements (`f32`, `f16`, `bf16`).
    pub(crate) fn dequantize(scheme: Scheme, output: &str) -> Self {
        Self::new(format!("dequantize_{}_{output}", scheme_name(scheme)))
    }
}

impl KernelName<SplitParams> {
    /// `gemm_split_{input}`: activations as exact bf16 pieces.
    pub(crate) fn split(input: &str) -> Self {
        Self::new(format!("gemm_split_{input}"))
    }
}

impl KernelName<CopyParams> {
    /// `gemm_copy_out_{element}`: a staged GEMM output copied to the caller's.
    pub(crate) fn copy_out(element: &str) -> Self {
        Self::new(format!("gemm_copy_out_{element}"))
    }
}

impl KernelName<Fp8ScaleParams> {
    /// `gemm_fp8_scales`: FP8 activation scales rewritten one per row.
    pub(crate) fn fp8_scales() -> Self {
        Self::new("gemm_fp8_scales")
    }
}

impl KernelName<GemvParams> {
    /// The general GEMV: `gemv_{scheme}` (M <= 8, bf16), `_f16` (M <= 8, f16) or `_m16`
    /// (M <= 16, either); both FP8 block tilings share `gemv_fp8_block`.
    pub(crate) fn gemv(scheme: Scheme, m: usize, f16: bool) -> Self {
        let variant = if m > 8 { "_m16" } else { f16_suffix(f16) };
        Self::new(match scheme {
            Scheme::Fp8Block(_) => format!("gemv_fp8_block{variant}"),
            s => format!("gemv_{}{variant}", scheme_name(s)),
        })
    }

    /// `gemv_reduce`: the general GEMV's split-K reduction.
    pub(crate) fn gemv_reduce() -> Self {
        Self::new("gemv_reduce")
    }
}

impl KernelName<PgemvParams> {
    /// The GEMV on prepared weights: `pgemv_{scheme}` (M <= 8, bf16), `_f16` (M <= 8,
    /// f16), `_m16` / `_m16_f16` (M <= 16).
    pub(crate) fn pgemv(scheme: Scheme, m: usize, f16: bool) -> Self {
        let rows = if m > 8 { "_m16" } else { "" };
        Self::new(format!("pgemv_{}{rows}{}", scheme_name(scheme), f16_suffix(f16)))
    }
}

impl KernelName<PgemmParams> {
    /// The GEMM on prepared weights (`mma.sync`): `pgemm_{scheme}`, `_f16`.
    pub(crate) fn pgemm(scheme: Scheme, f16: bool) -> Self {
        Self::new(format!("pgemm_{}{}", scheme_name(scheme), f16_suffix(f16)))
    }

    /// `pgemm_reduce`: pgemm's split-K reduction.
    pub(crate) fn pgemm_reduce() -> Self {
        Self::new("pgemm_reduce")
    }

    /// `pgemm_dequant_{scheme}`: prepared weights decoded to bf16 rows.
    pub(crate) fn pgemm_dequant(scheme: Scheme) -> Self {
        Self::new(format!("pgemm_dequant_{}", scheme_name(scheme)))
    }

    /// The Hopper wgmma GEMM on prepared weights: `wgemm_{scheme}` (bf16 activations),
    /// `_f16`.
    pub(crate) fn wgemm(scheme: Scheme, f16: bool) -> Self {
        Self::new(format!("wgemm_{}{}", scheme_name(scheme), f16_suffix(f16)))
    }

    /// The Hopper wgmma GEMM on wide tiles (256 activation rows; the pre-scaled schemes,
    /// bf16 activations): `wgemm_{scheme}_wide`.
    pub(crate) fn wgemm_wide(scheme: Scheme) -> Self {
        Self::new(format!("wgemm_{}_wide", scheme_name(scheme)))
    }

    /// The kernel that writes bf16 or f16 activations as the wgmma kernel's tiles, in the
    /// order of `scheme`'s fragments: INT4-G32's half map (32-element blocks inside a
    /// slab) has its own, `wgemm_acts_half`; the rest share `wgemm_acts`.
    pub(crate) fn wgemm_acts(scheme: Scheme) -> Self {
        Self::new(if scheme == Scheme::Int4G32 { "wgemm_acts_half" } else { "wgemm_acts" })
    }
}

impl KernelName<TilingArgs> {
    /// `wgemm_acts_{scheme}`: quantized activations of `scheme` (NVFP4 or MX) decoded into
    /// the wgmma kernel's tiles.
    pub(crate) fn wgemm_acts_quantized(scheme: Scheme) -> Self {
        Self::new(format!("wgemm_acts_{}", scheme_name(scheme)))
    }
}

impl KernelName<FgemmArgs> {
    /// The FP8 wgmma GEMM: `fgemm_fp8_block` (`mx` `None`) or `fgemm_mx_{a}_{b}` (`mx`:
    /// whether A's, B's elements are E5M2, else E4M3), with `_m64` for tiles of 64
    /// activation rows.
    pub(crate) fn fgemm(mx: Option<(bool, bool)>, m64: bool) -> Self {
        let element = |e5m2: bool| if e5m2 { "e5m2" } else { "e4m3" };
        let pair = match mx {
            None => "fp8_block".to_string(),
            Some((a, b)) => format!("mx_{}_{}", element(a), element(b)),
        };
        Self::new(format!("fgemm_{pair}{}", if m64 { "_m64" } else { "" }))
    }
}

#[cfg(test)]
mod tests {
    use blockscale_formats::Fp8Tile;

    use super::*;

    #[test]
    fn names_are_the_kernels_symbols() {
        let fp8_row = Scheme::Fp8Block(Fp8Tile::Row1x128);
        let fp8_tile = Scheme::Fp8Block(Fp8Tile::Tile128x128);
        assert_eq!(KernelName::quantize(Scheme::MxFp6E2M3, "bf16").as_str(), "quantize_mxfp6_e2m3_bf16");
        assert_eq!(KernelName::quantize(fp8_tile, "f32").as_str(), "quantize_fp8_block_128x128_f32");
        assert_eq!(KernelName::amax("f16").as_str(), "amax_f16");
        assert_eq!(KernelName::dequantize(Scheme::NvFp4, "f32").as_str(), "dequantize_nvfp4_f32");
        assert_eq!(KernelName::split("f16").as_str(), "gemm_split_f16");
        assert_eq!(KernelName::copy_out("bf16").as_str(), "gemm_copy_out_bf16");
        assert_eq!(KernelName::fp8_scales().as_str(), "gemm_fp8_scales");

        assert_eq!(KernelName::gemv(Scheme::NvFp4, 1, false).as_str(), "gemv_nvfp4");
        assert_eq!(KernelName::gemv(Scheme::MxFp8E4M3, 8, true).as_str(), "gemv_mxfp8_e4m3_f16");
        assert_eq!(KernelName::gemv(fp8_row, 9, true).as_str(), "gemv_fp8_block_m16");
        assert_eq!(KernelName::gemv(Scheme::Int4G32, 16, false).as_str(), "gemv_int4_g32_m16");
        assert_eq!(KernelName::gemv_reduce().as_str(), "gemv_reduce");

        assert_eq!(KernelName::pgemv(Scheme::NvFp4, 1, false).as_str(), "pgemv_nvfp4");
        assert_eq!(KernelName::pgemv(Scheme::MxFp8E4M3, 8, true).as_str(), "pgemv_mxfp8_e4m3_f16");
        assert_eq!(KernelName::pgemv(fp8_row, 9, true).as_str(), "pgemv_fp8_block_1x128_m16_f16");
        assert_eq!(KernelName::pgemv(Scheme::Int4G32, 16, false).as_str(), "pgemv_int4_g32_m16");

        assert_eq!(KernelName::pgemm(Scheme::NvFp4, false).as_str(), "pgemm_nvfp4");
        assert_eq!(KernelName::pgemm(Scheme::Int4G32, true).as_str(), "pgemm_int4_g32_f16");
        assert_eq!(KernelName::pgemm(fp8_row, false).as_str(), "pgemm_fp8_block_1x128");
        assert_eq!(KernelName::pgemm_reduce().as_str(), "pgemm_reduce");
        assert_eq!(KernelName::pgemm_dequant(fp8_tile).as_str(), "pgemm_dequant_fp8_block_128x128");

        assert_eq!(KernelName::wgemm(Scheme::MxFp4, false).as_str(), "wgemm_mxfp4");
        assert_eq!(KernelName::wgemm(Scheme::Int4G128, true).as_str(), "wgemm_int4_g128_f16");
        assert_eq!(KernelName::wgemm(fp8_row, false).as_str(), "wgemm_fp8_block_1x128");
        assert_eq!(KernelName::wgemm(Scheme::Int4G32, false).as_str(), "wgemm_int4_g32");
        assert_eq!(KernelName::wgemm_wide(Scheme::MxFp6E2M3).as_str(), "wgemm_mxfp6_e2m3_wide");
        assert_eq!(KernelName::wgemm_acts(Scheme::Int4G32).as_str(), "wgemm_acts_half");
        assert_eq!(KernelName::wgemm_acts(Scheme::Int4G128).as_str(), "wgemm_acts");
        assert_eq!(KernelName::wgemm_acts_quantized(Scheme::MxFp8E4M3).as_str(), "wgemm_acts_mxfp8_e4m3");

        assert_eq!(KernelName::fgemm(None, true).as_str(), "fgemm_fp8_block_m64");
        assert_eq!(KernelName::fgemm(None, false).as_str(), "fgemm_fp8_block");
        assert_eq!(KernelName::fgemm(Some((false, true)), true).as_str(), "fgemm_mx_e4m3_e5m2_m64");
        assert_eq!(KernelName::fgemm(Some((false, true)), false).as_str(), "fgemm_mx_e4m3_e5m2");
        assert_eq!(KernelName::fgemm(Some((true, false)), false).as_str(), "fgemm_mx_e5m2_e4m3");

        // Every scheme's fragment, as quantize.cu instantiates the kernels.
        let symbols = ["nvfp4", "mxfp4", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3", "mxfp8_e5m2"].into_iter().chain([
            "fp8_block_1x128",
            "fp8_block_128x128",
            "int4_g32",
            "int4_g128",
        ]);
        for (scheme, symbol) in Scheme::ALL.into_iter().zip(symbols) {
            assert_eq!(KernelName::quantize(scheme, "f32").as_str(), format!("quantize_{symbol}_f32"));
        }
    }

    #[test]
    fn each_kernel_is_looked_up_in_its_operations_module() {
        assert_eq!(KernelName::quantize(Scheme::NvFp4, "f32").module(), "quantize");
        assert_eq!(KernelName::amax("bf16").module(), "quantize");
        assert_eq!(KernelName::dequantize(Scheme::NvFp4, "bf16").module(), "dequantize");
        assert_eq!(KernelName::split("f32").module(), "prepare");
        assert_eq!(KernelName::fp8_scales().module(), "prepare");
        assert_eq!(KernelName::gemv_reduce().module(), "gemv");
        assert_eq!(KernelName::pgemv(Scheme::MxFp4, 16, true).module(), "prepared");
        assert_eq!(KernelName::pgemm_dequant(Scheme::NvFp4).module(), "pgemm");
        assert_eq!(KernelName::wgemm_acts(Scheme::NvFp4).module(), "wgemm");
        assert_eq!(KernelName::wgemm_acts_quantized(Scheme::NvFp4).module(), "wgemm");
        assert_eq!(KernelName::fgemm(None, true).module(), "fgemm");
    }
}
