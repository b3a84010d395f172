//! The W4 plot: per-item cost (ns/item) against N, both axes logarithmic, one line per swept
//! figure, drawn into a PNG with `plotters` (bitmap backend only, no font backend, so it builds
//! quickly and needs no system fonts). Without fonts the chart carries no text: grid lines mark
//! every power of ten on both axes and each figure has a fixed colour, listed in [`SERIES`]
//! and in `benches/README.md`.

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

/// Draws the W4 records among `records` into a PNG at `path`. Fails when there is no W4 record
/// to draw or the file cannot be written.
pub fn per_item_cost(path: &Path, records: &[Record]) -> Result<(), WorkloadError> {
    let lines: Vec<(RGBColor, Vec<(f64, f64)>)> = SERIES
        .iter()
        .map(|&(figure, (r, g, b))| {
            let mut points: Vec<(f64, f64)> = records
                .iter()
                .filter(|record| record.figure == figure && record.median > 0.0)
                .map(|record| (record.parameters.n as f64, record.median))
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            (RGBColor(r, g, b), points)
        })
        .filter(|(_, points)| !points.is_empty())
        .collect();
    if lines.is_empty() {
        return Err(WorkloadError::new("no W4 figures to plot"));
    }
    let all = lines.iter().flat_map(|(_, points)| points.iter().copied());
    let (x_min, x_max, y_min, y_max) = all.fold(
        (f64::MAX, f64::MIN, f64::MAX, f64::MIN),
        |(x0, x1, y0, y1), (x, y)| (x0.min(x), x1.max(x), y0.min(y), y1.max(y)),
    );
    // Half a decade of margin around the points; grid lines at the powers of ten inside.
    let margin = 10f64.sqrt();
    let (x_min, x_max) = (x_min / margin, x_max * margin);
    let (y_min, y_max) = (y_min / margin, y_max * margin);
    draw(path, &lines, (x_min, x_max), (y_min, y_max))
        .map_err(|e| WorkloadError::new(format!("cannot draw {}: {e}", path.display())))
}

fn draw(
    path: &Path,
    lines: &[(RGBColor, Vec<(f64, f64)>)],
    (x_min, x_max): (f64, f64),
    (y_min, y_max): (f64, f64),
) -> Result<(), Box<dyn std::error::Error>> {
    let root = BitMapBackend::new(path, (900, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .margin(30)
        .build_cartesian_2d((x_min..x_max).log_scale(), (y_min..y_max).log_scale())?;
    let grid = RGBColor(210, 210, 210);
    let decades = |low: f64, high: f64| {
        (low.log10().ceil() as i32..=high.log10().floor() as i32).map(|e| 10f64.powi(e))
    };
    for x in decades(x_min, x_max) {
        chart.draw_series(LineSeries::new([(x, y_min), (x, y_max)], &grid))?;
    }
    for y in decades(y_min, y_max) {
        chart.draw_series(LineSeries::new([(x_min, y), (x_max, y)], &grid))?;
    }
    for (colour, points) in lines {
        chart.draw_series(
            LineSeries::new(points.iter().copied(), colour.stroke_width(3)).point_size(5),
        )?;
    }
    root.present()?;
    Ok(())
}
