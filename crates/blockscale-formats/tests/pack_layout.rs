//! Packing orders and scale layouts: hand-computed examples written from the bit
//! formulas, property tests for every round trip on random shapes (padding included),
//! the swizzle against an independent 5-D permutation, and the proof that the
//! `torch._scaled_mm` NVFP4 scale order is the same order.

mod common;

use blockscale_formats::layout::{self, SWIZZLE_TILE, swizzled_offset, swizzled_position};
use blockscale_formats::pack::{self, Fp6};
use blockscale_formats::rng::SplitMix64;
use blockscale_formats::{E2M1, E2M3, E3M2, FormatError, Int4, Int4Storage, ScaleLayout};
use proptest::prelude::*;

#[test]
fn fp4_even_element_in_the_low_nibble() {
    let codes = [E2M1::from_f32(1.0), E2M1::from_f32(-6.0), E2M1::from_f32(0.5), E2M1::from_f32(3.0)];
    let mut out = [0u8; 2];
    pack::pack_e2m1(&codes, &mut out).unwrap();
    // 1.0 = 0x2, -6 = 0xf, 0.5 = 0x1, 3 = 0x5.
    assert_eq!(out, [0xf2, 0x51]);
    let mut back = [E2M1::ZERO; 4];
    pack::unpack_e2m1(&out, &mut back).unwrap();
    assert_eq!(back, codes);
}

#[test]
fn high_nibble_first_packing_swaps_neighbours() {
    // What a wrong-order packer (even element in the high nibble) produces, read back
    // with the standard order: every pair along K is swapped. A dot product with an
    // activation row then pairs each activation with its neighbour's weight.
    let w = [1.0f32, 6.0, -2.0, 0.5];
    let a = [1.0f32, 0.0, 1.0, 0.0];
    let codes: Vec<E2M1> = w.iter().map(|&x| E2M1::from_f32(x)).collect();
    let wrong: Vec<u8> = codes.chunks(2).map(|p| (p[0].to_bits() << 4) | p[1].to_bits()).collect();
    let read: Vec<f32> = pack::unpack_e2m1_vec(&wrong).iter().map(|c| c.to_f32()).collect();
    assert_eq!(read, [6.0, 1.0, 0.5, -2.0]);
    let dot = |x: &[f32]| x.iter().zip(a).map(|(x, a)| x * a).sum::<f32>();
    assert_eq!(dot(&w), -1.0);
    assert_eq!(dot(&read), 6.5);
}

#[test]
fn fp6_bitstream_matches_the_byte_formulas() {
    // REFERENCE.md §2.5: e0 = b0 & 0x3F; e1 = (b0 >> 6) | ((b1 & 0x0F) << 2);
    // e2 = (b1 >> 4) | ((b2 & 0x03) << 4); e3 = b2 >> 2.
    let codes = [0x2au8, 0x15, 0x3f, 0x01];
    let e: Vec<E2M3> = codes.iter().map(|&c| E2M3::from_bits(c)).collect();
    let mut b = [0u8; 3];
    pack::pack_fp6(&e, &mut b).unwrap();
    assert_eq!(b[0] & 0x3f, codes[0]);
    assert_eq!((b[0] >> 6) | ((b[1] & 0x0f) << 2), codes[1]);
    assert_eq!((b[1] >> 4) | ((b[2] & 0x03) << 4), codes[2]);
    assert_eq!(b[2] >> 2, codes[3]);
    assert_eq!(b, [0x6a, 0xf5, 0x07]);
}

#[test]
fn int4_element_i_in_bits_4i() {
    let vals: Vec<Int4> = (0..8).map(|i| Int4::new(i as i8 - 4).unwrap()).collect();
    let mut w = [0u32; 1];
    pack::pack_int4(&vals, Int4Storage::Offset8, &mut w).unwrap();
    // offset-8 codes 4, 5, ..., 11 in nibbles 0..7.
    assert_eq!(w[0], 0xba98_7654);
    pack::pack_int4(&vals, Int4Storage::TwosComplement, &mut w).unwrap();
    assert_eq!(w[0], 0x3210_fedc);
}

#[test]
fn fp4_bytes_read_as_words_are_int4_word_order() {
    let codes: Vec<E2M1> = (0..16u8).map(E2M1::from_bits).collect();
    let bytes = pack::pack_e2m1_vec(&codes).unwrap();
    let mut words = [0u32; 2];
    pack::words_from_le_bytes(&bytes, &mut words).unwrap();
    let as_int4: Vec<Int4> = codes.iter().map(|c| Int4::from_bits(c.to_bits())).collect();
    assert_eq!(words.to_vec(), pack::pack_int4_vec(&as_int4, Int4Storage::TwosComplement).unwrap());
    let mut back = vec![0u8; 8];
    pack::le_bytes_from_words(&words, &mut back).unwrap();
    assert_eq!(back, bytes);
}

#[test]
fn block_interleaved_index_formula() {
    let (n, k) = (3, 64);
    let rows: Vec<u32> = (0..(n * k / 8) as u32).collect();
    let inter = pack::to_block_interleaved_vec(&rows, n, k).unwrap();
    // Row r, K-block kb, word w sits at ((kb * n) + r) * 4 + w.
    for r in 0..n {
        for kb in 0..k / 32 {
            for w in 0..4 {
                assert_eq!(inter[(kb * n + r) * 4 + w], rows[r * (k / 8) + kb * 4 + w]);
            }
        }
    }
}

/// The swizzled layout as REFERENCE.md §1.6 describes it, independently: zero-pad to
/// [Mp, Sp], view as (Mp/128, 4, 32, Sp/4, 4), permute to (0, 3, 2, 1, 4), flatten.
fn swizzle_by_permutation(linear: &[u8], rows: usize, cols: usize) -> Vec<u8> {
    let (mp, sp) = (rows.div_ceil(128) * 128, cols.div_ceil(4) * 4);
    let padded = |r: usize, c: usize| {
        if r < rows && c < cols { linear[r * cols + c] } else { 0 }
    };
    let mut out = Vec::with_capacity(mp * sp);
    for a in 0..mp / 128 {
        for d in 0..sp / 4 {
            for c in 0..32 {
                for b in 0..4 {
                    for e in 0..4 {
                        // view index (a, b, c, d, e) = row a*128 + b*32 + c, column d*4 + e
                        out.push(padded(a * 128 + b * 32 + c, d * 4 + e));
                    }
                }
            }
        }
    }
    out
}

#[test]
fn torch_scaled_mm_nvfp4_order_is_the_swizzle() {
    // torch._scaled_mm's 1-D NVFP4 scale order: for each 128-row block, for each group
    // of 4 scale columns, for s in 0..32, for r in 0, 32, 64, 96, for c in 0..4.
    let (rows, cols): (usize, usize) = (256 + 17, 4 * 3 + 2);
    let (mp, sp) = (rows.div_ceil(128) * 128, cols.div_ceil(4) * 4);
    let mut position = 0;
    for rb in 0..mp / 128 {
        for cg in 0..sp / 4 {
            for s in 0..32 {
                for r in [0, 32, 64, 96] {
                    for c in 0..4 {
                        let (row, col) = (rb * 128 + r + s, cg * 4 + c);
                        assert_eq!(swizzled_offset(row, col, cols), position, "row {row} col {col}");
                        position += 1;
                    }
                }
            }
        }
    }
    assert_eq!(position, ScaleLayout::Swizzled128x4.storage_len(rows, cols).unwrap());
}

#[test]
fn layout_errors_are_typed() {
    let mut out = vec![0u8; 512];
    assert!(matches!(
        layout::swizzle(&[0u8; 5], 2, 3, &mut out),
        Err(FormatError::LengthMismatch { expected: 6, actual: 5, .. })
    ));
    assert!(matches!(
        layout::swizzle(&[0u8; 6], 2, 3, &mut out[..511]),
        Err(FormatError::LengthMismatch { expected: 512, actual: 511, .. })
    ));
    assert!(matches!(ScaleLayout::Swizzled128x4.storage_len(usize::MAX, 4), Err(FormatError::TooLarge { .. })));
    assert!(matches!(ScaleLayout::Linear.storage_len(usize::MAX, 2), Err(FormatError::TooLarge { .. })));
    assert!(matches!(
        pack::pack_e2m1_vec(&[E2M1::ZERO; 3]),
        Err(FormatError::NotMultiple { value: 3, multiple: 2, .. })
    ));
    assert!(matches!(
        pack::pack_fp6_vec(&[E3M2::ZERO; 6]),
        Err(FormatError::NotMultiple { value: 6, multiple: 4, .. })
    ));
    assert!(matches!(
        pack::unpack_fp6_vec::<E3M2>(&[0u8; 4]),
        Err(FormatError::NotMultiple { value: 4, multiple: 3, .. })
    ));
    assert!(matches!(
        pack::pack_int4_vec(&[Int4::ZERO; 7], Int4Storage::Offset8),
        Err(FormatError::NotMultiple { .. })
    ));
    assert!(matches!(
        pack::to_block_interleaved_vec(&[0u32; 6], 2, 24),
        Err(FormatError::NotMultiple { value: 24, multiple: 32, .. })
    ));
    assert!(matches!(
        pack::to_block_interleaved_vec(&[0u32; 7], 2, 32),
        Err(FormatError::LengthMismatch { expected: 8, .. })
    ));
    let mut words = [0u32; 1];
    assert!(pack::words_from_le_bytes(&[0u8; 5], &mut words).is_err());
    let err = pack::pack_e2m1_vec(&[E2M1::ZERO; 3]).unwrap_err();
    assert!(err.to_string().contains("pad it to 4"), "{err}");
}

#[test]
fn empty_inputs_are_fine() {
    assert_eq!(pack::pack_e2m1_vec(&[]).unwrap(), Vec::<u8>::new());
    assert_eq!(pack::to_block_interleaved_vec(&[], 0, 32).unwrap(), Vec::<u32>::new());
    assert_eq!(pack::to_block_interleaved_vec(&[], 5, 0).unwrap(), Vec::<u32>::new());
    assert_eq!(
        layout::convert_vec::<u8>(&[], ScaleLayout::Linear, ScaleLayout::Swizzled128x4, 0, 0).unwrap(),
        Vec::<u8>::new()
    );
    assert_eq!(
        layout::convert_vec::<u8>(&[], ScaleLayout::Linear, ScaleLayout::Swizzled128x4, 3, 0).unwrap(),
        Vec::<u8>::new()
    );
}

fn shape() -> impl Strategy<Value = (usize, usize)> {
    (1usize..300, 1usize..20)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn e2m1_pack_round_trip(codes in prop::collection::vec(0u8..16, 0..200).prop_map(|v| {
        let mut v = v; if v.len() % 2 == 1 { v.pop(); } v
    })) {
        let codes: Vec<E2M1> = codes.into_iter().map(E2M1::from_bits).collect();
        let packed = pack::pack_e2m1_vec(&codes).unwrap();
        for (j, b) in packed.iter().enumerate() {
            prop_assert_eq!(b & 0xf, codes[2 * j].to_bits());
            prop_assert_eq!(b >> 4, codes[2 * j + 1].to_bits());
        }
        prop_assert_eq!(pack::unpack_e2m1_vec(&packed), codes);
    }

    #[test]
    fn fp6_pack_round_trip(codes in prop::collection::vec(0u8..64, 0..50).prop_map(|v| {
        let n = v.len() / 4 * 4; v[..n].to_vec()
    })) {
        let e2m3: Vec<E2M3> = codes.iter().map(|&c| E2M3::from_bits(c)).collect();
        let packed = pack::pack_fp6_vec(&e2m3).unwrap();
        prop_assert_eq!(packed.len(), codes.len() / 4 * 3);
        // Independent bit-by-bit check of the LSB-first stream.
        for (i, &c) in codes.iter().enumerate() {
            let bit = |j: usize| (packed[j / 8] >> (j % 8)) & 1;
            let v = (0..6).fold(0u8, |acc, t| acc | (bit(6 * i + t) << t));
            prop_assert_eq!(v, c);
        }
        prop_assert_eq!(pack::unpack_fp6_vec::<E2M3>(&packed).unwrap(), e2m3);
        let e3m2: Vec<E3M2> = codes.iter().map(|&c| E3M2::from_code(c)).collect();
        prop_assert_eq!(pack::unpack_fp6_vec::<E3M2>(&pack::pack_fp6_vec(&e3m2).unwrap()).unwrap(), e3m2);
    }

    #[test]
    fn int4_pack_round_trip(vals in prop::collection::vec(-8i8..=7, 0..20).prop_map(|v| {
        v.into_iter().cycle().take(64).collect::<Vec<_>>()
    }), twos in any::<bool>()) {
        let storage = if twos { Int4Storage::TwosComplement } else { Int4Storage::Offset8 };
        let vals: Vec<Int4> = vals.into_iter().map(|v| Int4::new(v).unwrap()).collect();
        let words = pack::pack_int4_vec(&vals, storage).unwrap();
        for (i, v) in vals.iter().enumerate() {
            prop_assert_eq!(((words[i / 8] >> (4 * (i % 8))) & 0xf) as u8, storage.encode(*v));
        }
        let mut back = vec![Int4::ZERO; vals.len()];
        pack::unpack_int4(&words, storage, &mut back).unwrap();
        prop_assert_eq!(back, vals);
    }

    #[test]
    fn block_interleave_round_trip(n in 1usize..40, kb in 1usize..6, seed in any::<u64>()) {
        let k = kb * 32;
        let mut rng = SplitMix64::new(seed);
        let rows: Vec<u32> = (0..n * k / 8).map(|_| rng.next_u32()).collect();
        let inter = pack::to_block_interleaved_vec(&rows, n, k).unwrap();
        let mut back = vec![0u32; rows.len()];
        pack::from_block_interleaved(&inter, n, k, &mut back).unwrap();
        prop_assert_eq!(back, rows);
    }

    #[test]
    fn swizzle_matches_the_permutation_and_round_trips((rows, cols) in shape(), seed in any::<u64>()) {
        let mut rng = SplitMix64::new(seed);
        // Non-zero entries, so that padding (zero) is distinguishable from data.
        let linear: Vec<u8> = (0..rows * cols).map(|_| 1 + rng.below(255) as u8).collect();
        let sw = layout::convert_vec(&linear, ScaleLayout::Linear, ScaleLayout::Swizzled128x4, rows, cols).unwrap();
        prop_assert_eq!(&sw, &swizzle_by_permutation(&linear, rows, cols));
        prop_assert_eq!(sw.len() % SWIZZLE_TILE, 0);
        prop_assert_eq!(sw.iter().filter(|&&b| b == 0).count(), sw.len() - rows * cols);
        for r in 0..rows {
            for c in 0..cols {
                prop_assert_eq!(sw[ScaleLayout::Swizzled128x4.offset(r, c, cols)], linear[r * cols + c]);
                prop_assert_eq!(ScaleLayout::Linear.offset(r, c, cols), r * cols + c);
            }
        }
        for (i, &b) in sw.iter().enumerate() {
            let (r, c) = swizzled_position(i, cols);
            if r < rows && c < cols {
                prop_assert_eq!(swizzled_offset(r, c, cols), i);
                prop_assert_eq!(b, linear[r * cols + c]);
            } else {
                prop_assert_eq!(b, 0, "padding at {} ({}, {})", i, r, c);
            }
        }
        let back = layout::convert_vec(&sw, ScaleLayout::Swizzled128x4, ScaleLayout::Linear, rows, cols).unwrap();
        prop_assert_eq!(&back, &linear);
        let same = layout::convert_vec(&linear, ScaleLayout::Linear, ScaleLayout::Linear, rows, cols).unwrap();
        prop_assert_eq!(same, linear);
    }

    #[test]
    fn swizzle_overwrites_stale_padding((rows, cols) in shape()) {
        let linear = vec![7u8; rows * cols];
        let mut out = vec![0xffu8; ScaleLayout::Swizzled128x4.storage_len(rows, cols).unwrap()];
        layout::swizzle(&linear, rows, cols, &mut out).unwrap();
        prop_assert!(out.iter().all(|&b| b == 7 || b == 0));
    }
}
