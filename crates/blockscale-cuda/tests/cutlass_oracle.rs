//! The SM120 GEMM shims against CUTLASS's own host code, without SM120 hardware.
//!
//! The shims in `kernels/cutlass/sm120_*.cu` hand blockscale's operands straight to
//! CUTLASS 4.2: packed K-major elements, and scales in blockscale's layout described to
//! CUTLASS by `Sm1xxBlkScaledConfig::tile_atom_to_shape_SFA/SFB` (NVFP4 and MX, whose
//! scales blockscale stores as `Swizzled128x4`) or by
//! `Sm120BlockwiseScaleConfig<1, 128, 128>` (FP8 blockwise, `Linear` f32 scales). No
//! GPU of that tier is available to us, so two facts are proven here on the host, with
//! CUTLASS's headers as the independent oracle (tests/oracle/cutlass_oracle.cpp, built
//! with g++ once per test process):
//!
//! 1. The layouts agree offset for offset. For several hundred shapes, ragged ones
//!    included, CUTLASS's layout functions put every (row, K-block) scale where
//!    `blockscale_formats::layout::swizzled_offset` (or the `Linear` offset for FP8
//!    blockwise) puts it, over the padded shape as well, and the storage they need is
//!    `ScaleLayout::storage_len` (the scale-length blockscale allocates). A mismatch
//!    here would make the GPU read other blocks' scales: wrong answers that no SASS
//!    check sees.
//! 2. CUTLASS's host reference GEMM (`cutlass::reference::host::Gett`, what CUTLASS's
//!    examples 79 and 87 verify their SM120 kernels against), fed blockscale's bytes
//!    through those layouts, computes what `blockscale_cpu::gemm_reference` computes on
//!    every quantized x quantized golden GEMM case (NVFP4, MXFP4, MXFP8 E4M3 and E5M2,
//!    MXFP6 x MXFP8 in both orders, FP8 1x128 x 128x128): bit for bit on `-exact` cases,
//!    within the fast path's error bound on `-random` ones. This ties the element
//!    packing (FP4 nibble order, the FP6 bitstream), the scale types and `alpha` to
//!    CUTLASS's reading of them. Weight-only cases (f32/f16/bf16 activations) are not
//!    run: the shims have no such kernel.
//!
//! The headers come from `cargo xtask setup-cuda` (CUTLASS under `target/cutlass-4.2`
//! or `CUTLASS_DIR`, as build.rs finds it; CUDA under `target/cuda-13.0` or
//! `BLOCKSCALE_CUDA_HOME`, `CUDA_HOME`, `CUDA_PATH`; `target/` is the target dir this
//! test was built in, `CARGO_TARGET_DIR` when set). Without them, or without g++ (or
//! `CXX`), the tests skip with a message, except under `CI=true` or
//! `BLOCKSCALE_REQUIRE_ORACLES=1`, where a missing oracle fails.

use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use blockscale_cpu::{Epilogue, dequantize, gemm_reference};
use blockscale_formats::layout::{self, swizzled_offset};
use blockscale_formats::{Fp8Tile, QuantizedMatrix, ScaleData, ScaleLayout, Scheme};
use blockscale_golden::{GoldenFile, case};

type TestResult = Result<(), Box<dyn Error>>;

// ---------------------------------------------------------------------------------------
// Finding and building the oracle

/// The workspace root at build time. Not canonicalized: the GPU bundle runs this binary
/// on machines without the source tree, where the oracle must skip, not panic.
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The target dir this test was built in (`CARGO_TARGET_DIR`, else `target/`), where
/// `cargo xtask setup-cuda` installs: cargo's `CARGO_TARGET_TMPDIR` is its `tmp/`.
fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("..")
}

/// Whether a missing oracle must fail the test (`CI` set and not false, or
/// `BLOCKSCALE_REQUIRE_ORACLES=1`) rather than skip it.
fn oracle_required() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
        || std::env::var("BLOCKSCALE_REQUIRE_ORACLES").is_ok_and(|v| v == "1")
}

/// Skips (prints why) or, when oracles are required, fails.
fn skip_or_fail(what: &str) {
    if oracle_required() {
        panic!("{what}; under CI a missing oracle is a failure. Run `cargo xtask setup-cuda`, which installs it.");
    }
    eprintln!(
        "SKIPPED: {what}. Run `cargo xtask setup-cuda` (it installs CUTLASS and the CUDA headers under target/)."
    );
}

/// CUTLASS 4.2 (the folder holding `include/` and `tools/`), found as build.rs finds it.
fn cutlass_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("CUTLASS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join("cutlass-4.2/cutlass_library/source"));
    let present = dir.join("include/cutlass/cutlass.h").is_file()
        && dir.join("tools/util/include/cutlass/util/reference/host/gett.hpp").is_file();
    present.then_some(dir)
}

/// The CUDA toolkit headers CUTLASS includes (`cuda_runtime_api.h`, `cuda_fp16.h`).
fn cuda_home() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = ["BLOCKSCALE_CUDA_HOME", "CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(|v| std::env::var_os(v).map(PathBuf::from))
        .collect();
    candidates.push(target_dir().join("cuda-13.0/nvidia/cu13"));
    candidates
        .into_iter()
        .find(|p| p.join("include/cuda_runtime_api.h").is_file() && p.join("include/cuda_fp16.h").is_file())
}

/// Builds the oracle once per test process; `None` (after printing why) if the headers
/// or the compiler are missing. A compile failure with everything present is a failure.
fn oracle() -> Option<&'static Path> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let built = BIN.get_or_init(|| {
        let cutlass = cutlass_dir().ok_or("CUTLASS 4.2 headers not found (CUTLASS_DIR or target/cutlass-4.2)")?;
        let cuda = cuda_home().ok_or("CUDA headers (cuda_runtime_api.h, cuda_fp16.h) not found")?;
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oracle/cutlass_oracle.cpp");
        let bin = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cutlass_oracle");
        let cxx = std::env::var("CXX").unwrap_or_else(|_| "g++".into());
        let mut cmd = Command::new(&cxx);
        cmd.args(["-std=c++17", "-O2", "-Wno-deprecated-declarations", "-o"]).arg(&bin).arg(&src);
        for inc in [cutlass.join("include"), cutlass.join("tools/util/include"), cuda.join("include")] {
            cmd.arg(format!("-I{}", inc.display()));
        }
        if cuda.join("include/cccl").is_dir() {
            cmd.arg(format!("-I{}", cuda.join("include/cccl").display()));
        }
        let start = Instant::now();
        let out = cmd.output().map_err(|e| format!("could not run {cxx}: {e}"))?;
        assert!(
            out.status.success(),
            "building the CUTLASS oracle failed: {cmd:?}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!("built the CUTLASS oracle with {cxx} in {:.1} s", start.elapsed().as_secs_f64());
        Ok(bin)
    });
    match built {
        Ok(p) => Some(p.as_path()),
        Err(why) => {
            skip_or_fail(&format!("CUTLASS oracle unavailable: {why}"));
            None
        }
    }
}

/// Runs one oracle mode on `input`, returning its output file.
fn run_oracle(bin: &Path, mode: &str, input: &[u8]) -> Vec<u8> {
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let tag = format!("{mode}-{}-{}", std::process::id(), CALLS.fetch_add(1, Ordering::Relaxed));
    let (inp, outp) = (dir.join(format!("cutlass-in-{tag}")), dir.join(format!("cutlass-out-{tag}")));
    std::fs::write(&inp, input).expect("write the oracle's input");
    let out = Command::new(bin).arg(mode).arg(&inp).arg(&outp).output().expect("run the CUTLASS oracle");
    assert!(out.status.success(), "the CUTLASS oracle failed in mode {mode}: {}", String::from_utf8_lossy(&out.stderr));
    let result = std::fs::read(&outp).expect("read the oracle's output");
    let _ = std::fs::remove_file(&inp);
    let _ = std::fs::remove_file(&outp);
    result
}

/// Little-endian reads from the oracle's output.
struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let (head, rest) = self.0.split_first_chunk::<N>().expect("oracle output is too short");
        self.0 = rest;
        *head
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }
    fn u64(&mut self) -> usize {
        usize::try_from(u64::from_le_bytes(self.take())).expect("fits usize")
    }
}

/// Seeded shapes from the project's generator (blockscale_formats::rng).
struct Rng(blockscale_formats::rng::SplitMix64);

impl Rng {
    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.0.next_u64() % (hi - lo + 1) as u64) as usize
    }
}

// ---------------------------------------------------------------------------------------
// Scale layouts

/// One scale-factor layout as the oracle reports it.
struct CutlassLayout {
    /// Size of the layout's row mode (rows after CUTLASS's padding).
    rows: usize,
    /// Size of its K mode, in elements.
    k: usize,
    cosize: usize,
    /// `size(filter_zeros(layout))`: the allocation CUTLASS's examples make.
    storage: usize,
    /// `layout(r, j * vec, 0)` for every row and K-block of the domain, row-major.
    offsets: Vec<u32>,
}

impl CutlassLayout {
    fn read(c: &mut Cursor<'_>, vec: usize) -> Self {
        let (rows, k, cosize, storage) = (c.u64(), c.u64(), c.u64(), c.u64());
        let offsets = (0..rows * (k / vec)).map(|_| c.u32()).collect();
        Self { rows, k, cosize, storage, offsets }
    }
}

/// CUTLASS's SFA and SFB layouts for each `(rows, kblocks)` shape at block size `vec`
/// (16 or 32: `Sm1xxBlockScaledConfig<vec>`; 128: the FP8 blockwise config).
fn cutlass_layouts(bin: &Path, shapes: &[(usize, usize)], vec: usize) -> Vec<[CutlassLayout; 2]> {
    let mut input = Vec::new();
    input.extend((shapes.len() as u32).to_le_bytes());
    for &(rows, kblocks) in shapes {
        for v in [rows, kblocks, vec] {
            input.extend((v as u32).to_le_bytes());
        }
    }
    let out = run_oracle(bin, "layout", &input);
    let mut c = Cursor(&out);
    let layouts = shapes.iter().map(|_| [CutlassLayout::read(&mut c, vec), CutlassLayout::read(&mut c, vec)]).collect();
    assert!(c.0.is_empty(), "{} unread bytes of oracle output", c.0.len());
    layouts
}

/// Counts the problems of a check, keeps the first few of each part for the report,
/// and fails with them at the end.
#[derive(Default)]
struct Problems {
    count: usize,
    /// Problems of the current part (a shape or a GEMM case).
    in_part: usize,
    report: String,
}

impl Problems {
    /// Starts a new part: its first problems are reported even after earlier ones.
    fn part(&mut self) {
        self.in_part = 0;
    }
    fn push(&mut self, what: impl FnOnce() -> String) {
        self.count += 1;
        self.in_part += 1;
        if self.in_part <= 4 && self.report.lines().count() < 40 {
            self.report += &what();
            self.report.push('\n');
        }
    }
    fn check(self, what: &str) {
        assert!(self.count == 0, "{} disagreements with CUTLASS ({what}), first ones:\n{}", self.count, self.report);
    }
}

/// Row counts and K-block counts around every tile edge (128 rows, 4 K-blocks).
const ROWS: [usize; 19] = [1, 2, 31, 32, 33, 64, 127, 128, 129, 200, 255, 256, 257, 300, 383, 384, 385, 512, 1000];
const KBLOCKS: [usize; 18] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 16, 17, 31, 33, 64, 67, 70];

/// The fixed grid plus a seeded sweep of random shapes.
fn layout_shapes(random: usize, max_rows: usize, max_kblocks: usize) -> Vec<(usize, usize)> {
    let mut shapes: Vec<(usize, usize)> = ROWS.iter().flat_map(|&r| KBLOCKS.iter().map(move |&k| (r, k))).collect();
    let mut rng = Rng(blockscale_formats::rng::SplitMix64::new(0xc075_1a55_0e4a_c1e5));
    shapes.extend((0..random).map(|_| (rng.range(1, max_rows), rng.range(1, max_kblocks))));
    shapes
}

/// CUTLASS's `Sm1xxBlockScaledConfig<16>` and `<32>` SFA/SFB layouts (what the NVFP4 and
/// MX shims pass) against `Swizzled128x4`: the padded domain, the storage size, every
/// offset of every (row, K-block) (padding positions included: CUTLASS would read them
/// for a ragged tile), and that those offsets are exactly `0..storage_len` once each.
#[test]
fn cutlass_scale_layout_is_swizzled128x4() {
    let Some(bin) = oracle() else { return };
    let shapes = layout_shapes(200, 700, 48);
    let (mut offsets, mut problems) = (0usize, Problems::default());
    for vec in [16, 32] {
        let layouts = cutlass_layouts(bin, &shapes, vec);
        for (&(rows, kblocks), pair) in shapes.iter().zip(&layouts) {
            let (prows, pcols) = ScaleLayout::Swizzled128x4.padded_shape(rows, kblocks).unwrap();
            let storage = ScaleLayout::Swizzled128x4.storage_len(rows, kblocks).unwrap();
            for (operand, l) in ["SFA", "SFB"].into_iter().zip(pair) {
                problems.part();
                let at = || format!("vec {vec} {operand} rows {rows} kblocks {kblocks}");
                if (l.rows, l.k) != (prows, pcols * vec) {
                    problems.push(|| {
                        format!(
                            "{}: CUTLASS's domain is {} x {} elements, ours {prows} x {}",
                            at(),
                            l.rows,
                            l.k,
                            pcols * vec
                        )
                    });
                    continue;
                }
                if l.storage != storage || l.cosize != storage {
                    problems.push(|| {
                        format!("{}: CUTLASS needs {} (cosize {}), storage_len is {storage}", at(), l.storage, l.cosize)
                    });
                }
                for (i, &theirs) in l.offsets.iter().enumerate() {
                    let (r, j) = (i / pcols, i % pcols);
                    let ours = swizzled_offset(r, j, kblocks);
                    if theirs as usize != ours {
                        let pad = if r >= rows || j >= kblocks { " (padding)" } else { "" };
                        problems.push(|| format!("{}: row {r} kblock {j}{pad}: CUTLASS {theirs}, ours {ours}", at()));
                    }
                }
                let mut sorted = l.offsets.clone();
                sorted.sort_unstable();
                if !sorted.iter().enumerate().all(|(i, &o)| o as usize == i) || sorted.len() != storage {
                    problems.push(|| format!("{}: CUTLASS's offsets are not a bijection onto 0..{storage}", at()));
                }
                offsets += l.offsets.len();
            }
        }
    }
    eprintln!(
        "{} shapes x 2 block sizes x SFA/SFB: {offsets} scale offsets match Swizzled128x4 (padding included)",
        shapes.len()
    );
    problems.check("Sm1xxBlockScaledConfig vs Swizzled128x4");
}

/// CUTLASS's `Sm120BlockwiseScaleConfig<1, 128, 128, K, K>` (what the FP8 blockwise shim
/// passes) against blockscale's `Linear` FP8 block scales: SFA `[M][K/128]`, SFB
/// `[ceil(N/128)][K/128]`, storage as `QuantShape::scale_len` says.
#[test]
fn cutlass_fp8_blockwise_scale_layout_is_linear() {
    let Some(bin) = oracle() else { return };
    let shapes = layout_shapes(100, 700, 24);
    let layouts = cutlass_layouts(bin, &shapes, 128);
    let (mut offsets, mut problems) = (0usize, Problems::default());
    for (&(rows, kblocks), pair) in shapes.iter().zip(&layouts) {
        for (tile, l) in [Fp8Tile::Row1x128, Fp8Tile::Tile128x128].into_iter().zip(pair) {
            problems.part();
            let shape = Scheme::Fp8Block(tile).shape(rows, kblocks * 128).unwrap();
            let storage = shape.scale_len(ScaleLayout::Linear).unwrap();
            let block_rows = Scheme::Fp8Block(tile).block_rows();
            let at = || format!("{tile:?} rows {rows} kblocks {kblocks}");
            // CUTLASS's row mode covers whole row blocks.
            if (l.rows, l.k) != (shape.scale_rows * block_rows, kblocks * 128) || l.storage != storage {
                problems.push(|| {
                    format!(
                        "{}: CUTLASS's domain {} x {}, storage {}; ours {} x {}, storage {storage}",
                        at(),
                        l.rows,
                        l.k,
                        l.storage,
                        shape.scale_rows * block_rows,
                        kblocks * 128
                    )
                });
                continue;
            }
            for (i, &theirs) in l.offsets.iter().enumerate() {
                let (r, j) = (i / kblocks, i % kblocks);
                let ours = ScaleLayout::Linear.offset(r / block_rows, j, shape.scale_cols);
                if theirs as usize != ours {
                    problems.push(|| format!("{}: row {r} kblock {j}: CUTLASS {theirs}, ours {ours}", at()));
                }
            }
            offsets += l.offsets.len();
        }
    }
    eprintln!("{} shapes x SFA/SFB: {offsets} FP8 blockwise scale offsets match the Linear layout", shapes.len());
    problems.check("Sm120BlockwiseScaleConfig<1, 128, 128> vs Linear");
}

// ---------------------------------------------------------------------------------------
// GEMM

/// The oracle's operand kind for a scheme (see cutlass_oracle.cpp).
fn kind(scheme: Scheme) -> Option<u32> {
    Some(match scheme {
        Scheme::NvFp4 => 0,
        Scheme::MxFp4 => 1,
        Scheme::MxFp6E2M3 => 2,
        Scheme::MxFp6E3M2 => 3,
        Scheme::MxFp8E4M3 => 4,
        Scheme::MxFp8E5M2 => 5,
        Scheme::Fp8Block(_) => 6,
        Scheme::Int4G32 | Scheme::Int4G128 => return None,
    })
}

/// The matrix with its one-byte scales in `Swizzled128x4`, the layout the block-scaled
/// shims take (FP8 block scales stay `Linear`, as the FP8 shim takes them).
fn as_gpu_takes_it(q: QuantizedMatrix) -> Result<QuantizedMatrix, Box<dyn Error>> {
    if q.scale_layout() == ScaleLayout::Swizzled128x4 || !q.scheme().supports_layout(ScaleLayout::Swizzled128x4) {
        return Ok(q);
    }
    let (rows, cols) = (q.shape().scale_rows, q.shape().scale_cols);
    let mut parts = q.into_parts();
    let ScaleData::Bytes(linear) = &parts.scales else { return Err("swizzled scales are bytes".into()) };
    let swizzled = layout::convert_vec(linear, ScaleLayout::Linear, ScaleLayout::Swizzled128x4, rows, cols)?;
    parts.scales = ScaleData::Bytes(swizzled);
    parts.scale_layout = ScaleLayout::Swizzled128x4;
    Ok(QuantizedMatrix::from_parts(parts)?)
}

fn push_blob(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend((bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// CUTLASS's host reference: `alpha * A . B^T`, `M x N` f32.
fn cutlass_gemm(bin: &Path, a: &QuantizedMatrix, b: &QuantizedMatrix, alpha: f32) -> Vec<f32> {
    let mut input = Vec::new();
    for v in [a.rows(), b.rows(), a.k()] {
        input.extend((v as u32).to_le_bytes());
    }
    for s in [a.scheme(), b.scheme()] {
        input.extend(kind(s).expect("a block-scaled scheme").to_le_bytes());
    }
    input.extend(alpha.to_le_bytes());
    for q in [a, b] {
        push_blob(&mut input, q.data());
        push_blob(&mut input, &case::scale_bytes(q.scales()));
    }
    let out = run_oracle(bin, "gemm", &input);
    assert_eq!(out.len(), a.rows() * b.rows() * 4, "oracle output length");
    out.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn ulp(x: f32) -> f64 {
    let a = x.abs().max(f32::MIN_POSITIVE);
    if !a.is_finite() {
        return f64::INFINITY;
    }
    (f32::from_bits(a.to_bits() + 1) - a) as f64
}

/// The fast path's bound from blockscale-golden's verify.rs (docs/NUMERICS.md), for an
/// identity epilogue: `n u / (1 - n u) * T * 1.001 + 3 ulp(want)` with
/// `n = K + K/B + B + 8`, `u = 2^-24`, and `T = |alpha| sum_k |a_k b_k|` over the values
/// the accumulation adds (element times block scale; NVFP4's per-tensor factors are in
/// `alpha`, so `T` is verify.rs's `sum |a b|` over dequantized values, divided by the
/// per-tensor factors and multiplied by `|alpha|`, as its cuda bound does). CUTLASS's
/// reference adds the K exact products in order in f32 (FP8 blockwise: after rounding
/// each element times its f32 scale), then multiplies by `alpha`: within this bound.
fn bounds(a: &QuantizedMatrix, b: &QuantizedMatrix, alpha: f32, want: &[f32]) -> Vec<f64> {
    let (m, n, k) = (a.rows(), b.rows(), a.k());
    let (av, bv) = (dequantize::<f32>(a), dequantize::<f32>(b));
    let decode = |q: &QuantizedMatrix| q.global_scale().map_or(1.0, |g| g.decode() as f64);
    let scale = alpha.abs() as f64 / (decode(a) * decode(b));
    let block = b.scheme().block_size();
    let nu = (k + k / block + block + 8) as f64 * 2f64.powi(-24);
    (0..m * n)
        .map(|i| {
            let (r, c) = (i / n, i % n);
            let t: f64 = av.row(r).iter().zip(bv.row(c)).map(|(&x, &y)| (x as f64 * y as f64).abs()).sum();
            nu / (1.0 - nu) * scale * t * 1.001 + 3.0 * ulp(want[i])
        })
        .collect()
}

/// One comparison of CUTLASS's reference with `gemm_reference` on `a x b`.
struct Checked {
    exact: bool,
    /// Largest |difference| / bound (0 on exact cases).
    worst: f64,
}

/// Runs `a x b` both ways and compares: bit for bit if `exact`, else within [`bounds`].
fn check_pair(
    bin: &Path,
    name: &str,
    (a, b): (&QuantizedMatrix, &QuantizedMatrix),
    alpha: Option<f32>,
    exact: bool,
    problems: &mut Problems,
) -> Result<Checked, Box<dyn Error>> {
    let epilogue: Epilogue<'_> = Epilogue { alpha, ..Default::default() };
    let want = gemm_reference::<f32>(a, b, &epilogue)?.into_raw_vec_and_offset().0;
    let alpha = epilogue.alpha_quantized(a.global_scale(), b.global_scale());
    let got = cutlass_gemm(bin, a, b, alpha);
    let bound = if exact { vec![0.0; want.len()] } else { bounds(a, b, alpha, &want) };
    let n = b.rows();
    let (mut worst, before) = (0f64, problems.count);
    problems.part();
    for (i, ((&g, &w), &e)) in got.iter().zip(&want).zip(&bound).enumerate() {
        let (r, c) = (i / n, i % n);
        if exact {
            if g.to_bits() != w.to_bits() {
                problems.push(|| {
                    format!(
                        "{name} [{r}, {c}]: CUTLASS {g:e} ({:#010x}), ours {w:e} ({:#010x})",
                        g.to_bits(),
                        w.to_bits()
                    )
                });
            }
            continue;
        }
        let diff = (g as f64 - w as f64).abs();
        worst = worst.max(diff / e);
        if !(diff <= e || g.is_nan() && w.is_nan()) {
            problems.push(|| format!("{name} [{r}, {c}]: CUTLASS {g:e}, ours {w:e}, |diff| {diff:e} > bound {e:e}"));
        }
    }
    let verdict = match (problems.count - before, exact) {
        (0, true) => "bit for bit".to_string(),
        (0, false) => format!("within the bound (worst |diff| / bound {worst:.3})"),
        (bad, _) => format!("FAIL: {bad} of {} values differ", want.len()),
    };
    eprintln!("{name} ({} x {n} x {}, alpha {alpha:e}): {verdict}", a.rows(), a.k());
    Ok(Checked { exact, worst })
}

/// CUTLASS's host reference GEMM against `gemm_reference` on every quantized x quantized
/// golden case, with the operands as the shims take them (NVFP4/MX scales in
/// `Swizzled128x4`, FP8 blockwise scales `Linear`) and an epilogue of `alpha` only (the
/// case's explicit alpha, or the automatic one `Epilogue::alpha_quantized` resolves; no
/// bias, no activation: those are the shims' own epilogue, checked elsewhere). Mixed
/// MXFP6 x MXFP8 cases also run with the operands swapped (MXFP8 x MXFP6 is the order of
/// the mixed shim). Weight-only cases are skipped: they have no SM120 CUTLASS kernel.
#[test]
fn cutlass_host_reference_agrees_with_gemm_reference() -> TestResult {
    let Some(bin) = oracle() else { return Ok(()) };
    let dir = workspace_root().join("tests/golden");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)?.map(|e| e.map(|e| e.path())).collect::<Result<_, _>>()?;
    paths.retain(|p| p.file_name().and_then(|f| f.to_str()).is_some_and(|f| f.starts_with("gemm-")));
    paths.sort();
    let (mut results, mut skipped, mut problems) = (Vec::new(), Vec::new(), Problems::default());
    for path in &paths {
        let file = GoldenFile::open(path)?;
        let name = file.meta("case")?.to_string();
        if file.meta_opt("a.scheme").is_none() {
            skipped.push(name);
            continue;
        }
        let a = as_gpu_takes_it(case::get_matrix(&file, "a")?)?;
        let b = as_gpu_takes_it(case::get_matrix(&file, "b")?)?;
        let alpha = match file.meta("alpha")? {
            "auto" => None,
            _ => Some(file.f32_bits("alpha")?),
        };
        let exact = file.meta("exact")? == "true";
        assert_eq!(exact, name.ends_with("-exact"), "{name}: the `exact` flag and the name disagree");
        results.push(check_pair(bin, &name, (&a, &b), alpha, exact, &mut problems)?);
        if a.scheme().element().bits() != b.scheme().element().bits() {
            let swapped = format!("{name} (B x A)");
            results.push(check_pair(bin, &swapped, (&b, &a), alpha, exact, &mut problems)?);
        }
    }
    let exact = results.iter().filter(|c| c.exact).count();
    let worst = results.iter().map(|c| c.worst).fold(0.0, f64::max);
    eprintln!(
        "{} GEMMs checked against CUTLASS's host reference: {exact} bit for bit, {} within the bound \
         (worst |diff| / bound {worst:.3}); skipped (weight-only): {}",
        results.len(),
        results.len() - exact,
        skipped.join(", ")
    );
    assert!(!results.is_empty(), "no quantized x quantized GEMM golden cases under {}", dir.display());
    problems.check("Gett vs gemm_reference");
    Ok(())
}
