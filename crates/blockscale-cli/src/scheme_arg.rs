//! Scheme names on the command line: `quantize --scheme` (one scheme, a library scheme
//! or the CLI's own FP8 per tensor) and `eval --schemes` (`all` or a list of library
//! schemes). Both name the valid schemes when they refuse one.

use blockscale::Scheme;

use crate::error::CliError;

/// What `quantize --scheme` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantizeScheme {
    /// A block-scaled scheme of the library.
    Block(Scheme),
    /// `fp8-per-tensor`: E4M3 with one f32 scale per tensor (ModelOpt's FP8), which only
    /// the CLI implements.
    Fp8PerTensor,
}

impl QuantizeScheme {
    /// The name of FP8 per tensor (as `inspect` reports the format too).
    pub const FP8_PER_TENSOR: &'static str = "fp8-per-tensor";

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Block(s) => s.name(),
            Self::Fp8PerTensor => Self::FP8_PER_TENSOR,
        }
    }
}

/// Parses `--scheme` (case-insensitive, `_` accepted for `-`).
///
/// # Errors
/// [`CliError::Usage`] naming the valid schemes.
pub fn parse_scheme(s: &str) -> Result<QuantizeScheme, CliError> {
    if s.to_ascii_lowercase().replace('_', "-") == QuantizeScheme::FP8_PER_TENSOR {
        return Ok(QuantizeScheme::Fp8PerTensor);
    }
    s.parse().map(QuantizeScheme::Block).map_err(|_| {
        CliError::Usage(format!(
            "unknown scheme {s:?}; expected one of: {}, fp8-block, {}",
            valid_names(),
            QuantizeScheme::FP8_PER_TENSOR
        ))
    })
}

/// Parses `--schemes`: `all` (every scheme, in [`Scheme::ALL`] order) or a
/// comma-separated list of names (duplicates dropped, order kept).
///
/// # Errors
/// [`CliError::Usage`] for an empty list or an unknown name, listing the valid ones.
pub fn parse_schemes(s: &str) -> Result<Vec<Scheme>, CliError> {
    if s.trim().eq_ignore_ascii_case("all") {
        return Ok(Scheme::ALL.to_vec());
    }
    let mut out = Vec::new();
    for name in s.split(',').map(str::trim) {
        if name.is_empty() {
            return Err(CliError::Usage(format!("--schemes {s:?}: empty scheme name; valid: all, {}", valid_names())));
        }
        let scheme: Scheme = name
            .parse()
            .map_err(|_| CliError::Usage(format!("unknown scheme {name:?}; valid: all, {}", valid_names())))?;
        if !out.contains(&scheme) {
            out.push(scheme);
        }
    }
    Ok(out)
}

/// Every scheme's name, in [`Scheme::ALL`] order, comma-separated.
/// `quantize --scheme`'s long help: the schemes of [`Scheme::ALL`] and the CLI's own.
pub fn quantize_help() -> String {
    format!(
        "The scheme: one of {} (fp8-block means fp8-block-128x128, the weight tiles; int4-g128 is \
         compressed-tensors' W4A16), or {} (E4M3 with one f32 scale per tensor; modelopt convention only).",
        valid_names(),
        QuantizeScheme::FP8_PER_TENSOR
    )
}

fn valid_names() -> String {
    Scheme::ALL.iter().map(|s| s.name()).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_all_and_lists() {
        assert_eq!(parse_schemes("all").unwrap(), Scheme::ALL.to_vec());
        assert_eq!(parse_schemes("ALL").unwrap().len(), 10);
        assert_eq!(
            parse_schemes("nvfp4, mxfp8_e4m3,nvfp4,fp8-block").unwrap(),
            vec![Scheme::NvFp4, Scheme::MxFp8E4M3, Scheme::Fp8Block(blockscale::Fp8Tile::Tile128x128)]
        );
    }

    #[test]
    fn unknown_or_empty_scheme_is_a_usage_error_naming_the_valid_ones() {
        for bad in ["nvfp5", "nvfp4,", "", "mxfp4,,mxfp6-e2m3"] {
            let e = parse_schemes(bad).unwrap_err();
            assert!(matches!(e, CliError::Usage(_)), "{bad:?}: {e:?}");
            assert_eq!(e.exit_code(), crate::error::exit::USAGE);
            let msg = e.to_string();
            for s in Scheme::ALL {
                assert!(msg.contains(s.name()), "{msg}");
            }
        }
        assert!(parse_schemes("nvfp4,nvfp5").unwrap_err().to_string().contains("\"nvfp5\""));
    }

    #[test]
    fn one_scheme_parses_or_names_the_valid_ones() {
        let block = |s| QuantizeScheme::Block(s);
        assert_eq!(parse_scheme("nvfp4").unwrap(), block(Scheme::NvFp4));
        assert_eq!(parse_scheme("fp8-block").unwrap(), block(Scheme::Fp8Block(blockscale::Fp8Tile::Tile128x128)));
        assert_eq!(parse_scheme("FP8_per_tensor").unwrap(), QuantizeScheme::Fp8PerTensor);
        assert_eq!(QuantizeScheme::Fp8PerTensor.name(), "fp8-per-tensor");
        assert_eq!(parse_scheme("INT4_G128").unwrap(), QuantizeScheme::Block(Scheme::Int4G128));
        let e = parse_scheme("nvfp5").unwrap_err();
        assert!(matches!(e, CliError::Usage(_)), "{e:?}");
        let names: Vec<&str> = Scheme::ALL.iter().map(|s| s.name()).collect();
        assert_eq!(
            e.to_string(),
            CliError::Usage(format!(
                "unknown scheme \"nvfp5\"; expected one of: {}, fp8-block, fp8-per-tensor",
                names.join(", ")
            ))
            .to_string()
        );
    }
}
