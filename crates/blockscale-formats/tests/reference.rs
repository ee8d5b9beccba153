//! Every element type against the independent reference in `common` (value lists and
//! nearest-value search in f64, written from the format definitions): every code
//! decodes as defined, every f16 and bf16 input encodes as defined (to nearest even and,
//! for FP4/FP6, toward zero), the f64 conversions round once as defined on the NVIDIA
//! oracle's f64 inputs, the constants are the values the definitions give.
//! `all_f32_inputs_*` sweeps all 2^32 f32 patterns (ignored by default; `cargo xtask
//! test` runs it).

mod common;

use blockscale_formats::{E2M1, E2M3, E3M2, E4M3, E5M2, E8M0Rounding, Int4, Int4Storage, UE4M3, UE8M0};
use common::{Fmt, e8m0_reference};
use half::{bf16, f16};

/// One element type's entry points, for table-driven tests.
struct Case {
    fmt: Fmt,
    decode: fn(u8) -> f32,
    sat: fn(f32) -> u8,
    nosat: Option<fn(f32) -> u8>,
    from_f16: fn(f16) -> u8,
    from_bf16: fn(bf16) -> u8,
    f64: fn(f64) -> u8,
    f64_nosat: Option<fn(f64) -> u8>,
    /// Round toward zero from f32, f16, bf16 and f64 (FP4/FP6 only).
    rz: Option<Rz>,
}

struct Rz {
    f32: fn(f32) -> u8,
    f16: fn(f16) -> u8,
    bf16: fn(bf16) -> u8,
    f64: fn(f64) -> u8,
}

/// A format's case: its conversions, with the non-saturating or round-toward-zero ones
/// where it has them.
macro_rules! case {
    (@with $T:ident, $nosat:expr, $f64_nosat:expr, $rz:expr) => {
        Case {
            fmt: common::$T,
            decode: |c| $T::from_bits(c).to_f32(),
            sat: |x| $T::from_f32(x).to_bits(),
            nosat: $nosat,
            from_f16: |x| $T::from_f16(x).to_bits(),
            from_bf16: |x| $T::from_bf16(x).to_bits(),
            f64: |x| $T::from_f64(x).to_bits(),
            f64_nosat: $f64_nosat,
            rz: $rz,
        }
    };
    ($T:ident) => {
        case!(@with $T, None, None, None)
    };
    ($T:ident, nosat) => {
        case!(@with $T, Some(|x| $T::from_f32_nosat(x).to_bits()), Some(|x| $T::from_f64_nosat(x).to_bits()), None)
    };
    ($T:ident, rz) => {
        case!(@with $T, None, None, Some(Rz {
            f32: |x| $T::from_f32_rz(x).to_bits(),
            f16: |x| $T::from_f16_rz(x).to_bits(),
            bf16: |x| $T::from_bf16_rz(x).to_bits(),
            f64: |x| $T::from_f64_rz(x).to_bits(),
        }))
    };
}

fn cases() -> Vec<Case> {
    vec![case!(E2M1, rz), case!(E2M3, rz), case!(E3M2, rz), case!(E4M3, nosat), case!(E5M2, nosat), case!(UE4M3)]
}

fn same(a: f64, b: f32) -> bool {
    (a.is_nan() && b.is_nan()) || (a == b as f64 && a.is_sign_negative() == b.is_sign_negative())
}

#[test]
fn every_code_decodes_as_defined() {
    for case in cases() {
        let codes = 1u32 << (case.fmt.mag_bits() + case.fmt.signed as u32);
        let codes = if case.fmt.signed { codes } else { 256 };
        for c in 0..codes {
            let want = case.fmt.decode(c as u8);
            let got = (case.decode)(c as u8);
            assert!(same(want, got), "{} code {c:#04x}: want {want}, got {got}", case.fmt.name);
        }
    }
}

#[test]
fn every_f16_and_bf16_encodes_as_defined() {
    for case in cases() {
        let r = case.fmt.reference();
        for b in 0..=u16::MAX {
            for (what, x, got) in [
                ("f16", f16::from_bits(b).to_f64(), (case.from_f16)(f16::from_bits(b))),
                ("bf16", bf16::from_bits(b).to_f64(), (case.from_bf16)(bf16::from_bits(b))),
            ] {
                let want = r.encode(x, true);
                assert_eq!(got, want, "{} from {what} {b:#06x} ({x})", case.fmt.name);
                assert_eq!((case.sat)(x as f32), want, "{} from f32 {x}", case.fmt.name);
                if let Some(nosat) = case.nosat {
                    assert_eq!(nosat(x as f32), r.encode(x, false), "{} nosat {x}", case.fmt.name);
                }
                // NaN: the f64 rule differs for FP8 (tested in `f64_nan_rules`).
                if !x.is_nan() {
                    assert_eq!((case.f64)(x), want, "{} from f64 {x}", case.fmt.name);
                }
            }
            if let Some(rz) = &case.rz {
                let (h, bh) = (f16::from_bits(b), bf16::from_bits(b));
                let name = case.fmt.name;
                assert_eq!((rz.f16)(h), r.encode_rz(h.to_f64()), "{name} rz from f16 {b:#06x}");
                assert_eq!((rz.bf16)(bh), r.encode_rz(bh.to_f64()), "{name} rz from bf16 {b:#06x}");
                assert_eq!((rz.f32)(h.to_f32()), r.encode_rz(h.to_f64()), "{name} rz from f32 {h}");
                assert_eq!((rz.f64)(bh.to_f64()), r.encode_rz(bh.to_f64()), "{name} rz from f64 {bh}");
            }
        }
    }
}

#[test]
fn chosen_f32_inputs_encode_as_defined() {
    let inputs = common::f32_oracle_inputs();
    for case in cases() {
        let r = case.fmt.reference();
        for &b in &inputs {
            let x = f32::from_bits(b);
            assert_eq!((case.sat)(x), r.encode(x as f64, true), "{} {b:#010x}", case.fmt.name);
            if let Some(nosat) = case.nosat {
                assert_eq!(nosat(x), r.encode(x as f64, false), "{} nosat {b:#010x}", case.fmt.name);
            }
            if let Some(rz) = &case.rz {
                assert_eq!((rz.f32)(x), r.encode_rz(x as f64), "{} rz {b:#010x}", case.fmt.name);
            }
        }
    }
}

#[test]
fn f64_inputs_round_once_as_defined() {
    let inputs = common::f64_oracle_inputs();
    for case in cases() {
        let r = case.fmt.reference();
        let name = case.fmt.name;
        for &b in &inputs {
            let x = f64::from_bits(b);
            if x.is_nan() {
                continue; // `f64_nan_rules`
            }
            assert_eq!((case.f64)(x), r.encode(x, true), "{name} from f64 {b:#018x}");
            if let Some(nosat) = case.f64_nosat {
                assert_eq!(nosat(x), r.encode(x, false), "{name} nosat from f64 {b:#018x}");
            }
            if let Some(rz) = &case.rz {
                assert_eq!((rz.f64)(x), r.encode_rz(x), "{name} rz from f64 {b:#018x}");
            }
        }
    }
    for &b in &inputs {
        let x = f64::from_bits(b);
        for (up, rounding) in [(false, E8M0Rounding::Zero), (true, E8M0Rounding::PosInf)] {
            assert_eq!(UE8M0::from_f64(x, rounding).to_bits(), e8m0_reference(x, up, true), "{b:#018x} {rounding:?}");
            let nosat = UE8M0::from_f64_nosat(x, rounding).to_bits();
            assert_eq!(nosat, e8m0_reference(x, up, false), "{b:#018x} {rounding:?} nosat");
        }
    }
}

/// What an f64 NaN becomes: NVIDIA's double conversions (read off the headers and
/// checked against them by the oracle test) keep an FP8 NaN's sign, and for E5M2 the
/// payload bit below the quiet bit; FP4/FP6 give +MAX in both rounding modes.
#[test]
fn f64_nan_rules() {
    let nans: [(u64, u8); 6] = [
        (0x7ff8_0000_0000_0000, 0x7e), // f64::NAN
        (0x7ffc_0000_0000_0000, 0x7f),
        (0x7ff4_0000_0000_0000, 0x7f), // signalling, bit 50 set
        (0x7ff0_0000_0000_0001, 0x7e),
        (0x7fff_ffff_ffff_ffff, 0x7f),
        (0x7ff8_0000_0000_0001, 0x7e),
    ];
    for (bits, e5m2) in nans {
        for sign in [0, 1u64 << 63] {
            let x = f64::from_bits(bits | sign);
            let s = if sign == 0 { 0 } else { 0x80 };
            assert_eq!(E4M3::from_f64(x).to_bits(), 0x7f | s, "e4m3 {bits:#x}");
            assert_eq!(E4M3::from_f64_nosat(x).to_bits(), 0x7f | s, "e4m3 nosat {bits:#x}");
            assert_eq!(E5M2::from_f64(x).to_bits(), e5m2 | s, "e5m2 {bits:#x}");
            assert_eq!(E5M2::from_f64_nosat(x).to_bits(), e5m2 | s, "e5m2 nosat {bits:#x}");
            assert_eq!(UE4M3::from_f64(x), UE4M3::NAN);
            assert_eq!(UE8M0::from_f64(x, E8M0Rounding::Zero), UE8M0::NAN);
            assert_eq!(UE8M0::from_f64_nosat(x, E8M0Rounding::PosInf), UE8M0::NAN);
            assert_eq!(E2M1::from_f64(x), E2M1::MAX);
            assert_eq!(E2M1::from_f64_rz(x), E2M1::MAX);
            assert_eq!(E2M3::from_f64(x), E2M3::MAX);
            assert_eq!(E2M3::from_f64_rz(x), E2M3::MAX);
            assert_eq!(E3M2::from_f64(x), E3M2::MAX);
            assert_eq!(E3M2::from_f64_rz(x), E3M2::MAX);
        }
    }
    // From f32 (NVIDIA's float conversions) every NaN is positive, and RZ agrees.
    assert_eq!(E4M3::from_f32(-f32::NAN), E4M3::NAN);
    assert_eq!(E2M1::from_f32_rz(-f32::NAN), E2M1::MAX);
}

/// All 2^32 f32 bit patterns, split over the available cores.
fn sweep_all_f32(check: impl Fn(u32) -> Option<String> + Sync) {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()) as u64;
    let chunk = (1u64 << 32).div_ceil(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let check = &check;
                s.spawn(move || {
                    let (lo, hi) = (t * chunk, ((t + 1) * chunk).min(1 << 32));
                    (lo..hi).find_map(|b| check(b as u32))
                })
            })
            .collect();
        for h in handles {
            if let Some(msg) = h.join().unwrap() {
                panic!("{msg}");
            }
        }
    });
}

#[test]
#[ignore = "sweeps all 2^32 f32 inputs (minutes); run by `cargo xtask test`"]
fn all_f32_inputs_e2m1_and_e4m3() {
    // The two formats every scheme leans on, E4M3 in both saturation modes.
    let e2m1 = common::E2M1.reference();
    let e4m3 = common::E4M3.reference();
    sweep_all_f32(|b| {
        let x = f32::from_bits(b);
        let xd = x as f64;
        let got = E2M1::from_f32(x).to_bits();
        let want = e2m1.encode(xd, true);
        if got != want {
            return Some(format!("e2m1 {b:#010x}: want {want:#x}, got {got:#x}"));
        }
        let got = E4M3::from_f32(x).to_bits();
        let want = e4m3.encode(xd, true);
        if got != want {
            return Some(format!("e4m3 {b:#010x}: want {want:#x}, got {got:#x}"));
        }
        let got = E2M1::from_f32_rz(x).to_bits();
        let want = e2m1.encode_rz(xd);
        if got != want {
            return Some(format!("e2m1 rz {b:#010x}: want {want:#x}, got {got:#x}"));
        }
        let got = E4M3::from_f32_nosat(x).to_bits();
        let want = e4m3.encode(xd, false);
        (got != want).then(|| format!("e4m3 nosat {b:#010x}: want {want:#x}, got {got:#x}"))
    });
}

#[test]
#[ignore = "sweeps all 2^32 f32 inputs (minutes); run by `cargo xtask test`"]
fn all_f32_inputs_fp6_e5m2_e8m0() {
    let (e2m3, e3m2, e5m2) = (common::E2M3.reference(), common::E3M2.reference(), common::E5M2.reference());
    sweep_all_f32(|b| {
        let x = f32::from_bits(b);
        let xd = x as f64;
        let checks = [
            ("e2m3", E2M3::from_f32(x).to_bits(), e2m3.encode(xd, true)),
            ("e3m2", E3M2::from_f32(x).to_bits(), e3m2.encode(xd, true)),
            ("e2m3 rz", E2M3::from_f32_rz(x).to_bits(), e2m3.encode_rz(xd)),
            ("e3m2 rz", E3M2::from_f32_rz(x).to_bits(), e3m2.encode_rz(xd)),
            ("e5m2", E5M2::from_f32(x).to_bits(), e5m2.encode(xd, true)),
            ("e5m2 nosat", E5M2::from_f32_nosat(x).to_bits(), e5m2.encode(xd, false)),
            ("e8m0 rp", UE8M0::from_f32(x, E8M0Rounding::PosInf).to_bits(), e8m0_reference(xd, true, true)),
            ("e8m0 rz nosat", UE8M0::from_f32_nosat(x, E8M0Rounding::Zero).to_bits(), e8m0_reference(xd, false, false)),
        ];
        checks
            .iter()
            .find(|(_, got, want)| got != want)
            .map(|(name, got, want)| format!("{name} {b:#010x}: want {want:#x}, got {got:#x}"))
    });
}

#[test]
fn ue8m0_matches_the_cuda_definition() {
    let mut inputs: Vec<f64> =
        (0..=u16::MAX).flat_map(|b| [f16::from_bits(b).to_f64(), bf16::from_bits(b).to_f64()]).collect();
    inputs.extend(common::f32_oracle_inputs().into_iter().map(|b| f32::from_bits(b) as f64));
    for x in inputs {
        let xf = x as f32;
        for (up, rounding) in [(false, E8M0Rounding::Zero), (true, E8M0Rounding::PosInf)] {
            assert_eq!(UE8M0::from_f32(xf, rounding).to_bits(), e8m0_reference(x, up, true), "{x:e} {rounding:?}");
            assert_eq!(
                UE8M0::from_f32_nosat(xf, rounding).to_bits(),
                e8m0_reference(x, up, false),
                "{x:e} {rounding:?} nosat"
            );
        }
    }
}

#[test]
fn ue8m0_decodes_every_byte() {
    for b in 0..=255u8 {
        let v = UE8M0::from_bits(b);
        if b == 255 {
            assert!(v.to_f32().is_nan() && v.recip_f32().is_nan() && v.is_nan() && v.exponent().is_none());
            continue;
        }
        let e = b as i32 - 127;
        assert_eq!(v.to_f32() as f64, 2f64.powi(e), "byte {b}");
        assert_eq!(v.recip_f32() as f64, 2f64.powi(-e), "recip of byte {b}");
        assert_eq!(v.to_bf16().to_f64(), 2f64.powi(e), "bf16 of byte {b}");
        assert_eq!(v.exponent(), Some(e));
        assert_eq!(UE8M0::from_exponent(e), Some(v));
        assert_eq!(UE8M0::TABLE[b as usize].to_bits(), v.to_f32().to_bits());
    }
    assert_eq!(UE8M0::from_exponent(128), None);
    assert_eq!(UE8M0::from_exponent(-128), None);
    assert_eq!(format!("{}", UE8M0::ONE), "2^0");
    assert_eq!(format!("{:?}", UE8M0::NAN), "UE8M0(0xff = NaN)");
}

#[test]
fn constants_are_the_defined_values() {
    let min_sub = |f: &Fmt| f.finite()[1].1;
    let min_norm = |f: &Fmt| f.finite().iter().find(|&&(c, _)| c >> f.mbits == 1).unwrap().1;
    let check = |f: &Fmt, max: f32, min_pos: f32, min_sub_v: f32, max_f32: f32| {
        assert_eq!(max as f64, f.max().1, "{} MAX", f.name);
        assert_eq!(max_f32 as f64, f.max().1, "{} MAX_F32", f.name);
        assert_eq!(min_pos as f64, min_norm(f), "{} MIN_POSITIVE", f.name);
        assert_eq!(min_sub_v as f64, min_sub(f), "{} MIN_POSITIVE_SUBNORMAL", f.name);
    };
    macro_rules! check_each {
        ($($T:ident),*) => {$(
            check(&common::$T, $T::MAX.to_f32(), $T::MIN_POSITIVE.to_f32(), $T::MIN_POSITIVE_SUBNORMAL.to_f32(), $T::MAX_F32);
            assert_eq!($T::ONE.to_f32(), 1.0, "{} ONE", stringify!($T));
            assert_eq!($T::ZERO.to_bits(), 0, "{} ZERO", stringify!($T));
        )*};
    }
    check_each!(E2M1, E2M3, E3M2, E4M3, E5M2, UE4M3);
    assert_eq!(E2M1::MIN.to_f32(), -6.0);
    assert_eq!(E2M3::MIN.to_f32(), -7.5);
    assert_eq!(E3M2::MIN.to_f32(), -28.0);
    assert_eq!(E4M3::MIN.to_f32(), -448.0);
    assert_eq!(E5M2::MIN.to_f32(), -57344.0);
    assert_eq!(E5M2::INFINITY.to_f32(), f32::INFINITY);
    assert_eq!(E5M2::NEG_INFINITY.to_f32(), f32::NEG_INFINITY);
    assert!(E4M3::NAN.is_nan() && E5M2::NAN.is_nan() && UE4M3::NAN.is_nan());
    // NVIDIA's canonical NaN: all-ones magnitude.
    assert_eq!([E4M3::NAN.to_bits(), E5M2::NAN.to_bits(), UE4M3::NAN.to_bits()], [0x7f; 3]);
    assert_eq!(E2M1::CODES, 16);
    assert_eq!(E2M3::CODES, 64);
    assert_eq!(E4M3::CODES, 256);
}

#[test]
fn narrow_types_mask_high_bits_and_ue4m3_rejects_the_sign_bit() {
    assert_eq!(E2M1::from_bits(0xf7).to_bits(), 0x07);
    assert_eq!(E2M3::from_bits(0xff).to_bits(), 0x3f);
    assert_eq!(E3M2::from_bits(0xc1).to_bits(), 0x01);
    for b in 0x80..=0xffu8 {
        assert!(UE4M3::from_bits(b).to_f32().is_nan(), "UE4M3 {b:#x} must decode to NaN");
    }
    for x in [-0.0f32, -1.0, -448.0, f32::NEG_INFINITY, -1e-30] {
        assert_eq!(UE4M3::from_f32(x), UE4M3::ZERO, "UE4M3 of {x}");
    }
    assert_eq!(UE4M3::from_f32(-f32::NAN), UE4M3::NAN);
    for b in 0..=u16::MAX {
        let x = bf16::from_bits(b).to_f32();
        if x.is_sign_positive() && !x.is_nan() {
            assert_eq!(UE4M3::from_f32(x).to_bits(), E4M3::from_f32(x).to_bits(), "UE4M3 vs E4M3 at {x}");
        }
    }
}

#[test]
fn display_and_debug() {
    assert_eq!(format!("{}", E2M1::from_f32(-1.5)), "-1.5");
    assert_eq!(format!("{:?}", E2M1::MAX), "E2M1(0x07 = 6)");
    assert_eq!(format!("{:?}", E4M3::NAN), "E4M3(0x7f = NaN)");
    assert_eq!(format!("{}", E5M2::INFINITY), "inf");
    assert_eq!(format!("{}", Int4::MIN), "-8");
    assert_eq!(format!("{:?}", Int4::MAX), "Int4(7)");
}

/// Round half to even of an f64, written from the definition.
fn rne(x: f64) -> f64 {
    let f = x.floor();
    let d = x - f;
    if d > 0.5 || (d == 0.5 && f % 2.0 != 0.0) { f + 1.0 } else { f }
}

#[test]
fn int4_encodes_every_f16_and_bf16_as_defined() {
    for b in 0..=u16::MAX {
        for x in [f16::from_bits(b).to_f64(), bf16::from_bits(b).to_f64()] {
            let want = if x.is_nan() { 0.0 } else { rne(x.clamp(-1e6, 1e6)).clamp(-8.0, 7.0) };
            assert_eq!(Int4::from_f32(x as f32).value() as f64, want, "Int4 of {x}");
        }
        assert_eq!(Int4::from_f16(f16::from_bits(b)), Int4::from_f32(f16::from_bits(b).to_f32()));
        assert_eq!(Int4::from_bf16(bf16::from_bits(b)), Int4::from_f32(bf16::from_bits(b).to_f32()));
    }
    for (x, v) in [
        (0.5f32, 0),
        (1.5, 2),
        (2.5, 2),
        (-0.5, 0),
        (-1.5, -2),
        (6.5, 6),
        (7.49, 7),
        (7.5, 7),
        (-8.5, -8),
        (1e30, 7),
        (f32::NEG_INFINITY, -8),
    ] {
        assert_eq!(Int4::from_f32(x).value(), v, "Int4 of {x}");
    }
}

#[test]
fn int4_codes_in_both_storages() {
    for v in -8i8..=7 {
        let i = Int4::new(v).unwrap();
        assert_eq!(i.value(), v);
        assert_eq!(i.to_f32(), v as f32);
        assert_eq!(i.to_offset8_bits() as i8, v + 8, "offset-8 of {v}");
        assert_eq!(i.to_bits(), (v as u8) & 0xf, "two's complement of {v}");
        assert_eq!(Int4::from_offset8_bits((v + 8) as u8), i);
        assert_eq!(Int4::from_bits((v as u8) & 0xf), i);
        assert_eq!(Int4Storage::Offset8.decode(Int4Storage::Offset8.encode(i)), i);
        assert_eq!(Int4Storage::TwosComplement.decode(Int4Storage::TwosComplement.encode(i)), i);
        assert_eq!(Int4::TABLE[i.to_bits() as usize], v as f32);
        assert_eq!(Int4::OFFSET8_TABLE[i.to_offset8_bits() as usize], v as f32);
    }
    assert_eq!(Int4::new(8), None);
    assert_eq!(Int4::new(-9), None);
}
