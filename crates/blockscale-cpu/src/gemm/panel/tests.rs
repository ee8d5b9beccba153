//! The panel layout and kernels: every code and scale found where the layout says, the
//! in-register scale decoding equal to the formats' tables on all 256 codes, the
//! AVX2 and AVX-512 VNNI kernels bit-identical to the portable one, and all within the int8
//! mode's bound of an f64 reference computed here from the row-major weights.

use blockscale_formats::rng::SplitMix64;
use blockscale_formats::{E2M1, E2M3, E4M3, ScaleFormat, UE4M3, UE8M0};
use half::f16;
use proptest::prelude::*;

use super::super::nibble::{NibbleWeights, ScaleIndex, Scales};
use super::*;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Mxfp4,
    Nvfp4,
    Int4,
    /// MXFP6 E2M3: six-bit panels.
    Mxfp6,
    /// MXFP8 E4M3: eight-bit panels, UE8M0 scales.
    Mxfp8,
    /// FP8 block: eight-bit panels, f32 scales per 128 x 128.
    Fp8Block,
}

/// Every kind.
const KINDS: [Kind; 6] = [Kind::Mxfp4, Kind::Nvfp4, Kind::Int4, Kind::Mxfp6, Kind::Mxfp8, Kind::Fp8Block];

impl Kind {
    /// What K must be a multiple of.
    fn unit(self) -> usize {
        match self {
            Kind::Nvfp4 => 16,
            Kind::Fp8Block => 128,
            _ => 32,
        }
    }

    /// E4M3 codes, one a byte.
    fn eight(self) -> bool {
        matches!(self, Kind::Mxfp8 | Kind::Fp8Block)
    }
}

/// Row-major weights of one kind, with their scales as codes or f16.
struct Weights {
    kind: Kind,
    n: usize,
    k: usize,
    data: Vec<u8>,
    codes: Vec<u8>,
    halves: Vec<f16>,
    /// FP8 block's scales, `[n / 128, k / 128]` (rounded up).
    f32s: Vec<f32>,
    lut: [f32; 256],
    layout: ScaleIndex,
}

impl Weights {
    fn new(kind: Kind, n: usize, k: usize, swizzled: bool, rng: &mut SplitMix64) -> Self {
        let block = if kind == Kind::Nvfp4 { 16 } else { 32 };
        let cols = k / block;
        let layout = if swizzled { ScaleIndex::Swizzled128x4 { cols } } else { ScaleIndex::Linear { cols } };
        let len = layout.storage_len(n);
        // Four-bit codes two per byte; six-bit ones packed four per three bytes; E4M3
        // one a byte, NaN codes left out (they have their own test).
        let bytes = match kind {
            Kind::Mxfp6 => n * k / 4 * 3,
            Kind::Mxfp8 | Kind::Fp8Block => n * k,
            _ => n * k / 2,
        };
        let data = (0..bytes)
            .map(|_| rng.next_u64() as u8)
            .map(|b| if kind.eight() && b & 0x7f == 0x7f { b - 1 } else { b })
            .collect();
        let f32s = match kind {
            Kind::Fp8Block => {
                (0..n.div_ceil(128) * k / 128).map(|_| 0.01 + 2.0 * rng.uniform_f32(-1.0, 1.0).abs()).collect()
            }
            _ => vec![],
        };
        let (codes, halves, lut) = match kind {
            Kind::Fp8Block => (vec![], vec![], [0.0; 256]),
            Kind::Mxfp4 | Kind::Mxfp6 | Kind::Mxfp8 => (
                (0..len).map(|_| 118 + (rng.next_u64() % 18) as u8).collect(),
                vec![],
                core::array::from_fn(|b| UE8M0::from_bits(b as u8).to_f32()),
            ),
            Kind::Nvfp4 => (
                (0..len).map(|_| 0x01 + (rng.next_u64() % 0x7d) as u8).collect(),
                vec![],
                core::array::from_fn(|b| UE4M3::from_bits(b as u8).to_f32()),
            ),
            Kind::Int4 => (
                vec![],
                (0..len).map(|_| f16::from_f32(0.01 + 2.0 * rng.uniform_f32(-1.0, 1.0).abs())).collect(),
                [0.0; 256],
            ),
        };
        Self { kind, n, k, data, codes, halves, f32s, lut, layout }
    }

    fn block(&self) -> usize {
        if self.kind == Kind::Nvfp4 { 16 } else { 32 }
    }

    /// Code to integer value (NaN codes 0), and the factor that makes it the element's
    /// value, from the formats' own decoding.
    fn values(&self) -> ([i32; 256], f32) {
        match self.kind {
            Kind::Int4 => (core::array::from_fn(|c| (c % 16) as i32 - 8), 1.0),
            Kind::Mxfp6 => (core::array::from_fn(|c| (E2M3::from_bits(c as u8 % 64).to_f32() * 8.0) as i32), 0.125),
            Kind::Mxfp8 | Kind::Fp8Block => {
                let v = |c: usize| E4M3::from_bits(c as u8).to_f32();
                (core::array::from_fn(|c| if v(c).is_nan() { 0 } else { (v(c) * 512.0) as i32 }), 2f32.powi(-9))
            }
            _ => (core::array::from_fn(|c| (E2M1::from_bits(c as u8 % 16).to_f32() * 2.0) as i32), 0.5),
        }
    }

    fn scales(&self) -> Scales<'_> {
        match self.kind {
            Kind::Int4 => Scales::F16 { data: &self.halves, index: self.layout },
            _ => Scales::Bytes { data: &self.codes, lut: &self.lut, index: self.layout },
        }
    }

    /// The panels of these weights.
    fn panels(&self) -> Panels {
        let (n, k) = (self.n, self.k);
        match self.kind {
            Kind::Mxfp6 => Panels::pack_e2m3(&self.data, n, k, panel_scales(&self.scales(), self.format(), n, k / 32)),
            Kind::Mxfp8 => {
                let scales = panel_scales(&self.scales(), self.format(), n, k / 32);
                Panels::pack_e4m3(&self.data, n, k, scales, 32)
            }
            Kind::Fp8Block => {
                let cols = k / 128;
                let rows = |r: usize, dst: &mut [f32]| dst.copy_from_slice(&self.f32s[r / 128 * cols..][..cols]);
                Panels::pack_e4m3(&self.data, n, k, panel_scales_f32(n, cols, rows), 128)
            }
            _ => Panels::pack(&self.nibble(), self.format()),
        }
    }

    fn nibble(&self) -> NibbleWeights<'_> {
        assert!(matches!(self.kind, Kind::Mxfp4 | Kind::Nvfp4 | Kind::Int4), "only 4-bit codes have a nibble view");
        let (all, vscale) = self.values();
        let values = core::array::from_fn(|c| all[c] as i8);
        NibbleWeights {
            data: &self.data,
            n: self.n,
            k: self.k,
            block: self.block(),
            values,
            vscale,
            scales: self.scales(),
        }
    }

    fn format(&self) -> Option<ScaleFormat> {
        match self.kind {
            Kind::Mxfp4 | Kind::Mxfp6 | Kind::Mxfp8 => Some(ScaleFormat::UE8M0),
            Kind::Nvfp4 => Some(ScaleFormat::UE4M3),
            Kind::Int4 | Kind::Fp8Block => None,
        }
    }

    fn code(&self, row: usize, e: usize) -> u8 {
        if self.kind.eight() {
            return self.data[row * self.k + e];
        }
        if self.kind == Kind::Mxfp6 {
            // Four codes in three bytes, least significant bits first.
            let at = row * self.k / 4 * 3 + e / 4 * 3;
            let bits = u32::from_le_bytes([self.data[at], self.data[at + 1], self.data[at + 2], 0]);
            return ((bits >> (6 * (e % 4))) & 0x3f) as u8;
        }
        let b = self.data[row * self.k / 2 + e / 2];
        if e.is_multiple_of(2) { b & 0xf } else { b >> 4 }
    }

    fn scale(&self, row: usize, c: usize) -> f32 {
        if self.kind == Kind::Fp8Block {
            return self.f32s[row / 128 * (self.k / 128) + c * 32 / 128];
        }
        let i = self.layout.at(row, c);
        if self.kind == Kind::Int4 { self.halves[i].to_f32() } else { self.lut[usize::from(self.codes[i])] }
    }

    /// Per output (row i, weight row j): the f64 value of the int8 computation on the
    /// quantized activations `(q, d)`, and the sum of its terms' magnitudes.
    fn reference(&self, q: &[i8], d: &[f32], m: usize) -> Vec<(f64, f64)> {
        let (k, block) = (self.k, self.block());
        let (values, vscale) = self.values();
        let mut out = Vec::with_capacity(m * self.n);
        for i in 0..m {
            for j in 0..self.n {
                let (mut v, mut a) = (0f64, 0f64);
                for b in 0..k / block {
                    let s = f64::from(self.scale(j, b)) * f64::from(d[i * k.div_ceil(32) + b * block / 32]);
                    for e in b * block..(b + 1) * block {
                        let t = f64::from(q[i * k + e]) * f64::from(values[usize::from(self.code(j, e))]) * s;
                        v += t;
                        a += t.abs();
                    }
                }
                out.push((v * f64::from(vscale), a * f64::from(vscale)));
            }
        }
        out
    }
}

/// The kernels this CPU runs on panels of `width`.
fn kernels(width: Width) -> Vec<Kernel> {
    let mut v = vec![Kernel::Portable];
    #[cfg(target_arch = "x86_64")]
    if crate::avx2_available() && width != Width::Eight {
        v.push(Kernel::Avx2);
    }
    #[cfg(target_arch = "x86_64")]
    if if width == Width::Four { vnni_available() } else { crate::kernels::vbmi_available() } {
        v.push(Kernel::Avx512Vnni);
    }
    v
}

#[test]
fn every_code_and_scale_is_where_the_layout_says() {
    let mut rng = SplitMix64::new(1);
    for kind in KINDS {
        for (n, k, swizzled) in [(1, 32usize, false), (17, 64, true), (33, 96, false), (130, 160, true)] {
            let k = k.div_ceil(kind.unit()) * kind.unit();
            let w = Weights::new(kind, n, k, swizzled, &mut rng);
            let p = w.panels();
            let per_row = match kind {
                Kind::Mxfp6 => k / 4 * 3,
                Kind::Mxfp8 | Kind::Fp8Block => k,
                _ => k / 2,
            };
            assert_eq!(p.codes.len(), n.div_ceil(16) * 16 * per_row);
            for row in 0..n.div_ceil(16) * 16 {
                for e in 0..k {
                    let want = if row < n { w.code(row, e) } else { 0 };
                    assert_eq!(p.code(row, e), want, "{kind:?} row {row} e {e}");
                }
                for c in 0..k / w.block() {
                    let want = if row < n { w.scale(row, c) } else { p.scale(row / 16, c, row % 16) };
                    assert_eq!(p.scale(row / 16, c, row % 16).to_bits(), want.to_bits(), "{kind:?} {row} {c}");
                }
            }
            // The unsigned operands are the values shifted by the offset into 0..=24
            // (0..=120 for E2M3), the values those of the formats.
            let (values, vscale) = w.values();
            let used = match kind {
                Kind::Mxfp6 => 64,
                Kind::Mxfp8 | Kind::Fp8Block => 256,
                _ => 16,
            };
            assert_eq!((&p.values[..used], p.vscale), (&values[..used], vscale));
            if kind.eight() {
                // Each magnitude's three parts, less their offsets, rebuild `2^9 |value|`.
                for (mag, &want) in values.iter().enumerate().take(128) {
                    let part = |i: usize| i32::from(p.parts[i][mag]);
                    let n = part(0) + (part(1) << 7) + (part(2) << 14);
                    assert_eq!(n, want, "{kind:?} magnitude {mag:#04x}");
                    assert!((0..3).all(|i| (0..128).contains(&part(i))) && part(2) <= 14);
                }
                assert_eq!(p.offset, 0);
                continue;
            }
            for c in 0..used {
                assert_eq!(i32::from(p.unsigned[c]), p.values[c] + p.offset);
            }
            let offset = match kind {
                Kind::Int4 => 8,
                Kind::Mxfp6 => 60,
                _ => 12,
            };
            assert_eq!(p.offset, offset);
            assert!(p.unsigned.iter().all(|&u| u <= 120));
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn register_scale_decoding_equals_the_tables_on_every_code() {
    type Decode = fn(u8, &[u8; 16]) -> [f32; 16];
    let mut decoders: Vec<(&str, Decode)> = Vec::new();
    if crate::avx2_available() {
        decoders.push(("avx2", avx2::decode_bytes));
    }
    if vnni_available() {
        decoders.push(("avx512", avx512::decode_bytes));
    }
    if decoders.is_empty() {
        eprintln!("skipped: neither AVX2 nor AVX-512 VNNI on this CPU");
    }
    // The patched kinds on all 256 codes; the plain kinds on every code `plain_codes`
    // lets them see.
    let kinds = [
        (UE8M0, ScaleFormat::UE8M0, 0..=255u8),
        (UE4M3, ScaleFormat::UE4M3, 0..=255),
        (UE8M0_PLAIN, ScaleFormat::UE8M0, 1..=254),
        (UE4M3_PLAIN, ScaleFormat::UE4M3, 0..=0x7e),
    ];
    for (name, decode) in decoders {
        for (kind, format, range) in kinds.clone() {
            let all: Vec<u8> = range.collect();
            for chunk in all.chunks(16) {
                let codes: [u8; 16] = core::array::from_fn(|i| chunk[i % chunk.len()]);
                for (c, g) in codes.iter().zip(decode(kind, &codes)) {
                    let want = match format {
                        ScaleFormat::UE4M3 => UE4M3::from_bits(*c).to_f32(),
                        _ => UE8M0::from_bits(*c).to_f32(),
                    };
                    let same = g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan());
                    assert!(same, "{name} kind {kind} {c:#04x}: {g} {want}");
                }
            }
        }
    }
}

#[test]
fn plain_scales_are_flagged_only_without_special_codes() {
    let mut rng = SplitMix64::new(11);
    let plain = |p: &Panels| match &p.scales {
        PanelScales::Bytes { plain, .. } => *plain,
        PanelScales::F16(_) | PanelScales::F32(_) => panic!("byte scales expected"),
    };
    for (kind, specials) in [(Kind::Mxfp4, vec![0x00u8, 0xff]), (Kind::Nvfp4, vec![0x7f, 0x80, 0xfe])] {
        // 20 rows: the swizzled layout's padding rows and columns hold code 0, which
        // must not count.
        for swizzled in [false, true] {
            let mut w = Weights::new(kind, 20, 64, swizzled, &mut rng);
            assert!(plain(&w.panels()), "{kind:?} swizzled {swizzled}");
            for &c in &specials {
                let at = w.layout.at(19, 1);
                let old = std::mem::replace(&mut w.codes[at], c);
                assert!(!plain(&w.panels()), "{kind:?} code {c:#04x}");
                w.codes[at] = old;
            }
        }
    }
}

#[test]
fn special_scale_codes_take_the_patched_decoding() {
    // UE8M0 0x00 is 2^-127 (not the 0.0 a bare shift gives) and UE4M3 0x00 is zero;
    // with such a scale in a real row the kernels must match the table's values bit
    // for bit. (NaN codes: `a_nan_scale_gives_nan_outputs_for_its_row_only`.)
    let mut rng = SplitMix64::new(13);
    for kind in [Kind::Mxfp4, Kind::Nvfp4] {
        let mut w = Weights::new(kind, 21, 128, false, &mut rng);
        let cols = 128 / w.block();
        for row in [0, 7, 20] {
            w.codes[row * cols + 2] = 0;
        }
        if kind == Kind::Mxfp4 {
            // A row of 2^-127 scales only: its outputs are 2^-127 d times the block
            // sums, which activations of 2^100 keep normal; a bare shift gives 0.
            w.codes[7 * cols..8 * cols].fill(0);
        }
        let x: Vec<f32> =
            (0..2 * 128).map(|i| rng.uniform_f32(-1.0, 1.0) * if i % 5 == 0 { 2f32.powi(100) } else { 1.0 }).collect();
        check(&w, &x, 2, &format!("{kind:?} with zero codes"));
    }
}

/// Runs `kernel` on `x` (`m x k`) and checks it against the f64 reference: within the
/// int8 mode's bound, and the same bits as the portable kernel.
fn check(w: &Weights, x: &[f32], m: usize, label: &str) {
    let p = w.panels();
    let (k, xb) = (w.k, w.k.div_ceil(32));
    let (mut q, mut d) = (vec![0i8; m * k], vec![0f32; m * xb]);
    for i in 0..m {
        super::super::nibble::quantize_row(
            &x[i * k..(i + 1) * k],
            &mut q[i * k..(i + 1) * k],
            &mut d[i * xb..(i + 1) * xb],
        );
    }
    let want = w.reference(&q, &d, m);
    // As the int8 mode's bound: a term's block-scale and activation-factor product, the
    // FMA into the total, `K / block` accumulations and `vscale`.
    let rounds = (k / w.block() + 4) as f64;
    let gamma = rounds * 2f64.powi(-24) / (1.0 - rounds * 2f64.powi(-24));
    let mut portable = None;
    for kernel in kernels(p.width) {
        for parallel in [false, true] {
            let mut out = vec![f32::NAN; m * w.n];
            gemm_panels(kernel, x, m, &p, parallel, &mut out);
            for (idx, (&o, &(v, a))) in out.iter().zip(&want).enumerate() {
                let bound = gamma * a * (1.0 + 1e-9) + a * 2f64.powi(-45);
                assert!(
                    (f64::from(o) - v).abs() <= bound,
                    "{label} {kernel:?} out[{idx}] = {o}, want {v} (bound {bound:e})"
                );
            }
            let bits: Vec<u32> = out.iter().map(|v| v.to_bits()).collect();
            match &portable {
                None => portable = Some(bits),
                Some(b) => assert_eq!(&bits, b, "{label} {kernel:?} parallel {parallel}: bits differ from portable"),
            }
        }
    }
}

#[test]
fn kernels_agree_bit_for_bit_within_the_int8_bound() {
    let mut rng = SplitMix64::new(7);
    for kind in KINDS {
        let b = kind.unit();
        let mut shapes =
            vec![(1, 1, b), (1, 16, 4 * b), (3, 17, 8 * b), (9, 33, 2 * b), (16, 40, 6 * b), (1, 131, 16 * b)];
        if kind == Kind::Nvfp4 {
            shapes.extend([(2, 20, 48), (5, 18, 80)]);
        }
        // Enough rows for `run` to split the rows between tasks (with N not a multiple
        // of 16, so the padded rows are trimmed), a ragged last task among them.
        shapes.push((4 * rayon::current_num_threads() * ROWS_PER_TASK + 5, 37, 2 * b));
        for (m, n, k) in shapes {
            for swizzled in [false, true] {
                let w = Weights::new(kind, n, k, swizzled, &mut rng);
                let x: Vec<f32> = (0..m * k).map(|_| rng.uniform_f32(-1.0, 1.0) * 4.0).collect();
                check(&w, &x, m, &format!("{kind:?} {m}x{n}x{k} swizzled {swizzled}"));
            }
        }
    }
}

#[test]
fn integer_inputs_with_power_of_two_scales_are_exact() {
    // Activations with ±127 in every 32-block have d = 1 and q = x; power-of-two scales
    // keep every partial sum exact in f32, so the result is the exact value.
    let mut rng = SplitMix64::new(3);
    for kind in KINDS {
        let (n, k, m) = (37, 256, 5);
        let mut w = Weights::new(kind, n, k, false, &mut rng);
        w.codes.iter_mut().for_each(|c| {
            *c = if matches!(kind, Kind::Mxfp4 | Kind::Mxfp6 | Kind::Mxfp8) {
                126 + (*c % 3)
            } else {
                0x30 + 8 * (*c % 3)
            }
        });
        w.halves.iter_mut().for_each(|h| *h = f16::from_f32(2f32.powi((h.to_f32() * 10.0) as i32 % 3 - 1)));
        w.f32s.iter_mut().for_each(|f| *f = 2f32.powi((*f * 10.0) as i32 % 3 - 1));
        if kind.eight() {
            // Every partial sum stays an integer below 2^24 times the smallest unit (as
            // for the 4-bit kinds: 32 * 127 * 12 * 8 blocks * a scale ratio of 4) only for
            // `2^9 |value| <= 120`: codes of exponent 1..4.
            w.data.iter_mut().for_each(|c| *c = (*c & 0x87) | (0x08 + (*c & 0x18)));
        }
        let x: Vec<f32> =
            (0..m * k).map(|i| if i % 32 == 0 { 127.0 } else { (rng.next_u64() % 255) as f32 - 127.0 }).collect();
        let p = w.panels();
        let (q, d): (Vec<i8>, Vec<f32>) = (x.iter().map(|&v| v as i8).collect(), vec![1.0; m * k / 32]);
        let want = w.reference(&q, &d, m);
        for kernel in kernels(p.width) {
            let mut out = vec![0f32; m * n];
            gemm_panels(kernel, &x, m, &p, true, &mut out);
            for (idx, (o, (v, _))) in out.iter().zip(&want).enumerate() {
                assert_eq!(f64::from(*o), *v, "{kind:?} {kernel:?} out[{idx}]");
            }
        }
    }
}

#[test]
fn non_finite_rows_propagate_and_leave_the_others_alone() {
    let mut rng = SplitMix64::new(5);
    let w = Weights::new(Kind::Mxfp4, 20, 64, false, &mut rng);
    let p = w.panels();
    let mut x: Vec<f32> = (0..3 * 64).map(|_| rng.uniform_f32(-1.0, 1.0)).collect();
    x[64 + 5] = f32::NAN;
    x[2 * 64 + 9] = f32::INFINITY;
    let finite: Vec<f32> = x[..64].to_vec();
    for kernel in kernels(p.width) {
        let mut out = vec![0f32; 3 * 20];
        gemm_panels(kernel, &x, 3, &p, true, &mut out);
        let mut alone = vec![0f32; 20];
        gemm_panels(kernel, &finite, 1, &p, true, &mut alone);
        assert_eq!(&out[..20], &alone[..], "{kernel:?}: the finite row");
        assert!(out[20..40].iter().all(|v| v.is_nan()), "{kernel:?}: NaN row");
        // An infinity meets codes of both signs (and zeros): NaN or infinite.
        assert!(out[40..].iter().all(|v| !v.is_finite()), "{kernel:?}: infinite row {:?}", &out[40..]);
    }
}

#[test]
fn a_nan_scale_gives_nan_outputs_for_its_row_only() {
    let mut rng = SplitMix64::new(9);
    for (kind, nan) in [(Kind::Mxfp4, 0xffu8), (Kind::Nvfp4, 0x7f)] {
        let mut w = Weights::new(kind, 18, 64, false, &mut rng);
        let cols = 64 / w.block();
        w.codes[3 * cols + 1] = nan;
        let p = w.panels();
        let x: Vec<f32> = (0..64).map(|_| rng.uniform_f32(-1.0, 1.0)).collect();
        for kernel in kernels(p.width) {
            let mut out = vec![0f32; 18];
            gemm_panels(kernel, &x, 1, &p, false, &mut out);
            for (j, v) in out.iter().enumerate() {
                assert_eq!(v.is_nan(), j == 3, "{kind:?} {kernel:?} row {j}: {v}");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn random_shapes_agree_and_stay_in_bound(
        kind in prop_oneof![
            Just(Kind::Mxfp4), Just(Kind::Nvfp4), Just(Kind::Int4), Just(Kind::Mxfp6), Just(Kind::Mxfp8), Just(Kind::Fp8Block)
        ],
        m in 1usize..12, n in 1usize..70, blocks in 1usize..12, seed in any::<u64>(), swizzled in any::<bool>()
    ) {
        let mut rng = SplitMix64::new(seed);
        let k = blocks * kind.unit();
        let w = Weights::new(kind, n, k, swizzled, &mut rng);
        let x: Vec<f32> = (0..m * k).map(|_| rng.uniform_f32(-1.0, 1.0) * 8.0).collect();
        check(&w, &x, m, "proptest");
    }
}

/// The AVX-512 kernel's single-row walks (several panels per pass, prefetching; the
/// one this CPU's vendor takes is in `avx512::walk`) give the portable kernel's bits,
/// with a ragged last group of panels.
#[cfg(target_arch = "x86_64")]
#[test]
fn every_single_row_walk_gives_the_portable_bits() {
    if !vnni_available() {
        eprintln!("SKIPPED: no AVX-512 VNNI here");
        return;
    }
    let mut rng = SplitMix64::new(11);
    for kind in KINDS {
        let b = kind.unit();
        for (n, k) in [(16 * 7 + 3, 8 * b), (16 * 4, 2 * b), (5, b)] {
            let w = Weights::new(kind, n, k, false, &mut rng);
            let p = w.panels();
            let x: Vec<f32> = (0..k).map(|_| rng.uniform_f32(-1.0, 1.0) * 4.0).collect();
            let acts = Acts::new(&x, 1, &p);
            let rows = acts.rows(0, 1, k, p.block);
            let panels = p.panels();
            let mut want = vec![0f32; panels * ROWS];
            portable::rows(&rows, 1, &p, 0, panels, &mut want);
            for walk in [(1, 0), (2, 0), (2, 512), (3, 64), (4, 1024)] {
                let mut got = vec![f32::NAN; panels * ROWS];
                if p.width != Width::Four && !crate::kernels::vbmi_available() {
                    eprintln!("SKIPPED: six- and eight-bit walks need AVX-512 VBMI");
                    continue;
                }
                // SAFETY: the CPU has AVX-512 F, BW and VNNI (checked above), and VBMI for
                // six- and eight-bit panels; the buffers hold every panel's rows.
                unsafe {
                    match p.width {
                        Width::Four => avx512::rows_walking(&rows, 1, &p, (0, panels), &mut got, walk),
                        Width::Six => avx512::rows_six_walking(&rows, 1, &p, (0, panels), &mut got, walk),
                        Width::Eight => avx512::rows_eight_walking(&rows, 1, &p, (0, panels), &mut got, walk),
                    }
                }
                let (g, e): (Vec<u32>, Vec<u32>) =
                    got.iter().zip(&want).map(|(a, b)| (a.to_bits(), b.to_bits())).unzip();
                assert_eq!(g, e, "{kind:?} {n}x{k} walk {walk:?}");
            }
        }
    }
}

#[test]
fn e4m3_nan_codes_give_nan_outputs_for_their_row_only() {
    let mut rng = SplitMix64::new(17);
    for kind in [Kind::Mxfp8, Kind::Fp8Block] {
        let (n, k) = (19, 256);
        let mut w = Weights::new(kind, n, k, false, &mut rng);
        w.data[4 * k + 37] = 0x7f;
        w.data[17 * k + 200] = 0xff;
        let p = w.panels();
        assert_eq!(p.nan_rows, vec![4, 17]);
        let x: Vec<f32> = (0..2 * k).map(|_| rng.uniform_f32(-1.0, 1.0)).collect();
        for kernel in kernels(p.width) {
            let mut out = vec![0f32; 2 * n];
            gemm_panels(kernel, &x, 2, &p, true, &mut out);
            for (idx, v) in out.iter().enumerate() {
                assert_eq!(v.is_nan(), matches!(idx % n, 4 | 17), "{kind:?} {kernel:?} [{idx}]: {v}");
            }
        }
    }
}
