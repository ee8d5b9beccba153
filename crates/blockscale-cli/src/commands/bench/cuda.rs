//! The CUDA cases: quantize on device buffers, beside a device-to-device copy of the
//! same input measured in the same run. Times are CUDA-event times of back-to-back
//! calls into preallocated outputs (host launch overhead included).

use std::time::Instant;

use blockscale::cuda::cudarc::driver::sys::CUevent_flags;
use blockscale::cuda::cudarc::driver::{CudaSlice, DriverError};
use blockscale::cuda::{
    Device, DeviceMatrix, DeviceQuantized, GlobalScaleSource, NonFinite, QuantizeOptions, quantize_into,
};
use blockscale::half::bf16;
use blockscale::{DataLayout, GlobalScale, ScaleLayout, Scheme};

use super::{Anchor, Budget, Case, Gpu, Progress, Report, VALUES_AMAX, Work, cpu_machine, values};
use crate::error::CliError;

/// Calls per event-timed repetition: enough to hide the event overhead.
const BATCH: usize = 10;

fn driver(what: &'static str) -> impl Fn(DriverError) -> CliError {
    move |e| CliError::Cuda(format!("{what}: {e}"))
}

fn cuda(what: &str, e: impl std::fmt::Display) -> CliError {
    CliError::Cuda(format!("{what}: {e}"))
}

/// The best per-call time of `f` over event-timed batches of [`BATCH`] calls: three
/// warm-up calls, then at least `budget.min_runs` batches, more while the budget lasts.
fn best_of(dev: &Device, budget: Budget, mut f: impl FnMut() -> Result<(), CliError>) -> Result<f64, CliError> {
    for _ in 0..3 {
        f()?;
    }
    dev.synchronize().map_err(|e| cuda("warming up", e))?;
    let stream = dev.stream();
    let start_all = Instant::now();
    let (mut best, mut runs) = (f64::INFINITY, 0);
    while budget.more(runs, start_all.elapsed().as_secs_f64()) {
        let start = stream.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).map_err(driver("recording an event"))?;
        for _ in 0..BATCH {
            f()?;
        }
        let end = stream.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).map_err(driver("recording an event"))?;
        end.synchronize().map_err(driver("waiting for the timed work"))?;
        let ms = start.elapsed_ms(&end).map_err(driver("reading the event times"))?;
        best = best.min(f64::from(ms) / 1e3 / BATCH as f64);
        runs += 1;
    }
    Ok(best.max(1e-9))
}

/// Runs the CUDA cases on device 0.
pub fn run(quick: bool) -> Result<Report, CliError> {
    let dev = Device::new(0).map_err(|e| cuda("cannot use GPU 0 for `bench --backend cuda`", e))?;
    let budget = Budget::new(quick);
    let (rows, k) = if quick { (1024usize, 1024usize) } else { (8192, 8192) };
    let n = rows * k;
    let mut progress = Progress::new(5);

    let host: Vec<bf16> = values(n, 0x5eed).map(bf16::from_f32).collect();
    let stream = dev.stream();
    let x: CudaSlice<bf16> = stream.clone_htod(&host).map_err(driver("copying the input to the GPU"))?;
    drop(host);
    let m = DeviceMatrix::new(&x, rows, k);
    let bytes = (n * 2) as f64;

    progress.step("device-to-device copy");
    let mut dst: CudaSlice<bf16> = stream.alloc_zeros(n).map_err(driver("allocating the copy's destination"))?;
    let copy = Anchor {
        name: format!("device-to-device copy {} MiB", (n * 2) >> 20),
        seconds: best_of(&dev, budget, || stream.memcpy_dtod(&x, &mut dst).map_err(driver("copying on the device")))?,
    };
    drop(dst);

    let given = GlobalScaleSource::Given(GlobalScale::from_amax(VALUES_AMAX).map_err(|e| cuda("global scale", e))?);
    let list = [
        ("quantize nvfp4 (given global scale)", Scheme::NvFp4, given),
        ("quantize nvfp4 (+ tensor amax pass)", Scheme::NvFp4, GlobalScaleSource::TensorAmax),
        ("quantize mxfp4", Scheme::MxFp4, GlobalScaleSource::TensorAmax),
        ("quantize mxfp8-e4m3", Scheme::MxFp8E4M3, GlobalScaleSource::TensorAmax),
    ];
    let mut cases = Vec::new();
    for (name, scheme, global) in list {
        progress.step(name);
        let layout = ScaleLayout::Swizzled128x4;
        let mut opts = QuantizeOptions::default().with_scale_layout(layout).with_non_finite(NonFinite::Poison);
        if scheme.has_global_scale() {
            opts = opts.with_global_scale(global);
        }
        let mut out =
            DeviceQuantized::alloc(&dev, scheme, rows, k, layout, DataLayout::RowMajor).map_err(|e| cuda(name, e))?;
        let t = best_of(&dev, budget, || quantize_into(&dev, m, &opts, &mut out).map_err(|e| cuda(name, e)))?;
        cases.push(Case::new(name, t, Work::Elements(n as f64), Some(bytes), &copy));
    }
    progress.finish();

    let mut machine = cpu_machine();
    machine.gpu = Some(Gpu { name: dev.name().to_string(), arch: format!("{:?}", dev.arch()), sms: dev.sm_count() });
    let setup = vec![
        format!(
            "{} ({:?}, {} SMs); input {rows} x {k} bf16 on the device (seeded bell-shaped values, \
             1 in 1024 scaled by {VALUES_AMAX})",
            dev.name(),
            dev.arch(),
            dev.sm_count()
        ),
        "swizzled scales, preallocated outputs, NonFinite::Poison (nothing read back except the amax)".into(),
        format!(
            "timing: CUDA events around {BATCH} back-to-back calls; best of at least {} batches or {} s",
            budget.min_runs, budget.seconds
        ),
    ];
    Ok(Report { backend: "cuda", quick, machine, setup, cases })
}
