//! Ctrl-C or SIGTERM while `quantize` writes: the unfinished temporary is removed, the
//! destination never appears, and the exit code and message say what happened.
//!
//! The run is held at a known point without any hook in the binary: `--calibration`
//! names a FIFO that nobody writes, and `quantize` opens it after creating its
//! temporary output, so the process waits there until it is signalled.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// Entries of `dir` that are blockscale temporaries.
fn temporaries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(".blockscale-"))
        .collect()
}

/// Starts `quantize input -> out/dest` held on a FIFO, signals it with `signal` once its
/// temporary exists, and checks what is left.
fn interrupted(input: &Path, out: &Path, dest: &str, signal: &str) {
    let fifo = out.join("calibration.fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo runs");
    assert!(made.success(), "mkfifo failed");
    let dest = out.join(dest);
    let child = Command::new(env!("CARGO_BIN_EXE_blockscale"))
        .args(["quantize", "--scheme", "nvfp4", "--convention", "modelopt", "-q", "--calibration"])
        .arg(&fifo)
        .arg(input)
        .arg("-o")
        .arg(&dest)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let t0 = Instant::now();
    while temporaries(out).is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(30), "no temporary appeared in {}", out.display());
        std::thread::sleep(Duration::from_millis(5));
    }
    let temp = temporaries(out);
    let killed = Command::new("kill").arg(format!("-{signal}")).arg(child.id().to_string()).status().unwrap();
    assert!(killed.success());
    let o = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "exit after SIG{signal}; stderr: {stderr}");
    assert!(
        stderr.contains("interrupted: removed the unfinished output") && stderr.contains(&temp[0]),
        "stderr names the removed temporary {temp:?}: {stderr}"
    );
    assert!(temporaries(out).is_empty(), "left behind: {:?}", temporaries(out));
    assert!(!dest.exists(), "{} appeared", dest.display());
}

#[test]
fn sigterm_while_writing_a_file_removes_the_temporary() {
    let (dir, input) = input_file("model.safetensors", &model_tensors(7));
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    interrupted(&input, &out, "q.safetensors", "TERM");
}

#[test]
fn ctrl_c_while_writing_a_folder_removes_the_temporary_folder() {
    let dir = tempfile::tempdir().unwrap();
    let input = folder(dir.path(), "model", &[("model.safetensors", model_tensors(8))]);
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    interrupted(&input, &out, "q", "INT");
}
