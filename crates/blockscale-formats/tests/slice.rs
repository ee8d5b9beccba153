//! The slice encoders and decoders give, element for element, what the scalar
//! conversions give (which the reference and oracle tests pin down), on random data
//! seeded with every special value, for every input type.

mod common;

use blockscale_formats::rng::SplitMix64;
use blockscale_formats::{E2M1, E2M3, E3M2, E4M3, E5M2, E8M0Rounding, Element, FormatError, Int4, UE4M3, UE8M0, slice};
use half::{bf16, f16};

fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = SplitMix64::new(seed);
    let specials = [
        0.0,
        -0.0,
        f32::NAN,
        -f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MAX,
        1e-40,
        -1e-45,
        6.0,
        448.0,
        464.0,
        465.0,
        0.25,
        0.75,
    ];
    (0..n)
        .map(|i| match i % 7 {
            0 => specials[rng.below(specials.len())],
            1 => f32::from_bits(rng.next_u32()),
            _ => common::normal(&mut rng) * 2f32.powi(rng.below(40) as i32 - 20),
        })
        .collect()
}

fn check<E: Element>(x: &[f32]) {
    let mut out = vec![E::with_bits(0); x.len()];
    slice::encode(x, &mut out).unwrap();
    for (i, (&v, &c)) in x.iter().zip(&out).enumerate() {
        assert_eq!(c, E::encode(v), "{} element {i} ({v:e})", E::NAME);
    }
    let b: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
    slice::encode(&b, &mut out).unwrap();
    for (&v, &c) in b.iter().zip(&out) {
        assert_eq!(c, E::encode(v.to_f32()), "{} bf16 {v}", E::NAME);
    }
    let h: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
    slice::encode(&h, &mut out).unwrap();
    for (&v, &c) in h.iter().zip(&out) {
        assert_eq!(c, E::encode(v.to_f32()), "{} f16 {v}", E::NAME);
    }
    let mut back = vec![0.0f32; x.len()];
    slice::decode(&out, &mut back).unwrap();
    for (&c, &v) in out.iter().zip(&back) {
        assert_eq!(v.to_bits(), c.decode().to_bits());
    }
}

#[test]
fn slice_encoders_match_scalar() {
    // Odd lengths exercise the vector loops' remainders.
    for n in [0, 1, 7, 33, 1000, 4099] {
        let x = data(n, n as u64);
        check::<E2M1>(&x);
        check::<E2M3>(&x);
        check::<E3M2>(&x);
        check::<E4M3>(&x);
        check::<E5M2>(&x);
        check::<UE4M3>(&x);
        check::<Int4>(&x);
    }
}

#[test]
fn packed_e2m1_and_ue8m0_match_scalar() {
    for n in [0, 2, 6, 34, 1000, 4098] {
        let x = data(n, 99 + n as u64);
        let mut packed = vec![0u8; n / 2];
        slice::encode_e2m1_packed(&x, &mut packed).unwrap();
        for (j, &b) in packed.iter().enumerate() {
            assert_eq!(b & 0xf, E2M1::from_f32(x[2 * j]).to_bits());
            assert_eq!(b >> 4, E2M1::from_f32(x[2 * j + 1]).to_bits());
        }
        let xb: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
        let mut packed_b = vec![0u8; n / 2];
        slice::encode_e2m1_packed(&xb, &mut packed_b).unwrap();
        for (j, &b) in packed_b.iter().enumerate() {
            assert_eq!(b & 0xf, E2M1::from_bf16(xb[2 * j]).to_bits());
            assert_eq!(b >> 4, E2M1::from_bf16(xb[2 * j + 1]).to_bits());
        }
        let mut dec = vec![0.0f32; n];
        slice::decode_e2m1_packed(&packed, &mut dec).unwrap();
        for (j, &v) in dec.iter().enumerate() {
            let nib = (packed[j / 2] >> (4 * (j % 2))) & 0xf;
            assert_eq!(v.to_bits(), E2M1::from_bits(nib).to_f32().to_bits());
        }
        for rounding in [E8M0Rounding::Zero, E8M0Rounding::PosInf] {
            let mut s = vec![UE8M0::MIN; n];
            slice::encode_ue8m0(&x, rounding, &mut s).unwrap();
            for (&v, &c) in x.iter().zip(&s) {
                assert_eq!(c, UE8M0::from_f32(v, rounding), "{v:e} {rounding:?}");
            }
            slice::encode_ue8m0(&xb, rounding, &mut s).unwrap();
            for (&v, &c) in xb.iter().zip(&s) {
                assert_eq!(c, UE8M0::from_bf16(v, rounding));
            }
        }
    }
}

#[test]
fn slice_length_errors() {
    let mut out = [E4M3::ZERO; 2];
    assert_eq!(
        slice::encode(&[1.0f32; 3], &mut out),
        Err(FormatError::LengthMismatch { what: "encoded output", expected: 3, actual: 2 })
    );
    let mut packed = [0u8; 1];
    assert!(matches!(slice::encode_e2m1_packed(&[1.0f32; 3], &mut packed), Err(FormatError::NotMultiple { .. })));
    assert!(matches!(slice::encode_e2m1_packed(&[1.0f32; 4], &mut packed), Err(FormatError::LengthMismatch { .. })));
    let mut dec = [0.0f32; 3];
    assert!(matches!(slice::decode_e2m1_packed(&[0u8; 1], &mut dec), Err(FormatError::LengthMismatch { .. })));
    assert!(matches!(slice::decode(&[E4M3::ONE; 2], &mut dec), Err(FormatError::LengthMismatch { .. })));
    let mut s = [UE8M0::MIN; 1];
    assert!(matches!(
        slice::encode_ue8m0(&[1.0f32; 2], E8M0Rounding::PosInf, &mut s),
        Err(FormatError::LengthMismatch { .. })
    ));
}
