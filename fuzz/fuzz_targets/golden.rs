//! Raw bytes as a golden file: validation, then the CPU backend's verification of the
//! case it describes (metadata, tensors, their dtypes and shapes all come from the
//! input). Seeds: the smallest files of tests/golden/.

#![no_main]

use std::path::Path;

use blockscale::Backend;
use blockscale_golden::GoldenFile;
use blockscale_golden::verify::verify_file;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(file) = GoldenFile::from_bytes(Path::new("fuzz.safetensors"), data.to_vec()) {
        let _ = verify_file(&file, &Backend::Cpu);
    }
});
