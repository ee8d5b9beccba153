//! GEMV and GEMM on quantized operands against the baseline measured in the same run:
//! dequantize to f32, then ndarray's f32 product (matrixmultiply), plus a memcpy anchor
//! and the CPU's multiply-add peaks (BF16 and int8 dot products, AVX2 FMA; their
//! GFLOP/s are the ceilings of the rows that run on them).
//!
//! `cargo bench -p blockscale-cpu --bench gemm` runs criterion, then prints a best-of-N
//! summary with the ratios; `-- --summary-only` skips criterion; `-- --reference` also
//! times the exact reference on 2048^3; `-- --only TEXT` keeps the cases naming TEXT.
//!
//! Why this bench stays beside the facade's (benches/backend.rs, which times every scheme
//! through `Backend::Cpu` with default options): it times the crate's own paths, which the
//! facade does not choose between: one thread against all, the forced `Simd::Avx2`
//! kernels, int8 against exact activations, f32 activations, and the exact reference.

use std::hint::black_box;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use blockscale_cpu::{
    ActivationPrecision, Epilogue, GemmOptions, PanelWeights, QuantizeOptions, QuantizedMatrix, Simd, dequantize, gemm,
    gemm_reference, gemm_weight_only, gemm_weight_only_panels, quantize,
};
use blockscale_formats::rng::SplitMix64;
use blockscale_formats::{Fp8Tile, GlobalScale, GlobalScaleSource, ScaleLayout, Scheme};
use criterion::Criterion;
use half::bf16;
use ndarray::Array2;

fn data(rows: usize, cols: usize, seed: u64) -> Array2<f32> {
    let mut rng = SplitMix64::new(seed);
    Array2::from_shape_simple_fn((rows, cols), || {
        let s = rng.next_u64();
        let u = ((s >> 40) as f32 + ((s >> 16) & 0xff_ffff) as f32) / (1u64 << 24) as f32 - 1.0;
        if (s >> 8) & 1023 == 0 { u * 20.0 } else { u }
    })
}

fn quant(x: &Array2<f32>, scheme: Scheme) -> QuantizedMatrix {
    let layout = if scheme.supports_layout(ScaleLayout::Swizzled128x4) {
        ScaleLayout::Swizzled128x4
    } else {
        ScaleLayout::Linear
    };
    let mut opts = QuantizeOptions::default().with_scale_layout(layout);
    if scheme == Scheme::NvFp4 {
        opts = opts.with_global_scale(GlobalScaleSource::Given(GlobalScale::from_amax(20.0).unwrap()));
    }
    quantize(x.view(), scheme, &opts).unwrap()
}

type Run = Box<dyn Fn() + Sync>;

struct Case {
    name: String,
    run: Run,
    /// Multiply-adds per run (0 for the memcpy anchor).
    macs: f64,
    /// Bytes of quantized operands read per run (packed data and scales).
    bytes: f64,
    baseline: bool,
}

fn case(name: impl Into<String>, macs: f64, baseline: bool, run: impl Fn() + Sync + 'static) -> Case {
    Case { name: name.into(), run: Box::new(run), macs, bytes: 0.0, baseline }
}

/// The multiply-add ceilings the products are measured against: independent
/// dot-product instructions on registers only, on every thread of the pool at once.
/// Their GFLOP/s (two per multiply-add) compare directly with the products' rows: the
/// 4-bit GEMM and GEMV run on `vpdpbusd` (or AVX2 `vpmaddubsw`), the MXFP8 and FP8 GEMM
/// on `vdpbf16ps` (or AVX2 f32 FMA).
#[cfg(target_arch = "x86_64")]
mod peak {
    use core::arch::x86_64::*;

    /// Loop trips per thread and call.
    pub const ITERS: usize = 1 << 20;
    /// Independent accumulators (instructions per trip) in zmm and ymm registers.
    pub const CHAINS: usize = 16;
    pub const CHAINS_YMM: usize = 12;

    /// Keeps the compiler from running one accumulator's chain to the end before the
    /// next (which would measure latency, not throughput).
    #[inline(always)]
    fn barrier() {
        // SAFETY: an empty instruction sequence touching no memory or stack.
        unsafe { core::arch::asm!("", options(nomem, nostack)) };
    }

    /// # Safety
    /// The CPU has AVX-512 F, BW and BF16.
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    pub unsafe fn bf16() -> f32 {
        let mut acc = [_mm512_setzero_ps(); CHAINS];
        // SAFETY: a 64-byte vector of bf16 pairs is any bit pattern.
        let a: __m512bh = unsafe { core::mem::transmute(_mm512_set1_epi32(0x3f80_3f80)) };
        for _ in 0..ITERS {
            for x in acc.iter_mut() {
                *x = _mm512_dpbf16_ps(*x, a, a);
            }
            barrier();
        }
        _mm512_reduce_add_ps(acc.iter().fold(_mm512_setzero_ps(), |s, v| _mm512_add_ps(s, *v)))
    }

    /// # Safety
    /// The CPU has AVX-512 F, BW and VNNI.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub unsafe fn int8() -> i32 {
        let mut acc = [_mm512_setzero_si512(); CHAINS];
        let a = _mm512_set1_epi8(1);
        for _ in 0..ITERS {
            for x in acc.iter_mut() {
                *x = _mm512_dpbusd_epi32(*x, a, a);
            }
            barrier();
        }
        _mm512_reduce_add_epi32(acc.iter().fold(_mm512_setzero_si512(), |s, v| _mm512_add_epi32(s, *v)))
    }

    /// # Safety
    /// The CPU has AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn fma256() -> f32 {
        // 12 chains: AVX2 has 16 registers.
        let mut acc = [_mm256_setzero_ps(); CHAINS_YMM];
        let a = _mm256_set1_ps(1.0);
        for _ in 0..ITERS {
            for x in acc.iter_mut() {
                *x = _mm256_fmadd_ps(*x, a, a);
            }
            barrier();
        }
        let mut lanes = [0f32; 8];
        let sum = acc.iter().fold(_mm256_setzero_ps(), |s, v| _mm256_add_ps(s, *v));
        // SAFETY: `lanes` holds eight f32.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), sum) };
        lanes.iter().sum()
    }
}

#[cfg(target_arch = "x86_64")]
fn peak_cases(v: &mut Vec<Case>) {
    let threads = rayon::current_num_threads() as f64;
    let per_call = (peak::ITERS * peak::CHAINS) as f64 * threads;
    let per_call_ymm = (peak::ITERS * peak::CHAINS_YMM) as f64 * threads;
    if is_x86_feature_detected!("avx512bf16") && is_x86_feature_detected!("avx512bw") {
        v.push(case("peak: vdpbf16ps zmm (BF16 dot), all threads", per_call * 32.0, false, || {
            // SAFETY: AVX-512 F/BW/BF16 detected above.
            black_box(rayon::broadcast(|_| unsafe { peak::bf16() }));
        }));
    }
    if is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512bw") {
        v.push(case("peak: vpdpbusd zmm (int8 dot), all threads", per_call * 64.0, false, || {
            // SAFETY: AVX-512 F/BW/VNNI detected above.
            black_box(rayon::broadcast(|_| unsafe { peak::int8() }));
        }));
    }
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        v.push(case("peak: vfmadd ymm (AVX2 f32 FMA), all threads", per_call_ymm * 8.0, false, || {
            // SAFETY: AVX2 and FMA detected above.
            black_box(rayon::broadcast(|_| unsafe { peak::fma256() }));
        }));
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn peak_cases(_: &mut Vec<Case>) {}

/// The GEMV rows: the two 4-bit schemes with panel kernels, and the 8- and 6-bit
/// schemes the streaming kernels take (INT4 has the 4-bit rows' kernels).
const GEMV_SCHEMES: [Scheme; 6] = [
    Scheme::MxFp4,
    Scheme::NvFp4,
    Scheme::MxFp8E4M3,
    Scheme::MxFp8E5M2,
    Scheme::Fp8Block(Fp8Tile::Tile128x128),
    Scheme::MxFp6E2M3,
];

/// Whether `scheme`'s elements are E4M3 (panels without an AVX2 kernel).
fn e4m3(scheme: Scheme) -> bool {
    matches!(scheme, Scheme::MxFp8E4M3 | Scheme::Fp8Block(_))
}

fn gemv_cases(v: &mut Vec<Case>) {
    for (n, k) in [(4096, 4096), (16384, 2048)] {
        let x = data(1, k, 7).mapv(bf16::from_f32);
        let x: &'static Array2<bf16> = Box::leak(Box::new(x));
        let w = data(n, k, 11);
        for scheme in GEMV_SCHEMES {
            let q: &'static QuantizedMatrix = Box::leak(Box::new(quant(&w, scheme)));
            let macs = (n * k) as f64;
            v.push(case(format!("gemv {scheme} {n}x{k}: dequantize + ndarray sgemv (baseline)"), macs, true, || {
                let wf = dequantize::<f32>(q);
                let xf = x.mapv(|v| v.to_f32());
                black_box(xf.dot(&wf.t()));
            }));
            let wf: &'static Array2<f32> = Box::leak(Box::new(dequantize::<f32>(q)));
            v.push(case(
                format!("gemv {scheme} {n}x{k}: ndarray sgemv alone (f32 weights ready)"),
                macs,
                false,
                || {
                    let xf = x.mapv(|v| v.to_f32());
                    black_box(xf.dot(&wf.t()));
                },
            ));
            for (label, prec) in [("exact", ActivationPrecision::Exact), ("int8 act", ActivationPrecision::Int8Blocks)]
            {
                for single in [true, false] {
                    let opts = GemmOptions::default().with_single_thread(single).with_activations(prec);
                    let threads = if single { "1 thread" } else { "all threads" };
                    let mut c = case(format!("gemv {scheme} {n}x{k}: {label}, {threads}"), macs, false, move || {
                        black_box(gemm_weight_only::<bf16, f32>(x.view(), q, &Epilogue::default(), &opts).unwrap());
                    });
                    c.bytes = q.storage_bytes() as f64;
                    v.push(c);
                }
            }
            // f32 activations are not exact in bf16: they take the AVX2 f32 kernel.
            let xf: &'static Array2<f32> = Box::leak(Box::new(data(1, k, 7)));
            let mut c =
                case(format!("gemv {scheme} {n}x{k}: exact, f32 activations, all threads"), macs, false, || {
                    black_box(
                        gemm_weight_only::<f32, f32>(xf.view(), q, &Epilogue::default(), &GemmOptions::default())
                            .unwrap(),
                    );
                });
            c.bytes = q.storage_bytes() as f64;
            v.push(c);
            // Panel weights: the 4-bit schemes, MXFP6 E2M3 and E4M3.
            let Ok(panels) = PanelWeights::new(q) else { continue };
            let panels: &'static PanelWeights = Box::leak(Box::new(panels));
            for single in [true, false] {
                let opts =
                    GemmOptions::default().with_single_thread(single).with_activations(ActivationPrecision::Int8Blocks);
                let threads = if single { "1 thread" } else { "all threads" };
                let mut c =
                    case(format!("gemv {scheme} {n}x{k}: panels, int8 act, {threads}"), macs, false, move || {
                        black_box(
                            gemm_weight_only_panels::<bf16, f32>(x.view(), panels, &Epilogue::default(), &opts)
                                .unwrap(),
                        );
                    });
                c.bytes = panels.storage_bytes() as f64;
                v.push(c);
            }
            // E4M3 panels have no AVX2 kernel (the portable one would run).
            if blockscale_cpu::avx2_available() && !e4m3(scheme) {
                // The kernel of CPUs without AVX-512 VNNI.
                let opts =
                    GemmOptions::default().with_simd(Simd::Avx2).with_activations(ActivationPrecision::Int8Blocks);
                let mut c = case(
                    format!("gemv {scheme} {n}x{k}: panels, int8 act, Simd::Avx2, all threads"),
                    macs,
                    false,
                    move || {
                        black_box(
                            gemm_weight_only_panels::<bf16, f32>(x.view(), panels, &Epilogue::default(), &opts)
                                .unwrap(),
                        );
                    },
                );
                c.bytes = panels.storage_bytes() as f64;
                v.push(c);
            }
        }
    }
}

/// GEMV with a small decode batch (M = 16) and with cold weights: a call per copy of
/// the weights, rotating through copies larger than any L3 (384 MiB in all), so the
/// weights come from DRAM (compare their GB/s with the memcpy anchor).
fn batch_and_cold_cases(v: &mut Vec<Case>) {
    let (n, k) = (4096, 4096);
    let w = data(n, k, 11);
    for scheme in GEMV_SCHEMES {
        let q: &'static QuantizedMatrix = Box::leak(Box::new(quant(&w, scheme)));
        let panels: Option<&'static PanelWeights> = PanelWeights::new(q).ok().map(|p| &*Box::leak(Box::new(p)));
        let x16: &'static Array2<bf16> = Box::leak(Box::new(data(16, k, 9).mapv(bf16::from_f32)));
        let macs = (16 * n * k) as f64;
        for (label, prec) in [("exact", ActivationPrecision::Exact), ("int8 act", ActivationPrecision::Int8Blocks)] {
            let opts = GemmOptions::default().with_activations(prec);
            v.push(case(format!("gemv M=16 {scheme} {n}x{k}: {label}, all threads"), macs, false, move || {
                black_box(gemm_weight_only::<bf16, f32>(x16.view(), q, &Epilogue::default(), &opts).unwrap());
            }));
        }
        let copies = (384 << 20) / q.storage_bytes() + 1;
        let qs: &'static [QuantizedMatrix] = Box::leak((0..copies).map(|_| q.clone()).collect());
        let x: &'static Array2<bf16> = Box::leak(Box::new(data(1, k, 7).mapv(bf16::from_f32)));
        let next: &'static std::sync::atomic::AtomicUsize = Box::leak(Box::new(std::sync::atomic::AtomicUsize::new(0)));
        let macs1 = (n * k) as f64;
        for (label, prec) in [("exact", ActivationPrecision::Exact), ("int8 act", ActivationPrecision::Int8Blocks)] {
            let opts = GemmOptions::default().with_activations(prec);
            let mut c = case(format!("gemv cold {scheme} {n}x{k}: {label}, all threads"), macs1, false, move || {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % copies;
                black_box(gemm_weight_only::<bf16, f32>(x.view(), &qs[i], &Epilogue::default(), &opts).unwrap());
            });
            c.bytes = q.storage_bytes() as f64;
            v.push(c);
        }

        // Panel weights: the 4-bit schemes, MXFP6 E2M3 and E4M3.
        let Some(panels) = panels else { continue };
        let opts = GemmOptions::default().with_activations(ActivationPrecision::Int8Blocks);
        v.push(case(format!("gemv M=16 {scheme} {n}x{k}: panels, int8 act, all threads"), macs, false, move || {
            black_box(gemm_weight_only_panels::<bf16, f32>(x16.view(), panels, &Epilogue::default(), &opts).unwrap());
        }));
        if blockscale_cpu::avx2_available() && !e4m3(scheme) {
            let opts = opts.with_simd(Simd::Avx2);
            v.push(case(
                format!("gemv M=16 {scheme} {n}x{k}: panels, int8 act, Simd::Avx2, all threads"),
                macs,
                false,
                move || {
                    black_box(
                        gemm_weight_only_panels::<bf16, f32>(x16.view(), panels, &Epilogue::default(), &opts).unwrap(),
                    );
                },
            ));
        }
        let ps: &'static [PanelWeights] =
            Box::leak((0..copies).map(|_| PanelWeights::new(q).unwrap()).collect::<Vec<_>>().into_boxed_slice());
        let mut c =
            case(format!("gemv cold {scheme} {n}x{k}: panels, int8 act, all threads"), macs1, false, move || {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % copies;
                black_box(gemm_weight_only_panels::<bf16, f32>(x.view(), &ps[i], &Epilogue::default(), &opts).unwrap());
            });
        c.bytes = panels.storage_bytes() as f64;
        v.push(c);
    }
}

fn gemm_cases(v: &mut Vec<Case>) {
    for size in [1024, 2048] {
        let (a, b) = (data(size, size, 3), data(size, size, 5));
        let pairs = [
            (Scheme::NvFp4, Scheme::NvFp4),
            (Scheme::MxFp4, Scheme::MxFp4),
            (Scheme::MxFp8E4M3, Scheme::MxFp8E4M3),
            (Scheme::Fp8Block(Fp8Tile::Row1x128), Scheme::Fp8Block(Fp8Tile::Tile128x128)),
        ];
        for (scheme, wscheme) in pairs {
            let qa: &'static QuantizedMatrix = Box::leak(Box::new(quant(&a, scheme)));
            let qb: &'static QuantizedMatrix = Box::leak(Box::new(quant(&b, wscheme)));
            let macs = (size * size * size) as f64;
            v.push(case(format!("gemm {scheme} {size}^3: dequantize + ndarray sgemm (baseline)"), macs, true, || {
                let (af, bf) = (dequantize::<f32>(qa), dequantize::<f32>(qb));
                black_box(af.dot(&bf.t()));
            }));
            for single in [true, false] {
                let opts = GemmOptions::default().with_single_thread(single);
                let threads = if single { "1 thread" } else { "all threads" };
                v.push(case(format!("gemm {scheme} {size}^3: fast, {threads}"), macs, false, move || {
                    black_box(gemm::<f32>(qa, qb, &Epilogue::default(), &opts).unwrap());
                }));
            }
            if size == 1024 && blockscale_cpu::avx2_available() {
                // The kernels of CPUs without AVX-512 BF16.
                for single in [true, false] {
                    let opts = GemmOptions::default().with_single_thread(single).with_simd(Simd::Avx2);
                    let threads = if single { "1 thread" } else { "all threads" };
                    v.push(case(
                        format!("gemm {scheme} {size}^3: fast, Simd::Avx2, {threads}"),
                        macs,
                        false,
                        move || {
                            black_box(gemm::<f32>(qa, qb, &Epilogue::default(), &opts).unwrap());
                        },
                    ));
                }
            }
        }
    }
}

/// The cases; with `--only TEXT` naming GEMV (GEMM) cases, the GEMM (GEMV) ones are not
/// built (their setup is most of a run's time).
fn cases(reference: bool, only: Option<&str>) -> Vec<Case> {
    let builds = |kind: &str| only.is_none_or(|t| !t.contains("gem") || t.contains(kind));
    let mut v = Vec::new();
    let src: &'static [u8] = Box::leak(vec![1u8; 64 << 20].into_boxed_slice());
    let dst = Mutex::new(vec![0u8; 64 << 20]);
    v.push(case("memcpy 64 MiB (anchor)", 0.0, false, move || dst.lock().unwrap().copy_from_slice(black_box(src))));
    peak_cases(&mut v);
    if builds("gemv") {
        gemv_cases(&mut v);
        batch_and_cold_cases(&mut v);
    }
    if builds("gemm") {
        gemm_cases(&mut v);
    }
    if reference {
        let (a, b) = (data(2048, 2048, 3), data(2048, 2048, 5));
        for scheme in [Scheme::NvFp4, Scheme::MxFp8E4M3] {
            let qa: &'static QuantizedMatrix = Box::leak(Box::new(quant(&a, scheme)));
            let qb: &'static QuantizedMatrix = Box::leak(Box::new(quant(&b, scheme)));
            v.push(case(format!("gemm {scheme} 2048^3: exact reference"), 2048f64.powi(3), false, || {
                black_box(gemm_reference::<f32>(qa, qb, &Epilogue::default()).unwrap());
            }));
        }
    }
    v
}

fn bench(c: &mut Criterion, cases: &[Case]) {
    let mut group = c.benchmark_group("cpu_gemm");
    group.sample_size(10).measurement_time(Duration::from_secs(3));
    for case in cases.iter().filter(|c| !c.name.contains("reference")) {
        group.bench_function(&case.name, |b| b.iter(|| (case.run)()));
    }
    group.finish();
}

fn summary(cases: &[Case]) {
    println!("\nsummary: best of several runs (at least 7, or 0.5 s)");
    println!("{:<66} {:>9} {:>9} {:>10} {:>16}", "case", "ms", "GFLOP/s", "vs base", "weights GB/s");
    let (mut base, mut copy) = (f64::NAN, f64::NAN);
    for case in cases {
        let t0 = Instant::now();
        (case.run)();
        let first = t0.elapsed().as_secs_f64();
        let reps = if first > 2.0 { 1 } else { ((0.5 / first) as usize).clamp(7, 500) };
        let best = (0..reps)
            .map(|_| {
                let t = Instant::now();
                (case.run)();
                t.elapsed().as_secs_f64()
            })
            .fold(first, f64::min);
        if case.baseline {
            base = best;
        }
        if case.name.contains("reference") {
            base = f64::NAN;
        }
        if case.macs == 0.0 {
            copy = (64u64 << 20) as f64 / best / 1e9;
            println!("{:<66} {:>9.3} {:>9} {:>10}   ({copy:.1} GB/s copied)", case.name, best * 1e3, "", "");
            continue;
        }
        let gflops = 2.0 * case.macs / best / 1e9;
        let ratio = if base.is_nan() { String::new() } else { format!("{:.2}x", base / best) };
        let stream = if case.bytes > 0.0 {
            let gbs = case.bytes / best / 1e9;
            format!("{gbs:.1} ({:.0}% copy)", 100.0 * gbs / copy)
        } else {
            String::new()
        };
        println!("{:<66} {:>9.3} {:>9.1} {:>10} {:>16}", case.name, best * 1e3, gflops, ratio, stream);
    }
    println!("(vs base: the baseline's time over the case's; > 1 is faster than dequantize + ndarray.");
    println!(" weights GB/s: quantized weight bytes per second, against the memcpy rate above)");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let reference = args.iter().any(|a| a == "--reference");
    // `--only TEXT`: keep the anchor, and the cases (with their baselines) naming TEXT.
    let only = args.iter().position(|a| a == "--only").and_then(|i| args.get(i + 1)).cloned();
    let mut cases = cases(reference, only.as_deref());
    if let Some(text) = only {
        cases.retain(|c| c.macs == 0.0 || c.name.starts_with("peak") || c.name.contains(&text));
    }
    if !std::env::args().any(|a| a == "--summary-only") {
        let mut c = Criterion::default().configure_from_args();
        bench(&mut c, &cases);
        c.final_summary();
    }
    summary(&cases);
}
