//! The crate's promises, checked from outside: tables align and quote, every figure writes a
//! well-formed SVG holding its title, legend and the right number of marks, bad data gives an
//! error or a note rather than a panic, and unusable output directories are refused up front.

use std::fs;
use std::path::{Path, PathBuf};

use mu_figures::{
    output_dir, Bar, BarChart, BarSeries, FigureError, Histogram, LineChart, LineSeries, Table,
    PALETTE,
};

/// A fresh directory for one test, removed first in case an earlier run left it.
fn scratch(test: &str) -> PathBuf {
    let directory = std::env::temp_dir().join(format!("mu-figures-{}-{test}", std::process::id()));
    let _ = fs::remove_dir_all(&directory);
    fs::create_dir_all(&directory).expect("scratch directory");
    directory
}

fn read_svg(path: &Path) -> String {
    let svg = fs::read_to_string(path).expect("the figure was written");
    assert!(
        svg.trim_start().starts_with("<svg"),
        "starts with <svg: {}",
        &svg[..svg.len().min(80)]
    );
    assert!(svg.trim_end().ends_with("</svg>"), "ends with </svg>");
    assert_eq!(svg.matches("<svg").count(), 1);
    svg
}

fn hex(index: usize) -> String {
    let (red, green, blue) = PALETTE[index];
    format!("#{red:02X}{green:02X}{blue:02X}")
}

/// Elements of kind `tag` (such as `rect`) filled with `color`.
fn filled_count(svg: &str, tag: &str, color: &str) -> usize {
    elements(svg, tag).filter(|element| element.contains(&format!("fill=\"{color}\""))).count()
}

/// The text of each `<tag .../>` element.
fn elements<'a>(svg: &'a str, tag: &str) -> impl Iterator<Item = &'a str> {
    let opening = format!("<{tag} ");
    let found: Vec<&'a str> = svg
        .split(opening.as_str())
        .skip(1)
        .map(|rest| rest.split('>').next().unwrap_or(""))
        .collect();
    found.into_iter()
}

/// The number of points of each polyline stroked in `color`.
fn polyline_points(svg: &str, color: &str) -> Vec<usize> {
    elements(svg, "polyline")
        .filter(|element| element.contains(&format!("stroke=\"{color}\"")))
        .map(|element| {
            let points = element.split("points=\"").nth(1).and_then(|rest| rest.split('"').next());
            points.unwrap_or("").split_whitespace().count()
        })
        .collect()
}

// --- Tables -------------------------------------------------------------------------------------

#[test]
fn table_renders_aligned_with_numbers_on_the_right() {
    let mut table = Table::new("Latency", &["path", "p50 (µs)", "ops"]);
    table.row(vec!["direct".into(), "1.25".into(), "1,000".into()]);
    table.row(vec!["handover".into(), "12.5".into(), "5".into()]);
    table.row(vec!["slow".into(), "-".into()]);
    let rendered = table.render();
    let expected = "\
Latency
path      p50 (µs)    ops
-------------------------
direct        1.25  1,000
handover      12.5      5
slow             -
";
    assert_eq!(rendered, expected);
    assert_eq!(table.to_string(), expected);
}

#[test]
fn table_cells_with_line_breaks_stay_on_one_line_and_extra_cells_get_a_column() {
    let mut table = Table::new("", &["a"]);
    table.row(vec!["x\ny".into(), "extra".into()]);
    let rendered = table.render();
    assert_eq!(rendered, "a\n----------\nx y  extra\n");
    assert_eq!(table.columns_count(), 2);
}

#[test]
fn csv_quotes_commas_quotes_and_line_breaks() {
    let mut table = Table::new("ignored in CSV", &["name", "value, with comma"]);
    table.row(vec!["say \"hi\"".into(), "1,234".into()]);
    table.row(vec!["two\nlines".into(), "plain".into()]);
    table.row(vec![" padded ".into()]);
    let expected = "name,\"value, with comma\"\r\n\
                    \"say \"\"hi\"\"\",\"1,234\"\r\n\
                    \"two\nlines\",plain\r\n\
                    \" padded \",\r\n";
    assert_eq!(table.to_csv(), expected);

    let directory = scratch("csv");
    let path = directory.join("table.csv");
    table.write_csv(&path).expect("csv written");
    assert_eq!(fs::read_to_string(&path).expect("csv read"), expected);

    let error = table
        .write_csv(&directory.join("missing").join("table.csv"))
        .expect_err("no such directory");
    assert!(error.to_string().contains("missing"), "{error}");
}

// --- Bar charts ---------------------------------------------------------------------------------

fn bar_chart(log_y: bool) -> BarChart {
    BarChart {
        title: "Latency by payload".into(),
        x_label: "payload".into(),
        y_label: "latency (µs)".into(),
        categories: vec!["64 B".into(), "256 B".into(), "1 KiB".into()],
        series: vec![
            BarSeries {
                name: "direct".into(),
                points: vec![Some(Bar::new(1.3, 1.0, 2.3)), Some(Bar::new(1.4, 1.1, 2.5)), None],
            },
            BarSeries {
                name: "handover".into(),
                points: vec![
                    Some(Bar::new(1.9, 1.5, 3.4)),
                    Some(Bar::exact(2.0)),
                    Some(Bar::new(2.4, 1.9, 4.3)),
                ],
            },
        ],
        log_y,
    }
}

#[test]
fn bar_chart_draws_a_rect_per_bar_and_an_error_bar_per_spread() {
    let directory = scratch("bars");
    let path = directory.join("bars.svg");
    bar_chart(false).write_svg(&path).expect("drawn");
    let svg = read_svg(&path);
    for text in
        ["Latency by payload", "direct", "handover", "64 B", "1 KiB", "payload", "latency (µs)"]
    {
        assert!(svg.contains(text), "missing {text:?}");
    }
    // Each series: its bars plus its legend swatch.
    assert_eq!(filled_count(&svg, "rect", &hex(0)), 2 + 1);
    assert_eq!(filled_count(&svg, "rect", &hex(1)), 3 + 1);
    // An error bar (with both caps) is one six-point polyline; the exact bar has none.
    assert_eq!(polyline_points(&svg, "#333333"), vec![6; 4]);
}

#[test]
fn log_bar_chart_with_zero_and_nan_values_leaves_them_out_with_a_note() {
    let mut chart = bar_chart(true);
    chart.series[0].points[0] = Some(Bar::new(0.0, 0.0, 1.0));
    chart.series[0].points[1] = Some(Bar::new(f64::NAN, 1.0, 2.0));
    chart.series[1].points[0] = Some(Bar::new(1.9, 0.0, 3.4));
    let directory = scratch("bars-log");
    let path = directory.join("bars.svg");
    chart.write_svg(&path).expect("drawn without the bad bars");
    let svg = read_svg(&path);
    assert_eq!(filled_count(&svg, "rect", &hex(0)), 1, "only the legend swatch");
    assert_eq!(filled_count(&svg, "rect", &hex(1)), 3 + 1);
    assert!(svg.contains("2 values left out"), "the note says what is missing");
    // The zero low end of the first handover bar is cut at the axis, not dropped.
    assert_eq!(polyline_points(&svg, "#333333").len(), 2);
}

#[test]
fn bar_chart_errors_name_the_file() {
    let path = Path::new("nothing.svg");
    let mut all_zero = bar_chart(true);
    for series in &mut all_zero.series {
        for point in series.points.iter_mut().flatten() {
            *point = Bar::exact(0.0);
        }
    }
    let error = all_zero.write_svg(path).expect_err("nothing positive on a log axis");
    assert!(matches!(error, FigureError::NoData { .. }), "{error:?}");
    assert!(error.to_string().contains("nothing.svg"), "{error}");

    let mut ragged = bar_chart(false);
    ragged.series[1].points.pop();
    let error = ragged.write_svg(path).expect_err("a point per category");
    assert!(matches!(error, FigureError::Malformed { .. }), "{error:?}");
    assert!(error.to_string().contains("handover"), "{error}");

    let empty = BarChart { categories: vec!["a".into()], ..BarChart::default() };
    assert!(matches!(empty.write_svg(path), Err(FigureError::NoData { .. })));
    assert!(matches!(BarChart::default().write_svg(path), Err(FigureError::NoData { .. })));
}

// --- Line charts --------------------------------------------------------------------------------

fn line_chart(log_x: bool, log_y: bool) -> LineChart {
    LineChart {
        title: "Latency against throughput".into(),
        x_label: "throughput (ops/s)".into(),
        y_label: "latency (µs)".into(),
        series: vec![
            LineSeries {
                name: "1 outstanding".into(),
                points: vec![(1e5, 1.5), (1e6, 1.7), (2e6, 2.5), (2.5e6, 9.0)],
            },
            LineSeries { name: "8 outstanding".into(), points: vec![(1e6, 3.0), (8e6, 40.0)] },
        ],
        log_x,
        log_y,
    }
}

#[test]
fn line_chart_draws_a_polyline_through_every_point() {
    for (log_x, log_y) in [(false, false), (true, false), (false, true), (true, true)] {
        let directory = scratch(&format!("lines-{log_x}-{log_y}"));
        let path = directory.join("lines.svg");
        line_chart(log_x, log_y).write_svg(&path).expect("drawn");
        let svg = read_svg(&path);
        for text in
            ["Latency against throughput", "1 outstanding", "8 outstanding", "throughput (ops/s)"]
        {
            assert!(svg.contains(text), "missing {text:?}");
        }
        // The series line, then the legend's two-point sample.
        assert_eq!(polyline_points(&svg, &hex(0)), vec![4, 2]);
        assert_eq!(polyline_points(&svg, &hex(1)), vec![2, 2]);
        // A dot on every point, and one in the legend.
        assert_eq!(filled_count(&svg, "circle", &hex(0)), 4 + 1);
    }
}

#[test]
fn log_line_chart_with_zero_and_nan_values_does_not_panic() {
    let mut chart = line_chart(true, true);
    chart.series[0].points.push((0.0, 5.0));
    chart.series[0].points.push((3e6, 0.0));
    chart.series[0].points.push((f64::NAN, 1.0));
    chart.series[1].points.push((-1.0, -1.0));
    let directory = scratch("lines-log-zero");
    let path = directory.join("lines.svg");
    chart.write_svg(&path).expect("drawn without the bad points");
    let svg = read_svg(&path);
    assert_eq!(polyline_points(&svg, &hex(0)), vec![4, 2]);
    assert!(svg.contains("4 values left out"));

    let only_zeros = LineChart {
        series: vec![LineSeries { name: "zero".into(), points: vec![(0.0, 0.0)] }],
        log_y: true,
        ..LineChart::default()
    };
    assert!(matches!(only_zeros.write_svg(&path), Err(FigureError::NoData { .. })));
    let no_points = LineChart { series: vec![LineSeries::default()], ..LineChart::default() };
    assert!(matches!(no_points.write_svg(&path), Err(FigureError::NoData { .. })));
    assert!(matches!(LineChart::default().write_svg(&path), Err(FigureError::NoData { .. })));
}

#[test]
fn line_chart_with_one_point_or_extreme_values_draws() {
    let directory = scratch("lines-odd");
    let path = directory.join("lines.svg");
    let single = LineChart {
        title: "one".into(),
        series: vec![LineSeries { name: "a".into(), points: vec![(3.0, 3.0)] }],
        ..LineChart::default()
    };
    single.write_svg(&path).expect("one point");
    read_svg(&path);
    let extreme = LineChart {
        title: "extreme".into(),
        series: vec![LineSeries {
            name: "a".into(),
            points: vec![(-1e308, 1e-300), (1e308, 1e300)],
        }],
        log_y: true,
        ..LineChart::default()
    };
    extreme.write_svg(&path).expect("extreme values");
    read_svg(&path);
}

// --- Histograms ---------------------------------------------------------------------------------

#[test]
fn histogram_draws_a_rect_per_nonempty_bin() {
    let directory = scratch("histogram");
    let path = directory.join("histogram.svg");
    let histogram = Histogram {
        title: "Failover time".into(),
        x_label: "time (µs)".into(),
        // Bins of width 10 from 0 to 100: the first series fills bins 0, 1 and (with 100, the
        // largest value) 9; the second, bins 4 and 5.
        series: vec![
            ("switch".into(), vec![0.0, 5.0, 12.0, 100.0, f64::NAN]),
            ("heartbeat".into(), vec![45.0, 46.0, 55.0]),
        ],
        bins: 10,
    };
    histogram.write_svg(&path).expect("drawn");
    let svg = read_svg(&path);
    for text in ["Failover time", "switch (n=4)", "heartbeat (n=3)", "time (µs)", "count"] {
        assert!(svg.contains(text), "missing {text:?}");
    }
    // Bins plus the legend swatch.
    assert_eq!(filled_count(&svg, "rect", &hex(0)), 3 + 1);
    assert_eq!(filled_count(&svg, "rect", &hex(1)), 2 + 1);
    assert!(svg.contains("1 value left out"));
}

#[test]
fn histogram_of_one_value_or_bad_input_does_not_panic() {
    let directory = scratch("histogram-odd");
    let path = directory.join("histogram.svg");
    let same = Histogram {
        title: "same".into(),
        series: vec![("a".into(), vec![7.0; 5])],
        bins: 20,
        ..Histogram::default()
    };
    same.write_svg(&path).expect("one distinct value");
    assert_eq!(filled_count(&read_svg(&path), "rect", &hex(0)), 1 + 1);

    let huge = Histogram {
        series: vec![("a".into(), vec![-f64::MAX, f64::MAX])],
        bins: 10,
        ..Histogram::default()
    };
    huge.write_svg(&path).expect("the whole f64 range");

    let no_bins =
        Histogram { series: vec![("a".into(), vec![1.0])], bins: 0, ..Histogram::default() };
    assert!(matches!(no_bins.write_svg(&path), Err(FigureError::Malformed { .. })));
    let too_many = Histogram { bins: usize::MAX, ..no_bins.clone() };
    assert!(matches!(too_many.write_svg(&path), Err(FigureError::Malformed { .. })));
    let nan_only =
        Histogram { series: vec![("a".into(), vec![f64::NAN])], bins: 5, ..Histogram::default() };
    assert!(matches!(nan_only.write_svg(&path), Err(FigureError::NoData { .. })));
    let empty =
        Histogram { series: vec![("a".into(), Vec::new())], bins: 5, ..Histogram::default() };
    assert!(matches!(empty.write_svg(&path), Err(FigureError::NoData { .. })));
}

// --- Files and directories ----------------------------------------------------------------------

#[test]
fn titles_with_markup_characters_are_escaped() {
    let directory = scratch("escape");
    let path = directory.join("escaped.svg");
    let mut chart = line_chart(false, false);
    chart.title = "p99 < 5 µs & \"fast\"".into();
    chart.write_svg(&path).expect("drawn");
    let svg = read_svg(&path);
    assert!(svg.contains("p99 &lt; 5 µs &amp;"), "escaped title");
}

#[test]
fn output_dir_creates_parents_and_refuses_unusable_paths() {
    let directory = scratch("output-dir");
    let nested = directory.join("a").join("b");
    assert_eq!(output_dir(&nested).expect("created"), nested);
    assert!(nested.is_dir());
    assert_eq!(output_dir(&nested).expect("exists already"), nested);
    assert_eq!(fs::read_dir(&nested).expect("listable").count(), 0, "the write probe is removed");

    let file = directory.join("file");
    fs::write(&file, b"x").expect("file");
    let error = output_dir(&file).expect_err("a file is not a directory");
    assert!(matches!(error, FigureError::NotADirectory { .. }), "{error:?}");
    let error = output_dir(&file.join("below")).expect_err("nothing can be created below a file");
    assert!(matches!(error, FigureError::CreateDir { .. }), "{error:?}");
    assert!(error.to_string().contains("below"), "{error}");

    let error = bar_chart(false).write_svg(&file.join("bars.svg")).expect_err("unwritable figure");
    assert!(matches!(error, FigureError::Write { .. }), "{error:?}");
    assert!(error.to_string().contains("bars.svg"), "{error}");
}

#[cfg(target_os = "linux")]
#[test]
fn output_dir_refuses_a_directory_it_cannot_write_into() {
    // Permission bits do not stop root, so use a directory no one can write into: procfs.
    let error = output_dir(Path::new("/proc/self")).expect_err("procfs takes no new files");
    assert!(matches!(error, FigureError::NotWritable { .. }), "{error:?}");
    assert!(error.to_string().contains("/proc/self"), "{error}");
}

#[test]
fn a_legend_with_more_series_than_rows_counts_the_rest() {
    let directory = scratch("many-series");
    let path = directory.join("lines.svg");
    let chart = LineChart {
        title: "many".into(),
        series: (0..40)
            .map(|index| LineSeries {
                name: format!("series {index}"),
                points: vec![(0.0, f64::from(index))],
            })
            .collect(),
        ..LineChart::default()
    };
    chart.write_svg(&path).expect("drawn");
    let svg = read_svg(&path);
    assert!(svg.contains("series 0") && svg.contains("more"), "the legend counts what it left out");
    assert!(!svg.contains("series 39"));
}
