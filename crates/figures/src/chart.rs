//! The figures a benchmark draws: what each holds, how its data is checked and fitted to axes,
//! and which marks it draws.
//!
//! Data is checked before anything is drawn: values an axis cannot show (NaN, infinities, zero or
//! negative on a log axis) are left out and counted in a note on the figure; a figure with nothing
//! left, or whose parts contradict each other, is an error naming the file.

use std::path::Path;

use plotters::element::Circle;
use plotters::prelude::{Color, PathElement, RGBColor, Rectangle, ShapeStyle};

use crate::axis::Axis;
use crate::render::{self, error_bar, Frame, LegendEntry, Swatch};
use crate::FigureError;

/// Series colours, in order: series `i` of any figure is drawn in `PALETTE[i % PALETTE.len()]`,
/// so the same series keeps its colour across figures that list series in the same order. These
/// are the Okabe–Ito colours, told apart by readers with the common forms of colour blindness.
pub const PALETTE: [(u8, u8, u8); 8] = [
    (0x00, 0x72, 0xB2), // blue
    (0xE6, 0x9F, 0x00), // orange
    (0x00, 0x9E, 0x73), // bluish green
    (0xD5, 0x5E, 0x00), // vermillion
    (0xCC, 0x79, 0xA7), // reddish purple
    (0x56, 0xB4, 0xE9), // sky blue
    (0xF0, 0xE4, 0x42), // yellow
    (0x00, 0x00, 0x00), // black
];

/// Most bins a histogram may ask for: more than a figure has pixels is a mistake, and an
/// enormous count would only exhaust memory.
pub const HISTOGRAM_BINS_MAX: usize = 10_000;

/// Most points a line may have and still get a dot on each: denser dots merge into a thick line
/// that hides the line's shape, as in throughput sampled over time.
pub const LINE_MARKERS_POINTS_MAX: usize = 60;

fn series_color(index: usize) -> RGBColor {
    let (red, green, blue) = PALETTE[index % PALETTE.len()];
    RGBColor(red, green, blue)
}

/// One bar: a median with the spread around it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bar {
    /// Height of the bar, such as the median.
    pub value: f64,
    /// Lower end of the error bar, such as the 1st percentile.
    pub low: f64,
    /// Upper end of the error bar, such as the 99th percentile.
    pub high: f64,
}

impl Bar {
    /// A bar of height `value` with an error bar from `low` to `high`.
    pub fn new(value: f64, low: f64, high: f64) -> Bar {
        Bar { value, low, high }
    }

    /// A bar with no spread: no error bar is drawn.
    pub fn exact(value: f64) -> Bar {
        Bar { value, low: value, high: value }
    }
}

/// One legend entry of a bar chart: a bar in each category, or a gap where it has no point.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BarSeries {
    /// Legend entry, such as "handover".
    pub name: String,
    /// One per category, in the order of [`BarChart::categories`]; `None` leaves a gap.
    pub points: Vec<Option<Bar>>,
}

/// One bar group = a category on the x axis (e.g. "64 B"); one series per legend entry (e.g.
/// "direct", "handover").
///
/// Each bar has an error bar with caps from its `low` to its `high` (none where those are equal).
/// On a log y axis bars rise from the bottom of the axis, and a bar whose value is zero or
/// negative is left out; an error bar reaching down to zero is cut at the axis.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BarChart {
    /// Printed above the figure.
    pub title: String,
    /// Under the category names, such as "payload".
    pub x_label: String,
    /// Beside the y axis, with its unit, such as "latency (µs)".
    pub y_label: String,
    /// The legend entries, each with one point per category.
    pub series: Vec<BarSeries>,
    /// The groups along the x axis, left to right.
    pub categories: Vec<String>,
    /// A logarithmic y axis, for values spanning several orders of magnitude.
    pub log_y: bool,
}

/// One line of a [`LineChart`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LineSeries {
    /// Legend entry, such as "4 outstanding".
    pub name: String,
    /// Points joined in the order given (not sorted), so a curve may turn back, as latency
    /// against throughput does past saturation.
    pub points: Vec<(f64, f64)>,
}

/// Lines/points: x–y series, e.g. throughput (x) vs latency (y), one series per outstanding
/// count, or throughput over time.
///
/// Each series is a line through its points, with a dot on each point when there are at most
/// [`LINE_MARKERS_POINTS_MAX`] of them. A linear axis starts at zero when
/// the data is all on one side of it, so that lines can be compared by height.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LineChart {
    /// Printed above the figure.
    pub title: String,
    /// Under the x axis, with its unit.
    pub x_label: String,
    /// Beside the y axis, with its unit.
    pub y_label: String,
    /// The lines, each a legend entry.
    pub series: Vec<LineSeries>,
    /// A logarithmic x axis.
    pub log_x: bool,
    /// A logarithmic y axis.
    pub log_y: bool,
}

/// Histogram of values (e.g. failover times in µs), one or more series overlaid, with fixed bin
/// count.
///
/// Every series is counted in the same bins, spread evenly from the smallest to the largest value
/// of all series, and drawn translucent so overlapping distributions both show. The legend gives
/// each series' count of values.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    /// Printed above the figure.
    pub title: String,
    /// Under the x axis: what was measured, with its unit.
    pub x_label: String,
    /// Name and values of each series.
    pub series: Vec<(String, Vec<f64>)>,
    /// How many bins span the values, from 1 to [`HISTOGRAM_BINS_MAX`].
    pub bins: usize,
}

/// What a figure left out, as a line for the figure itself, so a reader knows the picture is not
/// the whole data.
fn left_out_note(left_out_count: usize, log_axis: bool) -> Option<String> {
    if left_out_count == 0 {
        return None;
    }
    let why = if log_axis { "not finite, or not positive on a log axis" } else { "not finite" };
    let values = if left_out_count == 1 { "value" } else { "values" };
    Some(format!("{} {values} left out: {why}", crate::group_thousands(left_out_count as u64)))
}

fn no_data(path: &Path, title: &str, reason: &str) -> FigureError {
    FigureError::NoData {
        path: path.to_path_buf(),
        title: title.to_string(),
        reason: reason.to_string(),
    }
}

fn malformed(path: &Path, title: &str, problem: String) -> FigureError {
    FigureError::Malformed { path: path.to_path_buf(), title: title.to_string(), problem }
}

/// Smallest and largest of `values`, which the caller has already filtered to finite ones.
fn min_max(values: impl IntoIterator<Item = f64>) -> Option<(f64, f64)> {
    values.into_iter().fold(None, |range, value| match range {
        None => Some((value, value)),
        Some((min, max)) => Some((min.min(value), max.max(value))),
    })
}

/// Whether `value` can be placed on an axis of this kind.
fn showable(value: f64, log: bool) -> bool {
    value.is_finite() && (!log || value > 0.0)
}

impl BarChart {
    /// Draws the chart to an SVG file at `path`.
    pub fn write_svg(&self, path: &Path) -> Result<(), FigureError> {
        let svg = self.render_svg(path)?;
        crate::write_file(path, svg.as_bytes())
    }

    /// The SVG text [`BarChart::write_svg`] writes; `path` only names the figure in errors.
    pub fn render_svg(&self, path: &Path) -> Result<String, FigureError> {
        let title = self.title.as_str();
        self.check_shape(path)?;
        let (bars_shown, left_out_count) = self.bars_shown();
        let extent = min_max(bars_shown.iter().flat_map(|(_, _, bar)| {
            [bar.value, bar.low, bar.high].into_iter().filter(|value| showable(*value, self.log_y))
        }));
        let Some((min, max)) = extent else {
            let reason = if self.log_y {
                "no bar has a finite, positive value for the log axis"
            } else {
                "no bar has a finite value"
            };
            return Err(no_data(path, title, reason));
        };
        let y_axis = Axis::fit(min, max, self.log_y, true);
        let categories_count = self.categories.len();
        let x_axis = Axis::categories(categories_count);
        let frame = Frame {
            title,
            x_label: &self.x_label,
            y_label: &self.y_label,
            x_axis: &x_axis,
            y_axis: &y_axis,
            x_categories: Some(&self.categories),
            legend: self
                .series
                .iter()
                .enumerate()
                .map(|(index, series)| LegendEntry {
                    name: series.name.clone(),
                    color: series_color(index),
                    swatch: Swatch::Box,
                })
                .collect(),
            note: left_out_note(left_out_count, self.log_y),
        };

        // A group fills 80% of its category; its bars split that evenly, each a little narrower
        // than its share so neighbours do not touch.
        let group_width = 0.8;
        let slot_width = group_width / self.series.len() as f64;
        let bar_width = slot_width * 0.9;
        let baseline = y_axis.baseline();
        render::render_svg(path, &frame, |plot| {
            let mut rectangles = Vec::with_capacity(bars_shown.len());
            let mut error_bars = Vec::new();
            for (series_index, category_index, bar) in &bars_shown {
                let slot_left = *category_index as f64
                    + (1.0 - group_width) / 2.0
                    + *series_index as f64 * slot_width;
                let left = slot_left + (slot_width - bar_width) / 2.0;
                let right = left + bar_width;
                let Some(top) = y_axis.to_plot(bar.value) else { continue };
                rectangles.push(Rectangle::new(
                    [(left, baseline), (right, top)],
                    series_color(*series_index).filled(),
                ));
                let low = y_axis.to_plot_clamped(bar.low.min(bar.high));
                let high = y_axis.to_plot_clamped(bar.low.max(bar.high));
                if let (Some(low), Some(high)) = (low, high) {
                    if high > low {
                        error_bars.push(error_bar(
                            (left + right) / 2.0,
                            low,
                            high,
                            bar_width * 0.2,
                        ));
                    }
                }
            }
            plot.draw_series(rectangles)?;
            plot.draw_series(error_bars)?;
            Ok(())
        })
    }

    /// Fails on a chart without categories or series, or with a series whose points do not
    /// match the categories.
    fn check_shape(&self, path: &Path) -> Result<(), FigureError> {
        let title = self.title.as_str();
        if self.categories.is_empty() {
            return Err(no_data(path, title, "no categories"));
        }
        if self.series.is_empty() {
            return Err(no_data(path, title, "no series"));
        }
        for series in &self.series {
            if series.points.len() != self.categories.len() {
                return Err(malformed(
                    path,
                    title,
                    format!(
                        "series {:?} has {} points for {} categories",
                        series.name,
                        series.points.len(),
                        self.categories.len()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The bars that can be drawn, as (series index, category index, bar), and how many were
    /// left out (no finite value, or none above zero on a log axis).
    fn bars_shown(&self) -> (Vec<(usize, usize, Bar)>, usize) {
        let mut left_out_count = 0;
        let mut bars_shown = Vec::new(); // (series index, category index, bar)
        for (series_index, series) in self.series.iter().enumerate() {
            for (category_index, point) in series.points.iter().enumerate() {
                let Some(bar) = point else { continue };
                if showable(bar.value, self.log_y) {
                    bars_shown.push((series_index, category_index, *bar));
                } else {
                    left_out_count += 1;
                }
            }
        }
        (bars_shown, left_out_count)
    }
}

impl LineChart {
    /// Draws the chart to an SVG file at `path`.
    pub fn write_svg(&self, path: &Path) -> Result<(), FigureError> {
        let svg = self.render_svg(path)?;
        crate::write_file(path, svg.as_bytes())
    }

    /// The SVG text [`LineChart::write_svg`] writes; `path` only names the figure in errors.
    pub fn render_svg(&self, path: &Path) -> Result<String, FigureError> {
        let title = self.title.as_str();
        if self.series.is_empty() {
            return Err(no_data(path, title, "no series"));
        }
        let mut left_out_count = 0;
        let shown: Vec<Vec<(f64, f64)>> = self
            .series
            .iter()
            .map(|series| {
                let points: Vec<(f64, f64)> = series
                    .points
                    .iter()
                    .copied()
                    .filter(|(x, y)| showable(*x, self.log_x) && showable(*y, self.log_y))
                    .collect();
                left_out_count += series.points.len() - points.len();
                points
            })
            .collect();
        let x_extent = min_max(shown.iter().flatten().map(|(x, _)| *x));
        let y_extent = min_max(shown.iter().flatten().map(|(_, y)| *y));
        let (Some((x_min, x_max)), Some((y_min, y_max))) = (x_extent, y_extent) else {
            let reason = if self.log_x || self.log_y {
                "no point is finite, and positive on its log axes"
            } else {
                "no point is finite"
            };
            return Err(no_data(path, title, reason));
        };
        let x_axis = Axis::fit(x_min, x_max, self.log_x, x_min >= 0.0 || x_max <= 0.0);
        let y_axis = Axis::fit(y_min, y_max, self.log_y, y_min >= 0.0 || y_max <= 0.0);

        let frame = Frame {
            title,
            x_label: &self.x_label,
            y_label: &self.y_label,
            x_axis: &x_axis,
            y_axis: &y_axis,
            x_categories: None,
            legend: self
                .series
                .iter()
                .enumerate()
                .map(|(index, series)| LegendEntry {
                    name: series.name.clone(),
                    color: series_color(index),
                    swatch: Swatch::Line,
                })
                .collect(),
            note: left_out_note(left_out_count, self.log_x || self.log_y),
        };
        render::render_svg(path, &frame, |plot| {
            for (series_index, points) in shown.iter().enumerate() {
                let color = series_color(series_index);
                let plotted: Vec<(f64, f64)> = points
                    .iter()
                    .filter_map(|(x, y)| Some((x_axis.to_plot(*x)?, y_axis.to_plot(*y)?)))
                    .collect();
                if plotted.is_empty() {
                    continue;
                }
                plot.draw_series([PathElement::new(
                    plotted.clone(),
                    ShapeStyle::from(&color).stroke_width(2),
                )])?;
                if plotted.len() <= LINE_MARKERS_POINTS_MAX {
                    plot.draw_series(
                        plotted.into_iter().map(|point| Circle::new(point, 3, color.filled())),
                    )?;
                }
            }
            Ok(())
        })
    }
}

impl Histogram {
    /// Draws the histogram to an SVG file at `path`.
    pub fn write_svg(&self, path: &Path) -> Result<(), FigureError> {
        let svg = self.render_svg(path)?;
        crate::write_file(path, svg.as_bytes())
    }

    /// The SVG text [`Histogram::write_svg`] writes; `path` only names the figure in errors.
    pub fn render_svg(&self, path: &Path) -> Result<String, FigureError> {
        let title = self.title.as_str();
        if self.bins == 0 || self.bins > HISTOGRAM_BINS_MAX {
            return Err(malformed(
                path,
                title,
                format!(
                    "{} bins asked for; from 1 to {HISTOGRAM_BINS_MAX} can be drawn",
                    self.bins
                ),
            ));
        }
        if self.series.is_empty() {
            return Err(no_data(path, title, "no series"));
        }
        let left_out_count: usize = self
            .series
            .iter()
            .map(|(_, values)| values.iter().filter(|value| !value.is_finite()).count())
            .sum();
        let finite_values = || {
            self.series
                .iter()
                .flat_map(|(_, values)| values.iter().copied().filter(|value| value.is_finite()))
        };
        let Some((min, max)) = min_max(finite_values()) else {
            return Err(no_data(path, title, "no finite value"));
        };
        let x_axis = Axis::fit(min, max, false, false);
        // Bins span the data. One distinct value has no span: it gets one bin as wide as the
        // axis would give each, centred on the value, rather than a bar of zero width.
        let (bins_low, bin_width) = if max > min {
            (min, (max - min) / self.bins as f64)
        } else {
            let width = (x_axis.high - x_axis.low) / self.bins as f64;
            (min - width / 2.0, width)
        };
        let counts: Vec<Vec<u64>> = self
            .series
            .iter()
            .map(|(_, values)| {
                let mut counts = vec![0_u64; self.bins];
                for value in values.iter().copied().filter(|value| value.is_finite()) {
                    // The largest value belongs in the last bin, not one past it.
                    let index = ((value - bins_low) / bin_width).floor();
                    let index = if index.is_finite() && index > 0.0 { index as usize } else { 0 };
                    counts[index.min(self.bins - 1)] += 1;
                }
                counts
            })
            .collect();
        let count_max = counts.iter().flatten().copied().max().unwrap_or(0);
        let y_axis = Axis::fit(0.0, count_max.max(1) as f64, false, true);

        let frame = Frame {
            title,
            x_label: &self.x_label,
            y_label: "count",
            x_axis: &x_axis,
            y_axis: &y_axis,
            x_categories: None,
            legend: self
                .series
                .iter()
                .enumerate()
                .map(|(index, (name, values))| {
                    let finite_count = values.iter().filter(|value| value.is_finite()).count();
                    LegendEntry {
                        name: format!("{name} (n={})", crate::group_thousands(finite_count as u64)),
                        color: series_color(index),
                        swatch: Swatch::Box,
                    }
                })
                .collect(),
            note: left_out_note(left_out_count, false),
        };
        render::render_svg(path, &frame, |plot| {
            for (series_index, series_counts) in counts.iter().enumerate() {
                let color = series_color(series_index);
                let bins = || {
                    series_counts.iter().enumerate().filter(|(_, count)| **count > 0).map(
                        |(bin_index, count)| {
                            let left = bins_low + bin_index as f64 * bin_width;
                            [(left, 0.0), (left + bin_width, *count as f64)]
                        },
                    )
                };
                plot.draw_series(
                    bins().map(|corners| Rectangle::new(corners, color.mix(0.45).filled())),
                )?;
                plot.draw_series(bins().map(|corners| {
                    Rectangle::new(corners, ShapeStyle::from(&color).stroke_width(1))
                }))?;
            }
            Ok(())
        })
    }
}
