//! Blocks worked out by hand from the recipes in docs/NUMERICS.md, with the expected
//! bytes written down literally (the arithmetic is in the comments).

use blockscale_cpu::{GlobalScaleSource, QuantizeOptions, dequantize, quantize_slice};
use blockscale_formats::{Fp8Tile, GlobalScale, ScaleData, ScaleRule, Scheme};
use half::f16;

fn opts_g1() -> QuantizeOptions {
    QuantizeOptions::default().with_global_scale(GlobalScaleSource::Given(GlobalScale::from_encode(1.0).unwrap()))
}

fn bytes(s: &ScaleData) -> &[u8] {
    match s {
        ScaleData::Bytes(b) => b,
        _ => panic!("expected byte scales"),
    }
}

#[test]
fn nvfp4_block() {
    // g = 1, amax = 3.3: sfv = 3.3 * RN(1/6) = 0.55 -> UE4M3 0.5625 (0x31; 0.5 is 0.05
    // away, 0.5625 only 0.0125). mult = 1 / 0.5625 = 1.7778.
    // 0.1 -> 0.178 -> 0; -2 -> -3.556 -> -4 (0xe); 3.3 -> 5.867 -> 6 (0x7); 0 -> 0;
    // 0.25 -> 0.444 -> 0.5 (0x1); -0.3 -> -0.533 -> -0.5 (0x9); 1 -> 1.778 -> 2 (0x4);
    // 1.2 -> 2.133 -> 2 (0x4). Low nibble = even element.
    let mut x = vec![0.0f32; 16];
    x[..8].copy_from_slice(&[0.1, -2.0, 3.3, 0.0, 0.25, -0.3, 1.0, 1.2]);
    let q = quantize_slice(&x, 1, 16, Scheme::NvFp4, &opts_g1()).unwrap();
    assert_eq!(q.data(), &[0xe0, 0x07, 0x91, 0x44, 0, 0, 0, 0]);
    assert_eq!(bytes(q.scales()), &[0x31]);
    let y = dequantize::<f32>(&q);
    assert_eq!(y.as_slice().unwrap()[..8], [0.0, -2.25, 3.375, 0.0, 0.28125, -0.28125, 1.125, 1.125]);
}

#[test]
fn nvfp4_zero_underflow_and_negative_zero() {
    // All zeros: scale 0, codes 0.
    let q = quantize_slice(&[0.0f32; 16], 1, 16, Scheme::NvFp4, &opts_g1()).unwrap();
    assert_eq!((q.data(), bytes(q.scales())), (&[0u8; 8][..], &[0u8][..]));
    // amax 0.001: sfv = 0.000167 < 2^-10, rounds to UE4M3 0, so mult = 0 and every code
    // is +0, negative inputs included.
    let mut x = [0.0f32; 16];
    x[0] = -0.001;
    x[1] = 0.0005;
    let q = quantize_slice(&x, 1, 16, Scheme::NvFp4, &opts_g1()).unwrap();
    assert_eq!((q.data(), bytes(q.scales())), (&[0u8; 8][..], &[0u8][..]));
    // A normal block keeps the sign of a negative value that rounds to zero:
    // amax 3 -> sf 0.5 (0x30), mult 2; -0.01 * 2 = -0.02 -> -0 (0x8); 3 * 2 = 6 (0x7).
    let mut x = [0.0f32; 16];
    x[0] = -0.01;
    x[1] = 3.0;
    let q = quantize_slice(&x, 1, 16, Scheme::NvFp4, &opts_g1()).unwrap();
    assert_eq!(q.data()[0], 0x78);
    assert_eq!(bytes(q.scales()), &[0x30]);
}

#[test]
fn mxfp4_rules() {
    let mut x = vec![0.0f32; 32];
    x[..4].copy_from_slice(&[7.0, 1.0, -0.6, 2.9]);
    // Rceil: 7 * RN(1/6) = 1.167 -> 2 (byte 128); x / 2: 3.5 -> 4 (tie to even, 0x6),
    // 0.5 (0x1), -0.3 -> -0.5 (0x9), 1.45 -> 1.5 (0x3).
    let q = quantize_slice(&x, 1, 32, Scheme::MxFp4, &QuantizeOptions::default()).unwrap();
    assert_eq!(&q.data()[..2], &[0x16, 0x39]);
    assert_eq!(bytes(q.scales()), &[128]);
    // Floor: floor(log2 7) - 2 = 0 -> scale 1 (byte 127): 7 -> 6 saturated (0x7),
    // 1 (0x2), -0.6 -> -0.5 (0x9), 2.9 -> 3 (0x5).
    let opts = QuantizeOptions::default().with_scale_rule(ScaleRule::Floor);
    let q = quantize_slice(&x, 1, 32, Scheme::MxFp4, &opts).unwrap();
    assert_eq!(&q.data()[..2], &[0x27, 0x59]);
    assert_eq!(bytes(q.scales()), &[127]);
    // An all-zero block: scale 2^-127 (byte 0), codes 0.
    let q = quantize_slice(&[0.0f32; 32], 1, 32, Scheme::MxFp4, &QuantizeOptions::default()).unwrap();
    assert_eq!((q.data(), bytes(q.scales())), (&[0u8; 16][..], &[0u8][..]));
}

#[test]
fn mxfp8_block() {
    // amax 1000: 1000 * RN(1/448) = 2.23 -> 4 (byte 129); x / 4: 250 -> 256 (0x78),
    // -0.75 (0xb4), 0.00025 -> 0 (below half the smallest subnormal 2^-9).
    let mut x = vec![0.0f32; 32];
    x[..3].copy_from_slice(&[1000.0, -3.0, 0.001]);
    let q = quantize_slice(&x, 1, 32, Scheme::MxFp8E4M3, &QuantizeOptions::default()).unwrap();
    assert_eq!(&q.data()[..3], &[0x78, 0xb4, 0x00]);
    assert_eq!(bytes(q.scales()), &[129]);
    // E5M2: 1000 * RN(1/57344) -> 2^-5 (byte 122); x * 32: 32000 -> 32768 (0x78),
    // -96 (0xd6), 0.032 -> 0.03125 (0x28).
    let q = quantize_slice(&x, 1, 32, Scheme::MxFp8E5M2, &QuantizeOptions::default()).unwrap();
    assert_eq!(&q.data()[..3], &[0x78, 0xd6, 0x28]);
    assert_eq!(bytes(q.scales()), &[122]);
}

#[test]
fn fp8_block_and_int4() {
    // FP8 1x128: amax 896 -> s = 2; 896 / 2 = 448 (0x7e), -1 / 2 = -0.5 (0xb0).
    let mut x = vec![0.0f32; 128];
    x[0] = 896.0;
    x[1] = -1.0;
    let q = quantize_slice(&x, 1, 128, Scheme::Fp8Block(Fp8Tile::Row1x128), &QuantizeOptions::default()).unwrap();
    assert_eq!(&q.data()[..2], &[0x7e, 0xb0]);
    assert_eq!(q.scales(), &ScaleData::F32(vec![2.0]));
    // 128x128 tile over 2 rows: the tile amax (row 1's 1792) sets s = 4 for both rows.
    let mut x2 = x.clone();
    x2.extend(x.iter().map(|v| v * 2.0));
    let q = quantize_slice(&x2, 2, 128, Scheme::Fp8Block(Fp8Tile::Tile128x128), &QuantizeOptions::default()).unwrap();
    assert_eq!(q.scales(), &ScaleData::F32(vec![4.0]));
    assert_eq!((q.data()[0], q.data()[128]), (0x76, 0x7e)); // 224 and 448
    // INT4-G32: amax 7 -> s = f16(1); 7 -> 15, -3.5 -> -4 (ties to even) -> 4,
    // 1.2 -> 1 -> 9, 0 -> 8. Low nibble first.
    let mut x = vec![0.0f32; 32];
    x[..4].copy_from_slice(&[7.0, -3.5, 1.2, 0.0]);
    let q = quantize_slice(&x, 1, 32, Scheme::Int4G32, &QuantizeOptions::default()).unwrap();
    assert_eq!(&q.data()[..3], &[0x4f, 0x89, 0x88]);
    assert_eq!(q.scales(), &ScaleData::F16(vec![f16::ONE]));
    // A zero group: scale 0, codes 8 (value 0).
    let q = quantize_slice(&[0.0f32; 32], 1, 32, Scheme::Int4G32, &QuantizeOptions::default()).unwrap();
    assert_eq!(q.data(), &[0x88; 16]);
    assert_eq!(q.scales(), &ScaleData::F16(vec![f16::ZERO]));
}
