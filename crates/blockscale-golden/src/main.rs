//! `blockscale-golden --backend cpu|cuda|all [--filter TEXT] [--dir DIR]`: recomputes
//! every golden case with the backend, prints one line per check and a summary, and
//! exits non-zero on any failure, unusable file, unavailable backend or empty selection.

use std::path::PathBuf;
use std::process::ExitCode;

use blockscale::Backend;
use blockscale_golden::GoldenFile;
use blockscale_golden::verify::{Verdict, verify_file};

const USAGE: &str = "usage: blockscale-golden --backend cpu|cuda|all [--filter TEXT] [--dir DIR]";

fn backends(name: &str) -> Result<Vec<Backend>, String> {
    let cuda = || -> Result<Backend, String> {
        Backend::cuda(0).map_err(|e| match e {
            blockscale::Error::CudaNotBuilt => {
                "this build has no cuda backend: run `cargo xtask verify --backend cuda`, which builds it".into()
            }
            e => format!("the cuda backend cannot run here: {e}"),
        })
    };
    match name {
        "cpu" => Ok(vec![Backend::Cpu]),
        "cuda" => Ok(vec![cuda()?]),
        "all" => Ok(vec![Backend::Cpu, cuda()?]),
        other => Err(format!("unknown backend {other:?}\n{USAGE}")),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
    let Some(backend) = value("--backend") else {
        eprintln!("{USAGE}");
        return ExitCode::FAILURE;
    };
    let filter = value("--filter").unwrap_or_default();
    let dir = value("--dir")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden"));
    let backends = match backends(&backend) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut files: Vec<PathBuf> = match std::fs::read_dir(&dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
            .filter(|p| p.file_stem().and_then(|s| s.to_str()).is_some_and(|s| s.contains(&filter)))
            .collect(),
        Err(e) => {
            eprintln!("error: cannot read {}: {e}", dir.display());
            return ExitCode::FAILURE;
        }
    };
    files.sort();
    if files.is_empty() {
        eprintln!("error: no golden file in {} matches {filter:?}", dir.display());
        return ExitCode::FAILURE;
    }
    let (mut pass, mut fail, mut skip, mut broken) = (0, 0, 0, 0);
    for path in &files {
        let file = match GoldenFile::open(path) {
            Ok(f) => f,
            Err(e) => {
                println!("ERROR {e}");
                broken += 1;
                continue;
            }
        };
        for b in &backends {
            match verify_file(&file, b) {
                Ok(outcomes) => {
                    for o in outcomes {
                        println!("{o}");
                        match o.verdict {
                            Verdict::Pass => pass += 1,
                            Verdict::Fail => fail += 1,
                            Verdict::Skip => skip += 1,
                        }
                    }
                }
                Err(e) => {
                    println!("ERROR {e}");
                    broken += 1;
                }
            }
        }
    }
    println!(
        "\n{} files, backend {backend}: {pass} passed, {fail} failed, {skip} skipped (not applicable), {broken} unusable",
        files.len()
    );
    if fail + broken > 0 { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}
