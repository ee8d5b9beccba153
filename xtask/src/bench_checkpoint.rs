//! `cargo xtask bench-checkpoint`: quantizes a generated 2 GB bf16 checkpoint (four
//! shards, 24 weights of 4096 x 10240, written under target/ or `CARGO_TARGET_DIR`, not
//! committed) to NVFP4
//! with the release `blockscale` binary under `/usr/bin/time -v`, and compares its
//! throughput with the in-memory NVFP4 quantize throughput (`blockscale bench`'s
//! "+ amax pass" case, the same work a checkpoint needs) measured in the same run.
//! Targets (issues 7 and 16): on a memory file system at least 80% of the in-memory
//! throughput; on the disk within 10% of the larger of the in-memory quantize time and
//! the time to write and sync the output alone; peak RSS under 1.5 GB.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use blockscale_formats::rng::SplitMix64;

use crate::util::{self, cargo, target_dir};

const ROWS: usize = 4096;
const K: usize = 10240;
const SHARDS: usize = 4;
const PER_SHARD: usize = 6;

pub fn run() -> Result<()> {
    util::run(cargo().args(["build", "--release", "-p", "blockscale-cli"]))?;
    let bin = target_dir().join("release").join("blockscale");
    let dir = target_dir().join("bench-checkpoint");
    let model = dir.join("model");
    generate(&model)?;

    // The anchor, in the same run.
    let o = Command::new(&bin).args(["bench", "--json"]).output().context("running blockscale bench")?;
    if !o.status.success() {
        bail!("blockscale bench failed: {}", String::from_utf8_lossy(&o.stderr));
    }
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)?;
    let anchor = v["cases"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"].as_str().is_some_and(|n| n.contains("nvfp4") && n.contains("amax"))))
        .context("blockscale bench has no NVFP4 '+ amax' quantize case")?;
    let anchor_gel = anchor["throughput"].as_f64().context("anchor throughput")?;
    let anchor_name = anchor["name"].as_str().unwrap_or_default().to_owned();

    let elems = (SHARDS * PER_SHARD * ROWS * K) as f64;
    let bytes = std::fs::read_dir(&model)?
        .map(|e| e.map(|e| e.metadata().map(|m| m.len()).unwrap_or(0)))
        .sum::<Result<u64, _>>()?;
    println!("checkpoint: {} ({:.2} GB bf16, {} shards)", model.display(), bytes as f64 / 1e9, SHARDS);
    println!("anchor ({anchor_name}, in memory): {anchor_gel:.3} G elem/s");
    // The output on this disk, and on a memory file system when there is one: the
    // difference is what writing 0.57 GB to the disk costs.
    let mut outs = vec![dir.join("model-nvfp4")];
    if Path::new("/dev/shm").is_dir() {
        outs.push(PathBuf::from("/dev/shm/blockscale-bench-checkpoint"));
    }
    for out in outs {
        let mut best: Option<(f64, u64)> = None;
        for _ in 0..3 {
            let (secs, rss_kb) = quantize_once(&bin, &model, &out)?;
            eprintln!("  run: {secs:.3} s, peak RSS {:.0} MB", rss_kb as f64 / 1024.0);
            if best.is_none_or(|(s, _)| secs < s) {
                best = Some((secs, rss_kb));
            }
        }
        let (secs, rss_kb) = best.expect("three runs");
        let out_bytes = dir_bytes(&out)?;
        let write_s = write_anchor(out.parent().unwrap_or(Path::new(".")), out_bytes)?;
        std::fs::remove_dir_all(&out)?;
        let gel = elems / secs / 1e9;
        println!("output {}:", out.display());
        println!(
            "  quantize -> NVFP4 modelopt, best of 3: {secs:.3} s, {gel:.3} G elem/s ({:.2} GB/s of input) = {:.0}% of the anchor (target >= 80%)",
            bytes as f64 / secs / 1e9,
            100.0 * gel / anchor_gel
        );
        println!("  peak RSS (/usr/bin/time -v) of that run: {:.0} MB (target < 1536 MB)", rss_kb as f64 / 1024.0);
        let in_memory_s = elems / anchor_gel / 1e9;
        println!(
            "  writing {:.2} GB of zeros there and syncing alone takes {write_s:.3} s; the in-memory quantize of the input {in_memory_s:.3} s",
            out_bytes as f64 / 1e9,
        );
        let floor = write_s.max(in_memory_s);
        println!(
            "  = {:.0}% over the larger of the two ({floor:.3} s; target <= 10% over, on the disk)",
            100.0 * (secs / floor - 1.0)
        );
    }
    Ok(())
}

fn quantize_once(bin: &Path, model: &Path, out: &Path) -> Result<(f64, u64)> {
    let t = Instant::now();
    let o = Command::new("/usr/bin/time")
        .arg("-v")
        .arg(bin)
        .arg("quantize")
        .arg(model)
        .arg("-o")
        .arg(out)
        .args(["--scheme", "nvfp4", "--convention", "modelopt", "--force", "-q"])
        .output()
        .context("running /usr/bin/time -v blockscale quantize (is /usr/bin/time installed?)")?;
    let secs = t.elapsed().as_secs_f64();
    let err = String::from_utf8_lossy(&o.stderr);
    if !o.status.success() {
        bail!("quantize failed: {err}");
    }
    let rss_kb = err
        .lines()
        .find_map(|l| l.trim().strip_prefix("Maximum resident set size (kbytes):"))
        .and_then(|v| v.trim().parse().ok())
        .context("no 'Maximum resident set size' in /usr/bin/time -v output")?;
    Ok((secs, rss_kb))
}

fn dir_bytes(dir: &Path) -> Result<u64> {
    let mut n = 0;
    for e in std::fs::read_dir(dir)? {
        n += e?.metadata()?.len();
    }
    Ok(n)
}

/// Seconds to write `bytes` zeros to a new file in `dir` and sync it: the file system's
/// share of the quantize run.
fn write_anchor(dir: &Path, bytes: u64) -> Result<f64> {
    let p = dir.join(".blockscale-write-anchor");
    let block = vec![0u8; 1 << 22];
    let t = Instant::now();
    let mut f = std::fs::File::create(&p)?;
    let mut left = bytes;
    while left > 0 {
        let n = left.min(block.len() as u64) as usize;
        f.write_all(&block[..n])?;
        left -= n as u64;
    }
    f.sync_all()?;
    let secs = t.elapsed().as_secs_f64();
    std::fs::remove_file(&p)?;
    Ok(secs)
}

/// Writes the checkpoint unless a complete one is there (same shapes and generator).
fn generate(model: &Path) -> Result<()> {
    let stamp = model.join(".complete");
    // The generator is in the stamp: a checkpoint drawn by another is written again.
    let want = format!("{SHARDS}x{PER_SHARD}x{ROWS}x{K} splitmix64");
    if std::fs::read_to_string(&stamp).is_ok_and(|s| s == want) {
        return Ok(());
    }
    if model.exists() {
        std::fs::remove_dir_all(model)?;
    }
    std::fs::create_dir_all(model)?;
    eprintln!("generating {} ...", model.display());
    let mut weight_map = serde_json::Map::new();
    let mut rng = SplitMix64::new(0x5eed_b10c);
    for s in 0..SHARDS {
        let file = format!("model-{:05}-of-{SHARDS:05}.safetensors", s + 1);
        let mut header = serde_json::Map::new();
        header.insert("__metadata__".into(), serde_json::json!({ "format": "pt" }));
        let n = ROWS * K * 2;
        let names: Vec<String> = (0..PER_SHARD)
            .map(|i| {
                let layer = s * PER_SHARD + i;
                format!("model.layers.{}.mlp.{}.weight", layer / 3, ["gate_proj", "up_proj", "down_proj"][layer % 3])
            })
            .collect();
        for (i, name) in names.iter().enumerate() {
            header.insert(
                name.clone(),
                serde_json::json!({ "dtype": "BF16", "shape": [ROWS, K], "data_offsets": [i * n, (i + 1) * n] }),
            );
            weight_map.insert(name.clone(), file.clone().into());
        }
        let mut json = serde_json::to_vec(&header)?;
        while json.len() % 8 != 0 {
            json.push(b' ');
        }
        let path: PathBuf = model.join(&file);
        let mut w = BufWriter::with_capacity(1 << 22, std::fs::File::create(&path)?);
        w.write_all(&(json.len() as u64).to_le_bytes())?;
        w.write_all(&json)?;
        let mut row = vec![0u8; K * 2];
        for _ in 0..PER_SHARD * ROWS {
            for c in row.chunks_exact_mut(2) {
                // A bell-ish sum of two uniforms, rare 20x outliers.
                let r = rng.next_u64();
                let u = ((r >> 40) as f32 + ((r >> 16) & 0xff_ffff) as f32) / (1u64 << 24) as f32 - 1.0;
                let v = if r & 0x3ff == 0 { u * 20.0 } else { u } * 0.02;
                c.copy_from_slice(&half::bf16::from_f32(v).to_le_bytes());
            }
            w.write_all(&row)?;
        }
        w.flush()?;
    }
    let index = serde_json::json!({ "metadata": { "total_size": SHARDS * PER_SHARD * ROWS * K * 2 }, "weight_map": weight_map });
    std::fs::write(model.join("model.safetensors.index.json"), serde_json::to_string_pretty(&index)?)?;
    std::fs::write(model.join("config.json"), "{\"model_type\": \"llama\"}\n")?;
    std::fs::write(&stamp, want)?;
    Ok(())
}
