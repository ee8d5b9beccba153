//! How `eval` reports: the table (one line per tensor and scheme, the per-scheme
//! summary, the skipped pairs) or the `--json` document, on any writer.

use std::io::Write;

use blockscale::Scheme;
use serde::Serialize;

use crate::error::CliError;
use crate::report::EvalRow;

use super::compute::{SchemeSummary, Skipped};

/// Version of the `--json` document; bumped on incompatible changes.
pub const JSON_VERSION: u32 = 1;

/// The `--json` document. Non-finite numbers (an exact tensor's infinite SQNR) are
/// written as `null`: serde_json does so for every f64 that JSON cannot represent.
#[derive(Debug, Serialize)]
pub struct EvalReport<'r> {
    /// [`JSON_VERSION`].
    pub version: u32,
    /// One row per (tensor, scheme), tensors in input order, schemes as asked.
    pub rows: &'r [EvalRow],
    /// One entry per scheme, in the order asked.
    pub summary: Vec<SchemeSummary>,
    /// The (tensor, scheme) pairs whose shape the scheme cannot hold.
    pub skipped: &'r [Skipped],
}

/// Writes the results to `out`: the `--json` document with `json`, else the table. A
/// reader that went away (`| head`) is not an error: there is no one left to tell.
///
/// # Errors
/// [`CheckpointError::Write`](blockscale::checkpoint::CheckpointError::Write) if `out` cannot be written.
pub fn write_report(
    out: &mut impl Write,
    json: bool,
    rows: &[EvalRow],
    summary: Vec<SchemeSummary>,
    skipped: &[Skipped],
) -> Result<(), CliError> {
    let written = if json {
        let report = EvalReport { version: JSON_VERSION, rows, summary, skipped };
        serde_json::to_writer_pretty(&mut *out, &report).map_err(std::io::Error::from).and_then(|()| writeln!(out))
    } else {
        write_table(out, rows, &summary, skipped)
    };
    match written.and_then(|()| out.flush()) {
        // The reader went away (`| head`): nothing left to tell it; not a failure.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(source) => Err(CliError::write("<stdout>", source)),
        Ok(()) => Ok(()),
    }
}

fn write_table(
    out: &mut impl Write,
    rows: &[EvalRow],
    summary: &[SchemeSummary],
    skipped: &[Skipped],
) -> std::io::Result<()> {
    let tw = rows.iter().map(|r| r.tensor.len()).chain([6]).max().unwrap_or(6);
    let sw = Scheme::ALL.iter().map(|s| s.name().len()).max().unwrap_or(6);
    writeln!(
        out,
        "{:<tw$}  {:<sw$}  {:>8}  {:>9}  {:>9}  {:>9}  {:>6}  {:>11}  {:>8}",
        "tensor", "scheme", "SQNR dB", "cosine", "max abs", "max rel", "bits/w", "compression", "quant ms"
    )?;
    for r in rows {
        writeln!(
            out,
            "{:<tw$}  {:<sw$}  {:>8}  {:>9.6}  {:>9}  {:>9}  {:>6.3}  {:>10.2}x  {:>8.1}",
            r.tensor,
            r.scheme,
            db(r.sqnr_db),
            r.cosine,
            sig(r.max_abs),
            sig(r.max_rel),
            r.bits_per_weight,
            r.compression,
            r.quantize_s * 1e3
        )?;
    }
    if !summary.is_empty() {
        writeln!(out)?;
        writeln!(
            out,
            "{:<sw$}  {:>7}  {:>13}  {:>12}  {:>10}  {:>10}  {:>6}  {:>11}",
            "scheme", "tensors", "mean SQNR dB", "min SQNR dB", "MB in", "MB out", "bits/w", "compression"
        )?;
        for s in summary {
            writeln!(
                out,
                "{:<sw$}  {:>7}  {:>13}  {:>12}  {:>10.2}  {:>10.2}  {:>6.3}  {:>10.2}x",
                s.scheme,
                s.tensors,
                db(s.mean_sqnr_db),
                db(s.min_sqnr_db),
                s.bytes_in as f64 / 1e6,
                s.bytes_out as f64 / 1e6,
                s.bits_per_weight,
                s.compression
            )?;
        }
    }
    if !skipped.is_empty() {
        writeln!(out)?;
        writeln!(out, "skipped {} (tensor, scheme) pairs:", skipped.len())?;
        for s in skipped.iter().take(20) {
            writeln!(out, "  {} {}: {}", s.tensor, s.scheme, s.reason)?;
        }
        if skipped.len() > 20 {
            writeln!(out, "  ... and {} more (--json lists them all)", skipped.len() - 20)?;
        }
    }
    Ok(())
}

/// A dB value with two decimals, `inf` for an exact result.
fn db(x: f64) -> String {
    if x.is_finite() { format!("{x:.2}") } else { format!("{x}") }
}

/// About four significant digits in at most nine characters.
fn sig(x: f64) -> String {
    let a = x.abs();
    if a == 0.0 || !a.is_finite() {
        format!("{x}")
    } else if (1e-3..1e5).contains(&a) {
        let decimals = (3 - a.log10().floor() as i32).clamp(0, 6) as usize;
        format!("{x:.decimals$}")
    } else {
        format!("{x:.2e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn number_formats() {
        assert_eq!(db(f64::INFINITY), "inf");
        assert_eq!(db(12.3456), "12.35");
        assert_eq!(sig(0.0), "0");
        assert_eq!(sig(1.0), "1.000");
        assert_eq!(sig(0.0125), "0.01250");
        assert_eq!(sig(123.456), "123.5");
        assert_eq!(sig(1.5e-5), "1.50e-5");
    }

    fn row(tensor: &str, scheme: &str) -> EvalRow {
        EvalRow {
            tensor: tensor.into(),
            scheme: scheme.into(),
            rows: 2,
            k: 32,
            sqnr_db: 20.0,
            cosine: 0.99,
            max_abs: 0.5,
            max_rel: 1.0,
            rmse: 0.01,
            bytes_in: 256,
            bytes_out: 36,
            compression: 256.0 / 36.0,
            bits_per_weight: 4.5,
            quantize_s: 0.001,
        }
    }

    fn skipped(n: usize) -> Vec<Skipped> {
        (0..n)
            .map(|i| Skipped { tensor: format!("t{i}"), scheme: "mxfp4".into(), rows: 2, k: 48, reason: "why".into() })
            .collect()
    }

    #[test]
    fn the_table_lists_twenty_skipped_pairs_then_counts_the_rest() {
        let mut out = Vec::new();
        write_report(&mut out, false, &[row("w", "nvfp4")], vec![], &skipped(23)).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        // Header, one row, a blank line, the skipped heading, 20 pairs, the rest counted.
        assert_eq!(lines.len(), 2 + 1 + 1 + 20 + 1, "{text}");
        assert_eq!(lines[3], "skipped 23 (tensor, scheme) pairs:");
        assert_eq!(lines[4], "  t0 mxfp4: why");
        assert_eq!(lines[24], "  ... and 3 more (--json lists them all)");
    }

    #[test]
    fn json_lists_every_skipped_pair() {
        let mut out = Vec::new();
        write_report(&mut out, true, &[row("w", "nvfp4")], vec![], &skipped(23)).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["version"], JSON_VERSION);
        assert_eq!(v["rows"][0]["tensor"], "w");
        assert_eq!(v["skipped"].as_array().unwrap().len(), 23);
        assert!(out.ends_with(b"}\n"));
    }

    /// A writer that fails every write with `kind`.
    struct Failing(std::io::ErrorKind);

    impl Write for Failing {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(self.0.into())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Err(self.0.into())
        }
    }

    #[test]
    fn a_closed_reader_is_not_an_error_but_a_failed_write_is() {
        for json in [false, true] {
            let rows = [row("w", "nvfp4")];
            assert!(write_report(&mut Failing(std::io::ErrorKind::BrokenPipe), json, &rows, vec![], &[]).is_ok());
            let e =
                write_report(&mut Failing(std::io::ErrorKind::PermissionDenied), json, &rows, vec![], &[]).unwrap_err();
            assert!(matches!(e, CliError::Checkpoint(blockscale::checkpoint::CheckpointError::Write { .. })), "{e:?}");
        }
    }
}
