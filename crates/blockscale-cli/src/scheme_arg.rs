//! Scheme names on the command line: `quantize --scheme` (one scheme) and
//! `eval --schemes` (`all` or a list). Both name the valid schemes when they refuse one.

use blockscale::Scheme;

use crate::error::CliError;

/// Parses `--scheme`.
///
/// # Errors
/// [`CliError::Usage`] naming the valid schemes.
pub fn parse_scheme(s: &str) -> Result<Scheme, CliError> {
    s.parse()
        .map_err(|_| CliError::Usage(format!("unknown scheme {s:?}; expected one of: {}, fp8-block", valid_names())))
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
fn valid_names() -> String {
    Scheme::ALL.iter().map(|s| s.name()).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_all_and_lists() {
        assert_eq!(parse_schemes("all").unwrap(), Scheme::ALL.to_vec());
        assert_eq!(parse_schemes("ALL").unwrap().len(), 9);
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
        assert_eq!(parse_scheme("nvfp4").unwrap(), Scheme::NvFp4);
        assert_eq!(parse_scheme("fp8-block").unwrap(), Scheme::Fp8Block(blockscale::Fp8Tile::Tile128x128));
        let e = parse_scheme("nvfp5").unwrap_err();
        assert!(matches!(e, CliError::Usage(_)), "{e:?}");
        let names: Vec<&str> = Scheme::ALL.iter().map(|s| s.name()).collect();
        assert_eq!(
            e.to_string(),
            CliError::Usage(format!("unknown scheme \"nvfp5\"; expected one of: {}, fp8-block", names.join(", ")))
                .to_string()
        );
    }
}
