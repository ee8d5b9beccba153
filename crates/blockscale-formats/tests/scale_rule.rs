//! UE8M0 scale selection against the rules written out in f64 from their definitions
//! (REFERENCE.md §2.2-2.3), for every f16 and bf16 amax, the f32 oracle inputs, and the
//! hand-worked examples.

mod common;

use blockscale_formats::{ElementFormat, ScaleRule};
use common::{e8m0_reference, floor_log2};
use half::{bf16, f16};

const FP: [ElementFormat; 5] =
    [ElementFormat::E2M1, ElementFormat::E2M3, ElementFormat::E3M2, ElementFormat::E4M3, ElementFormat::E5M2];

fn amax_inputs() -> Vec<f32> {
    let mut v: Vec<f32> =
        (0..=0x7fffu16).flat_map(|b| [f16::from_bits(b).to_f32(), bf16::from_bits(b).to_f32()]).collect();
    v.extend(common::f32_oracle_inputs().into_iter().map(f32::from_bits).filter(|x| x.is_sign_positive()));
    v
}

/// The element constants, restated from the format definitions (not from the crate).
fn max_emax_mbits(e: ElementFormat) -> (f64, i32, u32) {
    match e {
        ElementFormat::E2M1 => (6.0, 2, 1),
        ElementFormat::E2M3 => (7.5, 2, 3),
        ElementFormat::E3M2 => (28.0, 4, 2),
        ElementFormat::E4M3 => (448.0, 8, 3),
        ElementFormat::E5M2 => (57344.0, 15, 2),
        ElementFormat::Int4 => (7.0, 2, 2),
    }
}

fn byte_of(k: i32) -> u8 {
    (k.clamp(-127, 127) + 127) as u8
}

/// Floor / Ceil / Even from their definitions on the real value of amax.
fn exponent_rule_reference(rule: ScaleRule, amax: f64, e: ElementFormat) -> u8 {
    let (_, emax, mbits) = max_emax_mbits(e);
    if !amax.is_finite() {
        return 0xff;
    }
    if amax == 0.0 {
        return 0;
    }
    let k = match rule {
        ScaleRule::Floor => floor_log2(amax),
        ScaleRule::Ceil => {
            let f = floor_log2(amax);
            if 2f64.powi(f) == amax { f } else { f + 1 }
        }
        ScaleRule::Even => {
            // Round amax to mbits + 1 significant bits, ties away from zero (adding half
            // an ulp of the element's mantissa grid), then take the floor.
            let f = floor_log2(amax);
            let ulp = 2f64.powi(f - mbits as i32);
            let rounded = ((amax / ulp) + 0.5).floor() * ulp;
            if rounded >= 2f64.powi(128) {
                return 0xff; // torchao's quirk: the rounding carried into f32's Inf exponent
            }
            floor_log2(rounded)
        }
        ScaleRule::Rceil => unreachable!(),
    };
    byte_of(k - emax)
}

#[test]
fn rceil_is_the_cuda_conversion_of_the_scaled_amax() {
    for e in FP.into_iter().chain([ElementFormat::Int4]) {
        let (max, _, _) = max_emax_mbits(e);
        let recip = (1.0 / max) as f32; // RN(1/max), restated
        assert_eq!(e.max_recip(), recip);
        for &amax in &amax_inputs() {
            let want = e8m0_reference((amax * recip) as f64, true, true);
            assert_eq!(ScaleRule::Rceil.select(amax, e).to_bits(), want, "{e} amax {amax:e}");
            // The sign of amax is ignored.
            assert_eq!(ScaleRule::Rceil.select(-amax, e).to_bits(), want, "{e} amax -{amax:e}");
        }
    }
}

#[test]
fn rceil_equals_division_for_every_16_bit_amax() {
    // Kernels that divide (`amax / 6`) or multiply by the rounded reciprocal, and the
    // exact quotient, all give the same power of two for f16/bf16 amax values.
    for e in FP {
        let (max, _, _) = max_emax_mbits(e);
        for b in 0..0x7c00u16 {
            for amax in [f16::from_bits(b).to_f32(), bf16::from_bits(b).to_f32()] {
                if !amax.is_finite() {
                    continue;
                }
                let ours = ScaleRule::Rceil.select(amax, e).to_bits();
                let div_f32 = e8m0_reference((amax / max as f32) as f64, true, true);
                // Exact: the smallest k with max * 2^k >= amax (products exact in f64).
                let exact = if amax == 0.0 {
                    0
                } else {
                    let mut k = floor_log2(amax as f64 / max) - 1;
                    while max * 2f64.powi(k) < amax as f64 {
                        k += 1;
                    }
                    byte_of(k)
                };
                assert_eq!(ours, div_f32, "{e} amax {amax:e}: multiply vs f32 divide");
                assert_eq!(ours, exact, "{e} amax {amax:e}: multiply vs exact");
            }
        }
    }
}

#[test]
fn floor_ceil_even_follow_their_definitions() {
    let inputs = amax_inputs();
    for e in FP.into_iter().chain([ElementFormat::Int4]) {
        for rule in [ScaleRule::Floor, ScaleRule::Ceil, ScaleRule::Even] {
            for &amax in &inputs {
                let want = exponent_rule_reference(rule, amax as f64, e);
                assert_eq!(rule.select(amax, e).to_bits(), want, "{rule} {e} amax {amax:e} ({:#010x})", amax.to_bits());
            }
        }
    }
}

#[test]
fn documented_edge_cases() {
    let sub = f32::from_bits(0x0030_0000);
    for e in FP {
        for (rule, inf) in
            [(ScaleRule::Rceil, 0xfe), (ScaleRule::Floor, 0xff), (ScaleRule::Ceil, 0xff), (ScaleRule::Even, 0xff)]
        {
            assert_eq!(rule.select(0.0, e).to_bits(), 0x00, "{rule} {e} zero");
            assert_eq!(rule.select(sub, e).to_bits(), 0x00, "{rule} {e} subnormal");
            assert_eq!(rule.select(f32::INFINITY, e).to_bits(), inf, "{rule} {e} inf");
            assert_eq!(rule.select(f32::NAN, e).to_bits(), 0xff, "{rule} {e} nan");
        }
        assert_eq!(ScaleRule::Even.select(f32::MAX, e).to_bits(), 0xff, "Even's overflow quirk for {e}");
    }
}

#[test]
fn worked_examples() {
    // REFERENCE.md §2.2's FP4 table, by hand: amax -> scale per rule.
    let e = ElementFormat::E2M1;
    let cases = [
        // amax, floor, ceil, even, rceil
        (6.0f32, 1.0f32, 2.0, 1.0, 1.0),
        (6.5, 1.0, 2.0, 1.0, 2.0),
        (7.0, 1.0, 2.0, 2.0, 2.0),
        (5.0, 1.0, 2.0, 1.0, 1.0),
        (4.0, 1.0, 1.0, 1.0, 1.0),
        (0.75, 0.125, 0.25, 0.125, 0.125),
        (7.5, 1.0, 2.0, 2.0, 2.0),
    ];
    for (amax, floor, ceil, even, rceil) in cases {
        assert_eq!(ScaleRule::Floor.select(amax, e).to_f32(), floor, "floor {amax}");
        assert_eq!(ScaleRule::Ceil.select(amax, e).to_f32(), ceil, "ceil {amax}");
        assert_eq!(ScaleRule::Even.select(amax, e).to_f32(), even, "even {amax}");
        assert_eq!(ScaleRule::Rceil.select(amax, e).to_f32(), rceil, "rceil {amax}");
    }
    // MXFP8 E4M3: amax 448 fits scale 1 under every rule but Ceil; 449 needs 2 under Rceil.
    let e = ElementFormat::E4M3;
    assert_eq!(ScaleRule::Rceil.select(448.0, e).to_f32(), 1.0);
    assert_eq!(ScaleRule::Rceil.select(449.0, e).to_f32(), 2.0);
    assert_eq!(ScaleRule::Floor.select(449.0, e).to_f32(), 1.0);
    assert_eq!(ScaleRule::Ceil.select(448.0, e).to_f32(), 2.0);
    // Even bumps once amax's mantissa reaches 1.9375 (= 1 - 2^-4 past the top binade).
    assert_eq!(ScaleRule::Even.select(496.0, e).to_f32(), 2.0);
    assert_eq!(ScaleRule::Even.select(495.0, e).to_f32(), 1.0);
    assert_eq!(ScaleRule::Even.select(480.0, e).to_f32(), 1.0);
}

#[test]
fn names_round_trip() {
    for r in ScaleRule::ALL {
        assert_eq!(ScaleRule::from_name(r.name()), Some(r));
        assert_eq!(r.to_string(), r.name());
    }
    assert_eq!(ScaleRule::from_name("nearest"), None);
    assert_eq!(ScaleRule::default(), ScaleRule::Rceil);
}
