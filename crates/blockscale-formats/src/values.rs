//! [`FloatValues`]: a tensor's f32, f16 or bf16 values in their own type, borrowed or
//! owned. The one host value type of the command line, the golden files and xtask.

use alloc::borrow::Cow;
use alloc::vec::Vec;

use half::{bf16, f16};

use crate::FloatKind;

/// The values of a floating-point tensor in its own type: borrowed (from a memory map,
/// say) or owned.
///
/// ```
/// use blockscale_formats::{FloatKind, FloatValues, for_float_values};
/// let v = FloatValues::Bf16(vec![half::bf16::ONE, half::bf16::MIN_POSITIVE].into());
/// assert_eq!(v.kind(), FloatKind::Bf16);
/// assert_eq!(v.to_le_bytes(), [0x80, 0x3f, 0x80, 0x00]);
/// // One body for each of the three types:
/// let len = for_float_values!(&v, |x| x.len());
/// assert_eq!(len, 2);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub enum FloatValues<'a> {
    /// IEEE single.
    F32(Cow<'a, [f32]>),
    /// IEEE half.
    F16(Cow<'a, [f16]>),
    /// bfloat16.
    Bf16(Cow<'a, [bf16]>),
}

/// Evaluates `$body` with `$x` bound to the slice of whichever type a [`FloatValues`]
/// holds: one body for the three element types (each arm is compiled for its own type,
/// so `$body` may call generic functions).
#[macro_export]
macro_rules! for_float_values {
    ($values:expr, |$x:ident| $body:expr) => {
        match $values {
            $crate::FloatValues::F32($x) => $body,
            $crate::FloatValues::F16($x) => $body,
            $crate::FloatValues::Bf16($x) => $body,
        }
    };
}

impl FloatValues<'_> {
    /// Which type the values have.
    pub fn kind(&self) -> FloatKind {
        match self {
            Self::F32(_) => FloatKind::F32,
            Self::F16(_) => FloatKind::F16,
            Self::Bf16(_) => FloatKind::Bf16,
        }
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        for_float_values!(self, |v| v.len())
    }

    /// Whether there are no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every value as f32 (exact).
    pub fn to_f32(&self) -> Vec<f32> {
        for_float_values!(self, |v| v.iter().map(|&x| crate::Source::to_f32_exact(x)).collect())
    }

    /// The values' little-endian bytes.
    pub fn to_le_bytes(&self) -> Vec<u8> {
        for_float_values!(self, |v| v.iter().flat_map(|x| x.to_le_bytes()).collect())
    }
}
