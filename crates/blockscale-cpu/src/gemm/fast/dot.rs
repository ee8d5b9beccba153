//! Tile kernels of the fast GEMM: `out[i, j] = sum_kb s_a[i, kb] s_b[j, kb] dot_kb(a_i, b_j)`
//! for rows of A and B both K-major, in int8 (exact block sums) or f32. Each writes its
//! tile into the output matrix in place: row `i` of the tile starts at `out[i * stride]`.

use rayon::prelude::*;

use crate::kernels::Isa;

/// The operands of a block-scaled tile: A's rows `a` (`mt x k`) with their block scales
/// `sa` (`mt x k/bs`), B as the kernel takes it (rows `nt x k`, or packed panels) with
/// its scales `sb`; `bs` elements per scale block.
#[derive(Clone, Copy)]
pub(super) struct Blocks<'a, A, B = A> {
    pub a: &'a [A],
    pub sa: &'a [f32],
    pub b: &'a [B],
    pub sb: &'a [f32],
    pub k: usize,
    pub bs: usize,
}

/// int8 tile: `a` is `mt x k`, `b` is `nt x k` (small integers), scales `mt x k/bs` and
/// `nt x k/bs`; `out` (`mt` rows of `stride`) gets `post * sum_kb (sa * sb) * (exact block
/// sum)`.
pub(super) fn int8_tile(isa: Isa, ops: Blocks<'_, i8>, post: f32, out: &mut [f32], stride: usize) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx2` exists only after `avx2_available()` confirmed AVX2 (and
        // FMA, which every AVX2 CPU this path targets has; checked there too).
        Isa::Avx2 if (ops.bs == 16 || ops.bs == 32) && ops.k.is_multiple_of(32) => unsafe {
            avx2::int8_tile(ops, post, out, stride)
        },
        _ => portable_int8(ops, post, out, stride),
    }
}

/// f32 tile: as [`int8_tile`] with f32 element values, block sums in f32.
pub(super) fn f32_tile(isa: Isa, ops: Blocks<'_, f32>, out: &mut [f32], stride: usize) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `int8_tile`.
        Isa::Avx2 if ops.bs.is_multiple_of(8) => unsafe { avx2::f32_tile(ops, out, stride) },
        _ => portable_f32(ops, out, stride),
    }
}

/// Output columns per packed panel of B.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(super) const PANEL: usize = 32;

/// bf16 tile: rows `a` (`mt x kp` bf16, `kp` a multiple of 32) times the packed panels
/// of B for columns `j0..j1` (`j0` a multiple of [`PANEL`]); `out` holds `mt` rows of `stride`.
#[cfg(target_arch = "x86_64")]
pub(super) fn bf16_tile(
    a: &[half::bf16],
    packed: &[u32],
    kp: usize,
    (j0, j1): (usize, usize),
    out: &mut [f32],
    stride: usize,
) {
    assert!(crate::avx512_available() && kp.is_multiple_of(32) && j0.is_multiple_of(PANEL));
    assert!(packed.len() >= j1.div_ceil(PANEL) * kp / 2 * PANEL && a.len().is_multiple_of(kp));
    // SAFETY: AVX-512 F, BW and BF16 were just confirmed; the asserts give the kernel
    // the slice lengths its reads rely on.
    unsafe { avx512::bf16_tile(a, packed, kp, (j0, j1), out, stride) }
}

/// Output columns per packed f32 panel of B (two 8-lane vectors).
pub(super) const F32_PANEL: usize = 16;

/// Packs f32 rows of B (`n x k`) into panels of [`F32_PANEL`] columns: panel `p` holds,
/// for each `t < k`, the 16 values `b[16p + l, t]` (missing columns zero).
pub(super) fn pack_f32_panels(b: &[f32], n: usize, k: usize) -> Vec<f32> {
    let mut out = vec![0f32; n.div_ceil(F32_PANEL) * k * F32_PANEL];
    out.par_chunks_mut(k * F32_PANEL).enumerate().for_each(|(p, panel)| {
        for (lane, row) in b.chunks_exact(k).skip(p * F32_PANEL).take(F32_PANEL).enumerate() {
            for (t, &v) in row.iter().enumerate() {
                panel[t * F32_PANEL + lane] = v;
            }
        }
    });
    out
}

/// f32 tile of pre-scaled operands: rows `a` (`mt x k`) times the packed panels of B for
/// columns `j0..j1` (`j0` a multiple of [`F32_PANEL`]), f32 FMA accumulation along K.
pub(super) fn f32_panel_tile(
    isa: Isa,
    a: &[f32],
    packed: &[f32],
    k: usize,
    (j0, j1): (usize, usize),
    out: &mut [f32],
    stride: usize,
) {
    assert!(j0.is_multiple_of(F32_PANEL) && a.len().is_multiple_of(k.max(1)));
    assert!(packed.len() >= j1.div_ceil(F32_PANEL) * k * F32_PANEL);
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx2` exists only after `avx2_available()` confirmed AVX2 and FMA;
        // the asserts give the kernel the extents it reads.
        Isa::Avx2 => unsafe { avx2::f32_panel_tile(a, packed, k, (j0, j1), out, stride) },
        _ => {
            let mt = a.len() / k;
            for i in 0..mt {
                for j in j0..j1 {
                    let base = (j / F32_PANEL) * k * F32_PANEL + j % F32_PANEL;
                    let mut acc = 0f32;
                    for t in 0..k {
                        acc = a[i * k + t].mul_add(packed[base + t * F32_PANEL], acc);
                    }
                    out[i * stride + j - j0] = acc;
                }
            }
        }
    }
}

/// Block-scaled bf16 tile: unscaled bf16 element rows `a` (`mt x k`) with scales `sa`
/// (`mt x k/bs`) times packed B panels (`b`) with packed scales (`sb`), for columns
/// `j0..j1`: each block's f32 dot product is multiplied by `sa * sb` and accumulated.
#[cfg(target_arch = "x86_64")]
pub(super) fn bf16_scaled_tile(
    ops: Blocks<'_, half::bf16, u32>,
    (j0, j1): (usize, usize),
    out: &mut [f32],
    stride: usize,
) {
    let Blocks { a, sa, b: packed, sb: packed_scales, k, bs } = ops;
    let nb = k / bs;
    assert!(crate::avx512_available() && bs.is_multiple_of(2) && k.is_multiple_of(bs) && j0.is_multiple_of(PANEL));
    assert!(
        packed.len() >= j1.div_ceil(PANEL) * k / 2 * PANEL && packed_scales.len() >= j1.div_ceil(PANEL) * nb * PANEL
    );
    assert!(a.len().is_multiple_of(k) && sa.len() == a.len() / k * nb);
    // SAFETY: AVX-512 F, BW and BF16 were just confirmed; the asserts give the kernel
    // the slice lengths its reads rely on.
    unsafe { avx512::bf16_scaled_tile(ops, (j0, j1), out, stride) }
}

/// One ISA's K step of the packed-panel micro kernels: a panel's two column vectors at
/// a K position, times an element of a row of A broadcast to every lane, added to the
/// row's two accumulators ([`steps`] runs them).
#[cfg(target_arch = "x86_64")]
trait PanelStep {
    /// A K position's element of a row of A (an f32, or a pair of bf16).
    type Elem;
    /// A vector of f32 accumulators.
    type Acc: Copy;
    /// A vector of operands.
    type Op: Copy;
    /// Columns per panel: elements per K position of a panel.
    const W: usize;

    /// The panel's two column vectors at `p`.
    ///
    /// # Safety
    /// `W` elements readable at `p`; the CPU has the ISA's features.
    unsafe fn load(p: *const Self::Elem) -> [Self::Op; 2];

    /// The element at `p` in every lane.
    ///
    /// # Safety
    /// As [`Self::load`], for one element.
    unsafe fn broadcast(p: *const Self::Elem) -> Self::Op;

    /// `acc + a * b`, lane by lane.
    ///
    /// # Safety
    /// The CPU has the ISA's features.
    unsafe fn fma(acc: Self::Acc, a: Self::Op, b: Self::Op) -> Self::Acc;
}

/// K positions `t` of `ts` for `MI` rows of A (pointers to their elements) and one
/// packed panel: `acc[i] += a[i][t] * panel[t]`, in the order of `ts`.
///
/// # Safety
/// The CPU has `S`'s features (this runs inlined into a function that enables them);
/// every `a[i]` readable at each `t`, `panel` for `W` elements at each `t * W`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn steps<S: PanelStep, const MI: usize>(
    a: &[*const S::Elem; MI],
    panel: *const S::Elem,
    ts: core::ops::Range<usize>,
    acc: &mut [[S::Acc; 2]; MI],
) {
    for t in ts {
        // SAFETY: the caller guarantees the extents and the features.
        unsafe {
            let [b0, b1] = S::load(panel.add(t * S::W));
            for (row, acc) in a.iter().zip(acc.iter_mut()) {
                let av = S::broadcast(row.add(t));
                acc[0] = S::fma(acc[0], av, b0);
                acc[1] = S::fma(acc[1], av, b1);
            }
        }
    }
}

/// The register tiles of a packed-panel kernel: for each panel of `pw` columns among
/// `j0..j1` (`j0` a multiple of `pw`) and each run of at most `mr` of the `mt` rows of
/// A, `tile(panel, cols, i, ih)`, `cols` being the panel's columns of the output
/// (counted from `j0`) and `i..i + ih` the rows.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn for_each_tile(
    mt: usize,
    (j0, j1): (usize, usize),
    pw: usize,
    mr: usize,
    mut tile: impl FnMut(usize, core::ops::Range<usize>, usize, usize),
) {
    let mut jc = j0;
    while jc < j1 {
        let cols = (jc - j0)..((jc + pw).min(j1) - j0);
        let mut i = 0;
        while i < mt {
            let ih = (mt - i).min(mr);
            tile(jc / pw, cols.clone(), i, ih);
            i += ih;
        }
        jc += pw;
    }
}

/// Writes a tile's rows (each a panel's `W` columns) to `out` rows `i..` (`stride`
/// floats apart), columns `cols` of the panel.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn store_rows<const W: usize>(
    rows: impl IntoIterator<Item = [f32; W]>,
    i: usize,
    cols: core::ops::Range<usize>,
    stride: usize,
    out: &mut [f32],
) {
    for (ii, lanes) in rows.into_iter().enumerate() {
        let dst = &mut out[(i + ii) * stride..][cols.clone()];
        dst.copy_from_slice(&lanes[..dst.len()]);
    }
}

fn portable_int8(ops: Blocks<'_, i8>, post: f32, out: &mut [f32], stride: usize) {
    let Blocks { a, sa, b, sb, k, bs } = ops;
    let nb = k / bs;
    for (i, (ar, sar)) in a.chunks_exact(k).zip(sa.chunks_exact(nb)).enumerate() {
        for (j, (br, sbr)) in b.chunks_exact(k).zip(sb.chunks_exact(nb)).enumerate() {
            let mut acc = 0f32;
            for (kb, (ab, bb)) in ar.chunks_exact(bs).zip(br.chunks_exact(bs)).enumerate() {
                let s: i32 = ab.iter().zip(bb).map(|(&x, &y)| x as i32 * y as i32).sum();
                acc += s as f32 * (sar[kb] * sbr[kb]);
            }
            out[i * stride + j] = acc * post;
        }
    }
}

fn portable_f32(ops: Blocks<'_, f32>, out: &mut [f32], stride: usize) {
    let Blocks { a, sa, b, sb, k, bs } = ops;
    let nb = k / bs;
    for (i, (ar, sar)) in a.chunks_exact(k).zip(sa.chunks_exact(nb)).enumerate() {
        for (j, (br, sbr)) in b.chunks_exact(k).zip(sb.chunks_exact(nb)).enumerate() {
            let mut acc = 0f32;
            for (kb, (ab, bb)) in ar.chunks_exact(bs).zip(br.chunks_exact(bs)).enumerate() {
                // Eight lanes, as the SIMD kernel sums (any order meets the bound).
                let mut lanes = [0f32; 8];
                for (c, (&x, &y)) in ab.iter().zip(bb).enumerate() {
                    lanes[c % 8] = x.mul_add(y, lanes[c % 8]);
                }
                let s: f32 = lanes.iter().sum();
                acc = s.mul_add(sar[kb] * sbr[kb], acc);
            }
            out[i * stride + j] = acc;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use core::arch::x86_64::*;

    use crate::gemm::lanes::hsum8;

    /// Eight i32 lanes of 4-product sums of `a . b` (signed bytes): `|b| * sign(a, b)`.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn dot_lanes(a: __m256i, b: __m256i, babs: __m256i) -> __m256i {
        let p = _mm256_maddubs_epi16(babs, _mm256_sign_epi8(a, b));
        _mm256_madd_epi16(p, _mm256_set1_epi16(1))
    }

    /// The scale of each lane's block: lanes 0-3 and 4-7 of a 32-byte step are
    /// different 16-element blocks when `bs` is 16, the same block when it is 32.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn lane_scales(s: &[f32], step: usize, bs: usize) -> __m256 {
        if bs == 32 {
            _mm256_set1_ps(s[step])
        } else {
            _mm256_setr_m128(_mm_set1_ps(s[2 * step]), _mm_set1_ps(s[2 * step + 1]))
        }
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) fn int8_tile(ops: super::Blocks<'_, i8>, post: f32, out: &mut [f32], stride: usize) {
        let super::Blocks { a, sa, b, sb, k, bs } = ops;
        let (mt, nt, nb, steps) = (a.len() / k, b.len() / k, k / bs, k / 32);
        let load = |row: &[i8], s: usize| {
            let v = &row[s * 32..s * 32 + 32];
            // SAFETY: `v` holds exactly 32 bytes; loadu has no alignment requirement.
            unsafe { _mm256_loadu_si256(v.as_ptr().cast()) }
        };
        let mut i = 0;
        while i < mt {
            let ih = (mt - i).min(4);
            let mut j = 0;
            while j < nt {
                let jh = (nt - j).min(2);
                let mut acc = [[_mm256_setzero_ps(); 2]; 4];
                for s in 0..steps {
                    let mut bv = [_mm256_setzero_si256(); 2];
                    let mut babs = [_mm256_setzero_si256(); 2];
                    let mut bsc = [_mm256_setzero_ps(); 2];
                    for jj in 0..jh {
                        let row = &b[(j + jj) * k..(j + jj + 1) * k];
                        bv[jj] = load(row, s);
                        babs[jj] = _mm256_abs_epi8(bv[jj]);
                        bsc[jj] = lane_scales(&sb[(j + jj) * nb..(j + jj + 1) * nb], s, bs);
                    }
                    for ii in 0..ih {
                        let av = load(&a[(i + ii) * k..(i + ii + 1) * k], s);
                        let asc = lane_scales(&sa[(i + ii) * nb..(i + ii + 1) * nb], s, bs);
                        for jj in 0..jh {
                            let d = _mm256_cvtepi32_ps(dot_lanes(av, bv[jj], babs[jj]));
                            acc[ii][jj] = _mm256_fmadd_ps(d, _mm256_mul_ps(asc, bsc[jj]), acc[ii][jj]);
                        }
                    }
                }
                for ii in 0..ih {
                    for jj in 0..jh {
                        out[(i + ii) * stride + j + jj] = hsum8(acc[ii][jj]) * post;
                    }
                }
                j += jh;
            }
            i += ih;
        }
    }

    /// Rows of A per register tile of the packed f32 kernel (12 accumulators).
    const MR_F32: usize = 6;

    /// The f32 kernel's K step: 16 columns, FMA.
    struct F32;

    impl super::PanelStep for F32 {
        type Elem = f32;
        type Acc = __m256;
        type Op = __m256;
        const W: usize = super::F32_PANEL;

        #[inline]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn load(p: *const f32) -> [__m256; 2] {
            // SAFETY: the caller guarantees 16 readable f32.
            unsafe { [_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8))] }
        }

        #[inline]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn broadcast(p: *const f32) -> __m256 {
            // SAFETY: the caller guarantees one readable f32.
            _mm256_set1_ps(unsafe { p.read() })
        }

        #[inline]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn fma(acc: __m256, a: __m256, b: __m256) -> __m256 {
            _mm256_fmadd_ps(a, b, acc)
        }
    }

    /// `MI` rows of A times one packed 16-column panel along all of K.
    ///
    /// # Safety
    /// AVX2 and FMA present; each `a[i]` valid for `k` f32 reads, `panel` for `k * 16`.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn micro_f32<const MI: usize>(a: [*const f32; MI], panel: *const f32, k: usize) -> [[__m256; 2]; MI] {
        let mut acc = [[_mm256_setzero_ps(); 2]; MI];
        // SAFETY: the caller's guarantee.
        unsafe { super::steps::<F32, MI>(&a, panel, 0..k, &mut acc) };
        acc
    }

    /// # Safety
    /// AVX2 and FMA present; the extents checked by `super::f32_panel_tile`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn f32_panel_tile(
        a: &[f32],
        packed: &[f32],
        k: usize,
        (j0, j1): (usize, usize),
        out: &mut [f32],
        stride: usize,
    ) {
        let mt = a.len() / k;
        super::for_each_tile(mt, (j0, j1), super::F32_PANEL, MR_F32, |panel, cols, i, ih| {
            let panel = packed[panel * k * super::F32_PANEL..].as_ptr();
            macro_rules! go {
                ($($mi:literal)*) => {
                    match ih {
                        $($mi => {
                            let ap: [*const f32; $mi] = core::array::from_fn(|ii| a[(i + ii) * k..].as_ptr());
                            // SAFETY: rows i..i + ih exist; the panel is covered.
                            let acc = unsafe { micro_f32::<$mi>(ap, panel, k) };
                            super::store_rows(acc.iter().map(|v| lanes(v)), i, cols, stride, out);
                        })*
                        _ => unreachable!("1..=MR_F32 rows"),
                    }
                };
            }
            go!(6 5 4 3 2 1);
        });
    }

    /// The 16 floats of two 8-lane vectors.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn lanes(v: &[__m256; 2]) -> [f32; 16] {
        let mut lanes = [0f32; 16];
        // SAFETY: `lanes` holds 16 f32, two 8-lane vectors.
        unsafe {
            _mm256_storeu_ps(lanes.as_mut_ptr(), v[0]);
            _mm256_storeu_ps(lanes.as_mut_ptr().add(8), v[1]);
        }
        lanes
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) fn f32_tile(ops: super::Blocks<'_, f32>, out: &mut [f32], stride: usize) {
        let super::Blocks { a, sa, b, sb, k, bs } = ops;
        let (mt, nt, nb) = (a.len() / k, b.len() / k, k / bs);
        let load = |row: &[f32], at: usize| {
            let v = &row[at..at + 8];
            // SAFETY: `v` holds exactly 8 f32; loadu has no alignment requirement.
            unsafe { _mm256_loadu_ps(v.as_ptr()) }
        };
        let mut i = 0;
        while i < mt {
            let ih = (mt - i).min(2);
            let mut j = 0;
            while j < nt {
                let jh = (nt - j).min(2);
                let mut tot = [[_mm256_setzero_ps(); 2]; 2];
                for kb in 0..nb {
                    let mut blk = [[_mm256_setzero_ps(); 2]; 2];
                    for c in (kb * bs..(kb + 1) * bs).step_by(8) {
                        let mut bv = [_mm256_setzero_ps(); 2];
                        for jj in 0..jh {
                            bv[jj] = load(&b[(j + jj) * k..], c);
                        }
                        for ii in 0..ih {
                            let av = load(&a[(i + ii) * k..], c);
                            for jj in 0..jh {
                                blk[ii][jj] = _mm256_fmadd_ps(av, bv[jj], blk[ii][jj]);
                            }
                        }
                    }
                    for ii in 0..ih {
                        for jj in 0..jh {
                            let s = _mm256_set1_ps(sa[(i + ii) * nb + kb] * sb[(j + jj) * nb + kb]);
                            tot[ii][jj] = _mm256_fmadd_ps(blk[ii][jj], s, tot[ii][jj]);
                        }
                    }
                }
                for ii in 0..ih {
                    for jj in 0..jh {
                        out[(i + ii) * stride + j + jj] = hsum8(tot[ii][jj]);
                    }
                }
                j += jh;
            }
            i += ih;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use core::arch::x86_64::*;

    use crate::gemm::bf16::bh;

    use super::PANEL;

    /// Rows of A per register tile (with the two 16-lane column vectors of a panel:
    /// 16 accumulators).
    const MR: usize = 8;

    /// The bf16 kernels' K step: 32 columns, a pair of bf16 per K position, `vdpbf16ps`.
    struct Bf16;

    impl super::PanelStep for Bf16 {
        type Elem = u32;
        type Acc = __m512;
        type Op = __m512bh;
        const W: usize = PANEL;

        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
        unsafe fn load(p: *const u32) -> [__m512bh; 2] {
            // SAFETY: the caller guarantees 32 readable u32.
            unsafe { [bh(_mm512_loadu_si512(p.cast())), bh(_mm512_loadu_si512(p.add(16).cast()))] }
        }

        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
        unsafe fn broadcast(p: *const u32) -> __m512bh {
            // SAFETY: the caller guarantees one readable pair of bf16.
            bh(_mm512_set1_epi32(unsafe { p.read_unaligned() } as i32))
        }

        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
        unsafe fn fma(acc: __m512, a: __m512bh, b: __m512bh) -> __m512 {
            _mm512_dpbf16_ps(acc, a, b)
        }
    }

    /// `MI` rows of A (pointers to their bf16 pairs) times one packed panel.
    ///
    /// # Safety
    /// AVX-512 F/BW/BF16 present; each `a[i]` valid for `pairs` u32 reads, `panel` for
    /// `pairs * 32`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    unsafe fn micro<const MI: usize>(a: [*const u32; MI], panel: *const u32, pairs: usize) -> [[__m512; 2]; MI] {
        let mut acc = [[_mm512_setzero_ps(); 2]; MI];
        // SAFETY: the caller's guarantee.
        unsafe { super::steps::<Bf16, MI>(&a, panel, 0..pairs, &mut acc) };
        acc
    }

    /// # Safety
    /// As [`micro`], for rows `i..i + MI` of `a` and panel `panel`; `out` has room.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    unsafe fn rows<const MI: usize>(
        a: &[half::bf16],
        packed: &[u32],
        kp: usize,
        i: usize,
        panel: usize,
        cols: core::ops::Range<usize>,
        stride: usize,
        out: &mut [f32],
    ) {
        let pairs = kp / 2;
        let ptrs: [*const u32; MI] = core::array::from_fn(|ii| a[(i + ii) * kp..].as_ptr().cast::<u32>());
        // SAFETY: forwarded from the caller.
        let acc = unsafe { micro::<MI>(ptrs, packed[panel * pairs * PANEL..].as_ptr(), pairs) };
        super::store_rows(acc.iter().map(|v| lanes(v)), i, cols, stride, out);
    }

    /// Rows of A per register tile of the block-scaled kernel (12 block accumulators and
    /// 12 totals).
    const MR_SCALED: usize = 6;

    /// `MI` rows of A times one packed panel, block by block: `tot += (sa * sb) * block`.
    ///
    /// # Safety
    /// AVX-512 F/BW/BF16 present; each `a[i]` valid for `k / 2` u32 reads and `sa[i]`
    /// for `k / bs` f32, `panel` for `k / 2 * 32` u32 and `scales` for `k / bs * 32` f32.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    unsafe fn micro_scaled<const MI: usize>(
        a: [*const u32; MI],
        sa: [*const f32; MI],
        panel: *const u32,
        scales: *const f32,
        k: usize,
        bs: usize,
    ) -> [[__m512; 2]; MI] {
        let mut tot = [[_mm512_setzero_ps(); 2]; MI];
        let half = bs / 2;
        for kb in 0..k / bs {
            let mut blk = [[_mm512_setzero_ps(); 2]; MI];
            // SAFETY: t < k / 2; the caller guarantees the extents.
            unsafe { super::steps::<Bf16, MI>(&a, panel, kb * half..(kb + 1) * half, &mut blk) };
            // SAFETY: kb < k / bs; the caller guarantees the extents.
            let (s0, s1) = unsafe {
                let p = scales.add(kb * PANEL);
                (_mm512_loadu_ps(p), _mm512_loadu_ps(p.add(16)))
            };
            for ((acc, t), &s) in blk.iter().zip(tot.iter_mut()).zip(&sa) {
                // SAFETY: kb < k / bs, within the row's scales.
                let sv = _mm512_set1_ps(unsafe { s.add(kb).read() });
                t[0] = _mm512_fmadd_ps(acc[0], _mm512_mul_ps(sv, s0), t[0]);
                t[1] = _mm512_fmadd_ps(acc[1], _mm512_mul_ps(sv, s1), t[1]);
            }
        }
        tot
    }

    /// # Safety
    /// AVX-512 F/BW/BF16 present; the extents checked by `super::bf16_scaled_tile`.
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    pub(super) unsafe fn bf16_scaled_tile(
        ops: super::Blocks<'_, half::bf16, u32>,
        (j0, j1): (usize, usize),
        out: &mut [f32],
        stride: usize,
    ) {
        let super::Blocks { a, sa, b: packed, sb: packed_scales, k, bs } = ops;
        let (mt, nb) = (a.len() / k, k / bs);
        super::for_each_tile(mt, (j0, j1), PANEL, MR_SCALED, |panel, cols, i, ih| {
            let bp = packed[panel * (k / 2) * PANEL..].as_ptr();
            let sp = packed_scales[panel * nb * PANEL..].as_ptr();
            macro_rules! go {
                ($($mi:literal)*) => {
                    match ih {
                        $($mi => {
                            let ap: [*const u32; $mi] = core::array::from_fn(|ii| a[(i + ii) * k..].as_ptr().cast::<u32>());
                            let sap: [*const f32; $mi] = core::array::from_fn(|ii| sa[(i + ii) * nb..].as_ptr());
                            // SAFETY: rows i..i + ih exist; the panel and its scales are covered.
                            let acc = unsafe { micro_scaled::<$mi>(ap, sap, bp, sp, k, bs) };
                            super::store_rows(acc.iter().map(|v| lanes(v)), i, cols, stride, out);
                        })*
                        _ => unreachable!("1..=MR_SCALED rows"),
                    }
                };
            }
            go!(6 5 4 3 2 1);
        });
    }

    /// The 32 floats of two 16-lane vectors.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    fn lanes(v: &[__m512; 2]) -> [f32; PANEL] {
        let mut lanes = [0f32; PANEL];
        // SAFETY: `lanes` holds 32 f32, two 16-lane vectors.
        unsafe {
            _mm512_storeu_ps(lanes.as_mut_ptr(), v[0]);
            _mm512_storeu_ps(lanes.as_mut_ptr().add(16), v[1]);
        }
        lanes
    }

    /// # Safety
    /// AVX-512 F/BW/BF16 present; `a` holds whole rows of `kp` (a multiple of 32), `packed`
    /// covers the panels of columns `j0..j1`.
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    pub(super) unsafe fn bf16_tile(
        a: &[half::bf16],
        packed: &[u32],
        kp: usize,
        (j0, j1): (usize, usize),
        out: &mut [f32],
        stride: usize,
    ) {
        let mt = a.len() / kp;
        super::for_each_tile(mt, (j0, j1), PANEL, MR, |panel, cols, i, ih| {
            macro_rules! go {
                ($($mi:literal)*) => {
                    match ih {
                        // SAFETY: rows i..i + ih exist; the panel is covered.
                        $($mi => unsafe { rows::<$mi>(a, packed, kp, i, panel, cols.clone(), stride, out) },)*
                        _ => unreachable!("1..=MR rows"),
                    }
                };
            }
            go!(8 7 6 5 4 3 2 1);
        });
    }
}
