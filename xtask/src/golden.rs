//! `cargo xtask golden [--full] [--seed N] [--out DIR]`: writes the golden files from
//! the CPU reference.
//!
//! Deterministic: every value comes from a splitmix64 stream
//! ([`blockscale_formats::rng::SplitMix64`]) seeded with `--seed`
//! (default [`SEED`]) and the case's index, so the same seed and blockscale version
//! give the same bytes. The committed set (`tests/golden/`, under 20 MB) has, per
//! scheme, inputs in f32 (130 rows: not a multiple of 128; 7 scale columns: not a
//! multiple of 4), f16 and bf16 (33 rows), one row of K = 8192, and NaN/Inf poisoned
//! blocks; NVFP4 adds a saturating per-tensor scale and TransformerEngine's recipe,
//! MXFP4 the other UE8M0 rules. Blocks are drawn from adversarial patterns: all zero,
//! one huge value, subnormals, exact ties of the element grid, values at the element
//! maximum, near f32's maximum, and plain bell-shaped data. GEMM cases cover every
//! quantized pair and four weight-only ones, integer-friendly ("exact": any correct
//! kernel must match bit for bit) and random (with alpha, bias and an activation).
//! `--full` writes larger shapes to `target/golden-full/` (not committed).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use blockscale_cpu::{
    Activation, Epilogue, GemmOptions, QuantizeOptions, gemm, gemm_reference, gemm_weight_only,
    gemm_weight_only_reference, quantize_slice,
};
use blockscale_formats::for_float_values;
use blockscale_formats::rng::SplitMix64;
use blockscale_formats::{
    DataLayout, FloatValues, Fp8Tile, GlobalScale, GlobalScaleSource, NonFinite, NvFp4Recipe, QuantizedMatrix,
    ScaleLayout, ScaleRule, Scheme,
};
use blockscale_golden::Writer;
use blockscale_golden::case;
use blockscale_golden::verify::activation_name;
use half::{bf16, f16};
use ndarray::ArrayView2;

use crate::util;

/// The default seed.
pub const SEED: u64 = 0x5eed_b10c;

/// +1 or -1, by the low bit.
fn sign(rng: &mut SplitMix64) -> f32 {
    if rng.next_u64() & 1 == 0 { 1.0 } else { -1.0 }
}

/// Bell-shaped in (-1, 1).
fn bell(rng: &mut SplitMix64) -> f32 {
    rng.unit_f32() + rng.unit_f32() - 1.0
}

/// The element grid's midpoints (ties) and maximum, at scale 1.
fn grid(scheme: Scheme) -> (Vec<f32>, f32) {
    let table: Vec<f32> = if scheme.element() == blockscale_formats::ElementFormat::Int4 {
        (0..=7).map(|v| v as f32).collect()
    } else {
        let mut t: Vec<f32> = scheme.element().table().iter().copied().filter(|v| v.is_finite() && *v >= 0.0).collect();
        t.sort_by(f32::total_cmp);
        t.dedup();
        t
    };
    let ties = table.windows(2).map(|w| (w[0] + w[1]) / 2.0).collect();
    (ties, *table.last().unwrap_or(&1.0))
}

/// Adversarial rows: each block of `block` values gets one pattern.
fn adversarial(rng: &mut SplitMix64, rows: usize, k: usize, scheme: Scheme, dtype: &str) -> Vec<f32> {
    // The largest magnitude the input type holds comfortably.
    let top = if dtype == "f16" { 6.0e4 } else { 3.0e38 };
    let block = scheme.block_size();
    let (ties, max) = grid(scheme);
    let mut x = vec![0f32; rows * k];
    for (b, blk) in x.chunks_mut(block).enumerate() {
        let pattern = if b < 6 { b } else { rng.below(10) };
        match pattern {
            0 => {} // all zero
            1 => {
                // one huge value among small ones
                blk.iter_mut().for_each(|v| *v = bell(rng) * 0.01);
                blk[rng.below(block)] = 1e4 * sign(rng);
            }
            2 => blk.iter_mut().for_each(|v| *v = bell(rng) * 1e-39), // f32 subnormals
            3 => {
                // ties of the element grid at block scale 1 (amax pinned to the maximum)
                blk.iter_mut().for_each(|v| *v = ties[rng.below(ties.len())] * sign(rng));
                blk[rng.below(block)] = max;
            }
            4 => {
                // at the maximum, and a mix of the maximum's neighbourhood
                blk.iter_mut().for_each(|v| *v = max * (1.0 - 0.01 * rng.unit_f32()) * sign(rng));
                blk[0] = max;
            }
            5 => blk.iter_mut().for_each(|v| *v = bell(rng) * top), // near the input type's maximum
            6 => blk.iter_mut().for_each(|v| *v = bell(rng) * 1e-6), // f16 subnormals
            _ => {
                let s = 2f32.powi(rng.below(16) as i32 - 8);
                blk.iter_mut().for_each(|v| *v = bell(rng) * s);
            }
        }
    }
    x
}

fn values(dtype: &str, x: &[f32]) -> FloatValues<'static> {
    match dtype {
        "f16" => FloatValues::F16(x.iter().map(|&v| f16::from_f32(v)).collect()),
        "bf16" => FloatValues::Bf16(x.iter().map(|&v| bf16::from_f32(v)).collect()),
        _ => FloatValues::F32(x.to_vec().into()),
    }
}

fn quantize_values(
    v: &FloatValues<'_>,
    rows: usize,
    k: usize,
    scheme: Scheme,
    o: &QuantizeOptions,
) -> Result<QuantizedMatrix> {
    Ok(for_float_values!(v, |x| quantize_slice(&x[..], rows, k, scheme, o))?)
}

struct QuantCase {
    name: String,
    scheme: Scheme,
    rows: usize,
    k: usize,
    dtype: &'static str,
    rule: ScaleRule,
    recipe: NvFp4Recipe,
    global: Option<f32>, // given amax for NVFP4; None = tensor amax
    poison: bool,
}

/// The generator state of case `index`, and its metadata.
fn case_rng(w: &mut Writer, seed: u64, index: u64) -> SplitMix64 {
    w.meta("generator", "cargo xtask golden (xtask/src/golden.rs, splitmix64)")
        .meta("seed", format!("{seed:#x}"))
        .meta("case_index", index.to_string());
    SplitMix64::new(seed ^ index.wrapping_mul(0x9e37_79b9))
}

fn write_quant(dir: &Path, c: &QuantCase, seed: u64, index: u64) -> Result<()> {
    let mut w = Writer::new();
    let rng = &mut case_rng(&mut w, seed, index);
    let mut x = adversarial(rng, c.rows, c.k, c.scheme, c.dtype);
    if c.poison {
        let bs = c.scheme.block_size();
        x[1] = f32::NAN;
        x[2 * bs + 3] = f32::INFINITY;
        x[(c.rows - 1) * c.k + 5] = f32::NEG_INFINITY;
    }
    let input = values(c.dtype, &x);
    let mut o = QuantizeOptions::default().with_scale_rule(c.rule).with_non_finite(if c.poison {
        NonFinite::Poison
    } else {
        NonFinite::Error
    });
    if c.scheme == Scheme::NvFp4 {
        o = o.with_nvfp4_recipe(c.recipe);
        match c.global {
            Some(amax) => {
                let g = GlobalScale::from_amax(amax)?;
                o = o.with_global_scale(GlobalScaleSource::Given(g));
                w.meta("global_source", "given").meta_f32("global_given", g.encode());
            }
            None => {
                w.meta("global_source", "tensor-amax");
            }
        }
    }
    let q = quantize_values(&input, c.rows, c.k, c.scheme, &o)?;
    let dequant = blockscale_cpu::dequantize::<f32>(&q);
    w.meta("case", c.name.clone())
        .meta("kind", "quantize")
        .meta("input_dtype", c.dtype)
        .meta("scale_rule", c.rule.name())
        .meta("nvfp4_recipe", case::recipe_name(c.recipe))
        .meta("non_finite", case::non_finite_name(o.non_finite))
        .tensor("input", case::dtype_of(input.kind()), &[c.rows, c.k], input.to_le_bytes());
    case::put_matrix(&mut w, "q", &q);
    if c.scheme.supports_layout(ScaleLayout::Swizzled128x4) {
        let q2 = quantize_values(&input, c.rows, c.k, c.scheme, &o.with_scale_layout(ScaleLayout::Swizzled128x4))?;
        let shape = case::scale_shape(q2.shape(), ScaleLayout::Swizzled128x4);
        w.tensor("scales_swizzled", case::scale_dtype(c.scheme), &shape, case::scale_bytes(q2.scales()));
    }
    w.f32s("dequant", &[c.rows, c.k], dequant.as_slice().expect("standard layout"));
    w.write(&dir.join(format!("{}.safetensors", c.name)))?;
    Ok(())
}

fn short(s: Scheme) -> String {
    s.name().replace("fp8-block-", "fp8-")
}

fn quant_cases(full: bool) -> Vec<QuantCase> {
    let mut v = Vec::new();
    let base = |name: String, scheme, rows, k, dtype| QuantCase {
        name,
        scheme,
        rows,
        k,
        dtype,
        rule: ScaleRule::Rceil,
        recipe: NvFp4Recipe::LightX2V,
        global: None,
        poison: false,
    };
    for scheme in Scheme::ALL {
        let bs = scheme.block_size();
        let cols = if matches!(scheme, Scheme::Fp8Block(_)) { 3 } else { 7 };
        let s = short(scheme);
        let (big_rows, big_k) = if full { (1024, 4096) } else { (130, cols * bs) };
        v.push(base(format!("q-{s}-f32-ragged"), scheme, big_rows, big_k, "f32"));
        v.push(base(format!("q-{s}-f16-small"), scheme, 33, cols * bs, "f16"));
        v.push(base(format!("q-{s}-bf16-small"), scheme, 33, cols * bs, "bf16"));
        v.push(base(format!("q-{s}-f32-m1-longk"), scheme, 1, 8192, "f32"));
        let mut p = base(format!("q-{s}-bf16-poison"), scheme, 5, cols * bs, "bf16");
        p.poison = true;
        v.push(p);
    }
    let mut sat = base("q-nvfp4-f32-saturate".into(), Scheme::NvFp4, 64, 256, "f32");
    sat.global = Some(0.5); // far below the data's amax: block scales saturate at 448
    v.push(sat);
    let mut given = base("q-nvfp4-bf16-given".into(), Scheme::NvFp4, 64, 256, "bf16");
    given.global = Some(3.0e38);
    v.push(given);
    let mut te = base("q-nvfp4-f32-transformer-engine".into(), Scheme::NvFp4, 64, 256, "f32");
    te.recipe = NvFp4Recipe::TransformerEngine;
    v.push(te);
    for rule in [ScaleRule::Floor, ScaleRule::Ceil, ScaleRule::Even] {
        for scheme in [Scheme::MxFp4, Scheme::MxFp8E4M3] {
            let mut c = base(format!("q-{}-f32-rule-{}", short(scheme), rule.name()), scheme, 33, 224, "f32");
            c.rule = rule;
            v.push(c);
        }
    }
    v
}

/// Integer-friendly data: multiples of 1/2 in [-4, 4], with the scheme's element maximum
/// pinned once per block so that NVFP4 (per-tensor encode 1) and INT4 get block scales
/// of exactly 1 (MX scales are powers of two anyway).
///
/// FP8 block data is multiples of 1/2 in [-2, 2] with 3.5 pinned instead (scales of
/// exactly 2^-7, codes multiples of 64): products of codes are then multiples of 2^12
/// and a block's sum stays below 2^24, which Hopper's FP8 tensor cores, whose
/// accumulator keeps only about 13 bits below its largest term, still add exactly
/// (docs/KERNELS.md). With 448 pinned they round.
fn friendly(rng: &mut SplitMix64, rows: usize, k: usize, scheme: Scheme) -> Vec<f32> {
    if let Scheme::Fp8Block(_) = scheme {
        let mut x: Vec<f32> = (0..rows * k).map(|_| (rng.below(9) as f32 - 4.0) * 0.5).collect();
        for blk in x.chunks_mut(128) {
            blk[rng.below(128)] = 3.5;
        }
        return x;
    }
    let (_, max) = grid(scheme);
    let bs = scheme.block_size();
    let mut x: Vec<f32> = (0..rows * k).map(|_| (rng.below(17) as f32 - 8.0) * 0.5).collect();
    if matches!(scheme, Scheme::NvFp4 | Scheme::Int4G32 | Scheme::Int4G128) {
        for blk in x.chunks_mut(bs) {
            blk[rng.below(bs)] = max;
        }
    }
    x
}

struct GemmCase {
    name: String,
    a: Option<Scheme>, // None: weight-only with activations of `x_dtype`
    x_dtype: &'static str,
    /// A decode case (kind "gemv": weight-only, M <= 16, bf16 or f16 activations).
    gemv: bool,
    /// Weights in the block-interleaved data layout (4-bit schemes).
    interleaved: bool,
    b: Scheme,
    m: usize,
    n: usize,
    k: usize,
    exact: bool,
    activation: Activation,
}

fn quant_operand(
    x: &[f32],
    rows: usize,
    k: usize,
    scheme: Scheme,
    (layout, interleaved): (ScaleLayout, bool),
    exact: bool,
) -> Result<QuantizedMatrix> {
    let layout = if scheme.supports_layout(layout) { layout } else { ScaleLayout::Linear };
    let mut o = QuantizeOptions::default().with_scale_layout(layout);
    if interleaved {
        o = o.with_data_layout(DataLayout::BlockInterleaved);
    }
    if scheme == Scheme::NvFp4 {
        let g = if exact {
            GlobalScale::from_encode(1.0)?
        } else {
            GlobalScale::from_amax(x.iter().fold(0f32, |m, v| m.max(v.abs())))?
        };
        o = o.with_global_scale(GlobalScaleSource::Given(g));
    }
    Ok(quantize_slice(x, rows, k, scheme, &o)?)
}

fn write_gemm(dir: &Path, c: &GemmCase, seed: u64, index: u64) -> Result<()> {
    let mut w = Writer::new();
    let rng = &mut case_rng(&mut w, seed, index);
    let data = |rng: &mut SplitMix64, rows, scheme| {
        if c.exact {
            friendly(rng, rows, c.k, scheme)
        } else {
            (0..rows * c.k).map(|_| bell(rng) * 2f32.powi(rng.below(4) as i32)).collect()
        }
    };
    let bx = data(rng, c.n, c.b);
    let b = quant_operand(&bx, c.n, c.k, c.b, (ScaleLayout::Swizzled128x4, c.interleaved), c.exact)?;
    let bias: Option<Vec<f32>> = (!c.exact).then(|| (0..c.n).map(|_| bell(rng)).collect());
    let alpha = (!c.exact).then_some(0.75f32);
    let mut epi = Epilogue { alpha, ..Default::default() }.with_activation(c.activation);
    if let Some(bias) = &bias {
        epi = epi.with_bias(bias);
    }
    w.meta("case", c.name.clone())
        .meta("kind", if c.gemv { "gemv" } else { "gemm" })
        .meta("m", c.m.to_string())
        .meta("activation", activation_name(c.activation))
        .meta("exact", c.exact.to_string());
    match alpha {
        Some(a) => w.meta_f32("alpha", a),
        None => w.meta("alpha", "auto"),
    };
    let (reference, fast) = match c.a {
        Some(sa) => {
            let ax = data(rng, c.m, sa);
            let a = quant_operand(&ax, c.m, c.k, sa, (ScaleLayout::Linear, false), c.exact)?;
            case::put_matrix(&mut w, "a", &a);
            (gemm_reference::<f32>(&a, &b, &epi)?, gemm::<f32>(&a, &b, &epi, &GemmOptions::default())?)
        }
        None => {
            let xs = values(
                c.x_dtype,
                &if c.exact { friendly(rng, c.m, c.k, Scheme::MxFp8E4M3) } else { data(rng, c.m, c.b) },
            );
            w.tensor("x", case::dtype_of(xs.kind()), &[c.m, c.k], xs.to_le_bytes());
            macro_rules! wo {
                ($v:expr) => {{
                    let view = ArrayView2::from_shape((c.m, c.k), &$v[..])?;
                    (
                        gemm_weight_only_reference::<_, f32>(view, &b, &epi)?,
                        gemm_weight_only::<_, f32>(view, &b, &epi, &GemmOptions::default())?,
                    )
                }};
            }
            for_float_values!(&xs, |v| wo!(v))
        }
    };
    if c.exact && reference.iter().zip(fast.iter()).any(|(r, f)| r.to_bits() != f.to_bits()) {
        bail!("case {}: the fast path differs from the reference on data meant to be exact", c.name);
    }
    case::put_matrix(&mut w, "b", &b);
    if let Some(bias) = &bias {
        w.f32s("bias", &[c.n], bias);
    }
    w.f32s("out", &[c.m, c.n], reference.as_slice().expect("standard layout"));
    w.write(&dir.join(format!("{}.safetensors", c.name)))?;
    Ok(())
}

fn gemm_cases(full: bool) -> Vec<GemmCase> {
    let pairs = [
        (Scheme::NvFp4, Scheme::NvFp4),
        (Scheme::MxFp4, Scheme::MxFp4),
        (Scheme::MxFp8E4M3, Scheme::MxFp8E4M3),
        (Scheme::MxFp8E5M2, Scheme::MxFp8E5M2),
        (Scheme::MxFp6E2M3, Scheme::MxFp8E4M3),
        (Scheme::MxFp6E3M2, Scheme::MxFp8E5M2),
        (Scheme::Fp8Block(Fp8Tile::Row1x128), Scheme::Fp8Block(Fp8Tile::Tile128x128)),
    ];
    let acts = [Activation::Silu, Activation::GeluTanh, Activation::GeluErf, Activation::Identity];
    let (m, n) = if full { (512, 768) } else { (33, 70) };
    let mut v = Vec::new();
    for (i, (a, b)) in pairs.into_iter().enumerate() {
        let k = if matches!(a, Scheme::Fp8Block(_)) { 384 } else { 224 };
        for exact in [true, false] {
            let kind = if exact { "exact" } else { "random" };
            v.push(GemmCase {
                name: format!("gemm-{}-x-{}-{kind}", short(a), short(b)),
                a: Some(a),
                x_dtype: "",
                gemv: false,
                interleaved: false,
                b,
                m,
                n,
                k,
                exact,
                activation: if exact { Activation::Identity } else { acts[i % acts.len()] },
            });
        }
    }
    let wo = [("bf16", Scheme::NvFp4), ("f16", Scheme::MxFp4), ("f32", Scheme::Int4G32), ("bf16", Scheme::MxFp8E4M3)];
    for (i, (dtype, b)) in wo.into_iter().enumerate() {
        for exact in [true, false] {
            let kind = if exact { "exact" } else { "random" };
            v.push(GemmCase {
                name: format!("gemm-{dtype}-x-{}-{kind}", short(b)),
                a: None,
                x_dtype: dtype,
                gemv: false,
                interleaved: false,
                b,
                m: if i == 0 { 1 } else { 17 },
                n: if i == 0 { 130 } else { n },
                k: if i == 0 { 2048 } else { 224 },
                exact,
                activation: if exact { Activation::Identity } else { acts[(i + 1) % acts.len()] },
            });
        }
    }
    v
}

/// The decode cases: every weight scheme and layout, M 1, 4 and 16 in turn, bf16 and f16
/// activations, one exact case (identity) and one random case (bias, alpha and each
/// activation in turn) per scheme.
fn gemv_cases(full: bool) -> Vec<GemmCase> {
    let schemes = [
        (Scheme::NvFp4, false),
        (Scheme::MxFp4, false),
        (Scheme::MxFp6E2M3, false),
        (Scheme::MxFp6E3M2, false),
        (Scheme::MxFp8E4M3, false),
        (Scheme::MxFp8E5M2, false),
        (Scheme::Fp8Block(Fp8Tile::Tile128x128), false),
        (Scheme::Int4G32, false),
        (Scheme::Int4G32, true),
        (Scheme::Int4G128, false),
    ];
    let acts = [Activation::Silu, Activation::GeluTanh, Activation::GeluErf, Activation::Identity];
    let mut v = Vec::new();
    for (i, (b, interleaved)) in schemes.into_iter().enumerate() {
        let dtype = if i % 2 == 0 { "bf16" } else { "f16" };
        for exact in [true, false] {
            let kind = if exact { "exact" } else { "random" };
            v.push(GemmCase {
                name: format!("gemv-{dtype}-x-{}{}-{kind}", short(b), if interleaved { "-interleaved" } else { "" }),
                a: None,
                x_dtype: dtype,
                gemv: true,
                interleaved,
                b,
                m: [1, 4, 16][(i + usize::from(!exact)) % 3],
                n: if full { 3000 } else { 200 },
                // Long enough for the split-K path at these few rows.
                k: if full { 8192 } else { 1536 },
                exact,
                activation: if exact { Activation::Identity } else { acts[i % acts.len()] },
            });
        }
    }
    v
}

pub fn run(full: bool, seed: u64, out: Option<PathBuf>) -> Result<()> {
    let dir = out.unwrap_or_else(|| {
        if full { util::target_dir().join("golden-full") } else { util::root().join("tests/golden") }
    });
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    // Old cases would be verified too: clear the directory's golden files first.
    for e in std::fs::read_dir(&dir)? {
        let p = e?.path();
        if p.extension().is_some_and(|x| x == "safetensors") {
            std::fs::remove_file(&p)?;
        }
    }
    let (quant, gemms, gemvs) = (quant_cases(full), gemm_cases(full), gemv_cases(full));
    // Case i draws from splitmix64 seeded with `seed ^ (i * 0x9e3779b9)` (GEMM cases
    // count from 1000, GEMV cases from 2000); both numbers are in each file's metadata.
    for (i, c) in quant.iter().enumerate() {
        write_quant(&dir, c, seed, i as u64).with_context(|| format!("case {}", c.name))?;
    }
    for (i, c) in gemms.iter().enumerate() {
        write_gemm(&dir, c, seed, 1000 + i as u64).with_context(|| format!("case {}", c.name))?;
    }
    for (i, c) in gemvs.iter().enumerate() {
        write_gemm(&dir, c, seed, 2000 + i as u64).with_context(|| format!("case {}", c.name))?;
    }
    let bytes: u64 = std::fs::read_dir(&dir)?.filter_map(|e| e.ok()?.metadata().ok()).map(|m| m.len()).sum();
    println!(
        "{} golden files, {:.1} MB, in {} (seed {seed:#x})",
        quant.len() + gemms.len() + gemvs.len(),
        bytes as f64 / 1e6,
        dir.display()
    );
    if !full && bytes > 20_000_000 {
        bail!("the committed golden set must stay under 20 MB");
    }
    Ok(())
}
