//! CPU-side checks of arithmetic the kernels use in place of the formats crate's
//! encoders (no GPU needed): each must give the formats crate's bytes for every input.

use blockscale_formats::E2M1;

/// kernels/common/convert.cuh `encode_e2m1_fast`, transcribed (for non-NaN y).
fn e2m1_fast(y: f32) -> u8 {
    let a = y.abs();
    let c = a.clamp(1.0, 8.0); // fmaxf(fminf(a, 8), 1): the same for non-NaN a
    let magic = (c.to_bits() & 0x7f80_0000) + (22 << 23);
    let steps = (a + f32::from_bits(magic)).to_bits().wrapping_sub(magic);
    let code = steps.wrapping_add(magic >> 22).wrapping_sub(298).min(7);
    (code | ((y.is_sign_negative() as u32) << 3)) as u8
}

#[test]
fn e2m1_fast_formula_on_chosen_inputs() {
    for y in
        [0.0f32, 0.25, 0.2500001, 0.75, 0.7499999, 1.25, 1.75, 2.5, 3.5, 5.0, 5.0000005, 6.0, 7.0, 8.0, 1e30, f32::MAX]
    {
        for v in [y, -y] {
            assert_eq!(e2m1_fast(v), E2M1::from_f32(v).to_bits(), "{v}");
        }
    }
    for v in [f32::INFINITY, f32::NEG_INFINITY, f32::MIN_POSITIVE / 2.0, -f32::from_bits(1)] {
        assert_eq!(e2m1_fast(v), E2M1::from_f32(v).to_bits(), "{v}");
    }
}

#[test]
#[ignore = "all 2^32 f32 inputs (about 10 s); run by `cargo xtask test`"]
fn e2m1_fast_formula_on_every_non_nan_f32() {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()) as u64;
    std::thread::scope(|s| {
        for t in 0..threads {
            s.spawn(move || {
                let (lo, hi) = (t * (1 << 32) / threads, (t + 1) * (1 << 32) / threads);
                for b in lo..hi {
                    let y = f32::from_bits(b as u32);
                    if !y.is_nan() {
                        assert_eq!(e2m1_fast(y), E2M1::from_f32(y).to_bits(), "{b:#010x}");
                    }
                }
            });
        }
    });
}
