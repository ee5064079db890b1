//! Axis ranges, tick positions and tick labels.
//!
//! Every axis is drawn as a linear range of *plot coordinates*: the value itself on a linear axis,
//! its base-10 logarithm on a log axis. Doing the log transform here rather than in the drawing
//! library keeps one drawing path for all four combinations of linear and log axes, and puts tick
//! placement (decades, 2 and 5 between them) and labels (`10k`, `1M`) under this crate's control.

/// Roughly how many labelled ticks a linear axis gets.
const LINEAR_TICKS_TARGET: f64 = 6.0;

/// How many decades a log axis may span before its labels thin out to every other decade (and
/// beyond, every third...), so that labels never crowd each other.
const LOG_LABELLED_DECADES_MAX: i32 = 8;

/// One axis of a figure: its range and ticks in plot coordinates.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Axis {
    pub(crate) log: bool,
    /// Lower end of the range, in plot coordinates.
    pub(crate) low: f64,
    /// Upper end of the range, in plot coordinates; always greater than `low`.
    pub(crate) high: f64,
    /// Labelled ticks (and bold grid lines), in plot coordinates.
    pub(crate) ticks: Vec<f64>,
    /// Unlabelled light grid lines, in plot coordinates.
    pub(crate) minor_ticks: Vec<f64>,
    /// The labels' scale and precision, chosen once for the whole axis so they read alike.
    label_format: LabelFormat,
}

impl Axis {
    /// An axis covering every value in `min..=max` (data values, finite; positive on a log axis).
    /// On a linear axis with `include_zero`, the range is stretched to include zero, as bars and
    /// most magnitudes should be seen from zero to be compared honestly.
    pub(crate) fn fit(min: f64, max: f64, log: bool, include_zero: bool) -> Axis {
        debug_assert!(min.is_finite() && max.is_finite() && min <= max);
        if log {
            debug_assert!(min > 0.0);
            Axis::fit_log(min, max)
        } else {
            let (min, max) = if include_zero { (min.min(0.0), max.max(0.0)) } else { (min, max) };
            Axis::fit_linear(min, max)
        }
    }

    /// An x axis of `count` categories side by side, one unit of x each, with a tick at the
    /// middle of each (0.5, 1.5, ...) for the caller to label with the category's name.
    pub(crate) fn categories(count: usize) -> Axis {
        Axis {
            log: false,
            low: 0.0,
            high: count.max(1) as f64,
            ticks: (0..count).map(|index| index as f64 + 0.5).collect(),
            minor_ticks: Vec::new(),
            label_format: LabelFormat::Compact,
        }
    }

    /// Maps a data value to plot coordinates; `None` for values the axis cannot show (NaN,
    /// infinities, and zero or negative values on a log axis).
    pub(crate) fn to_plot(&self, value: f64) -> Option<f64> {
        if !value.is_finite() {
            return None;
        }
        if self.log {
            if value <= 0.0 {
                return None;
            }
            return Some(value.log10());
        }
        Some(value)
    }

    /// Like [`Axis::to_plot`], but a value below the axis is pinned to its lower end rather than
    /// dropped: an error bar reaching down to zero on a log axis still shows, cut at the axis.
    pub(crate) fn to_plot_clamped(&self, value: f64) -> Option<f64> {
        if self.log && value <= 0.0 && !value.is_nan() {
            return Some(self.low);
        }
        self.to_plot(value).map(|plot| plot.clamp(self.low, self.high))
    }

    /// Where bars start: zero on a linear axis (or the end of the range nearest zero), the lower
    /// end on a log axis, which has no zero.
    pub(crate) fn baseline(&self) -> f64 {
        if self.log {
            self.low
        } else {
            0.0_f64.clamp(self.low, self.high)
        }
    }

    /// The label for a tick at plot coordinate `plot`.
    pub(crate) fn label(&self, plot: f64) -> String {
        let value = if self.log { 10_f64.powf(plot) } else { plot };
        self.label_format.format(value)
    }

    fn fit_linear(min: f64, max: f64) -> Axis {
        let (min, max) = if max - min > 0.0 {
            (min, max)
        } else if min == 0.0 {
            (0.0, 1.0)
        } else {
            // One value: show it in the middle of a range a fifth of its size either side.
            let pad = min.abs() * 0.2;
            (min - pad, max + pad)
        };
        let span = max - min;
        if !span.is_finite() || span <= 0.0 {
            // Values near the limits of f64: no tick arithmetic is safe; show the ends only.
            return Axis {
                log: false,
                low: min,
                high: if max > min { max } else { min + 1.0 },
                ticks: vec![min, max],
                minor_ticks: Vec::new(),
                label_format: LabelFormat::Scientific,
            };
        }
        let step = nice_step(span / LINEAR_TICKS_TARGET);
        let first = (min / step).floor();
        let last = (max / step).ceil();
        let low = first * step;
        let high = last * step;
        let ticks_count = (last - first) as i64 + 1;
        let ticks: Vec<f64> = (0..ticks_count).map(|index| (first + index as f64) * step).collect();
        let magnitude = low.abs().max(high.abs());
        Axis {
            log: false,
            low,
            high,
            ticks,
            minor_ticks: Vec::new(),
            label_format: LabelFormat::for_linear(magnitude, step),
        }
    }

    fn fit_log(min: f64, max: f64) -> Axis {
        // A tiny nudge down so that a minimum exactly on a decade (10, 100) sits above the lower
        // end: bars start at the lower end and would otherwise have no height.
        let mut low_decade = (min.log10() - 1e-9).floor() as i32;
        let mut high_decade = max.log10().ceil() as i32;
        if high_decade <= low_decade {
            high_decade = low_decade + 1;
        }
        // f64 reaches about 1e±308: keep the decades where powers of ten are finite and nonzero.
        low_decade = low_decade.clamp(-307, 307);
        high_decade = high_decade.clamp(low_decade + 1, 308);
        let decades_count = high_decade - low_decade;
        let label_every = (decades_count + LOG_LABELLED_DECADES_MAX - 1) / LOG_LABELLED_DECADES_MAX;
        let mut ticks: Vec<f64> = (low_decade..=high_decade)
            .filter(|decade| (decade - low_decade) % label_every == 0)
            .map(f64::from)
            .collect();
        let mut minor_ticks = Vec::new();
        if decades_count <= 6 {
            for decade in low_decade..high_decade {
                for multiple in 2..=9 {
                    let plot = f64::from(decade) + f64::from(multiple).log10();
                    // Within one decade, the decades alone leave the axis with two labels: label
                    // 2 and 5 as well.
                    if decades_count == 1 && (multiple == 2 || multiple == 5) {
                        ticks.push(plot);
                    } else {
                        minor_ticks.push(plot);
                    }
                }
            }
            ticks.sort_by(f64::total_cmp);
        }
        Axis {
            log: true,
            low: f64::from(low_decade),
            high: f64::from(high_decade),
            ticks,
            minor_ticks,
            label_format: LabelFormat::Compact,
        }
    }
}

/// The smallest of 1, 2 or 5 times a power of ten that is at least `raw`.
fn nice_step(raw: f64) -> f64 {
    let magnitude = 10_f64.powf(raw.log10().floor());
    let normalized = raw / magnitude;
    let nice = if normalized <= 1.0 {
        1.0
    } else if normalized <= 2.0 {
        2.0
    } else if normalized <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * magnitude
}

/// How an axis writes its tick values.
#[derive(Debug, Clone, Copy, PartialEq)]
enum LabelFormat {
    /// Divided by `scale` (1, 1e3, 1e6 or 1e9, with the matching suffix), with `decimals`
    /// digits after the point at most, trailing zeros dropped.
    Scaled { scale: f64, suffix: &'static str, decimals: usize },
    /// Each value on its own: small ones in full, large ones with a k/M/G suffix, tiny ones in
    /// scientific notation; for log axes, whose ticks span many magnitudes.
    Compact,
    /// Scientific notation, for ranges too wide for anything else.
    Scientific,
}

impl LabelFormat {
    fn for_linear(magnitude: f64, step: f64) -> LabelFormat {
        let (scale, suffix) = si_scale(magnitude);
        let scaled_step = step / scale;
        if scaled_step < 1e-6 || magnitude >= 1e12 {
            return LabelFormat::Scientific;
        }
        // Enough digits that neighbouring ticks differ; the 1e-9 absorbs rounding in the
        // division (a step of 0.1 is 0.09999...).
        let decimals = (-(scaled_step.log10() + 1e-9).floor()).max(0.0) as usize;
        LabelFormat::Scaled { scale, suffix, decimals }
    }

    fn format(self, value: f64) -> String {
        match self {
            LabelFormat::Scaled { scale, suffix, decimals } => {
                let text = trim_zeros(format!("{:.*}", decimals, value / scale));
                if text == "0" {
                    text
                } else {
                    format!("{text}{suffix}")
                }
            }
            LabelFormat::Compact => {
                let magnitude = value.abs();
                if magnitude == 0.0 {
                    "0".to_string()
                } else if !(1e-3..1e12).contains(&magnitude) {
                    format!("{value:.0e}")
                } else {
                    let (scale, suffix) = si_scale(magnitude);
                    format!("{}{suffix}", trim_zeros(format!("{:.3}", value / scale)))
                }
            }
            LabelFormat::Scientific => format!("{value:.2e}"),
        }
    }
}

/// The k/M/G scale for values of this magnitude: below 10,000 numbers are written in full.
fn si_scale(magnitude: f64) -> (f64, &'static str) {
    if magnitude >= 1e9 {
        (1e9, "G")
    } else if magnitude >= 1e6 {
        (1e6, "M")
    } else if magnitude >= 1e4 {
        (1e3, "k")
    } else {
        (1.0, "")
    }
}

fn trim_zeros(text: String) -> String {
    if !text.contains('.') {
        return if text == "-0" { "0".to_string() } else { text };
    }
    let trimmed = text.trim_end_matches('0').trim_end_matches('.');
    if trimmed == "-0" {
        "0".to_string()
    } else {
        trimmed.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::Axis;

    fn labels(axis: &Axis) -> Vec<String> {
        axis.ticks.iter().map(|tick| axis.label(*tick)).collect()
    }

    #[test]
    fn linear_ticks_are_round_numbers_covering_the_data() {
        let axis = Axis::fit(1.3, 9.2, false, true);
        assert_eq!(axis.low, 0.0);
        assert!(axis.high >= 9.2);
        assert_eq!(labels(&axis), ["0", "2", "4", "6", "8", "10"]);

        let axis = Axis::fit(0.12, 0.47, false, false);
        assert_eq!(labels(&axis), ["0.1", "0.2", "0.3", "0.4", "0.5"]);
    }

    #[test]
    fn large_linear_values_get_a_suffix() {
        let axis = Axis::fit(0.0, 4_800_000.0, false, true);
        assert_eq!(labels(&axis), ["0", "1M", "2M", "3M", "4M", "5M"]);
        let axis = Axis::fit(12_000.0, 18_000.0, false, false);
        assert_eq!(labels(&axis)[0], "12k");
    }

    #[test]
    fn one_value_gets_a_range_around_it() {
        let axis = Axis::fit(5.0, 5.0, false, false);
        assert!(axis.low < 5.0 && axis.high > 5.0);
        let axis = Axis::fit(0.0, 0.0, false, true);
        assert!(axis.low < axis.high);
        let axis = Axis::fit(-1e308, 1e308, false, false);
        assert!(axis.low < axis.high);
    }

    #[test]
    fn log_axis_spans_whole_decades() {
        let axis = Axis::fit(1.3, 870.0, true, false);
        assert_eq!((axis.low, axis.high), (0.0, 3.0));
        assert_eq!(labels(&axis), ["1", "10", "100", "1000"]);
        assert_eq!(axis.minor_ticks.len(), 3 * 8);

        let axis = Axis::fit(10.0, 10.0, true, false);
        assert!(axis.low < 1.0 && axis.high >= 1.0);
        assert_eq!(labels(&axis), ["1", "2", "5", "10"]);

        let axis = Axis::fit(1e-30, 1e30, true, false);
        assert!(axis.ticks.len() <= 9);
        let axis = Axis::fit(f64::MIN_POSITIVE, f64::MAX, true, false);
        assert!(axis.low < axis.high);
    }

    #[test]
    fn values_a_log_axis_cannot_show_are_left_out_or_clamped() {
        let axis = Axis::fit(1.0, 100.0, true, false);
        assert_eq!(axis.to_plot(0.0), None);
        assert_eq!(axis.to_plot(-1.0), None);
        assert_eq!(axis.to_plot(f64::NAN), None);
        assert_eq!(axis.to_plot_clamped(0.0), Some(axis.low));
        assert_eq!(axis.to_plot_clamped(f64::NAN), None);
        assert_eq!(axis.to_plot(100.0), Some(2.0));
    }
}
