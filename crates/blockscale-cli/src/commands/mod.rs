//! One module per subcommand.

pub mod bench;
pub mod dequantize;
pub mod eval;
pub mod inspect;
pub mod quantize;
