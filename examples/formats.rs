//! The README's main command at this stage: every element format's value table, a
//! sample converted to each format, one block under each MX scale rule, and a
//! transformer-like weight matrix quantized with every scheme on the CPU backend.
//!
//! ```text
//! cargo run --release --example formats
//! ```

use std::time::Instant;

use blockscale::ndarray::Array2;
use blockscale::{
    E2M1, E2M3, E3M2, E4M3, E5M2, ElementFormat, Int4, QuantizeOptions, ScaleLayout, ScaleRule, Scheme, UE4M3, UE8M0,
    dequantize, error_metrics, quantize,
};

fn main() {
    println!("blockscale element formats\n");
    table("E2M1  (FP4: NVFP4, MXFP4)", "s.ee.m, bias 1, no Inf/NaN", &E2M1::TABLE);
    table("E2M3  (FP6: MXFP6)", "s.ee.mmm, bias 1, no Inf/NaN", &E2M3::TABLE);
    table("E3M2  (FP6: MXFP6)", "s.eee.mm, bias 3, no Inf/NaN", &E3M2::TABLE);
    table("E4M3  (FP8: MXFP8, FP8 block)", "s.eeee.mmm, bias 7, 0x7f/0xff NaN, no Inf", &E4M3::TABLE);
    table("E5M2  (FP8: MXFP8)", "s.eeeee.mm, bias 15, IEEE Inf/NaN", &E5M2::TABLE);
    println!("Int4  (INT4-G32): offset-8 codes 0..0xf are {:?}\n", Int4::OFFSET8_TABLE);
    println!(
        "UE4M3 (NVFP4 block scale): E4M3 with the sign bit 0: {} .. {}, NaN {:?}",
        UE4M3::MIN_POSITIVE_SUBNORMAL,
        UE4M3::MAX,
        UE4M3::NAN
    );
    println!("UE8M0 (MX block scale): byte b = 2^(b-127): {:?} .. {:?}, {:?}\n", UE8M0::MIN, UE8M0::MAX, UE8M0::NAN);

    let sample = [0.0f32, -0.3, 0.75, 1.25, 2.5, 3.3, -5.0, 7.0, 100.0, 500.0, f32::INFINITY, f32::NAN];
    println!("a sample, converted (round to nearest even, saturating; value shown after decoding):");
    println!("{:>10} {:>12} {:>12} {:>12} {:>14} {:>14} {:>8}", "x", "E2M1", "E2M3", "E3M2", "E4M3", "E5M2", "Int4");
    for x in sample {
        println!(
            "{:>10} {:>12} {:>12} {:>12} {:>14} {:>14} {:>8}",
            x,
            show(E2M1::from_f32(x).to_bits(), E2M1::from_f32(x).to_f32()),
            show(E2M3::from_f32(x).to_bits(), E2M3::from_f32(x).to_f32()),
            show(E3M2::from_f32(x).to_bits(), E3M2::from_f32(x).to_f32()),
            show(E4M3::from_f32(x).to_bits(), E4M3::from_f32(x).to_f32()),
            show(E5M2::from_f32(x).to_bits(), E5M2::from_f32(x).to_f32()),
            Int4::from_f32(x).value(),
        );
    }

    // One MXFP4 block: the UE8M0 scale each rule picks, and what the block's amax
    // becomes after quantization (scale x E2M1 code).
    let block: Vec<f32> = (0..32).map(|i| ((i as f32) * 0.37 + 0.5).sin() * 7.7).collect();
    let amax = block.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    println!("\none MXFP4 block of 32 values, amax {amax:.4}:");
    for rule in ScaleRule::ALL {
        let scale = rule.select(amax, ElementFormat::E2M1);
        let q = |x: f32| E2M1::from_f32(x * scale.recip_f32()).to_f32() * scale.to_f32();
        let err = block.iter().map(|&x| (q(x) - x).abs()).fold(0.0f32, f32::max);
        let rms = (block.iter().map(|&x| (q(x) - x).powi(2)).sum::<f32>() / 32.0).sqrt();
        println!("  {rule:<6} scale {scale:<5} amax -> {:<4} max abs error {err:.4}, rms error {rms:.4}", q(amax));
    }

    println!("\nschemes (storage bits per element, scales included):");
    for s in Scheme::ALL {
        println!(
            "  {:<18} {:>5} x {:<3} block {:>3} x {:<3} scale {:<6} {:.3} bits",
            s.name(),
            s.element().name(),
            s.element().bits(),
            s.block_rows(),
            s.block_size(),
            s.scale_format().name(),
            s.bits_per_element()
        );
    }

    // A deterministic, transformer-like weight: Gaussian-ish rows with a few outlier
    // input channels, quantized along K with every scheme and dequantized again.
    let (n, k) = (1024, 4096);
    let w = Array2::from_shape_fn((n, k), |(r, c)| {
        let h = (r as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (c as u64).wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
        let h = (h ^ (h >> 31)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        let u = ((h >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0;
        let bell = (u * u * u + u) as f32 * 0.02;
        if c % 512 == 7 { bell * 40.0 } else { bell }
    });
    println!("\na {n} x {k} weight with outlier channels, quantized on the CPU (swizzled scales where they exist):");
    println!("  {:<18} {:>9} {:>10} {:>12} {:>10} {:>9}", "scheme", "SQNR dB", "cosine", "max rel err", "MiB", "ms");
    for s in Scheme::ALL {
        let layout = if s.supports_layout(ScaleLayout::Swizzled128x4) {
            ScaleLayout::Swizzled128x4
        } else {
            ScaleLayout::Linear
        };
        let t = Instant::now();
        let q = quantize(w.view(), s, &QuantizeOptions::default().with_scale_layout(layout)).expect("valid shape");
        let ms = t.elapsed().as_secs_f64() * 1e3;
        let m = error_metrics(w.view(), dequantize::<f32>(&q).view()).expect("same shape");
        println!(
            "  {:<18} {:>9.2} {:>10.5} {:>12.3} {:>10.2} {:>9.1}",
            s.name(),
            m.sqnr_db,
            m.cosine,
            m.max_rel,
            q.storage_bytes() as f64 / (1 << 20) as f64,
            ms
        );
    }
    println!("  (bf16 would take {:.2} MiB)", (n * k * 2) as f64 / (1 << 20) as f64);
}

fn show(code: u8, v: f32) -> String {
    format!("{code:#04x}={v}")
}

fn table(name: &str, layout: &str, values: &[f32]) {
    println!("{name}: {layout}");
    let half = values.len() / 2;
    let row: Vec<String> = values[..half].iter().map(|v| format!("{v}")).collect();
    // Print the non-negative half (the sign bit mirrors it); long tables are elided.
    let shown = if row.len() > 24 {
        format!("{} ... {}", row[..12].join(" "), row[row.len() - 8..].join(" "))
    } else {
        row.join(" ")
    };
    println!("  codes 0..{half:#x}: {shown}\n");
}
