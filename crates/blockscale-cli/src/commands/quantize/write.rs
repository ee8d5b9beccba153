//! `quantize`, stage 3: the output shards written tensor by tensor as the plan says
//! (copied tensors as they are, each weight through the per-tensor job as its turn
//! comes, so one weight at most is held in memory), then the folder's index and side
//! files; the destination is renamed into place and the report made.

use std::collections::BTreeMap;

use indicatif::ProgressBar;

use blockscale::checkpoint::dtypes::tensor_bytes;
use blockscale::checkpoint::{Checkpoint, ShardWriter, copy_others, write_index};
use crate::cli::QuantizeArgs;
use crate::error::CliError;
use crate::progress::bytes_bar;

use super::job::{Quantized, Weight};
use super::plan::Plan;
use super::report::{QuantizeReport, QuantizedEntry};

/// Buffers of exactly a weight's codes and scales sizes, for a job that quantizes into
/// them (reused from weight to weight).
pub type Buffers<'a> = Option<(&'a mut [u8], &'a mut [u8])>;

/// A codes and scales buffer pair.
type Buffers2 = (Vec<u8>, Vec<u8>);

/// A weight's codes and scales being written by a thread, which returns the buffers.
struct Pending(std::thread::JoinHandle<Result<Buffers2, CliError>>);

impl Pending {
    /// Waits for the write; its buffers, or its error.
    fn join(self) -> Result<Buffers2, CliError> {
        // The thread only writes a file: a panic there is a bug, passed on as one.
        self.0.join().unwrap_or_else(|p| std::panic::resume_unwind(p))
    }
}

/// Writes the output `plan` describes, quantizing each weight with `job`, commits it,
/// and returns the report. With `into_buffers`, `job` is given buffers the sizes of each
/// weight's first two planned tensors (codes and scales), fills them and returns only
/// the others; otherwise it is given `None` and returns them all.
///
/// # Errors
/// The first error of `job`; [`CheckpointError::Write`](blockscale::checkpoint::CheckpointError::Write) and the writer's errors; the side
/// files' errors (an unusable config.json); [`CheckpointError::OutputExists`](blockscale::checkpoint::CheckpointError::OutputExists) if the
/// destination appeared meanwhile.
pub fn write(
    args: &QuantizeArgs,
    plan: Plan,
    into_buffers: bool,
    mut job: impl FnMut(Weight<'_>, &ProgressBar, Buffers<'_>) -> Result<Quantized, CliError>,
) -> Result<QuantizeReport, CliError> {
    let Plan { start, scheme, convention, backend, checkpoint, output, shards, configs, skipped, unused_calibration } =
        plan;
    let total: u64 = shards.iter().map(|s| s.shard.file_len() as u64).sum();
    let pb = bytes_bar(total, args.out.quiet || args.out.json);
    let n_tensors: usize = shards.iter().map(|s| s.shard.tensors().len()).sum();
    let mut done = 0usize;
    let mut quantized = Vec::new();
    let mut weight_map = BTreeMap::new();
    let mut bytes_out = 0u64;
    let mut total_size = 0u64;
    // Two sets of codes and scales buffers: a weight is quantized into one while the
    // previous weight's set is written by a thread (`pending`), which hands it back.
    let mut spare: Buffers2 = (Vec::new(), Vec::new());
    let mut pending: Option<Pending> = None;
    let result = (|| -> Result<(), CliError> {
        for sp in &shards {
            let shard = &sp.shard;
            let file_name = Checkpoint::file_name(shard.path());
            let path = output.path(checkpoint.is_dir.then_some(file_name.as_str()));
            let mut w = ShardWriter::create(&path, &sp.tensors, &sp.metadata)?;
            for p in &sp.tensors {
                weight_map.insert(p.name.clone(), file_name.clone());
                total_size += tensor_bytes(p.dtype, &p.shape).unwrap_or(0) as u64;
            }
            for (i, (t, weight)) in shard.tensors().iter().zip(&sp.weights).enumerate() {
                done += 1;
                pb.set_message(format!("[{done}/{n_tensors}] {}", t.name));
                // The next tensor is read from disk while this one is processed.
                if let Some(next) = shard.tensors().get(i + 1) {
                    shard.will_need(next);
                }
                let bytes = shard.bytes(t);
                match weight {
                    None => w.write(&t.name, bytes)?,
                    Some(plan) => {
                        let weight = Weight { path: shard.path(), tensor: t, bytes, plan };
                        let mut out_bytes = 0;
                        let q = match plan.outputs.as_slice() {
                            [codes, scales, ..] if into_buffers => {
                                let len = |name| w.planned_len(name).unwrap_or(0);
                                let (nc, ns) = (len(codes), len(scales));
                                // Grown to the largest weight once, then reused: no fresh
                                // pages to fault in and zero for every weight.
                                let (mut d, mut s) = std::mem::take(&mut spare);
                                d.resize(nc.max(d.len()), 0);
                                s.resize(ns.max(s.len()), 0);
                                let q = job(weight, &pb, Some((&mut d[..nc], &mut s[..ns])))?;
                                if let Some(p) = pending.take() {
                                    spare = p.join()?;
                                }
                                let (cw, sw) = (w.claim(codes, nc)?, w.claim(scales, ns)?);
                                pending = Some(Pending(std::thread::spawn(move || {
                                    cw.write(&d[..nc])?;
                                    sw.write(&s[..ns])?;
                                    Ok((d, s))
                                })));
                                out_bytes += nc + ns;
                                q
                            }
                            _ => job(weight, &pb, None)?,
                        };
                        for (name, b) in &q.tensors {
                            w.write(name, b)?;
                            out_bytes += b.len();
                        }
                        quantized.push(QuantizedEntry {
                            name: t.name.clone(),
                            shape: t.shape.clone(),
                            dtype: format!("{:?}", t.dtype),
                            outputs: plan.outputs.clone(),
                            bytes_in: t.nbytes(),
                            bytes_out: out_bytes,
                            poisoned_blocks: q.poisoned_blocks,
                        });
                    }
                }
                shard.release(t);
                pb.inc(t.nbytes() as u64);
            }
            if let Some(p) = pending.take() {
                spare = p.join()?;
            }
            bytes_out += w.finish()?;
        }
        Ok(())
    })();
    if let Some(p) = pending.take() {
        // Only after an error: the write still in flight ends before the output is removed.
        let _ = p.join();
    }
    result?;
    pb.finish_and_clear();
    if checkpoint.is_dir {
        if checkpoint.index.is_some() {
            write_index(&output, checkpoint.index.as_deref(), &weight_map, total_size)?;
        }
        copy_others(&output, &checkpoint, configs.config_json.as_ref(), &configs.files, &[])?;
    }
    output.commit()?;

    let seconds = start.elapsed().as_secs_f64();
    Ok(QuantizeReport {
        version: 1,
        input: args.input.clone(),
        output: args.output.clone(),
        scheme: scheme.name().into(),
        convention: convention.name().into(),
        backend: backend.into(),
        quantized,
        skipped,
        unused_calibration,
        bytes_in: total,
        bytes_out,
        seconds,
        throughput_gb_s: total as f64 / seconds / 1e9,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use blockscale::checkpoint::Shard;
    use crate::commands::quantize::plan::plan;
    use crate::commands::quantize::testing::{args, bf16_values, small_job, write_bf16};

    #[test]
    fn weights_go_through_the_job_and_the_rest_is_copied() {
        // Both ways a weight reaches the file: its bytes returned by the job, or codes
        // and scales filled into the writer's buffers by it.
        for in_place in [false, true] {
            let (_dir, out, a) = small_job(&["--scheme", "mxfp8-e4m3", "-q"]);
            let (_, plan) = plan(&a).unwrap();
            let sizes: HashMap<String, usize> = plan.shards[0]
                .tensors
                .iter()
                .map(|t| (t.name.clone(), tensor_bytes(t.dtype, &t.shape).unwrap()))
                .collect();
            let mut seen = Vec::new();
            // A stand-in for the per-tensor job: fixed bytes of the planned sizes.
            let report = write(&a, plan, in_place, |w, _, place| {
                seen.push((w.tensor.name.clone(), place.is_some()));
                let mut outputs = w.plan.outputs.iter();
                if let Some((d, s)) = place {
                    d.fill(0xab);
                    s.fill(0xcd);
                    outputs.nth(1);
                }
                let tensors = outputs.map(|n| (n.clone(), vec![0xcd; sizes[n]])).collect();
                Ok(Quantized { tensors, poisoned_blocks: 3 })
            })
            .unwrap();
            assert_eq!(seen, [("l.weight".to_string(), in_place)]);
            assert_eq!(report.quantized.len(), 1);
            let q = &report.quantized[0];
            assert_eq!((q.name.as_str(), q.poisoned_blocks, q.bytes_in), ("l.weight", 3, 256));
            assert_eq!(q.bytes_out, sizes["l.weight.codes"] + sizes["l.weight.scales"]);
            assert_eq!(report.skipped.len(), 1);
            assert_eq!(
                (report.scheme.as_str(), report.convention.as_str(), report.backend.as_str()),
                ("mxfp8-e4m3", "native", "cpu")
            );

            let written = Shard::open(&out).unwrap();
            let bytes = |name: &str| {
                let t = written.tensors().iter().find(|t| t.name == name).unwrap();
                written.bytes(t).to_vec()
            };
            let codes = if in_place { 0xab } else { 0xcd };
            assert_eq!(bytes("l.weight.codes"), vec![codes; sizes["l.weight.codes"]]);
            assert_eq!(bytes("l.weight.scales"), vec![0xcd; sizes["l.weight.scales"]]);
            assert_eq!(bytes("norm"), bf16_values(4));
            assert_eq!(report.bytes_out, written.file_len() as u64);
        }
    }

    #[test]
    fn each_weight_reaches_its_place_while_buffers_alternate() {
        // Four weights of three sizes quantized into two alternating buffer sets, each
        // written by a thread while the next is quantized: every weight's codes and
        // scales must be its own (a fill byte per weight), across two shards.
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("m");
        std::fs::create_dir(&model).unwrap();
        let shapes = [("a.weight", 4, 64), ("b.weight", 2, 128), ("c.weight", 6, 32), ("d.weight", 2, 64)];
        for (file, tensors) in [("s1.safetensors", &shapes[..2]), ("s2.safetensors", &shapes[2..])] {
            let t: Vec<_> = tensors.iter().map(|&(n, r, k)| (n, vec![r, k], bf16_values(r * k))).collect();
            write_bf16(&model.join(file), &t);
        }
        let out = dir.path().join("o");
        let a = args(&[model.to_str().unwrap(), "-o", out.to_str().unwrap(), "--scheme", "mxfp8-e4m3", "-q"]);
        let (_, plan) = plan(&a).unwrap();
        let fill = |name: &str| 0x10 * (shapes.iter().position(|s| s.0 == name).unwrap() as u8 + 1);
        write(&a, plan, true, |w, _, place| {
            let (d, s) = place.unwrap();
            d.fill(fill(&w.tensor.name));
            s.fill(fill(&w.tensor.name) + 1);
            Ok(Quantized { tensors: vec![], poisoned_blocks: 0 })
        })
        .unwrap();
        for (file, tensors) in [("s1.safetensors", &shapes[..2]), ("s2.safetensors", &shapes[2..])] {
            let written = Shard::open(&out.join(file)).unwrap();
            for &(name, rows, k) in tensors {
                let bytes = |suffix: &str| {
                    let t = written.tensors().iter().find(|t| t.name == format!("{name}{suffix}")).unwrap();
                    written.bytes(t).to_vec()
                };
                assert_eq!(bytes(".codes"), vec![fill(name); rows * k], "{name}");
                assert_eq!(bytes(".scales"), vec![fill(name) + 1; rows * k / 32], "{name}");
            }
        }
    }

    #[test]
    fn a_job_failing_while_a_write_is_in_flight_leaves_no_output() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("m.safetensors");
        let t: Vec<_> = ["a.weight", "b.weight"].iter().map(|&n| (n, vec![2, 64], bf16_values(128))).collect();
        write_bf16(&input, &t);
        let out = dir.path().join("o.safetensors");
        let a = args(&[input.to_str().unwrap(), "-o", out.to_str().unwrap(), "--scheme", "mxfp8-e4m3", "-q"]);
        let (_, plan) = plan(&a).unwrap();
        let e = write(&a, plan, true, |w, _, _| {
            if w.tensor.name == "b.weight" {
                return Err(CliError::tensor(w.path, &w.tensor.name, "stop"));
            }
            Ok(Quantized { tensors: vec![], poisoned_blocks: 0 })
        })
        .unwrap_err();
        assert!(e.to_string().contains("stop"), "{e}");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, ["m.safetensors"]);
    }

    #[test]
    fn a_failing_job_leaves_no_output() {
        let (dir, _out, a) = small_job(&["--scheme", "nvfp4", "-q"]);
        let (_, plan) = plan(&a).unwrap();
        let e = write(&a, plan, false, |w, _, _| Err(CliError::tensor(w.path, &w.tensor.name, "stop"))).unwrap_err();
        assert!(e.to_string().contains("stop"), "{e}");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, ["m.safetensors"]);
    }
}
