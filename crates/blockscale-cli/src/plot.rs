//! The SVG plot of `eval --plot`: SQNR per scheme, one series per tensor and the mean
//! (top), and the size-accuracy trade-off, mean SQNR against storage bits per weight
//! (bottom).
//!
//! Text is written as SVG `<text>` elements that the viewer lays out with its own
//! fonts, so plotters needs no font files (its font features stay off) and the plot
//! is written the same on a machine without any font installed.

use std::io::Write;
use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::error::CliError;
use blockscale::checkpoint::CheckpointError;
use crate::report::EvalRow;

/// Width of the SVG in pixels.
const WIDTH: u32 = 1000;
/// Height of the SQNR-per-scheme panel.
const TOP: u32 = 600;
/// Height of the trade-off panel.
const BOTTOM: u32 = 360;
/// Tensors drawn as coloured series with their own legend entry; beyond this many,
/// tensors are grey points and only the mean is named.
const MAX_SERIES: usize = 12;

/// Title of the top panel.
pub const TITLE: &str = "blockscale eval: SQNR per scheme and tensor";

/// Ten colours that stay apart from each other (and from the black mean line).
const COLOURS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

const GREY: RGBColor = RGBColor(160, 160, 160);
const FONT: &str = "sans-serif";
// Font sizes as plotters takes them; its SVG backend writes size / 1.24 pixels.
const TITLE_SIZE: u32 = 27;
const DESC_SIZE: u32 = 19;
const LABEL_SIZE: u32 = 16;

/// Writes the plot of `rows` to `path` through a temporary file in the same folder,
/// renamed into place once complete; an existing `path` is replaced only with `force`.
///
/// # Errors
/// [`CheckpointError::OutputExists`](blockscale::checkpoint::CheckpointError::OutputExists) if `path` exists and `force` is false;
/// [`CheckpointError::Write`](blockscale::checkpoint::CheckpointError::Write) if it cannot be written (the temporary file is removed).
pub fn write_svg(path: &Path, rows: &[EvalRow], force: bool) -> Result<(), CliError> {
    if !force && path.exists() {
        return Err(CliError::from(CheckpointError::OutputExists { path: path.to_owned() }));
    }
    let svg =
        render_svg(rows).map_err(|e| CliError::write(path.to_owned(), std::io::Error::other(e)))?;
    let write_err = |source| CliError::write(path.to_owned(), source);
    let dir = parent_dir(path);
    let mut tmp = tempfile::Builder::new()
        .prefix(".blockscale-plot")
        .suffix(".svg.tmp")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .tempfile_in(dir)
        .map_err(write_err)?;
    tmp.write_all(svg.as_bytes()).and_then(|()| tmp.flush()).map_err(write_err)?;
    let persisted = if force { tmp.persist(path) } else { tmp.persist_noclobber(path) };
    persisted.map_err(|e| {
        if e.error.kind() == std::io::ErrorKind::AlreadyExists {
            CliError::from(CheckpointError::OutputExists { path: path.to_owned() })
        } else {
            write_err(e.error)
        }
    })?;
    Ok(())
}

/// The folder of `path`, `.` for a bare file name.
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// The plot of `rows` as an SVG document.
///
/// # Errors
/// plotters' message if drawing fails.
pub fn render_svg(rows: &[EvalRow]) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, TOP + BOTTOM)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let (top, bottom) = root.split_vertically(TOP);
        let data = Data::new(rows);
        draw_per_scheme(&top, &data).map_err(|e| e.to_string())?;
        draw_tradeoff(&bottom, &data).map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// The rows rearranged: schemes and tensors in order of first appearance.
struct Data<'r> {
    schemes: Vec<&'r str>,
    tensors: Vec<&'r str>,
    /// `sqnr[tensor][scheme]`, `None` where not evaluated or not finite.
    sqnr: Vec<Vec<Option<f64>>>,
    /// Mean over the tensors' finite SQNR, per scheme.
    mean: Vec<Option<f64>>,
    /// Storage bits per weight of each scheme over all tensors.
    bits: Vec<Option<f64>>,
    /// Rows with an infinite SQNR (exact), which have no place on the y axis.
    exact: usize,
}

impl<'r> Data<'r> {
    fn new(rows: &'r [EvalRow]) -> Self {
        let mut schemes: Vec<&str> = vec![];
        let mut tensors: Vec<&str> = vec![];
        for r in rows {
            if !schemes.contains(&r.scheme.as_str()) {
                schemes.push(&r.scheme);
            }
            if !tensors.contains(&r.tensor.as_str()) {
                tensors.push(&r.tensor);
            }
        }
        let mut sqnr = vec![vec![None; schemes.len()]; tensors.len()];
        let (mut bytes, mut weights) = (vec![0usize; schemes.len()], vec![0usize; schemes.len()]);
        for r in rows {
            let s = schemes.iter().position(|&s| s == r.scheme).expect("collected above");
            let t = tensors.iter().position(|&t| t == r.tensor).expect("collected above");
            sqnr[t][s] = Some(r.sqnr_db).filter(|x| x.is_finite());
            bytes[s] += r.bytes_out;
            weights[s] += r.rows * r.k;
        }
        let mean = (0..schemes.len())
            .map(|s| {
                let v: Vec<f64> = sqnr.iter().filter_map(|t| t[s]).collect();
                (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
            })
            .collect();
        let bits = bytes.iter().zip(&weights).map(|(&b, &w)| (w > 0).then(|| (b * 8) as f64 / w as f64)).collect();
        let exact = rows.iter().filter(|r| r.sqnr_db == f64::INFINITY).count();
        Self { schemes, tensors, sqnr, mean, bits, exact }
    }

    /// The y range covering every finite SQNR, padded; 0..1 if there is none.
    fn sqnr_range(&self) -> (f64, f64) {
        let all = self.sqnr.iter().flatten().flatten().copied();
        let (lo, hi) = all.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| (lo.min(x), hi.max(x)));
        if lo > hi {
            return (0.0, 1.0);
        }
        let pad = ((hi - lo) * 0.08).max(1.0);
        (lo - pad, hi + pad)
    }

    fn coloured(&self) -> bool {
        self.tensors.len() <= MAX_SERIES
    }
}

/// A legend label: the name without the `model.` prefix and `.weight` suffix every
/// weight of a Hugging Face checkpoint shares.
fn short(name: &str) -> &str {
    let n = name.strip_prefix("model.").unwrap_or(name);
    n.strip_suffix(".weight").unwrap_or(n)
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type DrawResult<'a> = Result<(), DrawingAreaErrorKind<<SVGBackend<'a> as DrawingBackend>::ErrorType>>;

/// Draws marker number `m` (circle, triangle, cross, hollow circle) at pixel-sized scale.
fn marker<C, DB: DrawingBackend>(
    area: &DrawingArea<DB, C>,
    at: C::From,
    m: usize,
    colour: RGBColor,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    C: plotters::coord::CoordTranslate,
    C::From: Clone,
{
    let fill = colour.filled();
    match m % 4 {
        0 => area.draw(&Circle::new(at, 4, fill)),
        1 => area.draw(&TriangleMarker::new(at, 5, fill)),
        2 => area.draw(&Cross::new(at, 4, colour.stroke_width(2))),
        _ => area.draw(&Circle::new(at, 4, colour.stroke_width(2))),
    }
}

fn draw_per_scheme<'a>(area: &Area<'a>, data: &Data<'_>) -> DrawResult<'a> {
    let (plot_area, legend) = area.split_horizontally(WIDTH - 250);
    // An i32 range's segments include its end: n schemes are 0..n-1.
    let last = data.schemes.len().max(1) as i32 - 1;
    let (lo, hi) = data.sqnr_range();
    let mut chart = ChartBuilder::on(&plot_area)
        .caption(TITLE, (FONT, TITLE_SIZE))
        .margin(12)
        .x_label_area_size(64)
        .y_label_area_size(60)
        .build_cartesian_2d((0..last).into_segmented(), lo..hi)?;
    // Scheme names are drawn below, staggered on two lines when they would overlap.
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(data.schemes.len() + 1)
        .x_label_formatter(&|_| String::new())
        .y_label_style((FONT, LABEL_SIZE))
        .x_desc("scheme")
        .y_desc("SQNR (dB)")
        .axis_desc_style((FONT, DESC_SIZE))
        .draw()?;

    let centre = |s: usize| SegmentValue::CenterOf(s as i32);
    let base = plot_area.get_base_pixel();
    let at = |s: usize| {
        let (x, y) = chart.backend_coord(&(centre(s), lo));
        (x - base.0, y - base.1)
    };
    let spacing = if data.schemes.len() > 1 { at(1).0 - at(0).0 } else { i32::MAX };
    let widest = data.schemes.iter().map(|s| s.len()).max().unwrap_or(0) as i32;
    // About 7.5 pixels a character at this size in common sans-serif fonts.
    let stagger = widest * 15 / 2 + 8 > spacing;
    for (s, name) in data.schemes.iter().enumerate() {
        let (x, y) = at(s);
        let dy = if stagger && s % 2 == 1 { 26 } else { 8 };
        if dy > 8 {
            plot_area.draw(&PathElement::new(vec![(x, y + 5), (x, y + dy - 2)], GREY.stroke_width(1)))?;
        }
        let style = (FONT, LABEL_SIZE).into_font().color(&BLACK).pos(Pos::new(HPos::Center, VPos::Top));
        plot_area.draw(&Text::new((*name).to_owned(), (x, y + dy), style))?;
    }

    for (t, row) in data.sqnr.iter().enumerate() {
        let colour = if data.coloured() { COLOURS[t % COLOURS.len()] } else { GREY };
        let points: Vec<_> = row.iter().enumerate().filter_map(|(s, v)| v.map(|v| (centre(s), v))).collect();
        if data.coloured() {
            chart.draw_series(LineSeries::new(points.iter().cloned(), colour.mix(0.8).stroke_width(1)))?;
        }
        for p in points {
            marker(chart.plotting_area(), p, if data.coloured() { t / COLOURS.len() } else { 0 }, colour)?;
        }
    }
    let mean: Vec<_> = data.mean.iter().enumerate().filter_map(|(s, v)| v.map(|v| (centre(s), v))).collect();
    chart.draw_series(LineSeries::new(mean.iter().cloned(), BLACK.stroke_width(3)))?;
    for p in mean {
        chart.plotting_area().draw(&(EmptyElement::at(p) + Rectangle::new([(-4, -4), (4, 4)], BLACK.filled())))?;
    }

    draw_legend(&legend, data)
}

fn draw_legend<'a>(area: &Area<'a>, data: &Data<'_>) -> DrawResult<'a> {
    let text = |s: &str, x: i32, y: i32, size: u32| {
        Text::new(s.to_owned(), (x, y), (FONT, size).into_font().color(&BLACK).pos(Pos::new(HPos::Left, VPos::Center)))
    };
    let (x0, x1, xt) = (10, 40, 48);
    let mut y = 60;
    area.draw(&text("legend", x0, y, DESC_SIZE))?;
    y += 26;
    area.draw(&PathElement::new(vec![(x0, y), (x1, y)], BLACK.stroke_width(3)))?;
    area.draw(&(EmptyElement::at(((x0 + x1) / 2, y)) + Rectangle::new([(-4, -4), (4, 4)], BLACK.filled())))?;
    area.draw(&text("mean over tensors", xt, y, LABEL_SIZE))?;
    y += 22;
    if data.coloured() {
        for (t, name) in data.tensors.iter().enumerate() {
            let colour = COLOURS[t % COLOURS.len()];
            area.draw(&PathElement::new(vec![(x0, y), (x1, y)], colour.stroke_width(1)))?;
            marker(area, ((x0 + x1) / 2, y), t / COLOURS.len(), colour)?;
            area.draw(&text(short(name), xt, y, LABEL_SIZE))?;
            y += 20;
        }
    } else {
        area.draw(&Circle::new(((x0 + x1) / 2, y), 4, GREY.filled()))?;
        area.draw(&text(&format!("each of {} tensors", data.tensors.len()), xt, y, LABEL_SIZE))?;
        y += 20;
    }
    if data.exact > 0 {
        y += 10;
        area.draw(&text(&format!("{} exact (infinite SQNR), not drawn", data.exact), x0, y, LABEL_SIZE))?;
    }
    Ok(())
}

fn draw_tradeoff<'a>(area: &Area<'a>, data: &Data<'_>) -> DrawResult<'a> {
    let (plot_area, _) = area.split_horizontally(WIDTH - 250);
    let bits: Vec<f64> = data.bits.iter().flatten().copied().collect();
    let (blo, bhi) = bits.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &b| (l.min(b), h.max(b)));
    let (blo, bhi) = if blo > bhi { (0.0, 16.0) } else { ((blo - 0.5).max(0.0), bhi + 0.5) };
    let (lo, hi) = data.sqnr_range();
    let mut chart = ChartBuilder::on(&plot_area)
        .caption("mean SQNR against storage cost (up and left is better)", (FONT, DESC_SIZE + 2))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(blo..bhi, lo..hi)?;
    chart
        .configure_mesh()
        .x_label_style((FONT, LABEL_SIZE))
        .y_label_style((FONT, LABEL_SIZE))
        .x_desc("storage bits per weight (scales included)")
        .y_desc("SQNR (dB)")
        .axis_desc_style((FONT, DESC_SIZE))
        .draw()?;
    for row in &data.sqnr {
        for (s, v) in row.iter().enumerate() {
            if let (Some(v), Some(b)) = (v, data.bits[s]) {
                chart.plotting_area().draw(&Circle::new((b, *v), 2, GREY.filled()))?;
            }
        }
    }
    for (s, name) in data.schemes.iter().enumerate() {
        if let (Some(m), Some(b)) = (data.mean[s], data.bits[s]) {
            chart
                .plotting_area()
                .draw(&(EmptyElement::at((b, m)) + Rectangle::new([(-4, -4), (4, 4)], BLACK.filled())))?;
            // Alternate label sides: schemes of equal size (MXFP8 E4M3 / E5M2) stay legible.
            let (dx, h) = if s % 2 == 0 { (8, HPos::Left) } else { (-8, HPos::Right) };
            chart.plotting_area().draw(
                &(EmptyElement::at((b, m))
                    + Text::new(
                        (*name).to_owned(),
                        (dx, 0),
                        (FONT, LABEL_SIZE).into_font().color(&BLACK).pos(Pos::new(h, VPos::Center)),
                    )),
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(tensor: &str, scheme: &str, sqnr_db: f64, bits: f64) -> EvalRow {
        EvalRow {
            tensor: tensor.into(),
            scheme: scheme.into(),
            rows: 128,
            k: 128,
            sqnr_db,
            cosine: 0.99,
            max_abs: 0.1,
            max_rel: 1.0,
            rmse: 0.01,
            bytes_in: 128 * 128 * 2,
            bytes_out: (128.0 * 128.0 * bits / 8.0) as usize,
            compression: 16.0 / bits,
            bits_per_weight: bits,
            quantize_s: 0.001,
        }
    }

    fn rows() -> Vec<EvalRow> {
        let mut v = vec![];
        for (t, off) in [("model.layers.0.self_attn.q_proj.weight", 0.0), ("model.layers.0.mlp.down_proj.weight", -2.0)]
        {
            v.push(row(t, "nvfp4", 20.0 + off, 4.5));
            v.push(row(t, "mxfp8-e4m3", 33.0 + off, 8.25));
            v.push(row(t, "int4-g32", f64::INFINITY, 4.5));
        }
        v
    }

    #[test]
    fn svg_holds_title_axes_legend_and_scheme_labels() {
        let svg = render_svg(&rows()).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..100]);
        let texts = texts(&svg);
        for needle in [
            TITLE,
            "SQNR (dB)",
            "scheme",
            "storage bits per weight (scales included)",
            "mean over tensors",
            "layers.0.self_attn.q_proj",
            "layers.0.mlp.down_proj",
            "nvfp4",
            "mxfp8-e4m3",
            "int4-g32",
            "2 exact (infinite SQNR), not drawn",
        ] {
            assert!(texts.iter().any(|t| t == needle), "no text {needle:?} in {texts:?}");
        }
        // Scheme names label the x axis of the top panel and the points of the bottom one.
        assert_eq!(texts.iter().filter(|t| *t == "nvfp4").count(), 2);
        for bad in ["NaN", "\"inf", "inf\"", ",inf", "inf,", "inf "] {
            assert!(!svg.contains(bad), "non-finite coordinates: {bad}");
        }
    }

    /// The contents of the SVG's `<text>` elements.
    fn texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .map(|t| {
                let body = &t[t.find('>').expect("tag end") + 1..t.find("</text>").expect("closed")];
                body.trim().to_owned()
            })
            .collect()
    }

    #[test]
    #[ignore = "writes /tmp/blockscale-plot-sample.svg to look at"]
    fn sample() {
        std::fs::write("/tmp/blockscale-plot-sample.svg", render_svg(&rows()).unwrap()).unwrap();
    }

    #[test]
    fn many_tensors_and_no_rows_still_draw() {
        let many: Vec<EvalRow> =
            (0..40).flat_map(|t| [row(&format!("t{t}"), "nvfp4", 20.0 + t as f64 / 10.0, 4.5)]).collect();
        let svg = render_svg(&many).unwrap();
        assert!(texts(&svg).contains(&"each of 40 tensors".to_owned()));
        assert!(texts(&render_svg(&[]).unwrap()).contains(&TITLE.to_owned()));
    }

    #[test]
    fn writes_through_a_temporary_file_and_refuses_to_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("eval.svg");
        write_svg(&p, &rows(), false).unwrap();
        let first = std::fs::read_to_string(&p).unwrap();
        assert!(first.contains(TITLE));

        std::fs::write(&p, "mine").unwrap();
        let e = write_svg(&p, &rows(), false).unwrap_err();
        assert!(matches!(e, CliError::Checkpoint(CheckpointError::OutputExists { .. })), "{e:?}");
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "mine");
        write_svg(&p, &rows(), true).unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), first);
        // No temporary file left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);

        let e = write_svg(&dir.path().join("missing/eval.svg"), &rows(), false).unwrap_err();
        assert!(matches!(e, CliError::Checkpoint(CheckpointError::Write { .. })), "{e:?}");
    }
}
