//! Every path of the nibble GEMM (portable, AVX2, AVX-512 BF16; Exact and Int8 modes)
//! against an f64 reference: within the bounds the module docs state, bit-identical on
//! integer inputs, NaN scales and non-finite rows, empty shapes.

use blockscale_formats::rng::SplitMix64;
use blockscale_formats::{E2M1, ScaleLayout, UE4M3, UE8M0};
use half::f16;
use proptest::prelude::*;

use super::*;

thread_local! {
    /// Calls of the AVX-512 BF16 kernel on this thread (`run_bf16` runs on the caller's).
    pub(super) static BF16_RUNS: core::cell::Cell<usize> = const { core::cell::Cell::new(0) };
}

fn bf16_runs() -> usize {
    BF16_RUNS.with(|c| c.get())
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    /// Block 32, UE8M0 byte scales, E2M1 values.
    Mxfp4,
    /// Block 16, UE4M3 byte scales, E2M1 values.
    Nvfp4,
    /// Block 32, f16 scales, offset-8 INT4 values.
    Int4,
}

const KINDS: [Kind; 3] = [Kind::Mxfp4, Kind::Nvfp4, Kind::Int4];

impl Kind {
    fn block(self) -> usize {
        if self == Kind::Nvfp4 { 16 } else { 32 }
    }
    fn values(self) -> ([i8; 16], f32) {
        match self {
            Kind::Int4 => (core::array::from_fn(|c| c as i8 - 8), 1.0),
            _ => (core::array::from_fn(|c| (E2M1::from_bits(c as u8).to_f32() * 2.0) as i8), 0.5),
        }
    }
}

fn ue8m0_lut() -> [f32; 256] {
    core::array::from_fn(|b| UE8M0::from_bits(b as u8).to_f32())
}

fn ue4m3_lut() -> [f32; 256] {
    core::array::from_fn(|b| UE4M3::from_bits(b as u8).to_f32())
}

/// Owned test problem.
struct Problem {
    kind: Kind,
    n: usize,
    k: usize,
    data: Vec<u8>,
    /// Logical scales, row-major `n x cols`: byte codes, or f16.
    codes: Vec<u8>,
    halves: Vec<f16>,
    lut: [f32; 256],
}

/// How scales are drawn.
#[derive(Clone, Copy, PartialEq)]
enum Draw {
    /// Spread over a few binades (the codes vary).
    Random,
    /// Powers of two in [1/4, 4]: every partial sum of integer inputs is exact.
    PowersOfTwo,
}

impl Problem {
    fn new(kind: Kind, n: usize, k: usize, draw: Draw, rng: &mut SplitMix64) -> Self {
        let data = (0..n * k / 2).map(|_| rng.next_u64() as u8).collect();
        let cols = k / kind.block();
        let pow2 = |rng: &mut SplitMix64| rng.below(5) as i32 - 2;
        let (codes, halves, lut) = match kind {
            Kind::Mxfp4 => {
                let c = (0..n * cols)
                    .map(|_| if draw == Draw::Random { 120 + rng.below(14) } else { (127 + pow2(rng)) as usize } as u8)
                    .collect();
                (c, vec![], ue8m0_lut())
            }
            Kind::Nvfp4 => {
                // UE4M3: 0x38 is 1.0; each +8 doubles.
                let c = (0..n * cols)
                    .map(|_| if draw == Draw::Random { 0x08 + rng.below(0x70) } else { (0x38 + 8 * pow2(rng)) as usize } as u8)
                    .collect();
                (c, vec![], ue4m3_lut())
            }
            Kind::Int4 => {
                let h = (0..n * cols)
                    .map(|_| {
                        if draw == Draw::Random {
                            f16::from_f32(0.01 + 2.0 * rng.uniform_f32(-1.0, 1.0).abs())
                        } else {
                            f16::from_f32((pow2(rng) as f32).exp2())
                        }
                    })
                    .collect();
                (vec![], h, [0.0; 256])
            }
        };
        Self { kind, n, k, data, codes, halves, lut }
    }

    fn cols(&self) -> usize {
        self.k / self.kind.block()
    }

    /// The logical scale (row, col) as f64.
    fn scale(&self, r: usize, c: usize) -> f64 {
        let i = r * self.cols() + c;
        if self.kind == Kind::Int4 { self.halves[i].to_f64() } else { f64::from(self.lut[usize::from(self.codes[i])]) }
    }

    /// Element (r, k) as f64: `values[code] * vscale`.
    fn weight(&self, r: usize, k: usize) -> f64 {
        let b = self.data[r * self.k / 2 + k / 2];
        let code = if k.is_multiple_of(2) { b & 0xf } else { b >> 4 };
        let (values, vscale) = self.kind.values();
        f64::from(values[usize::from(code)]) * f64::from(vscale)
    }

    /// Runs the kernel with the scales stored in `layout`.
    fn run(&self, kernel: Kernel, layout: ScaleLayout, x: &[f32], m: usize, mode: ActMode, parallel: bool) -> Vec<f32> {
        let cols = self.cols();
        let index = match layout {
            ScaleLayout::Linear => ScaleIndex::Linear { cols },
            ScaleLayout::Swizzled128x4 => ScaleIndex::Swizzled128x4 { cols },
        };
        let bytes = blockscale_formats::layout::convert_vec(&self.codes, ScaleLayout::Linear, layout, self.n, cols);
        let halves = blockscale_formats::layout::convert_vec(&self.halves, ScaleLayout::Linear, layout, self.n, cols);
        let (bytes, halves) = (bytes.unwrap_or_default(), halves.unwrap_or_default());
        let scales = if self.kind == Kind::Int4 {
            Scales::F16 { data: &halves, index }
        } else {
            Scales::Bytes { data: &bytes, lut: &self.lut, index }
        };
        let (values, vscale) = self.kind.values();
        let w =
            NibbleWeights { data: &self.data, n: self.n, k: self.k, block: self.kind.block(), values, vscale, scales };
        // Poisoned, so an unwritten output shows.
        let mut out = vec![f32::NAN; m * self.n];
        gemm_nibble(kernel, x, m, &w, mode, parallel, &mut out);
        out
    }

    /// f64 reference for activations `xs` (already quantized for Int8): per (row, n)
    /// the value and `Σ |x * w * s|`.
    fn reference(&self, xs: &[f64], m: usize) -> Vec<(f64, f64)> {
        let (k, block) = (self.k, self.kind.block());
        let mut out = vec![(0.0, 0.0); m * self.n];
        for i in 0..m {
            for r in 0..self.n {
                let (mut v, mut a) = (0.0, 0.0);
                for c in 0..self.cols() {
                    let s = self.scale(r, c);
                    let mut p = 0.0;
                    for kk in c * block..(c + 1) * block {
                        let t = xs[i * k + kk] * self.weight(r, kk);
                        p += t;
                        a += (t * s).abs();
                    }
                    v += p * s;
                }
                out[i * self.n + r] = (v, a);
            }
        }
        out
    }

    /// `γ_n` of the documented bound.
    fn gamma(&self) -> f64 {
        let n = (self.kind.block() + self.cols() + 2) as f64;
        let u = 2f64.powi(-24);
        n * u / (1.0 - n * u)
    }
}

/// The instruction set `gemm_nibble` runs on.
type Kernel = Isa;

/// Every instruction set this CPU runs: portable, AVX2, and AVX-512 (where it has BF16,
/// its BF16 kernel takes bf16 activations).
fn paths() -> Vec<Kernel> {
    let mut p = vec![Isa::Portable];
    if crate::kernels::avx2_available() {
        p.push(Isa::select(crate::Simd::Avx2).unwrap());
    }
    if crate::avx512_available() {
        p.push(Isa::select(crate::Simd::Avx512).unwrap());
    }
    p
}

/// The test's own Q8_0-like quantization, per the module doc: (d*q per element, d per element).
fn quantize_ref(x: &[f32], k: usize) -> (Vec<f64>, Vec<f64>) {
    let mut dq = vec![0.0; x.len()];
    let mut ds = vec![0.0; x.len()];
    for (r, row) in x.chunks(k).enumerate() {
        for (b, blk) in row.chunks(32).enumerate() {
            let amax = blk.iter().map(|v| v.abs()).fold(0f32, f32::max);
            let d = amax / 127.0;
            for (j, &v) in blk.iter().enumerate() {
                let q = if d == 0.0 { 0.0 } else { (v / d).round_ties_even().clamp(-127.0, 127.0) };
                dq[r * k + b * 32 + j] = f64::from(d) * f64::from(q);
                ds[r * k + b * 32 + j] = f64::from(d);
            }
        }
    }
    (dq, ds)
}

fn random_x(rng: &mut SplitMix64, len: usize) -> Vec<f32> {
    // A few binades, some exact zeros and a zero block now and then.
    let mut x: Vec<f32> = (0..len).map(|_| rng.uniform_f32(-1.0, 1.0) * (rng.below(6) as f32 - 2.0).exp2()).collect();
    for v in x.iter_mut().filter(|_| rng.below(16) == 0) {
        *v = 0.0;
    }
    x
}

fn check_exact(p: &Problem, x: &[f32], m: usize, label: &str) {
    let xs: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
    let reference = p.reference(&xs, m);
    for isa in paths() {
        for layout in ScaleLayout::ALL {
            for parallel in [false, true] {
                let out = p.run(isa, layout, x, m, ActMode::Exact, parallel);
                for (idx, (&o, &(v, a))) in out.iter().zip(&reference).enumerate() {
                    let bound = p.gamma() * a * (1.0 + 1e-9) + a * 2f64.powi(-45);
                    let err = (f64::from(o) - v).abs();
                    assert!(
                        err <= bound,
                        "{label} {isa:?} {layout} par={parallel} out[{idx}] = {o}, want {v} (err {err:e} > bound {bound:e})"
                    );
                }
            }
        }
    }
}

fn check_int8(p: &Problem, x: &[f32], m: usize, label: &str) {
    let (dq, ds) = quantize_ref(x, p.k);
    let xs: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
    let quantized = p.reference(&dq, m);
    let exact = p.reference(&xs, m);
    // Σ_k (d (1/2 + 2^-17) + 2^-143) |w s| per output.
    let qerr: Vec<f64> = {
        let unit: Vec<f64> = ds.iter().map(|&d| d * (0.5 + 2f64.powi(-17)) + 2f64.powi(-143)).collect();
        p.reference(&unit, m).iter().map(|a| a.1).collect()
    };
    for isa in paths() {
        for layout in ScaleLayout::ALL {
            let out = p.run(isa, layout, x, m, ActMode::Int8, true);
            for (idx, &o) in out.iter().enumerate() {
                let (vq, aq) = quantized[idx];
                let round = p.gamma() * aq * (1.0 + 1e-9) + aq * 2f64.powi(-45);
                let err = (f64::from(o) - vq).abs();
                assert!(
                    err <= round,
                    "{label} {isa:?} {layout} out[{idx}] = {o}, quantized ref {vq} (err {err:e} > {round:e})"
                );
                let err = (f64::from(o) - exact[idx].0).abs();
                let bound = qerr[idx] + round;
                assert!(
                    err <= bound,
                    "{label} {isa:?} {layout} out[{idx}] = {o}, exact {} (err {err:e} > {bound:e})",
                    exact[idx].0
                );
            }
        }
    }
}

/// (m, n, k) shapes per kind: n not a multiple of 4, over one swizzle band, K with a
/// partial last scale group and (NVFP4) an odd number of 16-blocks.
fn shapes(kind: Kind) -> Vec<(usize, usize, usize)> {
    let b = kind.block();
    let mut s = vec![(1, 1, b), (1, 7, 3 * b), (3, 5, 6 * b), (16, 13, 8 * b), (17, 130, 5 * b), (1, 131, 16 * b)];
    if kind == Kind::Nvfp4 {
        s.extend([(1, 9, 48), (3, 6, 80), (17, 4, 16)]);
    }
    s
}

#[test]
fn scale_index_matches_formats_layout() {
    for cols in [1, 3, 4, 7, 64] {
        for rows in [1, 31, 128, 129, 300] {
            let lin = ScaleIndex::Linear { cols };
            let swz = ScaleIndex::Swizzled128x4 { cols };
            assert_eq!(lin.storage_len(rows), ScaleLayout::Linear.storage_len(rows, cols).unwrap());
            assert_eq!(swz.storage_len(rows), ScaleLayout::Swizzled128x4.storage_len(rows, cols).unwrap());
            for r in 0..rows {
                for c in 0..cols {
                    assert_eq!(lin.at(r, c), ScaleLayout::Linear.offset(r, c, cols));
                    assert_eq!(swz.at(r, c), ScaleLayout::Swizzled128x4.offset(r, c, cols));
                }
            }
        }
    }
}

#[test]
fn exact_random_within_bound() {
    let mut rng = SplitMix64::new(1);
    for kind in KINDS {
        for (m, n, k) in shapes(kind) {
            let p = Problem::new(kind, n, k, Draw::Random, &mut rng);
            let x = random_x(&mut rng, m * k);
            check_exact(&p, &x, m, &format!("{kind:?} {m}x{n}x{k}"));
        }
    }
}

/// Every path and scale layout in `mode` gives exactly the f64 reference (inputs whose
/// every partial sum is exact).
fn assert_bit_identical(p: &Problem, x: &[f32], m: usize, mode: ActMode, what: &str) {
    let xs: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
    let reference = p.reference(&xs, m);
    for isa in paths() {
        for layout in ScaleLayout::ALL {
            let out = p.run(isa, layout, x, m, mode, true);
            for (i, (&o, &(v, _))) in out.iter().zip(&reference).enumerate() {
                assert_eq!(f64::from(o), v, "{what} {isa:?} {layout} out[{i}]");
            }
        }
    }
}

#[test]
fn exact_integer_inputs_bit_identical() {
    let mut rng = SplitMix64::new(2);
    for kind in KINDS {
        for (m, n, k) in shapes(kind) {
            let p = Problem::new(kind, n, k, Draw::PowersOfTwo, &mut rng);
            let x: Vec<f32> = (0..m * k).map(|_| rng.below(17) as f32 - 8.0).collect();
            assert_bit_identical(&p, &x, m, ActMode::Exact, &format!("{kind:?} {m}x{n}x{k}"));
        }
    }
}

#[test]
fn int8_integer_inputs_bit_identical() {
    // Each 32-block holds ±127, so d = 1 and q = x: the Int8 result is exact too.
    let mut rng = SplitMix64::new(3);
    for kind in KINDS {
        for (m, n, k) in shapes(kind) {
            let p = Problem::new(kind, n, k, Draw::PowersOfTwo, &mut rng);
            let mut x: Vec<f32> = (0..m * k).map(|_| rng.below(255) as f32 - 127.0).collect();
            for row in x.chunks_mut(k) {
                for blk in row.chunks_mut(32) {
                    let j = rng.below(blk.len());
                    blk[j] = if rng.below(2) == 0 { 127.0 } else { -127.0 };
                }
            }
            assert_bit_identical(&p, &x, m, ActMode::Int8, &format!("{kind:?} {m}x{n}x{k}"));
        }
    }
}

#[test]
fn int8_random_within_bound() {
    let mut rng = SplitMix64::new(4);
    for kind in KINDS {
        for (m, n, k) in shapes(kind) {
            let p = Problem::new(kind, n, k, Draw::Random, &mut rng);
            let x = random_x(&mut rng, m * k);
            check_int8(&p, &x, m, &format!("{kind:?} {m}x{n}x{k}"));
        }
    }
}

#[test]
fn nan_scale_gives_nan_row() {
    let mut rng = SplitMix64::new(5);
    for kind in [Kind::Mxfp4, Kind::Nvfp4] {
        let (m, n, k) = (3, 9, 4 * kind.block());
        let mut p = Problem::new(kind, n, k, Draw::Random, &mut rng);
        let nan_code = if kind == Kind::Mxfp4 { 0xff } else { 0x7f };
        assert!(p.lut[nan_code].is_nan());
        let cols = p.cols();
        p.codes[5 * cols + 2] = nan_code as u8;
        let mut x = random_x(&mut rng, m * k);
        x[k..2 * k].fill(0.0); // 0 * NaN is NaN too
        for isa in paths() {
            for layout in ScaleLayout::ALL {
                for mode in [ActMode::Exact, ActMode::Int8] {
                    let out = p.run(isa, layout, &x, m, mode, false);
                    for (i, o) in out.iter().enumerate() {
                        assert_eq!(o.is_nan(), i % n == 5, "{kind:?} {isa:?} {layout} {mode:?} out[{i}] = {o}");
                    }
                }
            }
        }
    }
}

#[test]
fn int8_non_finite_row_takes_exact() {
    let mut rng = SplitMix64::new(6);
    for kind in KINDS {
        let (m, n, k) = (5, 11, 8 * kind.block());
        let p = Problem::new(kind, n, k, Draw::Random, &mut rng);
        let mut x = random_x(&mut rng, m * k);
        x[k + 7] = f32::INFINITY;
        x[3 * k + 1] = f32::NAN;
        let finite_rows: Vec<f32> = [0, 2, 4].iter().flat_map(|&r| x[r * k..(r + 1) * k].to_vec()).collect();
        for isa in paths() {
            for layout in ScaleLayout::ALL {
                let out = p.run(isa, layout, &x, m, ActMode::Int8, true);
                let exact = p.run(isa, layout, &x, m, ActMode::Exact, true);
                let int8 = p.run(isa, layout, &finite_rows, 3, ActMode::Int8, true);
                for r in 0..m {
                    for j in 0..n {
                        let o = out[r * n + j];
                        let want = match r {
                            1 | 3 => exact[r * n + j],
                            _ => int8[r / 2 * n + j],
                        };
                        assert_eq!(o.to_bits(), want.to_bits(), "{kind:?} {isa:?} {layout} row {r} col {j}");
                        if r == 3 {
                            assert!(o.is_nan());
                        }
                        if r == 1 {
                            // Inf times a mixed-sign row: +-Inf or NaN, never finite.
                            assert!(!o.is_finite());
                        }
                    }
                }
            }
        }
    }
}

/// `v` truncated to bf16.
fn bf16(v: f32) -> f32 {
    f32::from_bits(v.to_bits() & 0xffff_0000)
}

/// `γ_n` of the BF16 kernel: `n = ceil(K / 64) + 8`.
fn gamma_bf16(k: usize) -> f64 {
    let n = (k.div_ceil(64) + 8) as f64;
    let u = 2f64.powi(-24);
    n * u / (1.0 - n * u)
}

/// Shapes for the BF16 kernel: K with every remainder mod 64 the block allows, N
/// not a multiple of 4, M = 1, 3, 16 and one over a tile.
fn bf16_shapes(kind: Kind) -> Vec<(usize, usize, usize)> {
    let b = kind.block();
    let mut s = vec![
        (1, 1, b),
        (1, 7, 3 * b),
        (3, 5, 6 * b),
        (16, 13, 8 * b),
        (16, 37, 7 * b),
        (17, 130, 5 * b),
        (1, 262, 40 * b),
        (3, 133, 11 * b),
    ];
    if kind == Kind::Nvfp4 {
        s.extend([(1, 9, 48), (3, 6, 80), (16, 4, 16), (1, 11, 112), (16, 6, 176)]);
    }
    s
}

/// Whether this CPU runs the BF16 kernel (else the tests below check the f32 paths only).
fn wide_kernel() -> bool {
    Isa::select(crate::Simd::Auto).is_ok_and(Isa::bf16)
}

#[test]
fn bf16_random_within_bound() {
    let mut rng = SplitMix64::new(7);
    for kind in KINDS {
        for (m, n, k) in bf16_shapes(kind) {
            let p = Problem::new(kind, n, k, Draw::Random, &mut rng);
            let x: Vec<f32> = random_x(&mut rng, m * k).into_iter().map(bf16).collect();
            let label = format!("bf16 {kind:?} {m}x{n}x{k}");
            let before = bf16_runs();
            check_exact(&p, &x, m, &label);
            if wide_kernel() {
                assert!(bf16_runs() > before, "{label}: the BF16 kernel did not run");
                // The BF16 kernel's own, tighter bound.
                let xs: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
                let reference = p.reference(&xs, m);
                let kernel = Isa::select(crate::Simd::Avx512).unwrap();
                for layout in ScaleLayout::ALL {
                    let out = p.run(kernel, layout, &x, m, ActMode::Exact, true);
                    for (idx, (&o, &(v, a))) in out.iter().zip(&reference).enumerate() {
                        let bound = gamma_bf16(k) * a * (1.0 + 1e-9) + a * 2f64.powi(-45);
                        let err = (f64::from(o) - v).abs();
                        assert!(err <= bound, "{label} {layout} out[{idx}] = {o}, want {v} (err {err:e} > {bound:e})");
                    }
                }
            }
        }
    }
}

#[test]
fn bf16_integer_inputs_bit_identical() {
    let mut rng = SplitMix64::new(8);
    for kind in KINDS {
        for (m, n, k) in bf16_shapes(kind) {
            let p = Problem::new(kind, n, k, Draw::PowersOfTwo, &mut rng);
            let x: Vec<f32> = (0..m * k).map(|_| rng.below(17) as f32 - 8.0).collect();
            let xs: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
            let reference = p.reference(&xs, m);
            let before = bf16_runs();
            for isa in paths() {
                for layout in ScaleLayout::ALL {
                    for parallel in [false, true] {
                        let out = p.run(isa, layout, &x, m, ActMode::Exact, parallel);
                        for (i, (&o, &(v, _))) in out.iter().zip(&reference).enumerate() {
                            assert_eq!(f64::from(o), v, "{kind:?} {m}x{n}x{k} {isa:?} {layout} out[{i}]");
                        }
                    }
                }
            }
            assert!(!wide_kernel() || bf16_runs() > before, "{kind:?} {m}x{n}x{k}: the BF16 kernel did not run");
        }
    }
}

#[test]
fn bf16_nan_scale_gives_nan_row() {
    let mut rng = SplitMix64::new(9);
    for kind in [Kind::Mxfp4, Kind::Nvfp4] {
        for (m, k) in [(1, 4 * kind.block()), (3, 5 * kind.block()), (16, 3 * kind.block())] {
            let n = 9;
            let mut p = Problem::new(kind, n, k, Draw::Random, &mut rng);
            let nan_code = if kind == Kind::Mxfp4 { 0xff } else { 0x7f };
            let cols = p.cols();
            p.codes[5 * cols + cols - 1] = nan_code as u8;
            let mut x: Vec<f32> = random_x(&mut rng, m * k).into_iter().map(bf16).collect();
            x[..k].fill(0.0); // 0 * NaN is NaN too
            let before = bf16_runs();
            for isa in paths() {
                for layout in ScaleLayout::ALL {
                    let out = p.run(isa, layout, &x, m, ActMode::Exact, false);
                    for (i, o) in out.iter().enumerate() {
                        assert_eq!(o.is_nan(), i % n == 5, "{kind:?} m={m} {isa:?} {layout} out[{i}] = {o}");
                    }
                }
            }
            assert!(!wide_kernel() || bf16_runs() > before);
        }
    }
}

#[test]
fn bf16_other_rows_take_f32_kernel() {
    // Rows holding a bf16 subnormal, an f32 that is no bf16, an infinity or a NaN take
    // the AVX2 f32 kernel; the other rows give what they give alone in the BF16 kernel.
    let mut rng = SplitMix64::new(10);
    let odd = [
        f32::from_bits(0x0020_0000), // bf16 subnormal
        -f32::from_bits(0x0001_0000),
        1.0 + f32::EPSILON, // not a bf16
        f32::INFINITY,
        f32::NAN,
    ];
    for kind in KINDS {
        let (m, n, k) = (7, 11, 6 * kind.block());
        let p = Problem::new(kind, n, k, Draw::Random, &mut rng);
        let mut x: Vec<f32> = random_x(&mut rng, m * k).into_iter().map(bf16).collect();
        for (r, &v) in [1, 2, 3, 5, 6].iter().zip(&odd) {
            x[r * k + 3] = v;
        }
        let good: Vec<f32> = [0, 4].iter().flat_map(|&r| x[r * k..(r + 1) * k].to_vec()).collect();
        for isa in paths() {
            for layout in ScaleLayout::ALL {
                let out = p.run(isa, layout, &x, m, ActMode::Exact, true);
                // The f32 kernel of that ISA (under AVX-512 it is the AVX2 one).
                let f32_isa = if isa == Isa::Avx512 { Isa::Avx2 } else { isa };
                let f32_kernel = p.run(f32_isa, layout, &x, m, ActMode::Exact, true);
                let alone = p.run(isa, layout, &good, 2, ActMode::Exact, true);
                for r in 0..m {
                    for j in 0..n {
                        let want = match r {
                            0 | 4 => alone[r / 4 * n + j],
                            _ => f32_kernel[r * n + j],
                        };
                        let o = out[r * n + j];
                        assert_eq!(o.to_bits(), want.to_bits(), "{kind:?} {isa:?} {layout} row {r} col {j}");
                    }
                }
            }
        }
    }
}

#[test]
fn zero_k_and_zero_rows() {
    let lut = ue8m0_lut();
    let w = NibbleWeights {
        data: &[],
        n: 3,
        k: 0,
        block: 32,
        values: Kind::Mxfp4.values().0,
        vscale: 0.5,
        scales: Scales::Bytes { data: &[], lut: &lut, index: ScaleIndex::Linear { cols: 0 } },
    };
    for isa in paths() {
        let mut out = vec![f32::NAN; 6];
        gemm_nibble(isa, &[], 2, &w, ActMode::Exact, true, &mut out);
        assert_eq!(out, vec![0.0; 6]);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random shapes and values, both modes, every path and layout.
    #[test]
    fn random_shapes_within_bound(kind in 0usize..3, m in 1usize..20, n in 1usize..40, blocks in 1usize..12, seed in any::<u64>()) {
        let kind = KINDS[kind];
        let k = blocks * kind.block();
        let mut rng = SplitMix64::new(seed);
        let p = Problem::new(kind, n, k, Draw::Random, &mut rng);
        let x = random_x(&mut rng, m * k);
        check_exact(&p, &x, m, "proptest");
        check_int8(&p, &x, m, "proptest");
        let x: Vec<f32> = x.into_iter().map(bf16).collect();
        check_exact(&p, &x, m, "proptest bf16");
    }
}

#[test]
fn round_small_is_round_ties_even_on_the_quotients_range() {
    // Every tie and its neighbours in -140..140, then every f32 bit pattern in a
    // stride over that range.
    for k in -140i32..140 {
        for base in [k as f32, k as f32 + 0.5] {
            for y in [base, f32::from_bits(base.to_bits() + 1), f32::from_bits(base.to_bits().saturating_sub(1))] {
                assert_eq!(round_small(y), y.round_ties_even(), "{y}");
            }
        }
    }
    let (lo, hi) = (0u32, 140f32.to_bits());
    for bits in (lo..hi).step_by(997) {
        for y in [f32::from_bits(bits), -f32::from_bits(bits)] {
            // -0.x rounds to +0 here and to -0 there: both become the integer 0.
            assert_eq!(round_small(y) as i32, y.round_ties_even() as i32, "{y}");
        }
    }
}
