//! The W4 plot: per-item cost (ns/item) against N, both axes logarithmic, one line per swept
//! figure, drawn into a PNG with `plotters` (bitmap backend). Text is rendered with the DejaVu
//! Sans font embedded by the `dejavu` crate, so the plot needs no system fonts: axis labels,
//! axis descriptions, a caption and a legend naming each figure. Colours are fixed per figure,
//! listed in [`SERIES`].

use std::path::Path;

use plotters::prelude::*;

use crate::check::WorkloadError;
use crate::suite::Record;

/// The plotted W4 figures and their colours (RGB).
pub const SERIES: [(&str, (u8, u8, u8)); 7] = [
    ("w4.w1.create", (31, 119, 180)),
    ("w4.w1.update", (255, 127, 14)),
    ("w4.w1.list", (44, 160, 44)),
    ("w4.w1.destroy", (214, 39, 40)),
    ("w4.w1.map.insert", (127, 127, 127)),
    ("w4.w3.level.phase1_rate", (148, 103, 189)),
    ("w4.w3.queue.phase1_rate", (140, 86, 75)),
];

/// One plotted figure: its name (the legend), its colour and its (N, ns/item) points.
type Line = (&'static str, RGBColor, Vec<(f64, f64)>);

/// Draws the W4 records among `records` into a PNG at `path`. Fails when there is no W4 record
/// to draw or the file cannot be written.
pub fn per_item_cost(path: &Path, records: &[Record]) -> Result<(), WorkloadError> {
    let lines: Vec<Line> = SERIES
        .iter()
        .map(|&(figure, (r, g, b))| {
            let mut points: Vec<(f64, f64)> = records
                .iter()
                .filter(|record| record.figure == figure && record.median > 0.0)
                .map(|record| (record.parameters.n as f64, record.median))
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            (figure, RGBColor(r, g, b), points)
        })
        .filter(|(_, _, points)| !points.is_empty())
        .collect();
    if lines.is_empty() {
        return Err(WorkloadError::new("no W4 figures to plot"));
    }
    let all = lines
        .iter()
        .flat_map(|(_, _, points)| points.iter().copied());
    let (x_min, x_max, y_min, y_max) = all.fold(
        (f64::MAX, f64::MIN, f64::MAX, f64::MIN),
        |(x0, x1, y0, y1), (x, y)| (x0.min(x), x1.max(x), y0.min(y), y1.max(y)),
    );
    // Half a decade of margin around the points.
    let margin = 10f64.sqrt();
    let (x_min, x_max) = (x_min / margin, x_max * margin);
    let (y_min, y_max) = (y_min / margin, y_max * margin);
    draw(path, &lines, (x_min, x_max), (y_min, y_max))
        .map_err(|e| WorkloadError::new(format!("cannot draw {}: {e}", path.display())))
}

/// The font family name the embedded DejaVu Sans is registered under.
const FONT: &str = "sans-serif";

fn draw(
    path: &Path,
    lines: &[Line],
    (x_min, x_max): (f64, f64),
    (y_min, y_max): (f64, f64),
) -> Result<(), Box<dyn std::error::Error>> {
    // Registering twice (a second plot in one process) replaces the same bytes: harmless.
    plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular())
        .map_err(|_| "the embedded DejaVu Sans font is not a valid font")?;
    let root = BitMapBackend::new(path, (1000, 650)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("W4: per-item cost against N (log-log)", (FONT, 24))
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d((x_min..x_max).log_scale(), (y_min..y_max).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("N (resources)")
        .y_desc("ns per item")
        .label_style((FONT, 15))
        .axis_desc_style((FONT, 17))
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .light_line_style(RGBColor(235, 235, 235))
        .bold_line_style(RGBColor(200, 200, 200))
        .draw()?;
    for (name, colour, points) in lines {
        let colour = *colour;
        chart
            .draw_series(
                LineSeries::new(points.iter().copied(), colour.stroke_width(3)).point_size(5),
            )?
            .label(*name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(3))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font((FONT, 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
