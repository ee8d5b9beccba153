//! The command's side of the conventions, which live in `blockscale::checkpoint`:
//! `--convention`'s values mapped onto the library's writers, the layers a run leaves
//! unquantized, and a found weight dequantized on the CPU backend.

use blockscale::checkpoint::{self, Catalog, Found, TensorEntry, Writes, layer_prefix};
use blockscale::{Backend, Element};

use crate::cli::ConventionArg;
use crate::error::CliError;
use crate::select::Selector;

impl ConventionArg {
    /// The library's name of the convention.
    pub fn name(self) -> &'static str {
        match self {
            Self::Modelopt => "modelopt",
            Self::CompressedTensors => "compressed-tensors",
            Self::Native => "native",
            Self::Deepseek => "deepseek",
        }
    }

    /// How the library writes it.
    pub fn writes(self) -> &'static dyn Writes {
        checkpoint::by_name(self.name()).and_then(|c| c.writes()).expect("every --convention is a library writer")
    }
}

/// Layer prefixes of the 2-D `.weight` tensors left unquantized (the `exclude_modules`
/// / `ignore` lists of the configs), sorted.
pub fn ignored_linear_layers<'a>(
    tensors: impl IntoIterator<Item = &'a TensorEntry>,
    selector: &Selector,
) -> Vec<String> {
    let mut v: Vec<String> = tensors
        .into_iter()
        .filter(|t| t.shape.len() == 2 && t.name.ends_with(".weight") && selector.skip_reason(t).is_some())
        .map(|t| layer_prefix(&t.name).to_owned())
        .collect();
    v.sort();
    v
}

/// The dequantized values of `f`, row-major in `f.out_shape`: a library scheme's matrix
/// on `backend` (gpt-oss experts transposed as transformers does), the other formats as
/// the library's checkpoint layer decodes them.
///
/// # Errors
/// As [`decode_into`].
pub fn decode<O: Element>(backend: &Backend, catalog: &Catalog<'_>, f: &Found) -> Result<Vec<O>, CliError> {
    let mut out = vec![O::default(); f.rows * f.k];
    decode_into(backend, catalog, f, &mut out)?;
    Ok(out)
}

/// [`decode`] into `out`, `f.rows * f.k` values (a buffer reused from weight to weight:
/// no fresh pages to fault in for each).
///
/// # Errors
/// [`CliError::Checkpoint`] for parts that do not form a valid weight, the backend's
/// failure as [`CliError::Cuda`].
///
/// # Panics
/// If `out` is not `f.rows * f.k` values (a bug of the caller).
pub fn decode_into<O: Element>(
    backend: &Backend,
    catalog: &Catalog<'_>,
    f: &Found,
    out: &mut [O],
) -> Result<(), CliError> {
    assert_eq!(out.len(), f.rows * f.k, "the output holds the weight");
    let Some(q) = checkpoint::matrix(catalog, f)? else {
        out.copy_from_slice(&checkpoint::decode_values::<O>(catalog, f)?);
        return Ok(());
    };
    let dequantize = |out: &mut [O]| {
        backend.dequantize_into(&q, out).map_err(|e| match backend {
            Backend::Cpu => {
                CliError::tensor(catalog.path_of(&f.main), &f.main, format!("dequantizing failed: {e}"))
            }
            #[allow(unreachable_patterns, reason = "Cuda exists only with the cuda feature")]
            _ => CliError::Cuda(e.to_string()),
        })
    };
    match f.decode {
        checkpoint::Decode::Matrix { transpose_experts: Some(e), .. } => {
            let mut stored = vec![O::default(); out.len()];
            dequantize(&mut stored)?;
            out.copy_from_slice(&checkpoint::transpose_experts(&stored, e, f.rows / e, f.k));
        }
        _ => dequantize(out)?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use safetensors::Dtype;

    use super::*;

    fn entry(name: &str, shape: &[usize]) -> TensorEntry {
        TensorEntry { name: name.into(), dtype: Dtype::BF16, shape: shape.to_vec(), range: 0..0 }
    }

    #[test]
    fn the_ignore_list_holds_the_skipped_linear_layers_sorted() {
        let tensors = [
            entry("model.norm.weight", &[8]),
            entry("model.q.weight", &[8, 32]),
            entry("lm_head.weight", &[8, 32]),
            entry("model.embed_tokens.weight", &[8, 32]),
            entry("model.q.bias", &[8, 32]),
        ];
        let selector = Selector::new(&[], &[], true).unwrap();
        assert_eq!(ignored_linear_layers(&tensors, &selector), ["lm_head", "model.embed_tokens"]);
    }

    #[test]
    fn the_convention_arguments_are_the_library_writers() {
        use clap::ValueEnum;
        let args = ConventionArg::value_variants();
        for c in args {
            let w = c.writes();
            assert!(checkpoint::writers().any(|(name, writes)| name == c.name() && std::ptr::addr_eq(writes, w)));
        }
        // And the other way: a writer added to the library without a `--convention`
        // value fails here.
        for (name, _) in checkpoint::writers() {
            assert!(args.iter().any(|c| c.name() == name), "the library writes {name}, --convention does not offer it");
        }
    }
}
