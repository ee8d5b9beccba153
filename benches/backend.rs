//! The facade's [`Backend`] API, every operation and every scheme, on the CPU and (with
//! `--features cuda`) on CUDA device 0, each case beside an anchor timed in the same run.
//!
//! `cargo bench --bench backend` (the root package; `cargo bench` at the root runs it with
//! the per-crate benches) runs criterion, then prints a summary table with each case's
//! time and its ratio to its anchor. `-- --summary-only` skips criterion; `-- --only TEXT`
//! keeps the cases whose name contains TEXT (and the anchors they need); `-- --backend
//! cpu|cuda` runs one backend (`cargo xtask bench --backend cuda` passes `cuda`); `-- --quick`
//! takes the small shapes and short criterion runs. Our flags but `--quick` and criterion's
//! own arguments do not mix: with `--only`, `--backend` or `--summary-only` criterion runs
//! with its defaults (its positional filter works on its own: `-- nvfp4`).
//!
//! Cases (bf16 in, bf16 out, `Epilogue::default()`), per scheme of [`Scheme::ALL`]:
//! `quantize` of an N x K bf16 matrix, `dequantize` of it to bf16, `gemm` of an M x K
//! operand by the N x K weights in the same scheme (every scheme but INT4-G32, which is
//! weight-only; plus DeepSeek's FP8 pair, 1x128 activations x 128x128 weights),
//! `gemm_weight_only` of M_wo x K bf16 activations and `gemv` of a K-vector. Shapes: N x K
//! = 1024 x 4096, M = 512 (gemm), M_wo = 16; `--quick`: 256 x 1024, M = 128, M_wo = 16.
//! Data: seeded bell-shaped values with rare 20x outliers. Swizzled scales where the
//! scheme takes them (NVFP4, MX), linear otherwise; NVFP4 with a given per-tensor scale.
//! A case the backend refuses (no kernel for the pair, say) is printed as skipped.
//!
//! CPU: criterion's `bench_function`; the summary takes each case's best of at least 5
//! calls (or 0.3 s). Anchors: a one-thread memcpy of the N x K bf16 matrix into a
//! preallocated buffer for quantize and dequantize (ratio = the fraction of copy speed),
//! and ndarray's f32 `dot` (matrixmultiply, one thread) on the same shapes with the
//! operands already dequantized to f32 for the products. blockscale runs on every rayon
//! thread. Each anchor is resampled before every case it anchors and its best over the
//! run is the one reported: on a busy machine a single anchor sample varies too much.
//!
//! CUDA: `iter_custom` records CUDA events on the device's stream around `iters` calls
//! and returns the elapsed time; the summary takes the median of 7 repetitions of 5 calls
//! after 3 warm-up calls. The facade's CUDA calls take and return host arrays: each
//! copies its inputs to the device, runs the kernels and copies the result back (and
//! waits for it), so the events time the whole convenience call, transfers and
//! allocations included. The anchor of each case is the same bytes moved the same way:
//! one `clone_htod` of the bytes the call uploads and one `clone_dtoh` of the bytes it
//! downloads (pageable host memory, as the facade's), timed the same way; a ratio near 1
//! means the call costs its transfers. The device-buffer kernels are timed by
//! blockscale-cuda's benches (`cargo xtask bench --backend cuda`).
//!
//! Criterion's element throughput counts elements for quantize and dequantize and FLOPs
//! (2 per multiply-add) for the products.

use std::hint::black_box;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use blockscale::half::bf16;
use blockscale::ndarray::{Array1, Array2};
use blockscale::rng::SplitMix64;
use blockscale::{
    Backend, Epilogue, Error, Fp8Tile, GlobalScale, GlobalScaleSource, QuantizeOptions, QuantizedMatrix, ScaleLayout,
    Scheme,
};
use criterion::{BenchmarkGroup, Criterion, Throughput, measurement::WallTime};

/// The shapes of one run.
struct Shapes {
    /// Weight rows (the output width of the products).
    n: usize,
    /// The reduction length, and the width of every quantized matrix.
    k: usize,
    /// Rows of the quantized x quantized GEMM's left operand.
    m_gemm: usize,
    /// Activation rows of the weight-only GEMM.
    m_wo: usize,
}

const FULL: Shapes = Shapes { n: 1024, k: 4096, m_gemm: 512, m_wo: 16 };
const QUICK: Shapes = Shapes { n: 256, k: 1024, m_gemm: 128, m_wo: 16 };

fn data(rows: usize, cols: usize, seed: u64) -> Array2<bf16> {
    let mut rng = SplitMix64::new(seed);
    Array2::from_shape_simple_fn((rows, cols), || {
        let s = rng.next_u64();
        let u = ((s >> 40) as f32 + ((s >> 16) & 0xff_ffff) as f32) / (1u64 << 24) as f32 - 1.0;
        bf16::from_f32(if (s >> 8) & 1023 == 0 { u * 20.0 } else { u })
    })
}

fn options(scheme: Scheme) -> QuantizeOptions {
    let layout = if scheme.supports_layout(ScaleLayout::Swizzled128x4) {
        ScaleLayout::Swizzled128x4
    } else {
        ScaleLayout::Linear
    };
    let mut opts = QuantizeOptions::default().with_scale_layout(layout);
    if scheme.has_global_scale() {
        let given = GlobalScale::from_amax(20.0).expect("20 is a valid amax");
        opts = opts.with_global_scale(GlobalScaleSource::Given(given));
    }
    opts
}

/// One scheme's quantized operands (quantized on the CPU: every backend writes the
/// same bytes).
struct Operands {
    scheme: Scheme,
    /// The N x K weights.
    w: QuantizedMatrix,
    /// The GEMM's M x K left operand.
    a: QuantizedMatrix,
}

/// Everything the cases read, built once and shared by the backends.
struct Inputs {
    shapes: Shapes,
    w: Array2<bf16>,
    x: Array2<bf16>,
    v: Array1<bf16>,
    ops: Vec<Operands>,
}

impl Inputs {
    fn new(shapes: Shapes) -> Self {
        let Shapes { n, k, m_gemm, m_wo } = shapes;
        let w = data(n, k, 5);
        let a = data(m_gemm, k, 3);
        let x = data(m_wo, k, 7);
        let v = data(1, k, 9).row(0).to_owned();
        let ops = Scheme::ALL
            .iter()
            .map(|&scheme| {
                let q = |m: &Array2<bf16>| Backend::Cpu.quantize(m.view(), scheme, &options(scheme)).unwrap();
                Operands { scheme, w: q(&w), a: q(&a) }
            })
            .collect();
        Self { shapes, w, x, v, ops }
    }

    fn operands(&self, scheme: Scheme) -> &Operands {
        self.ops.iter().find(|o| o.scheme == scheme).expect("every scheme is quantized")
    }
}

/// What a case computes: its rate's unit and its anchor follow from it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Op {
    Quantize,
    Dequantize,
    Gemm,
    WeightOnly,
    Gemv,
}

impl Op {
    fn is_product(self) -> bool {
        !matches!(self, Self::Quantize | Self::Dequantize)
    }
}

type Call = Box<dyn Fn() -> Result<(), Error>>;

struct Case {
    name: String,
    op: Op,
    /// Elements (quantize, dequantize) or multiply-adds (products) per call.
    work: f64,
    /// Bytes a call copies to the device, then back (the CUDA anchor's sizes).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    upload: usize,
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    download: usize,
    call: Call,
}

impl Case {
    /// A case of `work` elements or multiply-adds per call, `bytes` (up, down) copied.
    fn new(name: String, op: Op, work: usize, (upload, download): (usize, usize), call: Call) -> Self {
        Self { name, op, work: work as f64, upload, download, call }
    }

    fn run(&self) {
        (self.call)().unwrap_or_else(|e| panic!("{}: {e}", self.name));
    }

    fn throughput(&self) -> Throughput {
        let work = if self.op.is_product() { 2.0 * self.work } else { self.work };
        Throughput::Elements(work as u64)
    }
}

/// Every case of `backend` over `inputs`, the ones the backend refuses left out (and
/// printed). Each case runs once here.
fn cases(backend: &'static Backend, inputs: &'static Inputs, only: Option<&str>) -> Vec<Case> {
    let Shapes { n, k, m_gemm, m_wo } = inputs.shapes;
    let epi = Epilogue::default;
    let mut v: Vec<Case> = Vec::new();
    let bf = size_of::<bf16>();
    for o in &inputs.ops {
        let (s, w) = (o.scheme, &o.w);
        v.push(Case::new(
            format!("quantize {s}"),
            Op::Quantize,
            n * k,
            (n * k * bf, w.storage_bytes()),
            Box::new(move || backend.quantize(inputs.w.view(), s, &options(s)).map(|q| drop(black_box(q)))),
        ));
    }
    for o in &inputs.ops {
        let w = &o.w;
        v.push(Case::new(
            format!("dequantize {} -> bf16", o.scheme),
            Op::Dequantize,
            n * k,
            (w.storage_bytes(), n * k * bf),
            Box::new(move || backend.dequantize::<bf16>(w).map(|y| drop(black_box(y)))),
        ));
    }
    let mut pairs: Vec<(Scheme, Scheme)> =
        Scheme::ALL.iter().filter(|&&s| s != Scheme::Int4G32).map(|&s| (s, s)).collect();
    pairs.push((Scheme::Fp8Block(Fp8Tile::Row1x128), Scheme::Fp8Block(Fp8Tile::Tile128x128)));
    for (sa, sw) in pairs {
        let (a, w) = (&inputs.operands(sa).a, &inputs.operands(sw).w);
        v.push(Case::new(
            format!("gemm {sa} x {sw} {m_gemm}x{n}x{k}"),
            Op::Gemm,
            m_gemm * n * k,
            (a.storage_bytes() + w.storage_bytes(), m_gemm * n * bf),
            Box::new(move || backend.gemm::<bf16>(a, w, &epi()).map(|y| drop(black_box(y)))),
        ));
    }
    for o in &inputs.ops {
        let w = &o.w;
        v.push(Case::new(
            format!("gemm_weight_only bf16 x {} M={m_wo}", o.scheme),
            Op::WeightOnly,
            m_wo * n * k,
            (m_wo * k * bf + w.storage_bytes(), m_wo * n * bf),
            Box::new(move || {
                backend.gemm_weight_only::<bf16, bf16>(inputs.x.view(), w, &epi()).map(|y| drop(black_box(y)))
            }),
        ));
    }
    for o in &inputs.ops {
        let w = &o.w;
        v.push(Case::new(
            format!("gemv bf16 x {}", o.scheme),
            Op::Gemv,
            n * k,
            (k * bf + w.storage_bytes(), n * bf),
            Box::new(move || backend.gemv::<bf16, bf16>(inputs.v.view(), w, &epi()).map(|y| drop(black_box(y)))),
        ));
    }
    v.retain(|c| only.is_none_or(|t| c.name.contains(t)));
    v.retain(|c| match (c.call)() {
        Ok(()) => true,
        Err(e) => {
            println!("skipped on {}: {}: {e}", backend.name(), c.name);
            false
        }
    });
    v
}

/// The unit and value of a case's rate, for `seconds` per call.
fn rate(case: &Case, seconds: f64) -> String {
    if case.op.is_product() {
        format!("{:.1} GFLOP/s", 2.0 * case.work / seconds / 1e9)
    } else {
        format!("{:.3} G elem/s", case.work / seconds / 1e9)
    }
}

fn time_str(seconds: f64) -> String {
    if seconds < 1e-3 { format!("{:.1} us", seconds * 1e6) } else { format!("{:.3} ms", seconds * 1e3) }
}

fn configure(group: &mut BenchmarkGroup<'_, WallTime>, quick: bool) {
    let (warm, measure) = if quick { (0.2, 0.5) } else { (0.5, 1.5) };
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs_f64(warm))
        .measurement_time(Duration::from_secs_f64(measure));
}

/// The CPU run: anchors, cases, criterion, summary.
mod cpu {
    use super::*;

    pub struct Anchor {
        pub name: String,
        pub op: Op,
        /// Bytes copied (the memcpy) or FLOPs (the products) per call.
        pub work: Throughput,
        pub run: Box<dyn Fn()>,
    }

    impl Anchor {
        /// Whether this anchor anchors `op`.
        fn anchors(&self, op: Op) -> bool {
            match self.op {
                Op::Quantize | Op::Dequantize => !op.is_product(),
                other => other == op,
            }
        }
    }

    /// The anchors: a memcpy of the bf16 matrix, and ndarray's f32 products on f32
    /// operands dequantized ahead (from NVFP4; the values do not change an f32 product's
    /// time).
    pub fn anchors(inputs: &'static Inputs) -> Vec<Anchor> {
        let Shapes { n, k, m_gemm, m_wo } = inputs.shapes;
        let src = inputs.w.as_slice().expect("standard layout");
        let dst = Mutex::new(vec![bf16::ZERO; n * k]);
        let o = inputs.operands(Scheme::NvFp4);
        let f32s = |q: &QuantizedMatrix| -> &'static Array2<f32> {
            Box::leak(Box::new(Backend::Cpu.dequantize::<f32>(q).unwrap()))
        };
        let (af, wf) = (f32s(&o.a), f32s(&o.w));
        let xf: &'static Array2<f32> = Box::leak(Box::new(inputs.x.mapv(f32::from)));
        let vf: &'static Array1<f32> = Box::leak(Box::new(inputs.v.mapv(f32::from)));
        vec![
            Anchor {
                name: format!("memcpy {} KiB, 1 thread", (n * k * 2) >> 10),
                op: Op::Quantize,
                work: Throughput::Bytes((n * k * 2) as u64),
                run: Box::new(move || dst.lock().unwrap().copy_from_slice(black_box(src))),
            },
            Anchor {
                name: format!("ndarray f32 dot {m_gemm}x{n}x{k}"),
                op: Op::Gemm,
                work: Throughput::Elements((2 * m_gemm * n * k) as u64),
                run: Box::new(move || drop(black_box(af.dot(&wf.t())))),
            },
            Anchor {
                name: format!("ndarray f32 dot {m_wo}x{n}x{k}"),
                op: Op::WeightOnly,
                work: Throughput::Elements((2 * m_wo * n * k) as u64),
                run: Box::new(move || drop(black_box(xf.dot(&wf.t())))),
            },
            Anchor {
                name: format!("ndarray f32 mat-vec {n}x{k}"),
                op: Op::Gemv,
                work: Throughput::Elements((2 * n * k) as u64),
                run: Box::new(move || drop(black_box(wf.dot(vf)))),
            },
        ]
    }

    pub fn bench(c: &mut Criterion, anchors: &[Anchor], cases: &[Case], quick: bool) {
        let mut group = c.benchmark_group("backend_cpu");
        configure(&mut group, quick);
        for a in anchors.iter().filter(|a| cases.iter().any(|c| a.anchors(c.op))) {
            let name = format!("{} (anchor)", a.name);
            group.throughput(a.work.clone()).bench_function(name, |b| b.iter(|| (a.run)()));
        }
        for case in cases {
            group.throughput(case.throughput()).bench_function(&case.name, |b| b.iter(|| case.run()));
        }
        group.finish();
    }

    /// Best seconds per call: one warm-up call, then at least `min` calls, continuing
    /// while `budget` seconds last (at most 1000 calls).
    fn best_of(f: &dyn Fn(), min: usize, budget: f64) -> f64 {
        f();
        let t0 = Instant::now();
        let mut best = f64::INFINITY;
        for i in 0..1000 {
            if i >= min && t0.elapsed().as_secs_f64() > budget {
                break;
            }
            let t = Instant::now();
            f();
            best = best.min(t.elapsed().as_secs_f64());
        }
        best
    }

    pub fn summary(anchors: &[Anchor], cases: &[Case], quick: bool) {
        let budget = if quick { 0.05 } else { 0.3 };
        let mut anchor_best = vec![f64::INFINITY; anchors.len()];
        let mut times = Vec::new();
        for case in cases {
            let i = anchors.iter().position(|a| a.anchors(case.op)).expect("every op has an anchor");
            anchor_best[i] = anchor_best[i].min(best_of(&*anchors[i].run, 3, budget / 3.0));
            times.push((i, best_of(&|| case.run(), 5, budget)));
        }
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
            })
            .unwrap_or_else(|| "unknown CPU".into());
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        println!("\nsummary, cpu ({cpu}, {threads} threads): best of at least 5 calls or {budget} s per case;");
        println!("each anchor resampled before every case it anchors, its best over the run shown\n");
        println!(
            "{:<54} {:>10} {:>16} {:>6}  {:<30} {:>10} {:>8}",
            "case", "time", "rate", "GB/s", "anchor", "anchor", "ratio"
        );
        for (case, &(i, t)) in cases.iter().zip(&times) {
            let a = anchor_best[i];
            let gbs = if case.op.is_product() { String::new() } else { format!("{:.2}", case.work * 2.0 / t / 1e9) };
            println!(
                "{:<54} {:>10} {:>16} {:>6}  {:<30} {:>10} {:>7.3}x",
                case.name,
                time_str(t),
                rate(case, t),
                gbs,
                anchors[i].name,
                time_str(a),
                a / t
            );
        }
        for (a, &t) in anchors.iter().zip(&anchor_best) {
            if let (Throughput::Bytes(bytes), true) = (&a.work, t.is_finite()) {
                println!("{}: {:.2} GB/s read, {}", a.name, *bytes as f64 / t / 1e9, time_str(t));
            }
        }
        println!("ratio: the anchor's time over the case's (above 1: faster than the anchor; against the");
        println!("memcpy, the fraction of copy speed). GB/s: bytes of the bf16 matrix read (quantize) or");
        println!("written (dequantize) per second.");
    }
}

/// The CUDA run: CUDA-event timing of the host calls against a host<->device copy of
/// the same bytes.
#[cfg(feature = "cuda")]
mod cuda {
    use std::sync::Arc;

    use blockscale::cuda::Device;
    use blockscale::cuda::cudarc::driver::CudaStream;
    use blockscale::cuda::cudarc::driver::sys::CUevent_flags;

    use super::*;

    /// Seconds that `iters` calls of `f` take between two events on `stream`.
    fn elapsed(stream: &Arc<CudaStream>, iters: u64, f: &dyn Fn()) -> Duration {
        let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
        let start = stream.record_event(flags).expect("recording an event");
        for _ in 0..iters {
            f();
        }
        let end = stream.record_event(flags).expect("recording an event");
        end.synchronize().expect("waiting for the stream");
        Duration::from_secs_f64(f64::from(start.elapsed_ms(&end).expect("reading the events")) / 1e3)
    }

    /// Median seconds per call: 3 warm-up calls, then 7 repetitions of 5 calls.
    fn median(stream: &Arc<CudaStream>, f: &dyn Fn()) -> f64 {
        for _ in 0..3 {
            f();
        }
        let mut reps: Vec<f64> = (0..7).map(|_| elapsed(stream, 5, f).as_secs_f64() / 5.0).collect();
        reps.sort_by(f64::total_cmp);
        reps[3]
    }

    /// The anchor of `case`: its upload as one `clone_htod`, its download as one
    /// `clone_dtoh`, from and into pageable host memory.
    fn transfer(dev: &'static Device, case: &Case) -> impl Fn() + use<> {
        let host = vec![1u8; case.upload.max(1)];
        let on_device = dev.stream().alloc_zeros::<u8>(case.download.max(1)).expect("allocating the anchor");
        move || {
            let up = dev.stream().clone_htod(&host).expect("host to device copy");
            let down = dev.stream().clone_dtoh(&on_device).expect("device to host copy");
            black_box((up, down));
        }
    }

    fn mib(bytes: usize) -> String {
        format!("{:.2}", bytes as f64 / (1 << 20) as f64)
    }

    /// Criterion (if `c`), then (if `summary`) the summary table.
    pub fn run(dev: &'static Device, cases: &[Case], c: Option<&mut Criterion>, summary: bool, quick: bool) {
        let stream = dev.stream();
        println!("\ncuda: {} ({:?}, {} SMs)", dev.name(), dev.arch(), dev.sm_count());
        let anchors: Vec<_> = cases.iter().map(|case| transfer(dev, case)).collect();
        if let Some(c) = c {
            let mut group = c.benchmark_group("backend_cuda");
            configure(&mut group, quick);
            for (case, anchor) in cases.iter().zip(&anchors) {
                group
                    .throughput(Throughput::Bytes((case.upload + case.download) as u64))
                    .bench_function(format!("{}: copy in + out (anchor)", case.name), |b| {
                        b.iter_custom(|iters| elapsed(stream, iters, anchor))
                    });
                group
                    .throughput(case.throughput())
                    .bench_function(&case.name, |b| b.iter_custom(|iters| elapsed(stream, iters, &|| case.run())));
            }
            group.finish();
        }
        if !summary {
            return;
        }
        println!("\nsummary, cuda ({}): CUDA-event medians of 7 x 5 calls; host arrays in and out", dev.name());
        println!(
            "{:<54} {:>10} {:>16} {:>8} {:>8} {:>10} {:>8}",
            "case", "time", "rate", "in MiB", "out MiB", "copy", "ratio"
        );
        for (case, anchor) in cases.iter().zip(&anchors) {
            let ta = median(stream, anchor);
            let t = median(stream, &|| case.run());
            println!(
                "{:<54} {:>10} {:>16} {:>8} {:>8} {:>10} {:>7.3}x",
                case.name,
                time_str(t),
                rate(case, t),
                mib(case.upload),
                mib(case.download),
                time_str(ta),
                ta / t
            );
        }
        println!("copy: the anchor, one clone_htod of the bytes the call uploads and one clone_dtoh of those it");
        println!("downloads, timed the same way. ratio: the copy's time over the case's (1: the call costs its");
        println!("transfers). The device-buffer kernels alone: blockscale-cuda's benches.");
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let flag = |f: &str| args.iter().any(|a| a == f);
    let (quick, summary_only) = (flag("--quick"), flag("--summary-only"));
    // `--only TEXT`: keep the cases naming TEXT (and their anchors).
    let only: Option<&'static str> =
        args.iter().position(|a| a == "--only").and_then(|i| args.get(i + 1)).map(|s| &*s.clone().leak());
    // `--backend cpu|cuda`: that backend alone.
    let only_backend = args.iter().position(|a| a == "--backend").and_then(|i| args.get(i + 1)).cloned();
    let wants = |name: &str| only_backend.as_deref().is_none_or(|b| b == name);
    // Under `cargo test --benches` (no `--bench`), criterion runs each case once and the
    // summary is skipped.
    let bench_mode = flag("--bench") || summary_only;
    let mut criterion = (!summary_only).then(|| {
        let c = Criterion::default();
        if only.is_some() || only_backend.is_some() { c } else { c.configure_from_args() }
    });

    let inputs: &'static Inputs = Box::leak(Box::new(Inputs::new(if quick { QUICK } else { FULL })));
    let Shapes { n, k, m_gemm, m_wo } = inputs.shapes;
    println!(
        "shapes: weights N x K = {n} x {k}; gemm M = {m_gemm}; gemm_weight_only M = {m_wo}; gemv M = 1; bf16 in and out"
    );

    if wants("cpu") {
        let cpu_cases = cases(&Backend::Cpu, inputs, only);
        let anchors = cpu::anchors(inputs);
        if let Some(c) = criterion.as_mut() {
            cpu::bench(c, &anchors, &cpu_cases, quick);
        }
        if bench_mode && !cpu_cases.is_empty() {
            cpu::summary(&anchors, &cpu_cases, quick);
        }
    }

    #[cfg(not(feature = "cuda"))]
    if wants("cuda") {
        println!("\ncuda: skipped, this build has no CUDA backend (bench with `--features cuda`)");
    }
    #[cfg(feature = "cuda")]
    if wants("cuda") {
        cuda_backend(inputs, only, criterion.as_mut(), bench_mode, quick);
    }

    if let Some(c) = criterion {
        c.final_summary();
    }
}

/// Opens device 0 and runs its cases, or says why not.
#[cfg(feature = "cuda")]
fn cuda_backend(inputs: &'static Inputs, only: Option<&str>, c: Option<&mut Criterion>, summary: bool, quick: bool) {
    match Backend::cuda(0) {
        Ok(backend) => {
            let backend: &'static Backend = Box::leak(Box::new(backend));
            let Backend::Cuda(dev) = backend else { unreachable!("Backend::cuda opens a CUDA device") };
            let cuda_cases = cases(backend, inputs, only);
            if !cuda_cases.is_empty() {
                cuda::run(dev, &cuda_cases, c, summary, quick);
            }
        }
        Err(e) => println!("\ncuda: skipped, device 0 does not open: {e}"),
    }
}
