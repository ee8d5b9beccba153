//! The AVX-512 VNNI panel kernels: per 8-element group of a block, one 64-byte load
//! gives 16 rows x 8 codes; masking and shifting split it into two vectors of 16 rows x
//! 4 codes, one `vpshufb` each maps codes to unsigned values, and one `vpdpbusd` each
//! multiplies them with four activation bytes broadcast to every lane. A block's 16
//! i32 lanes (one per weight row) then take the offset correction as their starting
//! value, become f32 and meet the rows' scales in one FMA. The decoded block is reused
//! for up to eight activation rows. A single row (the GEMV) may instead walk two or more
//! panels side by side, each block's activation bytes broadcast once for all of them,
//! with a software prefetch ahead of each panel's codes: what Intel's cores stream
//! faster ([`walk`]).
//!
//! Six-bit panels (E2M3) take the same tiles with another group decoding (VBMI on top
//! of VNNI): the 32-byte plane is broadcast to both halves of a vector,
//! `vpmultishiftqb` moves each position's two top bits to bits 4 and 5 of its byte,
//! one `vpternlogd` merges them under the low nibble, and `vpermb` maps the six-bit
//! codes to unsigned values through a 64-byte table.
//!
//! Scales are decoded in registers: UE8M0 by shifting the byte into an f32 exponent
//! (0 and 255 patched to 2^-127 and NaN), UE4M3 by shifting it under an f32's exponent
//! and multiplying by 2^120 (exact, subnormals included; `0x7f` and up patched to
//! NaN), f16 by `vcvtph2ps`. Panels whose scales hold none of the patched codes (the
//! usual case, recorded at pack time) skip the patching. The tests check all 256 byte
//! codes against the tables, and the unpatched decoding on every code it may meet.
//!
//! Eight-bit panels (E4M3) decode each 64-byte vector of codes into three operands, one
//! per 7-bit part of the value's magnitude: `vpermt2b` looks each code's magnitude up in
//! a 128-byte table per part. The sign goes on the activations instead: one masked
//! `vpsubb` negates the four broadcast activation bytes in the lanes of negative codes
//! (`vpmovb2m`), and three `vpdpbusd` go into three accumulators, which combine as
//! `S0 + (S1 << 7) + (S2 << 14)` per block. (Negating the three parts instead, as offsets
//! `o - n`, measured 1.5x slower on a Zen 4: three masked byte operations a vector.)
//!
//! Every function needs AVX-512 F, BW and VNNI (and VBMI for the six- and eight-bit
//! tiles): `Kernel::of` only picks these kernels where `Isa::vnni` (and `Isa::vbmi`)
//! hold.

use core::arch::x86_64::*;

use super::drive::{self, Run, Tiles};
use super::{ActRows, PanelScales, Panels, UE4M3_PLAIN, UE8M0, UE8M0_PLAIN, Width};

/// The AVX-512 VNNI tiles of four-bit panels (see [`Tiles`]).
pub(super) struct Avx512Vnni;

/// The AVX-512 VNNI + VBMI tiles of six-bit panels.
pub(super) struct Avx512Six;

/// The AVX-512 VNNI + VBMI tiles of eight-bit (E4M3) panels.
pub(super) struct Avx512Eight;

/// The entry points of one tile type: `$rows` runs int8 mode for panels `p0..p1` and the
/// `m` activation rows of `a`, as `super::portable::rows` (which gives the same bits),
/// with this CPU's single-row walk; `$walking` takes the walk `(panels, prefetch)` given
/// (see [`walk`]; the tests run every walk on any CPU).
macro_rules! entries {
    ($rows:ident, $walking:ident, $tiles:ty, $features:literal, $needs:literal) => {
        #[doc = concat!("Int8 mode on the ", stringify!($tiles), " tiles (see [`entries`]).")]
        ///
        /// # Safety
        #[doc = concat!("The CPU has ", $needs, ".")]
        #[target_feature(enable = $features)]
        pub(super) unsafe fn $rows(a: &ActRows<'_>, m: usize, p: &Panels, p0: usize, p1: usize, buf: &mut [f32]) {
            // SAFETY: the caller's guarantee.
            unsafe { $walking(a, m, p, (p0, p1), buf, walk()) }
        }

        #[doc = concat!("[`", stringify!($rows), "`] with the single-row walk given.")]
        ///
        /// # Safety
        #[doc = concat!("As [`", stringify!($rows), "`].")]
        #[target_feature(enable = $features)]
        pub(super) unsafe fn $walking(
            a: &ActRows<'_>,
            m: usize,
            p: &Panels,
            (p0, p1): (usize, usize),
            buf: &mut [f32],
            walk: (usize, usize),
        ) {
            // SAFETY: the caller guarantees the features, which this function enables
            // for the driver inlined into it.
            unsafe { drive::rows::<$tiles>(a, m, p, p0, p1, buf, walk) }
        }
    };
}

entries!(rows, rows_walking, Avx512Vnni, "avx512f,avx512bw,avx512vnni", "AVX-512 F, BW and VNNI");
entries!(
    rows_six,
    rows_six_walking,
    Avx512Six,
    "avx512f,avx512bw,avx512vnni,avx512vbmi",
    "AVX-512 F, BW, VNNI and VBMI"
);
entries!(
    rows_eight,
    rows_eight_walking,
    Avx512Eight,
    "avx512f,avx512bw,avx512vnni,avx512vbmi",
    "AVX-512 F, BW, VNNI and VBMI"
);

/// How a tile turns a group's bytes into its two vectors of unsigned operands (16 rows
/// x 4 elements each: the low-nibble and high-nibble positions, or for E4M3 the two
/// 64-byte halves), and multiplies them with activation bytes into a row's block sum.
trait Groups {
    /// Bytes per group.
    const GB: usize;
    /// What the decoding keeps in registers for a tile.
    type Consts: Copy;
    /// One decoded vector: its operand (or, for E4M3, its three parts' operands).
    type V: Copy;
    /// A row's i32 block sums (one vector, or one per part).
    type Acc: Copy;
    /// The constants of panels `p`.
    ///
    /// # Safety
    /// The CPU has the tile's features, inlined into a function that enables them.
    unsafe fn consts(p: &Panels) -> Self::Consts;
    /// A placeholder decoded vector (zeros).
    ///
    /// # Safety
    /// As [`Self::consts`].
    unsafe fn zero() -> Self::V;
    /// The two vectors of the group at `w`.
    ///
    /// # Safety
    /// As [`Self::consts`], and `Self::GB` bytes readable at `w`.
    unsafe fn group(c: Self::Consts, w: *const u8) -> (Self::V, Self::V);
    /// A block's sums before any product, from `corr = -offset Σ q` of its activations.
    ///
    /// # Safety
    /// As [`Self::consts`].
    unsafe fn start(corr: i32) -> Self::Acc;
    /// `acc` plus the products of `v` with the four activation bytes broadcast in `q`.
    ///
    /// # Safety
    /// As [`Self::consts`].
    unsafe fn dot(acc: Self::Acc, v: Self::V, q: __m512i) -> Self::Acc;
    /// The block sums `Σ value q`, exact.
    ///
    /// # Safety
    /// As [`Self::consts`].
    unsafe fn sum(acc: Self::Acc) -> __m512i;
}

/// The one-operand form of [`Groups`]' products (four- and six-bit codes).
macro_rules! one_operand {
    () => {
        type V = __m512i;
        type Acc = __m512i;

        #[inline(always)]
        unsafe fn zero() -> __m512i {
            // SAFETY: the caller guarantees the features.
            unsafe { _mm512_setzero_si512() }
        }

        #[inline(always)]
        unsafe fn start(corr: i32) -> __m512i {
            // SAFETY: the caller guarantees the features.
            unsafe { _mm512_set1_epi32(corr) }
        }

        #[inline(always)]
        unsafe fn dot(acc: __m512i, v: __m512i, q: __m512i) -> __m512i {
            // SAFETY: the caller guarantees the features.
            unsafe { _mm512_dpbusd_epi32(acc, v, q) }
        }

        #[inline(always)]
        unsafe fn sum(acc: __m512i) -> __m512i {
            acc
        }
    };
}

/// Four-bit codes: mask or shift, then `vpshufb` through the 16-entry table.
struct Nibbles;

impl Groups for Nibbles {
    const GB: usize = 64;
    type Consts = (__m512i, __m512i);
    one_operand!();

    #[inline(always)]
    unsafe fn consts(p: &Panels) -> Self::Consts {
        // SAFETY: `unsigned` holds 64 bytes; the caller guarantees the features.
        unsafe { (_mm512_broadcast_i32x4(_mm_loadu_si128(p.unsigned.as_ptr().cast())), _mm512_set1_epi8(0x0f)) }
    }

    #[inline(always)]
    unsafe fn group((lut, low): Self::Consts, w: *const u8) -> (__m512i, __m512i) {
        // SAFETY: the caller guarantees 64 bytes at `w` and the features.
        unsafe {
            let v = _mm512_loadu_si512(w.cast());
            let lo = _mm512_shuffle_epi8(lut, _mm512_and_si512(v, low));
            let hi = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16::<4>(v), low));
            (lo, hi)
        }
    }
}

/// Six-bit codes: the low nibble merged with the plane's top bits, then `vpermb`
/// through the 64-entry table (see the module docs).
struct Six;

/// `vpmultishiftqb` controls of vector `J` (0: low nibbles, 1: high): byte `p` takes the 8
/// bits of its qword that start 4 below its top bits (bit `8 (p % 8) + 2c` of the plane
/// broadcast to both 32-byte halves, `c = 2 (p / 32) + J`), so they land in bits 4 and 5.
const fn six_shifts<const J: usize>() -> [u8; 64] {
    let mut c = [0u8; 64];
    let mut p = 0;
    while p < 64 {
        c[p] = ((8 * (p % 8) + 2 * (2 * (p / 32) + J) + 60) % 64) as u8;
        p += 1;
    }
    c
}

const SIX_SHIFTS: [[u8; 64]; 2] = [six_shifts::<0>(), six_shifts::<1>()];

impl Groups for Six {
    const GB: usize = 96;
    /// (table, shift controls of vectors 0 and 1, low-nibble mask).
    type Consts = (__m512i, [__m512i; 2], __m512i);
    one_operand!();

    #[inline(always)]
    unsafe fn consts(p: &Panels) -> Self::Consts {
        // SAFETY: `unsigned` and each `SIX_SHIFTS` hold 64 bytes; the caller guarantees the
        // features.
        unsafe {
            let shifts = |j: usize| _mm512_loadu_si512(SIX_SHIFTS[j].as_ptr().cast());
            (_mm512_loadu_si512(p.unsigned.as_ptr().cast()), [shifts(0), shifts(1)], _mm512_set1_epi8(0x0f))
        }
    }

    #[inline(always)]
    unsafe fn group((table, shifts, low): Self::Consts, w: *const u8) -> (__m512i, __m512i) {
        // SAFETY: the caller guarantees 96 bytes at `w` and the features.
        unsafe {
            let v = _mm512_loadu_si512(w.cast());
            let plane = _mm512_broadcast_i64x4(_mm256_loadu_si256(w.add(64).cast()));
            let decode = |nibbles: __m512i, shifts: __m512i| {
                let top = _mm512_multishift_epi64_epi8(shifts, plane);
                // Bits 0..4 from the nibbles, 4.. from `top` (`vpermb` reads bits 0..6).
                _mm512_permutexvar_epi8(_mm512_ternarylogic_epi32::<0xe4>(nibbles, top, low), table)
            };
            (decode(v, shifts[0]), decode(_mm512_srli_epi16::<4>(v), shifts[1]))
        }
    }
}

/// E4M3 codes: three 7-bit parts of the magnitude, the sign on the activations (see the
/// module docs).
struct Eight;

impl Groups for Eight {
    const GB: usize = 128;
    /// The three parts' tables, as low and high 64 bytes.
    type Consts = [[__m512i; 2]; 3];
    /// The parts' operands and the lanes of negative codes.
    type V = ([__m512i; 3], __mmask64);
    type Acc = [__m512i; 3];

    #[inline(always)]
    unsafe fn consts(p: &Panels) -> Self::Consts {
        // SAFETY: `parts` holds three tables of 128 bytes (`check_kernel_inputs`); the
        // caller guarantees the features.
        unsafe {
            let t = |i: usize, h: usize| _mm512_loadu_si512(p.parts[i].as_ptr().add(64 * h).cast());
            [[t(0, 0), t(0, 1)], [t(1, 0), t(1, 1)], [t(2, 0), t(2, 1)]]
        }
    }

    #[inline(always)]
    unsafe fn zero() -> Self::V {
        // SAFETY: the caller guarantees the features.
        unsafe { ([_mm512_setzero_si512(); 3], 0) }
    }

    #[inline(always)]
    unsafe fn group(tables: Self::Consts, w: *const u8) -> (Self::V, Self::V) {
        // SAFETY: the caller guarantees 128 bytes at `w` and the features.
        unsafe {
            let decode = |at: usize| {
                let v = _mm512_loadu_si512(w.add(at).cast());
                // `vpermt2b` reads the index's low seven bits: the magnitude.
                let parts = core::array::from_fn(|i| _mm512_permutex2var_epi8(tables[i][0], v, tables[i][1]));
                (parts, _mm512_movepi8_mask(v))
            };
            (decode(0), decode(64))
        }
    }

    #[inline(always)]
    unsafe fn start(corr: i32) -> Self::Acc {
        // The panels' offset is 0: nothing to take off.
        debug_assert_eq!(corr, 0);
        // SAFETY: the caller guarantees the features.
        unsafe { [_mm512_setzero_si512(); 3] }
    }

    #[inline(always)]
    unsafe fn dot(acc: Self::Acc, (v, negative): Self::V, q: __m512i) -> Self::Acc {
        // SAFETY: the caller guarantees the features.
        unsafe {
            // |q| <= 127, so its negation is exact.
            let q = _mm512_mask_sub_epi8(q, negative, _mm512_setzero_si512(), q);
            [
                _mm512_dpbusd_epi32(acc[0], v[0], q),
                _mm512_dpbusd_epi32(acc[1], v[1], q),
                _mm512_dpbusd_epi32(acc[2], v[2], q),
            ]
        }
    }

    #[inline(always)]
    unsafe fn sum(acc: Self::Acc) -> __m512i {
        // S0 + 2^7 S1 + 2^14 S2: below 2^31 in magnitude (module docs), so exact.
        // SAFETY: the caller guarantees the features.
        unsafe {
            _mm512_add_epi32(acc[0], _mm512_add_epi32(_mm512_slli_epi32::<7>(acc[1]), _mm512_slli_epi32::<14>(acc[2])))
        }
    }
}

/// The `Tiles` of an AVX-512 tile type: rows per tile, code width, group decoding and the
/// features its functions enable.
macro_rules! tiles {
    ($tiles:ty, $mr:expr, $width:expr, $groups:ty, $features:literal) => {
        impl Tiles for $tiles {
            const MR: usize = $mr;
            const WIDTH: Width = $width;

            /// # Safety
            /// As [`Tiles::tile`].
            #[inline]
            #[target_feature(enable = $features)]
            unsafe fn tile<const BLOCK: usize, const SC: u8, const TR: usize>(run: &Run<'_>, pi: usize, i0: usize) {
                // SAFETY: the caller's guarantee; the features are enabled here.
                unsafe { tile::<$groups, BLOCK, SC, TR>(run, pi, i0) }
            }

            /// # Safety
            /// As [`Tiles::tile1`].
            #[inline]
            #[target_feature(enable = $features)]
            unsafe fn tile1<const BLOCK: usize, const SC: u8, const NP: usize>(run: &Run<'_>, pi: usize) {
                // SAFETY: as `tile`.
                unsafe { tile1::<$groups, BLOCK, SC, NP>(run, pi) }
            }
        }
    };
}

// Eight rows a tile (one vector of accumulators each); four for E4M3, whose rows hold
// three accumulators a block.
tiles!(Avx512Vnni, 8, Width::Four, Nibbles, "avx512f,avx512bw,avx512vnni");
tiles!(Avx512Six, 8, Width::Six, Six, "avx512f,avx512bw,avx512vnni,avx512vbmi");
tiles!(Avx512Eight, 4, Width::Eight, Eight, "avx512f,avx512bw,avx512vnni,avx512vbmi");

/// Panel `pi` times activation rows `i0..i0 + TR`, groups decoded by `G`.
///
/// # Safety
/// As [`Tiles::tile`], inlined into a function enabling `G`'s features.
#[inline(always)]
unsafe fn tile<G: Groups, const BLOCK: usize, const SC: u8, const TR: usize>(run: &Run<'_>, pi: usize, i0: usize) {
    let (a, p) = (run.a, run.p);
    let k = p.k;
    let (cols, groups, xb) = (k / BLOCK, BLOCK / 8, k.div_ceil(a.dblock));
    // SAFETY (this function): group (pi, g) is `G::GB` bytes inside `codes`; (pi, b, r)
    // inside the scales; activation row i < m has k bytes of q, xb factors and cols
    // corrections; the output row i holds (pi - p0 + 1) * 16 <= stride floats.
    unsafe {
        let consts = G::consts(p);
        let wbase = run.codes(pi);
        let mut accf = [_mm512_setzero_ps(); TR];
        let mut lo = [G::zero(); 4];
        let mut hi = [G::zero(); 4];
        for b in 0..cols {
            let s = scales16::<SC>(p, p.scale_at(pi, b));
            for g in 0..groups {
                (lo[g], hi[g]) = G::group(consts, wbase.add((b * groups + g) * G::GB));
            }
            for (r, acc_f) in accf.iter_mut().enumerate() {
                let i = i0 + r;
                let q = a.q.as_ptr().add(i * k + b * BLOCK).cast::<i32>();
                let mut acc = G::start(*a.corr.get_unchecked(i * cols + b));
                for g in 0..groups {
                    acc = G::dot(acc, lo[g], _mm512_set1_epi32(q.add(2 * g).read_unaligned()));
                    acc = G::dot(acc, hi[g], _mm512_set1_epi32(q.add(2 * g + 1).read_unaligned()));
                }
                let c = _mm512_mul_ps(s, _mm512_set1_ps(*a.d.get_unchecked(i * xb + b * BLOCK / a.dblock)));
                *acc_f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(G::sum(acc)), c, *acc_f);
            }
        }
        let vscale = _mm512_set1_ps(p.vscale);
        for (r, acc_f) in accf.iter().enumerate() {
            let o = run.out(i0 + r, pi);
            _mm512_storeu_ps(o, _mm512_mul_ps(*acc_f, vscale));
        }
    }
}

/// Panels `pi..pi + NP` times activation row 0 (the GEMV): each block's activation
/// bytes broadcast once for the NP panels, whose codes stream side by side, each
/// `walk.1` bytes ahead in the prefetcher. The same operations per panel as [`tile`]
/// with one row, in the same order: the same bits.
///
/// # Safety
/// As [`Tiles::tile1`], inlined into a function enabling `G`'s features.
#[inline(always)]
unsafe fn tile1<G: Groups, const BLOCK: usize, const SC: u8, const NP: usize>(run: &Run<'_>, pi: usize) {
    let (a, p) = (run.a, run.p);
    let k = p.k;
    let (cols, groups) = (k / BLOCK, BLOCK / 8);
    let pf = run.walk.1;
    // SAFETY (this function): as `tile` with one activation row, for each of the NP
    // panels; a prefetch is a hint, valid for any address.
    unsafe {
        let consts = G::consts(p);
        let wbase: [*const u8; NP] = core::array::from_fn(|j| run.codes(pi + j));
        let mut accf = [_mm512_setzero_ps(); NP];
        let mut bq = [_mm512_setzero_si512(); 8];
        for b in 0..cols {
            let q = a.q.as_ptr().add(b * BLOCK).cast::<i32>();
            for (g, v) in bq.iter_mut().enumerate().take(2 * groups) {
                *v = _mm512_set1_epi32(q.add(g).read_unaligned());
            }
            let corr = *a.corr.get_unchecked(b);
            let d = _mm512_set1_ps(*a.d.get_unchecked(b * BLOCK / a.dblock));
            for (j, acc_f) in accf.iter_mut().enumerate() {
                let s = scales16::<SC>(p, p.scale_at(pi + j, b));
                let w = wbase[j].add(b * groups * G::GB);
                if pf > 0 {
                    for line in 0..(groups * G::GB).div_ceil(64) {
                        _mm_prefetch::<_MM_HINT_T0>(w.add(pf + line * 64).cast());
                    }
                }
                let mut acc = G::start(corr);
                for g in 0..groups {
                    let (lo, hi) = G::group(consts, w.add(g * G::GB));
                    acc = G::dot(acc, lo, bq[2 * g]);
                    acc = G::dot(acc, hi, bq[2 * g + 1]);
                }
                *acc_f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(G::sum(acc)), _mm512_mul_ps(s, d), *acc_f);
            }
        }
        let vscale = _mm512_set1_ps(p.vscale);
        for (j, acc_f) in accf.iter().enumerate() {
            let o = run.out(0, pi + j);
            _mm512_storeu_ps(o, _mm512_mul_ps(*acc_f, vscale));
        }
    }
}

/// How the single-row kernel walks the panels here: how many panels side by side per
/// pass over a block's activation bytes (1: the general tile), and how far ahead (bytes)
/// it prefetches each panel's codes (0: not at all). Intel's cores stream the codes
/// faster with two panels and a prefetch 512 bytes ahead (the Xeon host of the GPU
/// machine: MXFP4 4096 x 4096 0.19-0.24 ms against 0.22-0.26, 16384 x 2048 0.35-0.37
/// against 0.46-0.68; docs/BENCHMARKS.md); AMD's Zen 4 measured the same or up to 3%
/// slower with them and keeps one panel. Decided once from the CPU's vendor;
/// `BLOCKSCALE_PANEL_WALK=panels,prefetch` overrides it (for measurements).
fn walk() -> (usize, usize) {
    static S: std::sync::OnceLock<(usize, usize)> = std::sync::OnceLock::new();
    *S.get_or_init(|| {
        let set = std::env::var("BLOCKSCALE_PANEL_WALK").ok().and_then(|v| {
            let (a, b) = v.split_once(',')?;
            Some((a.trim().parse::<usize>().ok()?.clamp(1, 4), b.trim().parse::<usize>().ok()?.min(4096)))
        });
        set.unwrap_or(if intel() { (2, 512) } else { (1, 0) })
    })
}

/// Whether the CPU's vendor string is Intel's.
fn intel() -> bool {
    let id = __cpuid(0);
    let vendor: Vec<u8> = [id.ebx, id.edx, id.ecx].iter().flat_map(|r| r.to_le_bytes()).collect();
    vendor == b"GenuineIntel"
}

/// The 16 scales of (panel, block) starting at scale index `at`, as f32.
///
/// # Safety
/// 16 scales readable at `at`, of the kind `SC` says.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn scales16<const SC: u8>(p: &Panels, at: usize) -> __m512 {
    // SAFETY: the caller guarantees the 16 entries exist.
    unsafe {
        match &p.scales {
            PanelScales::Bytes { data, .. } => bytes16::<SC>(_mm_loadu_si128(data.as_ptr().add(at).cast())),
            PanelScales::F16(data) => _mm512_cvtph_ps(_mm256_loadu_si256(data.as_ptr().add(at).cast())),
            PanelScales::F32(data) => _mm512_loadu_ps(data.as_ptr().add(at)),
        }
    }
}

/// 16 UE8M0 or UE4M3 codes as f32, exactly as the formats' tables decode them; the
/// `_PLAIN` kinds skip the special codes' patching.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn bytes16<const SC: u8>(codes: __m128i) -> __m512 {
    let c = _mm512_cvtepu8_epi32(codes);
    if SC == UE8M0 || SC == UE8M0_PLAIN {
        // 2^(c - 127): the byte is the f32 exponent; 0 is the subnormal 2^-127.
        let f = _mm512_slli_epi32::<23>(c);
        if SC == UE8M0_PLAIN {
            return _mm512_castsi512_ps(f);
        }
        let f = _mm512_mask_mov_epi32(
            f,
            _mm512_cmpeq_epi32_mask(c, _mm512_setzero_si512()),
            _mm512_set1_epi32(0x0040_0000),
        );
        let f = _mm512_mask_mov_epi32(
            f,
            _mm512_cmpeq_epi32_mask(c, _mm512_set1_epi32(0xff)),
            _mm512_set1_epi32(0x7fc0_0000),
        );
        _mm512_castsi512_ps(f)
    } else {
        // eeee.mmm under the f32's exponent and mantissa: 2^-120 times the value (an f32
        // subnormal for UE4M3 subnormals), which the exact multiplication rescales.
        let f = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32::<20>(c)), _mm512_set1_ps(2f32.powi(120)));
        if SC == UE4M3_PLAIN {
            return f;
        }
        _mm512_mask_mov_ps(f, _mm512_cmpge_epu32_mask(c, _mm512_set1_epi32(0x7f)), _mm512_set1_ps(f32::NAN))
    }
}

/// [`bytes16`] on 16 codes of scale kind `kind`, for the tests.
#[cfg(test)]
pub(super) fn decode_bytes(kind: u8, codes: &[u8; 16]) -> [f32; 16] {
    use super::UE4M3;

    assert!(super::vnni_available());
    let mut out = [0f32; 16];
    // SAFETY: the CPU has the features (asserted); 16 bytes in, 16 f32 out.
    unsafe {
        let v = _mm_loadu_si128(codes.as_ptr().cast());
        let f = match kind {
            UE4M3 => bytes16::<UE4M3>(v),
            UE4M3_PLAIN => bytes16::<UE4M3_PLAIN>(v),
            UE8M0 => bytes16::<UE8M0>(v),
            _ => bytes16::<UE8M0_PLAIN>(v),
        };
        _mm512_storeu_ps(out.as_mut_ptr(), f);
    }
    out
}
