//! Progress bars on stderr: tensors and bytes, with rate and ETA. Hidden with `--quiet`
//! and whenever stderr is not a terminal (indicatif's rule), so scripts and `--json`
//! output stay clean.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A byte-counting bar with `total` bytes.
pub fn bytes_bar(total: u64, quiet: bool) -> ProgressBar {
    let target = if quiet { ProgressDrawTarget::hidden() } else { ProgressDrawTarget::stderr() };
    let pb = ProgressBar::with_draw_target(Some(total), target);
    pb.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta} {msg}",
        )
        .expect("a valid template")
        .progress_chars("=> "),
    );
    pb
}
