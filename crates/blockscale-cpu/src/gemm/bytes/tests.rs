//! The exact form of every code, and the SIMD decoders against it.

use blockscale_formats::ElementFormat;

use super::*;

const ALL: [(Elem, ElementFormat); 4] = [
    (Elem::E4M3, ElementFormat::E4M3),
    (Elem::E5M2, ElementFormat::E5M2),
    (Elem::E2M3, ElementFormat::E2M3),
    (Elem::E3M2, ElementFormat::E3M2),
];

/// `h(code) * post` is the formats crate's value of every code (E4M3's NaN codes
/// excepted: the kernels never multiply them), infinities and NaN of E5M2 included.
#[test]
fn half_bits_are_the_value_times_a_power_of_two() {
    for (elem, format) in ALL {
        let table = format.table();
        for code in 0..1u16 << elem.bits() {
            let want = table[code as usize];
            let h = half::f16::from_bits(elem.half_bits(code as u8)).to_f32();
            let got = h * elem.post();
            if elem == Elem::E4M3 && code & 0x7f == 0x7f {
                assert!(want.is_nan(), "E4M3 {code:#x}");
                continue;
            }
            if want.is_nan() {
                assert!(got.is_nan(), "{elem:?} {code:#x}");
            } else {
                assert_eq!(got.to_bits(), want.to_bits(), "{elem:?} {code:#x}: {got} vs {want}");
                // The scaled value itself is exact (no f16 rounding hides behind `post`).
                assert_eq!(h as f64 * elem.post() as f64, want as f64, "{elem:?} {code:#x}");
            }
        }
    }
}

#[test]
fn e4m3_nan_rows_are_found_anywhere() {
    for isa in isas() {
        for code in 0..=255u8 {
            let nan = code & 0x7f == 0x7f;
            for (len, at) in [(1, 0), (200, 0), (200, 31), (200, 32), (200, 199), (64, 63)] {
                let mut row = vec![0x7eu8; len];
                assert!(!has_e4m3_nan(isa, &row));
                row[at] = code;
                assert_eq!(has_e4m3_nan(isa, &row), nan, "{isa:?} {code:#x} at {at} of {len}");
            }
        }
    }
}

/// Every code at every position (finite codes; the non-finite ones are tested in
/// `tests/gemm.rs`) of a 16-code step, through the portable decoder and
/// (where the CPU has them) the SIMD ones, as seen by a GEMV with unit activations.
#[test]
fn every_code_decodes_alike_on_every_path() {
    for (elem, _) in ALL {
        let count = 1usize << elem.bits();
        // Rows of 64 codes (block 32): code c sits at position (c + r) % 64 of row r.
        let k = 64;
        let rows = count;
        let mut codes = vec![0u8; rows * k];
        for r in 0..rows {
            for e in 0..k {
                let c = (e + r) % count;
                // Non-finite codes would make every lane's `0 * code` NaN: zero instead
                // (they have their own test).
                let finite = !matches!((elem, c & 0x7f), (Elem::E4M3, 0x7f) | (Elem::E5M2, 0x7c..));
                codes[r * k + e] = if finite { c as u8 } else { 0 };
            }
        }
        let data = if elem.bits() == 8 {
            codes.clone()
        } else {
            let mut d = vec![0u8; codes.len() / 4 * 3];
            for (g, out) in codes.chunks_exact(4).zip(d.chunks_exact_mut(3)) {
                let w = g.iter().enumerate().fold(0u32, |a, (i, &c)| a | u32::from(c) << (6 * i));
                out.copy_from_slice(&w.to_le_bytes()[..3]);
            }
            d
        };
        let scales = vec![127u8; rows * 2];
        let w = ByteWeights {
            data: &data,
            n: rows,
            k,
            block: 32,
            elem,
            scales: ByteScales::Ue8m0 { data: &scales, index: ScaleIndex::Linear { cols: 2 } },
        };
        // One-hot activations pick single codes: x[e] = 1 at one position per row i.
        let m = 16;
        let mut x = vec![0f32; m * k];
        for i in 0..m {
            x[i * k + (i * 5 + 3) % k] = 1.0;
        }
        let want: Vec<f32> = (0..m * rows)
            .map(|idx| {
                let (i, r) = (idx / rows, idx % rows);
                let code = codes[r * k + (i * 5 + 3) % k];
                half::f16::from_bits(elem.half_bits(code)).to_f32() * elem.post()
            })
            .collect();
        for isa in isas() {
            let mut out = vec![0f32; m * rows];
            gemm_bytes(isa, &x, m, &w, false, &mut out);
            for (idx, (&g, &v)) in out.iter().zip(&want).enumerate() {
                // A -0 code meets +0 products of the other lanes: the sum is +0.
                let same = g.to_bits() == v.to_bits() || (v == 0.0 && g == 0.0) || (g.is_nan() && v.is_nan());
                assert!(same, "{elem:?} {isa:?} [{idx}]: {g} vs {v}");
            }
        }
    }
}

fn isas() -> Vec<Isa> {
    let mut v = vec![Isa::Portable];
    #[cfg(target_arch = "x86_64")]
    {
        if crate::avx2_available() {
            v.push(Isa::Avx2);
        }
        if crate::avx512_available() {
            v.push(Isa::Avx512);
        }
    }
    v
}
