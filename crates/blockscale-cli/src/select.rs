//! Which tensors `quantize` quantizes: 2-D float `*.weight` tensors, minus the default
//! exclusions (embeddings, LM head) and the user's `--exclude`, restricted to
//! `--include` when given. Every other tensor is copied, with the reason.

use globset::{Glob, GlobSet, GlobSetBuilder};

use blockscale::checkpoint::TensorEntry;
use crate::error::CliError;

/// The patterns excluded unless `--no-default-excludes`: embeddings and the LM head,
/// which the NVFP4 exporters in the wild also leave in high precision.
pub const DEFAULT_EXCLUDES: [&str; 2] = ["*embed*", "*lm_head*"];

/// The include/exclude decision.
pub struct Selector {
    include: Option<GlobSet>,
    exclude: GlobSet,
    exclude_src: Vec<String>,
}

fn build(patterns: &[String]) -> Result<GlobSet, CliError> {
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        b.add(Glob::new(p).map_err(|e| CliError::Usage(format!("bad glob {p:?}: {e}")))?);
    }
    b.build().map_err(|e| CliError::Usage(format!("bad glob set: {e}")))
}

impl Selector {
    /// From `--include`, `--exclude` and whether the defaults apply.
    ///
    /// # Errors
    /// [`CliError::Usage`] for a malformed glob.
    pub fn new(include: &[String], exclude: &[String], default_excludes: bool) -> Result<Self, CliError> {
        let mut exclude_src: Vec<String> =
            if default_excludes { DEFAULT_EXCLUDES.iter().map(|s| s.to_string()).collect() } else { Vec::new() };
        exclude_src.extend(exclude.iter().cloned());
        Ok(Self {
            include: if include.is_empty() { None } else { Some(build(include)?) },
            exclude: build(&exclude_src)?,
            exclude_src,
        })
    }

    /// `None` to quantize `t`, or why it is copied unchanged.
    pub fn skip_reason(&self, t: &TensorEntry) -> Option<String> {
        use safetensors::Dtype;
        if !t.name.ends_with(".weight") {
            return Some("not a `.weight` tensor".into());
        }
        if t.shape.len() != 2 {
            return Some(format!("{}-D, not a 2-D linear weight", t.shape.len()));
        }
        if !matches!(t.dtype, Dtype::BF16 | Dtype::F16 | Dtype::F32) {
            return Some(format!("dtype {:?} is not bf16, f16 or f32", t.dtype));
        }
        let hits = self.exclude.matches(&t.name);
        if let Some(&i) = hits.first() {
            return Some(format!("excluded by {:?}", self.exclude_src[i]));
        }
        if let Some(set) = &self.include
            && !set.is_match(&t.name)
        {
            return Some("not matched by --include".into());
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, shape: &[usize], dtype: safetensors::Dtype) -> TensorEntry {
        TensorEntry { name: name.into(), dtype, shape: shape.to_vec(), range: 0..0 }
    }

    #[test]
    fn selects_2d_float_weights_minus_exclusions() {
        use safetensors::Dtype::*;
        let s = Selector::new(&[], &["*.mlp.gate.*".into()], true).unwrap();
        assert_eq!(s.skip_reason(&entry("l.0.q_proj.weight", &[8, 16], BF16)), None);
        assert!(s.skip_reason(&entry("l.0.q_proj.bias", &[8], BF16)).unwrap().contains(".weight"));
        assert!(s.skip_reason(&entry("l.0.norm.weight", &[8], BF16)).unwrap().contains("1-D"));
        assert!(s.skip_reason(&entry("l.0.q_proj.weight", &[8, 16], U8)).unwrap().contains("U8"));
        assert!(s.skip_reason(&entry("model.embed_tokens.weight", &[8, 16], F32)).unwrap().contains("*embed*"));
        assert!(s.skip_reason(&entry("l.0.mlp.gate.weight", &[8, 16], F16)).unwrap().contains("gate"));
        let all = Selector::new(&[], &[], false).unwrap();
        assert_eq!(all.skip_reason(&entry("lm_head.weight", &[8, 16], BF16)), None);
        let only = Selector::new(&["*.mlp.*".into()], &[], true).unwrap();
        assert!(only.skip_reason(&entry("l.0.q_proj.weight", &[8, 16], BF16)).unwrap().contains("--include"));
        assert_eq!(only.skip_reason(&entry("l.0.mlp.up_proj.weight", &[8, 16], BF16)), None);
        assert!(Selector::new(&["a[".into()], &[], true).is_err());
    }
}
