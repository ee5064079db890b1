//! Draws one figure of each kind, with made-up but plausible data, and prints a table: a quick
//! way to see what `mu bench` output looks like after changing this crate.
//!
//! `cargo run -p mu-figures --example gallery -- DIRECTORY`

use std::path::PathBuf;
use std::process::ExitCode;

use mu_figures::{
    output_dir, Bar, BarChart, BarSeries, Histogram, LineChart, LineSeries, Progress, Table,
};

fn main() -> ExitCode {
    let Some(directory) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: gallery DIRECTORY");
        return ExitCode::FAILURE;
    };
    match draw(directory) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

fn draw(directory: PathBuf) -> Result<(), Box<dyn std::error::Error>> {
    let directory = output_dir(&directory)?;
    let categories = ["64 B", "256 B", "1 KiB", "4 KiB"];

    let mut progress = Progress::new("gallery", 4);
    let mut table = Table::new("Replication latency", &["payload", "path", "p50 (µs)", "p99 (µs)"]);
    let medians = [[1.3, 1.9], [1.4, 2.0], [1.7, 2.4], [2.9, 3.8]];
    for (category, pair) in categories.iter().zip(medians) {
        for (path, median) in ["direct", "handover"].iter().zip(pair) {
            table.row(vec![
                category.to_string(),
                path.to_string(),
                format!("{median:.2}"),
                format!("{:.2}", median * 1.8),
            ]);
        }
    }
    print!("{}", table.render());
    table.write_csv(&directory.join("latency.csv"))?;
    progress.set(1);

    let bar_series = |name: &str, column: usize| BarSeries {
        name: name.to_string(),
        points: medians
            .iter()
            .map(|pair| Some(Bar::new(pair[column], pair[column] * 0.8, pair[column] * 1.8)))
            .collect(),
    };
    BarChart {
        title: "Replication latency by payload".to_string(),
        x_label: "payload".to_string(),
        y_label: "latency (µs)".to_string(),
        series: vec![bar_series("direct", 0), bar_series("handover", 1)],
        categories: categories.iter().map(|category| category.to_string()).collect(),
        log_y: false,
    }
    .write_svg(&directory.join("bars.svg"))?;
    progress.set(2);

    let curve = |outstanding: f64| LineSeries {
        name: format!("{outstanding} outstanding"),
        points: (1..=8)
            .map(|step| {
                let load = f64::from(step) / 8.0;
                let throughput = 4.0e6 * outstanding.sqrt() * load;
                let latency = 1.5 * outstanding.sqrt() / (1.05 - load);
                (throughput, latency)
            })
            .collect(),
    };
    LineChart {
        title: "Latency against throughput".to_string(),
        x_label: "throughput (ops/s)".to_string(),
        y_label: "median latency (µs)".to_string(),
        series: vec![curve(1.0), curve(2.0), curve(4.0), curve(8.0)],
        log_x: false,
        log_y: true,
    }
    .write_svg(&directory.join("lines.svg"))?;
    progress.set(3);

    // Two bell-ish shapes from a fixed sequence, so the example needs no random number crate.
    let spread = |center: f64, width: f64| -> Vec<f64> {
        (0..2_000)
            .map(|index| {
                let sum: f64 = (0..6)
                    .map(|term| ((index * 7919 + term * 104_729) % 1_000) as f64 / 1_000.0)
                    .sum();
                center + (sum - 3.0) * width
            })
            .collect()
    };
    Histogram {
        title: "Failover time".to_string(),
        x_label: "time to first commit after leader failure (µs)".to_string(),
        series: vec![
            ("permission switch".to_string(), spread(870.0, 60.0)),
            ("heartbeat only".to_string(), spread(1_150.0, 90.0)),
        ],
        bins: 40,
    }
    .write_svg(&directory.join("histogram.svg"))?;
    progress.set(4);
    progress.finish();
    Ok(())
}
