//! The prepared weight layout, on the host: what [`super::PreparedWeights`] uploads and
//! `kernels/gemv/prepared.cu` reads. Pure data rearrangement, testable without a GPU.
//!
//! # The layout
//!
//! Rows are taken in groups of 16 (`row_groups`, padded to a multiple of 8 groups) and K
//! in slabs of 64 elements (`slabs`, padded to a multiple of 4). For every (row group,
//! slab) the 32 lanes of a warp each hold 32 codes, in `words` 32-bit words per lane
//! (4 for 4-bit elements, 6 for 6-bit, 8 for 8-bit): a block of `B = 128 words` bytes at
//! [`code_offset`]` = ((group / 4) * slabs + slab) * 4 B + (group % 4) B`, so the four
//! groups of one slab sit side by side (one copy brings a CTA's groups). In a block:
//!
//! - 4-bit: lane L's words at `16 L`;
//! - 8-bit: words 0..3 at `16 L`, words 4..7 at `512 + 16 L`;
//! - 6-bit: plane A (sign and the top three magnitude bits, four bits a code) in words
//!   0..3 at `16 L`, plane B (the low two bits) in words 4..5 at `512 + 8 L`.
//!
//! Lane L = 4 g + t holds the A fragments of four `mma.m16n8k16` (q = 0..3): register
//! i of MMA q covers weight row `16 group + g + 8 (i & 1)` and the two K positions
//! `slab * 64 + kmap(t, q, e)` for `e = 2 (i >> 1) + h`, `h` the half (low first), with
//! `kmap = 16 t + 4 q + e` (every scheme but INT4-G32) or `32 (q / 2) + 8 t + 4 (q % 2) + e`
//! (INT4-G32, whose 32-element blocks must each fill whole MMAs). Inside the words each
//! code's bits sit where the kernel's decoding (a handful of masks, rotations and, for
//! E2M1, one multiply; [`decode_registers`] is its host transcription) moves them into
//! a bf16 pattern: the placement is derived here by running that decoding on single
//! bits, so the two cannot disagree.
//!
//! Scales get their own buffer, one entry per lane and slab in the order the lanes read
//! them (see [`ScaleOrder`]); nothing is converted, so [`PreparedLayout::to_quantized`]
//! gives back the exact codes and scales.

use blockscale_formats::{
    DataLayout, ElementFormat, Fp8Tile, GlobalScale, QuantizedMatrix, QuantizedParts, ScaleData, ScaleLayout, Scheme,
};
use half::f16;
use rayon::prelude::*;

/// K elements per slab.
pub const SLAB_K: usize = 64;
/// Rows per row group.
pub const GROUP_ROWS: usize = 16;
/// Row groups are padded to a multiple of this (the kernels' largest CTA tile: the
/// weight-only GEMM's two 4-group units).
pub const GROUP_ALIGN: usize = 8;
/// Slabs are padded to a multiple of this (the kernel's chunk).
pub const SLAB_ALIGN: usize = 4;

/// Why a matrix keeps its checkpoint layout instead of the prepared one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unpreparable {
    /// A NaN or infinite element code (E4M3 0x7f/0xff, E5M2 exponent all ones).
    SpecialCode,
    /// A NaN scale, or a UE4M3 scale byte of 0x80 or more.
    SpecialScale,
    /// A subnormal or zero UE4M3 scale on a block with nonzero codes: its product with
    /// the codes would need the scale's own subnormal path.
    SubnormalScale,
    /// MX scales spread over more binades than bf16 holds exactly after scaling.
    ScaleRange,
}

impl std::fmt::Display for Unpreparable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::SpecialCode => "a NaN or infinite element code",
            Self::SpecialScale => "a NaN scale",
            Self::SubnormalScale => "a zero or subnormal UE4M3 scale on a block with nonzero codes",
            Self::ScaleRange => "MX scale exponents spread over more than bf16 holds exactly",
        })
    }
}

/// How the kernel decodes a scheme's codes (and what it does with the scales).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decode {
    E2M1,
    Int4,
    E4M3,
    E5M2,
    E2M3,
    E3M2,
}

impl Decode {
    pub(crate) fn of(scheme: Scheme) -> Self {
        match scheme.element() {
            ElementFormat::E2M1 => Self::E2M1,
            ElementFormat::Int4 => Self::Int4,
            ElementFormat::E4M3 => Self::E4M3,
            ElementFormat::E5M2 => Self::E5M2,
            ElementFormat::E2M3 => Self::E2M3,
            ElementFormat::E3M2 => Self::E3M2,
        }
    }

    /// Bits per code.
    pub(crate) const fn bits(self) -> usize {
        match self {
            Self::E2M1 | Self::Int4 => 4,
            Self::E2M3 | Self::E3M2 => 6,
            Self::E4M3 | Self::E5M2 => 8,
        }
    }

    /// 32-bit words per lane and slab (32 codes).
    pub(crate) const fn words(self) -> usize {
        self.bits()
    }

    /// The bf16 bit each code bit lands on (in the low half of a register; +16 for the
    /// high half): E2M1 (s e1 e0 m) -> 15, 8, 7, 6; INT4 -> mantissa bits 6..3; E4M3
    /// -> 15 and 10..4; E5M2 -> 15 and 11..5; E2M3 -> 15 and 8..4; E3M2 -> 15 and 9..5.
    fn target(self, code_bit: usize) -> usize {
        let sign = self.bits() - 1;
        let low = match self {
            Self::E2M1 => 6,
            Self::E2M3 | Self::E4M3 => 4,
            Self::E3M2 | Self::E5M2 => 5,
            Self::Int4 => 3,
        };
        if self != Self::Int4 && code_bit == sign { 15 } else { low + code_bit }
    }
}

const fn rotr(w: u32, r: u32) -> u32 {
    w.rotate_right(r)
}

/// The data bits of the 16 A-fragment registers (4 MMAs x 4) of one lane and slab, as
/// `kernels/gemv/prepared.cu` computes them from the lane's words (register 4 q + i is
/// a[i] of MMA q), before the constant and multiply steps.
pub(crate) fn decode_registers(dec: Decode, w: &[u32]) -> [u32; 16] {
    let mut r = [0u32; 16];
    let e2m1 = |w: u32| -> [u32; 4] {
        const M: u32 = 0x81C0_81C0;
        [w & M, rotr(w, 3) & M, rotr(w, 6) & M, ((w & 0x001B_001B).wrapping_mul(0x1084)) & M]
    };
    for q in 0..4 {
        let regs: [u32; 4] = match dec {
            Decode::E2M1 => e2m1(w[q]),
            Decode::Int4 => core::array::from_fn(|i| rotr(w[q], 4 * i as u32) & 0x0078_0078),
            Decode::E4M3 | Decode::E5M2 => {
                let pair = |w: u32| -> (u32, u32) {
                    if dec == Decode::E4M3 {
                        (w & 0x87F0_87F0, (rotr(w, 4) & 0x8080_8080) | (rotr(w, 8) & 0x0770_0770))
                    } else {
                        (w & 0x8FE0_8FE0, (rotr(w, 5) & 0x8080_8080) | (rotr(w, 8) & 0x0F60_0F60))
                    }
                };
                let (a0, a2) = pair(w[2 * q]);
                let (a1, a3) = pair(w[2 * q + 1]);
                [a0, a1, a2, a3]
            }
            Decode::E2M3 | Decode::E3M2 => {
                let a = if dec == Decode::E2M3 {
                    e2m1(w[q])
                } else {
                    const M: u32 = 0x8380_8380;
                    let x = w[q];
                    [
                        x & M,
                        rotr(x, 3) & M,
                        ((x & 0x4058_4058).wrapping_mul(0x22)) & M,
                        ((x & 0x2023_2023).wrapping_mul(0x104)) & M,
                    ]
                };
                let mb = if dec == Decode::E2M3 { 0x0030_0030 } else { 0x0060_0060 };
                let wb = w[4 + q / 2];
                core::array::from_fn(|i| a[i] | (rotr(wb, 2 * ((q % 2) * 4 + i) as u32) & mb))
            }
        };
        r[4 * q..4 * q + 4].copy_from_slice(&regs);
    }
    r
}

/// Where each code bit goes: `table[reg][half][code bit] = (word, bit)`, derived by
/// decoding every single-bit word set (the decoding moves bits, never combines them).
struct Placement {
    table: [[[(u8, u8); 8]; 2]; 16],
}

impl Placement {
    fn new(dec: Decode) -> Self {
        let words = dec.words();
        // (reg, bf16 bit) -> (word, bit)
        let mut from = vec![None; 16 * 32];
        for j in 0..words {
            for b in 0..32 {
                let mut w = [0u32; 8];
                w[j] = 1 << b;
                let regs = decode_registers(dec, &w[..words]);
                let hits: Vec<(usize, usize)> = (0..16)
                    .flat_map(|r| (0..32).filter(move |&p| regs[r] >> p & 1 == 1).map(move |p| (r, p)))
                    .collect();
                assert_eq!(hits.len(), 1, "{dec:?}: word {j} bit {b} must land on exactly one register bit");
                let (r, p) = hits[0];
                assert!(from[r * 32 + p].is_none(), "{dec:?}: two bits land on register {r} bit {p}");
                from[r * 32 + p] = Some((j as u8, b as u8));
            }
        }
        let mut table = [[[(0u8, 0u8); 8]; 2]; 16];
        for (r, reg) in table.iter_mut().enumerate() {
            for (h, half) in reg.iter_mut().enumerate() {
                for (cb, slot) in half.iter_mut().enumerate().take(dec.bits()) {
                    let p = dec.target(cb) + 16 * h;
                    *slot = from[r * 32 + p]
                        .unwrap_or_else(|| panic!("{dec:?}: register {r} bit {p} is fed by no word bit"));
                }
            }
        }
        Self { table }
    }
}

/// The order of the prepared scales: what one lane reads for one slab.
///
/// | scheme | per (group, slab) or (group, slab pair) | entry of lane (g, t) |
/// |---|---|---|
/// | NVFP4 | 32 x 2 bytes a slab | rows g, g + 8, block `4 slab + t` |
/// | MX | 16 x 2 bytes a slab | rows g, g + 8, block `2 slab + t / 2` (lanes t, t^1 share) |
/// | INT4-G32 | 8 x 4 f16 a slab | blocks `2 slab`, `2 slab + 1` x rows g, g + 8 |
/// | INT4-G128 | 8 x 2 f16 a slab pair | rows g, g + 8, block `slab / 2` |
/// | FP8 128x128 | one f32 a slab pair | the row group's tile, block `slab / 2` |
/// | FP8 1x128 | 8 x 2 f32 a slab pair | rows g, g + 8, block `slab / 2` |
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScaleOrder {
    /// UE4M3 bytes.
    Nvfp4,
    /// UE8M0 bytes.
    Mx,
    /// f16, two blocks per slab.
    Int4G32,
    /// f16 per row and 128.
    Int4G128,
    /// f32 per 128 x 128 tile.
    Fp8Tile,
    /// f32 per row and 128.
    Fp8Row,
}

impl ScaleOrder {
    pub(crate) fn of(scheme: Scheme) -> Self {
        match scheme {
            Scheme::NvFp4 => Self::Nvfp4,
            Scheme::Int4G32 => Self::Int4G32,
            Scheme::Int4G128 => Self::Int4G128,
            Scheme::Fp8Block(Fp8Tile::Tile128x128) => Self::Fp8Tile,
            Scheme::Fp8Block(Fp8Tile::Row1x128) => Self::Fp8Row,
            _ => Self::Mx,
        }
    }

    /// Bytes per (group, slab) step (per slab pair for FP8).
    pub(crate) const fn step_bytes(self) -> usize {
        match self {
            Self::Nvfp4 | Self::Int4G32 | Self::Fp8Row => 64,
            Self::Mx | Self::Int4G128 => 32,
            Self::Fp8Tile => 4,
        }
    }

    const fn per_pair(self) -> bool {
        matches!(self, Self::Fp8Tile | Self::Fp8Row | Self::Int4G128)
    }
}

/// Prepared weights on the host: codes and scales in the kernel's order, plus what the
/// kernel needs to undo the layout's scaling.
#[derive(Clone, Debug, PartialEq)]
pub struct PreparedLayout {
    scheme: Scheme,
    rows: usize,
    k: usize,
    row_groups: usize,
    slabs: usize,
    codes: Vec<u8>,
    scales: Vec<u8>,
    /// MX: the power of two c the layout divides the scales by (the kernel multiplies
    /// the result by 2^c); NVFP4: 8.
    shift: i32,
    global_scale: Option<GlobalScale>,
}

/// Per-element-format windows of `e - c` (UE8M0 exponent code minus the shift) for
/// which the scaled product is exact in bf16 and the bf16 scale is normal (see
/// docs/KERNELS.md): low end from the element's smallest bit, high end from the
/// bf16 exponent of the scale.
fn mx_window(dec: Decode) -> (i32, i32) {
    match dec {
        Decode::E2M1 => (-5, 128),
        Decode::E2M3 => (-3, 128),
        Decode::E3M2 => (-2, 130),
        Decode::E4M3 => (3, 134),
        Decode::E5M2 => (10, 142),
        Decode::Int4 => (i32::MIN, i32::MAX),
    }
}

/// The decode's power-of-two offset W (decoded value = code value x 2^-W).
pub(crate) fn decode_offset(dec: Decode) -> i32 {
    match dec {
        Decode::E2M1 | Decode::E2M3 => 126,
        Decode::E3M2 => 124,
        Decode::E4M3 => 120,
        Decode::E5M2 => 112,
        Decode::Int4 => 0,
    }
}

/// Every code of one matrix row as a byte, from any data layout.
fn row_codes(q: &QuantizedMatrix, row: usize, out: &mut [u8]) {
    let k = q.k();
    let data = q.data();
    let bits = q.scheme().element().bits() as usize;
    match (bits, q.data_layout()) {
        (4, DataLayout::BlockInterleaved) => {
            let n = q.rows();
            for (c, o) in out.iter_mut().enumerate().take(k) {
                let word = ((c / 32) * n + row) * 4 + (c % 32) / 8;
                let byte = data[word * 4 + (c % 8) / 2];
                *o = (byte >> (4 * (c & 1))) & 0xF;
            }
        }
        (4, _) => {
            let r = &data[row * k / 2..(row + 1) * k / 2];
            for (c, o) in out.iter_mut().enumerate().take(k) {
                *o = (r[c / 2] >> (4 * (c & 1))) & 0xF;
            }
        }
        (6, _) => {
            let r = &data[row * k * 3 / 4..(row + 1) * k * 3 / 4];
            for (g, chunk) in out[..k].chunks_exact_mut(4).enumerate() {
                let v = r[3 * g] as u32 | (r[3 * g + 1] as u32) << 8 | (r[3 * g + 2] as u32) << 16;
                for (i, o) in chunk.iter_mut().enumerate() {
                    *o = ((v >> (6 * i)) & 0x3F) as u8;
                }
            }
        }
        _ => out[..k].copy_from_slice(&data[row * k..(row + 1) * k]),
    }
}

/// K position of (lane t, MMA q, slot e) inside a slab.
const fn kmap(half_map: bool, t: usize, q: usize, e: usize) -> usize {
    if half_map { 32 * (q / 2) + 8 * t + 4 * (q % 2) + e } else { 16 * t + 4 * q + e }
}

/// Row groups stored side by side for each slab: a CTA's groups (up to 4) are one
/// contiguous run, so one copy per slab brings them all.
pub const UNIT_GROUPS: usize = 4;

/// Byte offset of row group `rg`'s slab `slab` in the codes (`block` bytes a group-slab).
pub const fn code_offset(rg: usize, slab: usize, slabs: usize, block: usize) -> usize {
    ((rg / UNIT_GROUPS) * slabs + slab) * UNIT_GROUPS * block + (rg % UNIT_GROUPS) * block
}

/// Byte offset of row group `rg`'s scale step `step` (a slab, or a slab pair) in the
/// scales (`step_bytes` a group-step).
pub const fn scale_offset(rg: usize, step: usize, steps: usize, step_bytes: usize) -> usize {
    ((rg / UNIT_GROUPS) * steps + step) * UNIT_GROUPS * step_bytes + (rg % UNIT_GROUPS) * step_bytes
}

/// Byte offset of word `j` of lane `lane` inside one (group, slab) block.
const fn word_offset(words: usize, lane: usize, j: usize) -> usize {
    match (words, j) {
        (4, _) | (6, 0..4) | (8, 0..4) => 16 * lane + 4 * j,
        (6, _) => 512 + 8 * lane + 4 * (j - 4),
        _ => 512 + 16 * lane + 4 * (j - 4),
    }
}

fn is_special_code(dec: Decode, c: u8) -> bool {
    match dec {
        Decode::E4M3 => c & 0x7F == 0x7F,
        Decode::E5M2 => c & 0x7C == 0x7C,
        _ => false,
    }
}

impl PreparedLayout {
    /// Rearranges `q` into the prepared layout, or says why it keeps its own.
    ///
    /// # Errors
    /// [`Unpreparable`] for the data the fast kernels cannot take exactly (special
    /// codes, NaN scales, subnormal NVFP4 scales on nonzero blocks, MX scales spread
    /// over too many binades); the GEMV then runs on the checkpoint layout.
    pub fn new(q: &QuantizedMatrix) -> Result<Self, Unpreparable> {
        let scheme = q.scheme();
        let dec = Decode::of(scheme);
        let (n, k) = (q.rows(), q.k());
        let row_groups = n.div_ceil(GROUP_ROWS).next_multiple_of(GROUP_ALIGN);
        let slabs = k.div_ceil(SLAB_K).next_multiple_of(SLAB_ALIGN);
        let words = dec.words();
        let block_bytes = 128 * words;
        let placement = Placement::new(dec);
        let half_map = scheme == Scheme::Int4G32;

        // Codes, one row group at a time.
        let mut codes = vec![0u8; row_groups * slabs * block_bytes];
        let special = std::sync::atomic::AtomicBool::new(false);
        codes.par_chunks_mut(UNIT_GROUPS * slabs * block_bytes).enumerate().for_each(|(unit, out)| {
            let stride = slabs * SLAB_K;
            let mut rowc = vec![0u8; 16 * stride];
            for rg in unit * UNIT_GROUPS..(unit + 1) * UNIT_GROUPS {
                rowc.fill(0);
                for r in 0..16 {
                    let row = rg * 16 + r;
                    if row < n {
                        row_codes(q, row, &mut rowc[r * stride..r * stride + k]);
                        if rowc[r * stride..r * stride + k].iter().any(|&c| is_special_code(dec, c)) {
                            special.store(true, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                }
                for slab in 0..slabs {
                    let o = code_offset(rg % UNIT_GROUPS, slab, slabs, block_bytes);
                    let blk = &mut out[o..o + block_bytes];
                    for lane in 0..32 {
                        let (g, t) = (lane / 4, lane % 4);
                        let mut w = [0u32; 8];
                        for (reg, halves) in placement.table.iter().enumerate() {
                            let (qq, i) = (reg / 4, reg % 4);
                            let r = g + 8 * (i & 1);
                            for (h, bits) in halves.iter().enumerate() {
                                let kk = slab * SLAB_K + kmap(half_map, t, qq, 2 * (i >> 1) + h);
                                let c = rowc[r * stride + kk];
                                for (cb, &(j, b)) in bits.iter().enumerate().take(dec.bits()) {
                                    w[j as usize] |= ((c as u32 >> cb) & 1) << b;
                                }
                            }
                        }
                        for (j, word) in w.iter().enumerate().take(words) {
                            let o = word_offset(words, lane, j);
                            blk[o..o + 4].copy_from_slice(&word.to_le_bytes());
                        }
                    }
                }
            }
        });
        if special.into_inner() {
            return Err(Unpreparable::SpecialCode);
        }

        let order = ScaleOrder::of(scheme);
        let shift = Self::check_scales(q, dec)?;
        let scales = Self::place_scales(q, order, row_groups, slabs);
        Ok(Self { scheme, rows: n, k, row_groups, slabs, codes, scales, shift, global_scale: q.global_scale() })
    }

    /// Checks the scales of pre-scaled schemes and picks the shift c (NVFP4: 8; MX:
    /// centred on the scales within the window every block allows); 0 for the others.
    fn check_scales(q: &QuantizedMatrix, dec: Decode) -> Result<i32, Unpreparable> {
        let scheme = q.scheme();
        let ScaleData::Bytes(bytes) = q.scales() else { return Ok(0) };
        let shape = q.shape();
        let (n, cols, block) = (shape.rows, shape.scale_cols, scheme.block_size());
        let layout = q.scale_layout();
        // Whether block (row, col) has any nonzero code (sign aside).
        let mut rowc = vec![0u8; q.k()];
        let mut nonzero = vec![false; n * cols];
        for row in 0..n {
            row_codes(q, row, &mut rowc);
            let mag = (1u8 << (dec.bits() - 1)) - 1;
            for col in 0..cols {
                nonzero[row * cols + col] = rowc[col * block..(col + 1) * block].iter().any(|&c| c & mag != 0);
            }
        }
        let byte = |row: usize, col: usize| bytes[layout.offset(row, col, cols)];
        if scheme == Scheme::NvFp4 {
            for row in 0..n {
                for col in 0..cols {
                    let b = byte(row, col);
                    if b >= 0x7F {
                        return Err(Unpreparable::SpecialScale);
                    }
                    if b < 0x08 && nonzero[row * cols + col] {
                        return Err(Unpreparable::SubnormalScale);
                    }
                }
            }
            return Ok(NVFP4_SHIFT);
        }
        let (lo, hi) = mx_window(dec);
        let w = decode_offset(dec);
        // c within [e_max - hi, e_min - lo] (nonzero blocks) and, for all-zero blocks,
        // a finite bf16 scale: 0 <= e + W - c <= 254; c <= W keeps the kernel's bias
        // (W - c, added to both halves at once) from carrying between them.
        let (mut cmin, mut cmax) = (i32::MIN, w);
        let (mut sum, mut count) = (0i64, 0i64);
        for row in 0..n {
            for col in 0..cols {
                let e = byte(row, col) as i32;
                if e == 0xFF {
                    return Err(Unpreparable::SpecialScale);
                }
                if nonzero[row * cols + col] {
                    cmin = cmin.max(e - hi);
                    cmax = cmax.min(e - lo);
                    sum += e as i64;
                    count += 1;
                } else {
                    cmin = cmin.max(e + w - 254);
                    cmax = cmax.min(e + w);
                }
            }
        }
        if cmin > cmax {
            return Err(Unpreparable::ScaleRange);
        }
        let centre = if count > 0 { (sum as f64 / count as f64).round() as i32 - 127 } else { 0 };
        Ok(centre.clamp(cmin, cmax))
    }

    fn place_scales(q: &QuantizedMatrix, order: ScaleOrder, row_groups: usize, slabs: usize) -> Vec<u8> {
        let shape = q.shape();
        let (n, cols) = (shape.rows, shape.scale_cols);
        let layout = q.scale_layout();
        let steps = if order.per_pair() { slabs / 2 } else { slabs };
        let step = order.step_bytes();
        let mut out = vec![0u8; row_groups * steps * step];
        let scale_rows = shape.scale_rows;
        for rg in 0..row_groups {
            for s in 0..steps {
                let o = scale_offset(rg, s, steps, step);
                let blk = &mut out[o..o + step];
                let row_of = |g: usize, h: usize| rg * 16 + g + 8 * h;
                match (order, q.scales()) {
                    (ScaleOrder::Nvfp4, ScaleData::Bytes(b)) => {
                        for lane in 0..32 {
                            let (g, t) = (lane / 4, lane % 4);
                            for h in 0..2 {
                                let (row, col) = (row_of(g, h), 4 * s + t);
                                if row < n && col < cols {
                                    blk[2 * lane + h] = b[layout.offset(row, col, cols)];
                                }
                            }
                        }
                    }
                    (ScaleOrder::Mx, ScaleData::Bytes(b)) => {
                        for g in 0..8 {
                            for t2 in 0..2 {
                                for h in 0..2 {
                                    let (row, col) = (row_of(g, h), 2 * s + t2);
                                    if row < n && col < cols {
                                        blk[2 * (2 * g + t2) + h] = b[layout.offset(row, col, cols)];
                                    }
                                }
                            }
                        }
                    }
                    (ScaleOrder::Int4G32, ScaleData::F16(v)) => {
                        for g in 0..8 {
                            for b in 0..2 {
                                for h in 0..2 {
                                    let (row, col) = (row_of(g, h), 2 * s + b);
                                    let x = if row < n && col < cols {
                                        v[layout.offset(row, col, cols)]
                                    } else {
                                        f16::ZERO
                                    };
                                    let o = 8 * g + 2 * (2 * b + h);
                                    blk[o..o + 2].copy_from_slice(&x.to_le_bytes());
                                }
                            }
                        }
                    }
                    (ScaleOrder::Int4G128, ScaleData::F16(v)) => {
                        for g in 0..8 {
                            for h in 0..2 {
                                let (row, col) = (row_of(g, h), s);
                                let x =
                                    if row < n && col < cols { v[layout.offset(row, col, cols)] } else { f16::ZERO };
                                let o = 4 * g + 2 * h;
                                blk[o..o + 2].copy_from_slice(&x.to_le_bytes());
                            }
                        }
                    }
                    (ScaleOrder::Fp8Tile, ScaleData::F32(v)) => {
                        let (tile, col) = (rg * 16 / 128, s);
                        let x = if tile < scale_rows && col < cols { v[layout.offset(tile, col, cols)] } else { 0.0 };
                        blk.copy_from_slice(&x.to_le_bytes());
                    }
                    (ScaleOrder::Fp8Row, ScaleData::F32(v)) => {
                        for g in 0..8 {
                            for h in 0..2 {
                                let (row, col) = (row_of(g, h), s);
                                let x = if row < n && col < cols { v[layout.offset(row, col, cols)] } else { 0.0 };
                                let o = 8 * g + 4 * h;
                                blk[o..o + 4].copy_from_slice(&x.to_le_bytes());
                            }
                        }
                    }
                    _ => unreachable!("the scale data matches the scheme (QuantizedMatrix validates it)"),
                }
            }
        }
        out
    }

    /// Reassembles a layout from its parts (as [`Self::new`] made them).
    pub(crate) fn from_parts(
        scheme: Scheme,
        (rows, k): (usize, usize),
        (row_groups, slabs): (usize, usize),
        codes: Vec<u8>,
        scales: Vec<u8>,
        shift: i32,
        global_scale: Option<GlobalScale>,
    ) -> Self {
        Self { scheme, rows, k, row_groups, slabs, codes, scales, shift, global_scale }
    }

    /// The scheme.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }
    /// Logical rows (N).
    pub fn rows(&self) -> usize {
        self.rows
    }
    /// Logical K.
    pub fn k(&self) -> usize {
        self.k
    }
    /// Row groups of 16 (padded to a multiple of 8, the layout's `GROUP_ALIGN`).
    pub fn row_groups(&self) -> usize {
        self.row_groups
    }
    /// Slabs of 64 (padded to a multiple of 4).
    pub fn slabs(&self) -> usize {
        self.slabs
    }
    /// The prepared codes.
    pub fn codes(&self) -> &[u8] {
        &self.codes
    }
    /// The prepared scales.
    pub fn scales(&self) -> &[u8] {
        &self.scales
    }
    /// The layout's power of two c: the GEMV multiplies its sums by 2^c (MX, NVFP4).
    pub fn shift(&self) -> i32 {
        self.shift
    }
    /// NVFP4's per-tensor scale.
    pub fn global_scale(&self) -> Option<GlobalScale> {
        self.global_scale
    }

    /// Back to a [`QuantizedMatrix`] (row-major codes, `Linear` scales): the exact codes
    /// and scales `new` was given.
    ///
    /// # Panics
    /// Never for a layout made by [`Self::new`] (the parts are valid by construction).
    pub fn to_quantized(&self) -> QuantizedMatrix {
        let dec = Decode::of(self.scheme);
        let (n, k) = (self.rows, self.k);
        let words = dec.words();
        let placement = Placement::new(dec);
        let half_map = self.scheme == Scheme::Int4G32;
        let mut codes = vec![0u8; n * k];
        for rg in 0..n.div_ceil(16) {
            for slab in 0..k.div_ceil(SLAB_K) {
                let blk = &self.codes[code_offset(rg, slab, self.slabs, 128 * words)..];
                for lane in 0..32 {
                    let (g, t) = (lane / 4, lane % 4);
                    let w: Vec<u32> = (0..words)
                        .map(|j| {
                            let o = word_offset(words, lane, j);
                            u32::from_le_bytes(blk[o..o + 4].try_into().expect("4 bytes"))
                        })
                        .collect();
                    for (reg, halves) in placement.table.iter().enumerate() {
                        let (qq, i) = (reg / 4, reg % 4);
                        let row = rg * 16 + g + 8 * (i & 1);
                        for (h, bits) in halves.iter().enumerate() {
                            let kk = slab * SLAB_K + kmap(half_map, t, qq, 2 * (i >> 1) + h);
                            if row >= n || kk >= k {
                                continue;
                            }
                            let mut c = 0u8;
                            for (cb, &(j, b)) in bits.iter().enumerate().take(dec.bits()) {
                                c |= (((w[j as usize] >> b) & 1) as u8) << cb;
                            }
                            codes[row * k + kk] = c;
                        }
                    }
                }
            }
        }
        let data = pack_codes(dec, &codes, k);
        let shape = self.scheme.shape(n, k).expect("the shape was valid");
        let cols = shape.scale_cols;
        let order = ScaleOrder::of(self.scheme);
        let steps = if order.per_pair() { self.slabs / 2 } else { self.slabs };
        let step = order.step_bytes();
        let at = |rg: usize, s: usize| {
            let o = scale_offset(rg, s, steps, step);
            &self.scales[o..o + step]
        };
        let scales = match order {
            ScaleOrder::Nvfp4 | ScaleOrder::Mx => {
                let mut v = vec![0u8; n * cols];
                for row in 0..n {
                    let (rg, g, h) = (row / 16, row % 8, (row % 16) / 8);
                    for col in 0..cols {
                        v[row * cols + col] = if order == ScaleOrder::Nvfp4 {
                            at(rg, col / 4)[2 * (4 * g + col % 4) + h]
                        } else {
                            at(rg, col / 2)[2 * (2 * g + col % 2) + h]
                        };
                    }
                }
                ScaleData::Bytes(v)
            }
            ScaleOrder::Int4G32 | ScaleOrder::Int4G128 => {
                // A step holds two columns of G32 scales per row pair, one of G128.
                let g32 = order == ScaleOrder::Int4G32;
                let mut v = vec![f16::ZERO; n * cols];
                for row in 0..n {
                    let (rg, g, h) = (row / 16, row % 8, (row % 16) / 8);
                    for col in 0..cols {
                        let (o, b) = if g32 {
                            (8 * g + 2 * (2 * (col % 2) + h), at(rg, col / 2))
                        } else {
                            (4 * g + 2 * h, at(rg, col))
                        };
                        v[row * cols + col] = f16::from_le_bytes([b[o], b[o + 1]]);
                    }
                }
                ScaleData::F16(v)
            }
            ScaleOrder::Fp8Tile => {
                let tiles = shape.scale_rows;
                let mut v = vec![0f32; tiles * cols];
                for tile in 0..tiles {
                    for col in 0..cols {
                        let b = at(tile * 8, col);
                        v[tile * cols + col] = f32::from_le_bytes(b[..4].try_into().expect("4 bytes"));
                    }
                }
                ScaleData::F32(v)
            }
            ScaleOrder::Fp8Row => {
                let mut v = vec![0f32; n * cols];
                for row in 0..n {
                    let (rg, g, h) = (row / 16, row % 8, (row % 16) / 8);
                    for col in 0..cols {
                        let o = 8 * g + 4 * h;
                        v[row * cols + col] = f32::from_le_bytes(at(rg, col)[o..o + 4].try_into().expect("4 bytes"));
                    }
                }
                ScaleData::F32(v)
            }
        };
        QuantizedMatrix::from_parts(QuantizedParts {
            scheme: self.scheme,
            rows: n,
            k,
            data,
            data_layout: DataLayout::RowMajor,
            scales,
            scale_layout: ScaleLayout::Linear,
            global_scale: self.global_scale,
        })
        .expect("a prepared layout holds a valid matrix")
    }
}

/// NVFP4's fixed shift: E2M1 x UE4M3 x 2^-8 stays in bf16's normal range and the bf16
/// scale `UE4M3 x 2^118` below its largest finite value.
pub(crate) const NVFP4_SHIFT: i32 = 8;

/// Row-major packing of one code per byte (the formats crate's orders).
fn pack_codes(dec: Decode, codes: &[u8], k: usize) -> Vec<u8> {
    match dec.bits() {
        4 => codes.chunks_exact(2).map(|p| p[0] | (p[1] << 4)).collect(),
        6 => {
            let _ = k;
            codes
                .chunks_exact(4)
                .flat_map(|c| {
                    let v = c[0] as u32 | (c[1] as u32) << 6 | (c[2] as u32) << 12 | (c[3] as u32) << 18;
                    [v as u8, (v >> 8) as u8, (v >> 16) as u8]
                })
                .collect()
        }
        _ => codes.to_vec(),
    }
}

/// The kernel's `scale_add` for a pre-scaled scheme: added to the scale placed by one
/// multiply (UE4M3 byte x 16, UE8M0 byte x 128) in both bf16 halves, it makes the bf16
/// `scale x 2^(W - c)` that cancels the decode's 2^-W and divides by the shift 2^c.
pub(crate) fn scale_add(scheme: Scheme, shift: i32) -> u32 {
    let dec = Decode::of(scheme);
    let bias = match scheme {
        // byte << 4 reads as UE4M3 x 2^-120: add 120 + W - c to the exponent field.
        Scheme::NvFp4 => 120 + decode_offset(dec) - shift,
        Scheme::MxFp4 | Scheme::MxFp6E2M3 | Scheme::MxFp6E3M2 | Scheme::MxFp8E4M3 | Scheme::MxFp8E5M2 => {
            decode_offset(dec) - shift
        }
        _ => return 0,
    };
    let half = ((bias as u32) << 7) & 0xFFFF;
    half | (half << 16)
}

#[cfg(test)]
mod tests {
    use blockscale_formats::{DataLayout, QuantizeOptions, ScaleLayout, Scheme};
    use half::bf16;

    use super::*;

    /// Every scheme row-major, and the INT4 ones block-interleaved too (what checkpoints
    /// hold).
    fn all() -> Vec<(Scheme, DataLayout)> {
        Scheme::ALL
            .into_iter()
            .flat_map(|s| {
                let int4 = matches!(s, Scheme::Int4G32 | Scheme::Int4G128);
                [(s, DataLayout::RowMajor)].into_iter().chain(int4.then_some((s, DataLayout::BlockInterleaved)))
            })
            .collect()
    }

    /// The project's seeded generator (blockscale_formats::rng).
    struct Rng(blockscale_formats::rng::SplitMix64);
    impl Rng {
        fn new(seed: u64) -> Self {
            Self(blockscale_formats::rng::SplitMix64::new(seed))
        }
        /// Bell-shaped values with rare outliers and some all-zero blocks.
        fn values(&mut self, n: usize, k: usize) -> Vec<f32> {
            (0..n * k)
                .map(|i| {
                    if (i / 32) % 23 == 5 {
                        return 0.0;
                    }
                    let u = (self.0.next_u64() >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
                    let v = u * u * u * 8.0 + u;
                    if self.0.next_u64().is_multiple_of(97) { v * 40.0 } else { v * (1.0 + (i % 7) as f32) }
                })
                .collect()
        }
    }

    fn matrix(scheme: Scheme, data: DataLayout, (n, k): (usize, usize), seed: u64) -> QuantizedMatrix {
        let x = Rng::new(seed).values(n, k);
        let layout = if scheme.supports_layout(ScaleLayout::Swizzled128x4) {
            ScaleLayout::Swizzled128x4
        } else {
            ScaleLayout::Linear
        };
        let o = QuantizeOptions::default().with_scale_layout(layout).with_data_layout(data);
        blockscale_cpu::quantize_slice(&x, n, k, scheme, &o).unwrap()
    }

    #[test]
    fn every_word_bit_feeds_exactly_one_code_bit() {
        // Placement::new asserts the decoding is a bijection between word bits and the
        // registers' code bits.
        for dec in [Decode::E2M1, Decode::Int4, Decode::E4M3, Decode::E5M2, Decode::E2M3, Decode::E3M2] {
            let p = Placement::new(dec);
            let mut seen = std::collections::HashSet::new();
            for reg in &p.table {
                for half in reg {
                    for &wb in &half[..dec.bits()] {
                        assert!(seen.insert(wb), "{dec:?}: word bit {wb:?} used twice");
                    }
                }
            }
            assert_eq!(seen.len(), 32 * dec.words(), "{dec:?}");
        }
    }

    #[test]
    fn the_layout_round_trips_every_scheme() {
        // Ragged N and K: padding rows and slabs, and the last row group.
        for (i, (scheme, data)) in all().into_iter().enumerate() {
            for &(n, k) in &[(37, 384), (16, 128), (130, 1152)] {
                let q = matrix(scheme, data, (n, k), 7 + i as u64);
                let p = PreparedLayout::new(&q).unwrap_or_else(|e| panic!("{scheme:?}: {e}"));
                assert_eq!(p.row_groups() % GROUP_ALIGN, 0);
                assert_eq!(p.slabs() % SLAB_ALIGN, 0);
                let back = p.to_quantized();
                let (a, b): (ndarray::Array2<f32>, ndarray::Array2<f32>) =
                    (blockscale_cpu::dequantize(&q), blockscale_cpu::dequantize(&back));
                assert!(
                    a.iter().zip(b.iter()).all(|(x, y)| x.to_bits() == y.to_bits()),
                    "{scheme:?} {data:?} {n}x{k}: round trip changed values"
                );
                // The exact codes too, not only their values.
                let (mut c0, mut c1) = (vec![0u8; k], vec![0u8; k]);
                for row in 0..n {
                    row_codes(&q, row, &mut c0);
                    row_codes(&back, row, &mut c1);
                    assert_eq!(c0, c1, "{scheme:?} {data:?} row {row}");
                }
            }
        }
    }

    /// The bf16 value of half `h` of a register.
    fn half_value(reg: u32, h: usize) -> f64 {
        bf16::from_bits((reg >> (16 * h)) as u16).to_f64()
    }

    /// What the kernel multiplies, emulated from the prepared words and scales with the
    /// device's integer steps, against the element and scale values the formats crate
    /// decodes from the original matrix: pre-scaled weights must equal element x scale x
    /// 2^-shift exactly in bf16; INT4 must decode to 8 (c - 8); FP8 block to the element.
    #[test]
    fn the_kernels_arithmetic_gives_the_exact_products() {
        for (i, (scheme, data)) in all().into_iter().enumerate() {
            let (n, k) = (40, 640);
            let q = matrix(scheme, data, (n, k), 100 + i as u64);
            let p = PreparedLayout::new(&q).unwrap();
            let dec = Decode::of(scheme);
            let words = dec.words();
            let table = scheme.element().table();
            let half_map = scheme == Scheme::Int4G32;
            let add = scale_add(scheme, p.shift());
            let order = ScaleOrder::of(scheme);
            let mut codes = vec![0u8; k];
            for rg in 0..n.div_ceil(16) {
                for slab in 0..k / SLAB_K {
                    let blk = &p.codes()[code_offset(rg, slab, p.slabs(), 128 * words)..];
                    for lane in 0..32 {
                        let (g, t) = (lane / 4, lane % 4);
                        let w: Vec<u32> = (0..words)
                            .map(|j| {
                                let o = word_offset(words, lane, j);
                                u32::from_le_bytes(blk[o..o + 4].try_into().unwrap())
                            })
                            .collect();
                        let regs = decode_registers(dec, &w);
                        // The lane's two scale pairs (rows g, g + 8) as the kernel makes them.
                        let pair = |h: usize| -> u32 {
                            let sb = &p.scales()[scale_offset(rg, slab, p.slabs(), order.step_bytes())..];
                            let off = match order {
                                ScaleOrder::Nvfp4 => 2 * lane,
                                _ => 2 * (2 * g + t / 2),
                            };
                            let byte = sb[off + h] as u32;
                            let v = byte | (byte << 16);
                            v.wrapping_mul(if order == ScaleOrder::Nvfp4 { 16 } else { 128 }).wrapping_add(add)
                        };
                        for (reg, &r) in regs.iter().enumerate() {
                            let (qq, ii) = (reg / 4, reg % 4);
                            let row = rg * 16 + g + 8 * (ii & 1);
                            if row >= n {
                                continue;
                            }
                            row_codes(&q, row, &mut codes);
                            for h in 0..2 {
                                let kk = slab * SLAB_K + kmap(half_map, t, qq, 2 * (ii >> 1) + h);
                                let c = codes[kk];
                                let got = match dec {
                                    Decode::Int4 => {
                                        let v = half_value((r & 0x00780078) | 0x4300_4300, h) - 192.0;
                                        assert_eq!(v, 8.0 * (c as f64 - 8.0), "{scheme:?} INT4 decode");
                                        continue;
                                    }
                                    _ if order == ScaleOrder::Nvfp4 || order == ScaleOrder::Mx => {
                                        let s = half_value(pair(ii & 1), h);
                                        let prod = half_value(r, h) * s;
                                        assert_eq!(
                                            bf16::from_f64(prod).to_f64(),
                                            prod,
                                            "{scheme:?}: the bf16 product must be exact"
                                        );
                                        prod
                                    }
                                    _ => half_value(r, h) * 2f64.powi(decode_offset(dec)),
                                };
                                let elem = table[c as usize] as f64;
                                let want = match order {
                                    ScaleOrder::Nvfp4 | ScaleOrder::Mx => {
                                        elem * q.scale(row, kk / scheme.block_size()).unwrap() as f64
                                            * 2f64.powi(-p.shift())
                                    }
                                    _ => elem,
                                };
                                assert_eq!(got, want, "{scheme:?} row {row} k {kk} code {c:#x}");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn what_the_fast_kernels_cannot_take_keeps_its_layout() {
        let base = |scheme| matrix(scheme, DataLayout::RowMajor, (16, 256), 3);
        let with = |q: &QuantizedMatrix, f: &dyn Fn(&mut QuantizedParts)| {
            let mut parts = q.clone().into_parts();
            f(&mut parts);
            QuantizedMatrix::from_parts(parts).unwrap()
        };
        // A NaN E4M3 code, an infinite E5M2 one.
        for scheme in [Scheme::MxFp8E4M3, Scheme::MxFp8E5M2] {
            let q = with(&base(scheme), &|p| p.data[5] = 0x7F);
            assert_eq!(PreparedLayout::new(&q).unwrap_err(), Unpreparable::SpecialCode, "{scheme:?}");
        }
        // NaN scales.
        let q = with(&base(Scheme::MxFp4), &|p| {
            if let ScaleData::Bytes(b) = &mut p.scales {
                b[0] = 0xFF;
            }
        });
        assert_eq!(PreparedLayout::new(&q).unwrap_err(), Unpreparable::SpecialScale);
        let q = with(&base(Scheme::NvFp4), &|p| {
            if let ScaleData::Bytes(b) = &mut p.scales {
                b[0] = 0x7F;
            }
        });
        assert_eq!(PreparedLayout::new(&q).unwrap_err(), Unpreparable::SpecialScale);
        // A subnormal NVFP4 scale on a block with a nonzero code; on an all-zero block
        // it is fine.
        let nv = base(Scheme::NvFp4);
        let q = with(&nv, &|p| {
            p.data[0] = 0x22;
            if let ScaleData::Bytes(b) = &mut p.scales {
                b[0] = 0x03;
            }
        });
        assert_eq!(PreparedLayout::new(&q).unwrap_err(), Unpreparable::SubnormalScale);
        let q = with(&nv, &|p| {
            p.data[..8].fill(0x88); // -0 codes: the block (row 0, K 0..16) is zero
            if let ScaleData::Bytes(b) = &mut p.scales {
                b[0] = 0x03;
            }
        });
        assert!(PreparedLayout::new(&q).is_ok());
        // MX scales 2^-120 and 2^+120 in one matrix: no shift makes both exact.
        let q = with(&base(Scheme::MxFp4), &|p| {
            p.data.fill(0x11);
            if let ScaleData::Bytes(b) = &mut p.scales {
                b[0] = 7;
                b[1] = 247;
            }
        });
        assert_eq!(PreparedLayout::new(&q).unwrap_err(), Unpreparable::ScaleRange);
    }

    #[test]
    fn the_mx_shift_centres_the_scales() {
        // Weights near 2^-20 get scales near 2^-22: the shift moves them to about 1.
        let x: Vec<f32> = Rng::new(9).values(32, 256).iter().map(|v| v * 2f32.powi(-20)).collect();
        let q = blockscale_cpu::quantize_slice(&x, 32, 256, Scheme::MxFp8E4M3, &QuantizeOptions::default()).unwrap();
        let p = PreparedLayout::new(&q).unwrap();
        assert!((-30..=-15).contains(&p.shift()), "shift {}", p.shift());
        assert_eq!(scale_add(Scheme::MxFp8E4M3, p.shift()) >> 16, scale_add(Scheme::MxFp8E4M3, p.shift()) & 0xFFFF);
    }
}
