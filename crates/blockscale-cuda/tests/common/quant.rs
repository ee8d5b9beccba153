//! What the quantize tests share (gpu.rs and pipeline.rs): seeded data with the cases
//! that matter, the option sets worth covering per scheme, and the byte comparison of a
//! GPU result against the CPU's.
//!
//! Not every test file uses every item.
#![allow(dead_code)]

use blockscale_cpu as cpu;
use blockscale_cuda as gpu;
use blockscale_formats::{
    DataLayout, GlobalScale, GlobalScaleSource, NonFinite, NvFp4Recipe, QuantizedMatrix, ScaleData, ScaleLayout,
    ScaleRule, Scheme,
};

/// Seeded data with ties, zeros, outliers, subnormal-scale blocks and (if asked) NaN/Inf.
pub fn data(n: usize, seed: u64, specials: bool) -> Vec<f32> {
    let mut rng = blockscale_formats::rng::SplitMix64::new(seed);
    let mut next = move || rng.next_u64();
    (0..n)
        .map(|i| {
            let r = next();
            let u = ((r >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0;
            let v = match r % 100 {
                0 if specials => [f32::NAN, f32::INFINITY, f32::NEG_INFINITY][i % 3],
                1 => 0.0,
                2 => -0.0,
                3 => u * 1e4,
                4 => u * 1e-6,
                5 => [0.25f32, 0.75, 2.5, 5.0, 448.0, 464.0, 6.0][i % 7] * u.signum(),
                _ => u * 2f32.powi((r >> 8) as i32 % 16 - 8),
            };
            // Every 13th block of 16 is scaled into the subnormal range.
            if (i / 16) % 13 == 5 { v * 1e-39 } else { v }
        })
        .collect()
}

pub fn same_scales(a: &ScaleData, b: &ScaleData) -> bool {
    match (a, b) {
        (ScaleData::Bytes(x), ScaleData::Bytes(y)) => x == y,
        (ScaleData::F32(x), ScaleData::F32(y)) => x.iter().map(|v| v.to_bits()).eq(y.iter().map(|v| v.to_bits())),
        (ScaleData::F16(x), ScaleData::F16(y)) => x.iter().map(|v| v.to_bits()).eq(y.iter().map(|v| v.to_bits())),
        _ => false,
    }
}

/// Panics with the first difference.
pub fn assert_same(g: &QuantizedMatrix, c: &QuantizedMatrix, what: &str) {
    assert_eq!(g.shape(), c.shape(), "{what}: shape");
    if let Some(i) = g.data().iter().zip(c.data()).position(|(a, b)| a != b) {
        let rb = c.shape().row_bytes;
        panic!(
            "{what}: code byte {i} (row {}, byte {}) GPU {:#04x} CPU {:#04x}",
            i / rb,
            i % rb,
            g.data()[i],
            c.data()[i]
        );
    }
    assert!(same_scales(g.scales(), c.scales()), "{what}: scales differ\nGPU {:?}\nCPU {:?}", g.scales(), c.scales());
    assert_eq!(g.global_scale(), c.global_scale(), "{what}: global scale");
    assert_eq!((g.data_layout(), g.scale_layout()), (c.data_layout(), c.scale_layout()), "{what}: layouts");
}

pub fn cpu_opts(g: &gpu::QuantizeOptions) -> cpu::QuantizeOptions {
    cpu::QuantizeOptions::default()
        .with_scale_layout(g.scale_layout)
        .with_scale_rule(g.scale_rule)
        .with_nvfp4_recipe(g.nvfp4_recipe)
        .with_global_scale(g.global_scale)
        .with_data_layout(g.data_layout)
        .with_non_finite(g.non_finite)
}

/// Every option combination worth covering for a scheme.
pub fn option_sets(scheme: Scheme, k: usize) -> Vec<gpu::QuantizeOptions> {
    let base = gpu::QuantizeOptions::default().with_non_finite(NonFinite::Poison);
    let mut v = Vec::new();
    for layout in ScaleLayout::ALL {
        if !scheme.supports_layout(layout) {
            continue;
        }
        let b = base.with_scale_layout(layout);
        match scheme {
            Scheme::NvFp4 => {
                for recipe in [NvFp4Recipe::LightX2V, NvFp4Recipe::TransformerEngine] {
                    v.push(b.with_nvfp4_recipe(recipe));
                    v.push(b.with_nvfp4_recipe(recipe).with_global_scale(GlobalScaleSource::Amax(3.5)));
                }
                v.push(b.with_global_scale(GlobalScaleSource::Given(GlobalScale::from_decode(0.02).unwrap())));
            }
            Scheme::Fp8Block(_) | Scheme::Int4G32 | Scheme::Int4G128 => v.push(b),
            _ => v.extend(ScaleRule::ALL.iter().map(|&r| b.with_scale_rule(r))),
        }
    }
    if scheme.element().bits() == 4 && k.is_multiple_of(32) {
        v.push(base.with_data_layout(DataLayout::BlockInterleaved));
    }
    v
}

/// A device on an engine's own context and stream, with cudarc's cross-stream event
/// tracking off (None without a GPU, as [`super::device`]). The caller uses every buffer
/// of that context on its stream only, or ordered by events of its own.
pub fn callers_device() -> Option<gpu::Device> {
    super::device()?;
    let ctx = gpu::cudarc::driver::CudaContext::new(0).unwrap();
    // SAFETY: the caller's promise above: no buffer of this context crosses streams
    // without an event of its own ordering it.
    unsafe { ctx.disable_event_tracking() };
    Some(gpu::Device::from_stream(ctx.new_stream().unwrap()).unwrap())
}
