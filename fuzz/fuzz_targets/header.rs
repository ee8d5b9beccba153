//! Raw bytes as one safetensors shard: the header parser, then convention detection and
//! dequantization of whatever it recognises. Seeds: `cargo xtask fuzz` (or the files of
//! fuzz/seeds/) give it small valid checkpoints of each convention to mutate.

#![no_main]

use std::path::Path;

use blockscale::checkpoint::Shard;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(shard) = Shard::from_bytes(Path::new("fuzz.safetensors"), data.to_vec()) {
        for t in shard.tensors() {
            assert_eq!(shard.bytes(t).len(), t.nbytes());
        }
        blockscale_fuzz::read_checkpoint(std::slice::from_ref(&shard));
    }
});
