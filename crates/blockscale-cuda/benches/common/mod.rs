//! What the GPU benches share.

use std::sync::Arc;

use blockscale_cuda::Device;
use blockscale_cuda::cudarc::driver::CudaStream;
use blockscale_cuda::cudarc::driver::sys::{CUevent_flags, CUgraphInstantiate_flags, CUstreamCaptureMode};

/// Median seconds per call of `f`: 3 warm-up calls, then 7 timed repetitions of
/// `launches` back-to-back calls between two CUDA events.
pub fn time(stream: &Arc<CudaStream>, launches: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..3 {
        f();
    }
    let mut reps: Vec<f64> = (0..7)
        .map(|_| {
            let start = stream.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).unwrap();
            for _ in 0..launches {
                f();
            }
            let end = stream.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).unwrap();
            end.synchronize().unwrap();
            start.elapsed_ms(&end).unwrap() as f64 / 1e3 / launches as f64
        })
        .collect();
    reps.sort_by(f64::total_cmp);
    reps[3]
}

/// The first GPU, or the process exits saying why.
pub fn device_or_exit() -> Device {
    match Device::new(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("no usable GPU: {e}");
            std::process::exit(1);
        }
    }
}

pub mod anchors;

/// Median seconds per call when `launches` calls (`call(i)`, i = 0, 1, ...) are captured
/// in one CUDA graph and the graph is replayed: the GPU's time with the least launch and
/// host overhead, as an inference engine that captures its step sees it.
#[allow(dead_code, reason = "the quantize bench replays no graphs")]
pub fn graph_time(dev: &Device, launches: usize, mut call: impl FnMut(usize)) -> f64 {
    dev.synchronize().unwrap();
    let stream = dev.stream().clone();
    // SAFETY: every buffer involved lives on the device's one stream, which was
    // synchronized above; tracking resumes right after the capture.
    unsafe { dev.context().disable_event_tracking() };
    stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).unwrap();
    for i in 0..launches {
        call(i);
    }
    let graph = stream.end_capture(CUgraphInstantiate_flags(0)).unwrap();
    // SAFETY: as above.
    unsafe { dev.context().enable_event_tracking() };
    let graph = graph.expect("the capture recorded the calls");
    time(dev.stream(), 1, || graph.launch().unwrap()) / launches as f64
}
