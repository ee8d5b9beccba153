//! The SIMD panel kernels' driver, written once for AVX2 and AVX-512 VNNI: the
//! dispatch from (weight block, scale kind) to the kernels' const parameters, and the
//! loops over blocks of activation rows, panels and row tiles (or, for one activation
//! row, panels walked side by side). Each ISA file supplies only its tiles ([`Tiles`]);
//! its `#[target_feature]` entry point calls [`rows`], which like everything here is
//! `#[inline(always)]`, so the loops are compiled with that ISA's features and every
//! tile is monomorphized for it.

use super::{ActRows, F16, F32, Panels, ROWS, UE4M3, UE4M3_PLAIN, UE8M0, UE8M0_PLAIN, Width, check_kernel_inputs};

/// Activation rows per pass over the task's panels (64 rows of K = 4096 int8: 256 KiB).
const ROW_BLOCK: usize = 64;

/// The most activation rows a tile of any ISA takes.
const MAX_MR: usize = 8;

/// One task's inputs and output.
pub(super) struct Run<'a> {
    /// The activation rows.
    pub a: &'a ActRows<'a>,
    /// The weights.
    pub p: &'a Panels,
    /// The task's first panel: panel `pi` writes floats `(pi - p0) * 16..` of a row of `buf`.
    pub p0: usize,
    /// Floats per activation row of `buf`.
    pub stride: usize,
    /// The output, `[m, stride]`.
    pub buf: *mut f32,
    /// Panels side by side and prefetch distance of the single-row walk (see the
    /// AVX-512 kernel's `walk`; `(1, 0)`: one panel at a time, the general tile).
    pub walk: (usize, usize),
}

impl Run<'_> {
    /// The codes of panel `pi`: `k / 8` groups of 64 bytes, or 96 for six-bit codes
    /// (see the module docs of `panel`).
    ///
    /// # Safety
    /// `pi` is a panel of the weights.
    #[inline(always)]
    pub unsafe fn codes(&self, pi: usize) -> *const u8 {
        // SAFETY: the caller's guarantee; `check_kernel_inputs` checked the codes' length.
        unsafe { self.p.codes.as_ptr().add(pi * (self.p.k / 8) * self.p.group_bytes()) }
    }

    /// The 16 outputs of activation row `i` and panel `pi` in `buf`.
    ///
    /// # Safety
    /// Row `i` is one of the task's `m` and `pi` one of its panels.
    #[inline(always)]
    pub unsafe fn out(&self, i: usize, pi: usize) -> *mut f32 {
        // SAFETY: the caller's guarantee; `check_kernel_inputs` checked that a row of
        // `buf` holds `stride >= (p1 - p0) * 16` floats.
        unsafe { self.buf.add(i * self.stride + (pi - self.p0) * ROWS) }
    }
}

/// The instruction-set-specific pieces of a panel kernel.
pub(super) trait Tiles {
    /// Activation rows per tile: each decoded block serves up to this many (at most 8).
    const MR: usize;

    /// The code width of the panels the tiles take (six- and eight-bit: blocks of 32).
    const WIDTH: Width = Width::Four;

    /// Panel `pi` times activation rows `i0..i0 + TR`, into `run.buf`.
    ///
    /// # Safety
    /// The CPU has the kernel's features; `i0 + TR <= m` and `pi < p1`, with the lengths
    /// `check_kernel_inputs` checks for `m` rows and panels `run.p0..p1`.
    unsafe fn tile<const BLOCK: usize, const SC: u8, const TR: usize>(run: &Run<'_>, pi: usize, i0: usize);

    /// Panels `pi..pi + NP` times activation row 0 (the GEMV). By default each panel as
    /// a one-row [`Self::tile`]; a kernel that walks several panels at once does the same
    /// operations per panel in the same order, so the bits are the same.
    ///
    /// # Safety
    /// As [`Self::tile`] with one row, for each of the `NP` panels.
    #[inline(always)]
    unsafe fn tile1<const BLOCK: usize, const SC: u8, const NP: usize>(run: &Run<'_>, pi: usize) {
        for j in 0..NP {
            // SAFETY: the caller's guarantee.
            unsafe { Self::tile::<BLOCK, SC, 1>(run, pi + j, 0) };
        }
    }
}

/// Int8 mode for panels `p0..p1` and the `m` activation rows of `a` into `buf` (`[m,
/// buf.len() / m]`), as `super::portable::rows` (which gives the same bits), with the
/// single-row walk `walk` (see [`Run::walk`]).
///
/// # Safety
/// The CPU has the features of `X`'s tiles, and this runs inlined into a function that
/// enables them.
#[inline(always)]
pub(super) unsafe fn rows<X: Tiles>(
    a: &ActRows<'_>,
    m: usize,
    p: &Panels,
    p0: usize,
    p1: usize,
    buf: &mut [f32],
    walk: (usize, usize),
) {
    let (stride, kind) = check_kernel_inputs(a, m, p, p0, p1, buf);
    let run = Run { a, p, p0, stride, buf: buf.as_mut_ptr(), walk };
    assert_eq!(X::WIDTH, p.width, "the tiles take the panels' code width");
    // SAFETY: every length the tiles read and write was checked above; the caller
    // guarantees the features.
    unsafe {
        if X::WIDTH != Width::Four {
            // Six- and eight-bit panels: blocks of 32 with UE8M0 or (eight-bit) f32
            // scales (`check_kernel_inputs`).
            return match kind {
                UE8M0_PLAIN => panels::<X, 32, UE8M0_PLAIN>(&run, m, p1),
                F32 => panels::<X, 32, F32>(&run, m, p1),
                _ => panels::<X, 32, UE8M0>(&run, m, p1),
            };
        }
        match (p.block, kind) {
            (16, UE4M3) => panels::<X, 16, UE4M3>(&run, m, p1),
            (16, UE4M3_PLAIN) => panels::<X, 16, UE4M3_PLAIN>(&run, m, p1),
            (16, UE8M0) => panels::<X, 16, UE8M0>(&run, m, p1),
            (16, UE8M0_PLAIN) => panels::<X, 16, UE8M0_PLAIN>(&run, m, p1),
            (16, _) => panels::<X, 16, F16>(&run, m, p1),
            (_, UE4M3) => panels::<X, 32, UE4M3>(&run, m, p1),
            (_, UE4M3_PLAIN) => panels::<X, 32, UE4M3_PLAIN>(&run, m, p1),
            (_, UE8M0) => panels::<X, 32, UE8M0>(&run, m, p1),
            (_, UE8M0_PLAIN) => panels::<X, 32, UE8M0_PLAIN>(&run, m, p1),
            _ => panels::<X, 32, F16>(&run, m, p1),
        }
    }
}

/// Panels `run.p0..p1` times the `m` activation rows.
///
/// # Safety
/// As [`rows`], with the lengths checked.
#[inline(always)]
unsafe fn panels<X: Tiles, const BLOCK: usize, const SC: u8>(run: &Run<'_>, m: usize, p1: usize) {
    let np = run.walk.0;
    if m == 1 && np > 1 {
        let mut pi = run.p0;
        // SAFETY: row 0 exists and every panel walked is below `p1`; the caller checked
        // the rest.
        unsafe {
            while pi + np <= p1 {
                match np {
                    2 => X::tile1::<BLOCK, SC, 2>(run, pi),
                    3 => X::tile1::<BLOCK, SC, 3>(run, pi),
                    _ => X::tile1::<BLOCK, SC, 4>(run, pi),
                }
                pi += np;
            }
            while pi < p1 {
                X::tile1::<BLOCK, SC, 1>(run, pi);
                pi += 1;
            }
        }
        return;
    }
    // Blocks of activation rows small enough to stay in cache while every panel of the
    // task passes over them.
    const { assert!(X::MR >= 1 && X::MR <= MAX_MR) };
    for i0 in (0..m).step_by(ROW_BLOCK) {
        let i1 = (i0 + ROW_BLOCK).min(m);
        for pi in run.p0..p1 {
            let mut i = i0;
            while i < i1 {
                // SAFETY: rows i..i1 of the activations exist, and a tile takes at most
                // `i1 - i` of them; the caller checked the rest.
                unsafe {
                    match (i1 - i).min(X::MR) {
                        1 => X::tile::<BLOCK, SC, 1>(run, pi, i),
                        2 => X::tile::<BLOCK, SC, 2>(run, pi, i),
                        3 => X::tile::<BLOCK, SC, 3>(run, pi, i),
                        4 => X::tile::<BLOCK, SC, 4>(run, pi, i),
                        5 => X::tile::<BLOCK, SC, 5>(run, pi, i),
                        6 => X::tile::<BLOCK, SC, 6>(run, pi, i),
                        7 => X::tile::<BLOCK, SC, 7>(run, pi, i),
                        _ => X::tile::<BLOCK, SC, MAX_MR>(run, pi, i),
                    }
                }
                i += X::MR;
            }
        }
    }
}
