//! What the GPU benches share.

use std::sync::Arc;

use blockscale_cuda::Device;
use blockscale_cuda::cudarc::driver::CudaStream;
use blockscale_cuda::cudarc::driver::sys::CUevent_flags;

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
