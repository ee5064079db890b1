//! Drawing with plotters' SVG backend: the frame every figure shares (title, axes, grid, tick
//! labels, axis labels, legend, a note on what was left out), with the figure's own marks drawn by
//! a closure in plot coordinates.
//!
//! Text goes into the SVG as `<text>` elements for the viewer to set in its sans-serif font;
//! plotters only estimates text widths for layout, so no font file is read or needed.

use std::io;
use std::path::Path;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::coord::Shift;
use plotters::drawing::DrawingAreaErrorKind;
use plotters::prelude::{
    Cartesian2d, ChartBuilder, ChartContext, Color, DrawingArea, IntoDrawingArea, IntoFont,
    PathElement, RGBColor, Rectangle, SVGBackend, ShapeStyle, Text, TextStyle, BLACK, WHITE,
};
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::axis::Axis;
use crate::FigureError;

/// Size of every figure in pixels: wide enough for a legend beside the plot, and the 16:9 shape
/// of slides and screens.
pub(crate) const WIDTH_PX: u32 = 960;
/// See [`WIDTH_PX`].
pub(crate) const HEIGHT_PX: u32 = 540;

const FONT: &str = "sans-serif";
// Font sizes as plotters takes them: it writes them into the SVG divided by 1.24 (a title of 28
// is set at about 22.6 px).
const TITLE_FONT_PX: f64 = 28.0;
const AXIS_LABEL_FONT_PX: f64 = 20.0;
const TICK_LABEL_FONT_PX: f64 = 17.0;
const LEGEND_FONT_PX: f64 = 18.0;
const NOTE_FONT_PX: f64 = 15.0;
const LEGEND_ROW_PX: i32 = 24;
/// Estimated width of a character of tick labels: wide enough for the digits of common sans-serif
/// fonts, so estimated text is never narrower than the drawn text.
const TICK_LABEL_CHAR_PX: f64 = 8.0;
/// Distance between lines of a wrapped category name.
const TICK_LABEL_LINE_PX: i32 = 16;
/// Most lines a category name is wrapped onto; the rest is cut with an ellipsis.
const CATEGORY_LINES_MAX: usize = 3;
const MARGIN_LEFT_PX: u32 = 12;
const MARGIN_RIGHT_PX: u32 = 16;
const X_LABEL_AREA_PX: u32 = 52;
const Y_LABEL_AREA_PX: u32 = 72;
const LEGEND_SWATCH_PX: i32 = 18;
/// Longest legend entry, in characters, before it is shortened with an ellipsis: past this the
/// legend would take the plot's room.
const LEGEND_NAME_CHARS_MAX: usize = 32;

/// Grey for error bars: dark enough to read on every palette colour, and unlike any of them.
pub(crate) const ERROR_BAR_COLOR: RGBColor = RGBColor(0x33, 0x33, 0x33);

pub(crate) type Plot<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<Axis, Axis>>;
pub(crate) type DrawResult = Result<(), DrawingAreaErrorKind<io::Error>>;

/// An axis is a plotters coordinate of its own, linear over plot coordinates, whose grid lines
/// and labels fall at exactly the ticks the axis chose: plotters' own float ranges pick their own
/// ticks and come with no label format.
impl Ranged for Axis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let fraction = (value - self.low) / (self.high - self.low);
        let pixel = f64::from(limit.0) + fraction * f64::from(limit.1 - limit.0);
        // A float-to-int `as` saturates (and maps NaN to 0), so no value can make this panic.
        pixel.round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            self.minor_ticks.clone()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.low..self.high
    }
}

/// How a legend entry shows its series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Swatch {
    /// A filled square, for bars and histograms.
    Box,
    /// A short line with a dot, for line charts.
    Line,
}

/// One legend entry.
pub(crate) struct LegendEntry {
    pub(crate) name: String,
    pub(crate) color: RGBColor,
    pub(crate) swatch: Swatch,
}

/// The parts of a figure outside the plotted marks.
pub(crate) struct Frame<'a> {
    pub(crate) title: &'a str,
    pub(crate) x_label: &'a str,
    pub(crate) y_label: &'a str,
    pub(crate) x_axis: &'a Axis,
    pub(crate) y_axis: &'a Axis,
    /// Names for the x ticks in place of numbers, one per tick (a bar chart's categories),
    /// wrapped onto more lines when they are wider than a category. The x axis then has no
    /// vertical grid lines: its ticks mark groups, not values to read off.
    pub(crate) x_categories: Option<&'a [String]>,
    pub(crate) legend: Vec<LegendEntry>,
    /// Shown small in the lower left corner: what was left out of the figure, if anything.
    pub(crate) note: Option<String>,
}

/// Draws the frame and then the marks (`draw`, in plot coordinates), and returns the SVG text.
pub(crate) fn render_svg(
    path: &Path,
    frame: &Frame<'_>,
    draw: impl FnOnce(&mut Plot<'_, '_>) -> DrawResult,
) -> Result<String, FigureError> {
    let mut svg = String::new();
    draw_frame_and_marks(&mut svg, frame, draw).map_err(|error| FigureError::Draw {
        path: path.to_path_buf(),
        message: error.to_string(),
    })?;
    Ok(svg)
}

fn draw_frame_and_marks(
    svg: &mut String,
    frame: &Frame<'_>,
    draw: impl FnOnce(&mut Plot<'_, '_>) -> DrawResult,
) -> DrawResult {
    let root = SVGBackend::with_string(svg, (WIDTH_PX, HEIGHT_PX)).into_drawing_area();
    root.fill(&WHITE)?;
    // A little air above the title, which plotters would otherwise set against the top edge.
    let below_title = root
        .margin(8, 0, 0, 0)
        .titled(frame.title, (FONT, TITLE_FONT_PX).into_font().color(&BLACK))?;

    let legend_names: Vec<String> =
        frame.legend.iter().map(|entry| shorten(&entry.name, LEGEND_NAME_CHARS_MAX)).collect();
    let legend_width_px = legend_width_px(&legend_names);
    let (plot_area, legend_area) =
        below_title.split_horizontally(WIDTH_PX.saturating_sub(legend_width_px));

    // Category names are wrapped to the width of a category, estimated before the chart is
    // built because the label area's height depends on how many lines they take.
    let plot_width_px = plot_area
        .dim_in_pixel()
        .0
        .saturating_sub(MARGIN_LEFT_PX + MARGIN_RIGHT_PX + Y_LABEL_AREA_PX);
    let category_lines: Vec<Vec<String>> = match frame.x_categories {
        Some(categories) => {
            let category_width_px = f64::from(plot_width_px) / categories.len().max(1) as f64;
            let chars_per_line =
                ((category_width_px - 8.0) / TICK_LABEL_CHAR_PX).floor().max(3.0) as usize;
            categories
                .iter()
                .map(|category| wrap(category, chars_per_line, CATEGORY_LINES_MAX))
                .collect()
        }
        None => Vec::new(),
    };
    let extra_lines = category_lines.iter().map(Vec::len).max().unwrap_or(1).saturating_sub(1);
    let x_label_area_px = X_LABEL_AREA_PX + extra_lines as u32 * TICK_LABEL_LINE_PX as u32;

    let mut chart = ChartBuilder::on(&plot_area)
        .margin_top(8)
        .margin_left(MARGIN_LEFT_PX)
        .margin_right(MARGIN_RIGHT_PX)
        .margin_bottom(if frame.note.is_some() { 20 } else { 8 })
        .x_label_area_size(x_label_area_px)
        .y_label_area_size(Y_LABEL_AREA_PX)
        .build_cartesian_2d(frame.x_axis.clone(), frame.y_axis.clone())?;

    let x_label_formatter = |plot: &f64| {
        if frame.x_categories.is_some() {
            // Drawn below, wrapped, rather than by plotters on one line.
            String::new()
        } else {
            frame.x_axis.label(*plot)
        }
    };
    let y_label_formatter = |plot: &f64| frame.y_axis.label(*plot);
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(frame.x_label)
        .y_desc(frame.y_label)
        .x_label_formatter(&x_label_formatter)
        .y_label_formatter(&y_label_formatter)
        .axis_desc_style((FONT, AXIS_LABEL_FONT_PX))
        .label_style((FONT, TICK_LABEL_FONT_PX))
        .bold_line_style(BLACK.mix(0.12))
        .light_line_style(BLACK.mix(0.04))
        .axis_style(BLACK.mix(0.8));
    if frame.x_categories.is_some() {
        mesh.disable_x_mesh();
    }
    mesh.draw()?;

    for (tick, lines) in frame.x_axis.ticks.iter().zip(&category_lines) {
        let (x_px, y_px) = chart.backend_coord(&(*tick, frame.y_axis.low));
        let style = TextStyle::from((FONT, TICK_LABEL_FONT_PX).into_font())
            .color(&BLACK)
            .pos(Pos::new(HPos::Center, VPos::Top));
        for (line_index, line) in lines.iter().enumerate() {
            let line_y_px = y_px + 10 + line_index as i32 * TICK_LABEL_LINE_PX;
            root.draw(&Text::new(line.clone(), (x_px, line_y_px), style.clone()))?;
        }
    }

    draw(&mut chart)?;

    draw_legend(&legend_area, &frame.legend, &legend_names)?;
    if let Some(note) = &frame.note {
        let grey = BLACK.mix(0.6);
        let style = TextStyle::from((FONT, NOTE_FONT_PX).into_font())
            .color(&grey)
            .pos(Pos::new(HPos::Left, VPos::Bottom));
        root.draw(&Text::new(note.clone(), (12, HEIGHT_PX as i32 - 6), style))?;
    }
    root.present()?;
    Ok(())
}

fn legend_width_px(names: &[String]) -> u32 {
    let longest_chars = names.iter().map(|name| name.chars().count()).max().unwrap_or(0) as u32;
    // Swatch, gap and an estimate of 8 px per character at the legend's font size.
    (LEGEND_SWATCH_PX as u32 + 24 + longest_chars * 8).clamp(110, 330)
}

fn draw_legend(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    entries: &[LegendEntry],
    names: &[String],
) -> DrawResult {
    // The first row lines up with the top of the plot, below the chart's top margin.
    let top_px = 16;
    let left_px = 4;
    // Rows that fit below the title; when there are more entries, the last row counts the rest
    // rather than running off the figure.
    let rows_max = ((area.dim_in_pixel().1 as i32 - top_px) / LEGEND_ROW_PX).max(1) as usize;
    let shown_count = if entries.len() > rows_max { rows_max - 1 } else { entries.len() };
    let text_style = TextStyle::from((FONT, LEGEND_FONT_PX).into_font())
        .color(&BLACK)
        .pos(Pos::new(HPos::Left, VPos::Center));
    if shown_count < entries.len() {
        let center_y = top_px + shown_count as i32 * LEGEND_ROW_PX;
        let more = format!("… and {} more", entries.len() - shown_count);
        area.draw(&Text::new(
            more,
            (left_px + LEGEND_SWATCH_PX + 8, center_y),
            text_style.clone(),
        ))?;
    }
    for (index, (entry, name)) in entries.iter().zip(names).take(shown_count).enumerate() {
        let center_y = top_px + index as i32 * LEGEND_ROW_PX;
        let swatch_left = left_px;
        let swatch_right = left_px + LEGEND_SWATCH_PX;
        match entry.swatch {
            Swatch::Box => {
                area.draw(&Rectangle::new(
                    [(swatch_left + 3, center_y - 6), (swatch_right - 3, center_y + 6)],
                    entry.color.filled(),
                ))?;
            }
            Swatch::Line => {
                area.draw(&PathElement::new(
                    vec![(swatch_left, center_y), (swatch_right, center_y)],
                    ShapeStyle::from(&entry.color).stroke_width(2),
                ))?;
                area.draw(&plotters::element::Circle::new(
                    ((swatch_left + swatch_right) / 2, center_y),
                    3,
                    entry.color.filled(),
                ))?;
            }
        }
        area.draw(&Text::new(name.clone(), (swatch_right + 8, center_y), text_style.clone()))?;
    }
    Ok(())
}

/// `text` broken at spaces into lines of at most `chars_per_line` characters, at most
/// `lines_max` of them; a word too long for a line, or text left over, is cut with an ellipsis.
fn wrap(text: &str, chars_per_line: usize, lines_max: usize) -> Vec<String> {
    // A number stays with the word after it ("64 B", "4 KiB"): a size split across lines reads
    // as two labels.
    let mut words: Vec<String> = Vec::new();
    for word in text.split_whitespace() {
        match words.last_mut() {
            Some(previous) if is_number(previous) => {
                previous.push(' ');
                previous.push_str(word);
            }
            _ => words.push(word.to_string()),
        }
    }
    let mut lines: Vec<String> = Vec::new();
    let mut current = String::new();
    for word in &words {
        let candidate_chars =
            current.chars().count() + usize::from(!current.is_empty()) + word.chars().count();
        if !current.is_empty() && candidate_chars > chars_per_line {
            lines.push(std::mem::take(&mut current));
        }
        if !current.is_empty() {
            current.push(' ');
        }
        current.push_str(word);
    }
    if !current.is_empty() || lines.is_empty() {
        lines.push(current);
    }
    let cut = lines.len() > lines_max;
    lines.truncate(lines_max);
    let mut lines: Vec<String> = lines.iter().map(|line| shorten(line, chars_per_line)).collect();
    if cut {
        if let Some(last) = lines.last_mut() {
            let kept: String = last.chars().take(chars_per_line.saturating_sub(1)).collect();
            *last = format!("{}…", kept.trim_end_matches('…'));
        }
    }
    lines
}

fn is_number(word: &str) -> bool {
    !word.is_empty()
        && word
            .chars()
            .all(|character| character.is_ascii_digit() || matches!(character, '.' | ','))
}

/// `text` cut to at most `chars_max` characters, the last one an ellipsis when cut.
fn shorten(text: &str, chars_max: usize) -> String {
    if text.chars().count() <= chars_max {
        return text.to_string();
    }
    let mut shortened: String = text.chars().take(chars_max.saturating_sub(1)).collect();
    shortened.push('…');
    shortened
}

/// An error bar from `low` to `high` at `x`, with caps `cap_half_width` either side, in plot
/// coordinates: drawn as one polyline (bottom cap, stem, top cap) so each error bar is one
/// element.
pub(crate) fn error_bar(
    x: f64,
    low: f64,
    high: f64,
    cap_half_width: f64,
) -> PathElement<(f64, f64)> {
    PathElement::new(
        vec![
            (x - cap_half_width, low),
            (x + cap_half_width, low),
            (x, low),
            (x, high),
            (x - cap_half_width, high),
            (x + cap_half_width, high),
        ],
        ShapeStyle::from(&ERROR_BAR_COLOR).stroke_width(1),
    )
}

#[cfg(test)]
mod tests {
    use super::{shorten, wrap};

    #[test]
    fn category_names_wrap_at_spaces() {
        assert_eq!(wrap("redis-wait 64 B", 20, 3), ["redis-wait 64 B"]);
        assert_eq!(wrap("redis-wait 64 B", 12, 3), ["redis-wait", "64 B"]);
        assert_eq!(wrap("redis-wait 64 B", 13, 3), ["redis-wait", "64 B"]);
        assert_eq!(wrap("an extraordinarily long word", 8, 3), ["an", "extraor…", "long…"]);
        assert_eq!(wrap("", 8, 3), [""]);
        assert_eq!(wrap("a b c d", 1, 2), ["a", "…"]);
    }

    #[test]
    fn long_legend_names_are_shortened() {
        assert_eq!(shorten("direct", 32), "direct");
        assert_eq!(shorten("abcdef", 4), "abc…");
        assert_eq!(shorten("µµµµµ", 5), "µµµµµ");
    }
}
