//! A table of benchmark results: aligned text for the terminal, CSV for scripts.

use std::fmt;
use std::fs;
use std::path::Path;

/// A table of results: printed aligned on stdout and written as CSV.
///
/// Cells are text, formatted by the caller, so that the table shows exactly the precision and
/// units the benchmark chose and the CSV holds the same values the person saw. A row may have
/// fewer cells than there are headers (the rest are blank) or more (the extra columns get blank
/// headers): nothing a caller passes makes rendering fail.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Table {
    title: String,
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with a title (printed above it, not part of the CSV) and column headers.
    pub fn new(title: &str, headers: &[&str]) -> Table {
        Table {
            title: title.to_string(),
            headers: headers.iter().map(|header| header.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row of cells, one per column.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The title given to [`Table::new`].
    pub fn title(&self) -> &str {
        &self.title
    }

    /// The column headers.
    pub fn headers(&self) -> &[String] {
        &self.headers
    }

    /// The rows appended so far, in order.
    pub fn rows(&self) -> &[Vec<String>] {
        &self.rows
    }

    /// How many columns the table has: the most of the headers and of any row's cells.
    pub fn columns_count(&self) -> usize {
        self.rows.iter().map(Vec::len).chain([self.headers.len()]).max().unwrap_or(0)
    }

    /// The table as aligned text: a title line, the header, a rule and the rows, every line
    /// ending in a newline. A column whose cells are all numbers (blank cells and `-` allowed) is
    /// right-aligned, header included, so that digits of the same weight line up; others are
    /// left-aligned.
    pub fn render(&self) -> String {
        let columns_count = self.columns_count();
        let header_cells: Vec<String> =
            (0..columns_count).map(|column| single_line(cell(&self.headers, column))).collect();
        let row_cells: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|row| (0..columns_count).map(|column| single_line(cell(row, column))).collect())
            .collect();

        let mut widths: Vec<usize> = header_cells.iter().map(|text| display_width(text)).collect();
        let mut numeric = vec![true; columns_count];
        let mut any_number = vec![false; columns_count];
        for row in &row_cells {
            for (column, text) in row.iter().enumerate() {
                widths[column] = widths[column].max(display_width(text));
                match classify(text) {
                    CellKind::Number => any_number[column] = true,
                    CellKind::Blank => {}
                    CellKind::Text => numeric[column] = false,
                }
            }
        }
        let right_aligned: Vec<bool> =
            numeric.iter().zip(&any_number).map(|(numeric, any)| *numeric && *any).collect();

        let mut out = String::new();
        if !self.title.is_empty() {
            out.push_str(&single_line(&self.title));
            out.push('\n');
        }
        push_line(&mut out, &header_cells, &widths, &right_aligned);
        let rule_width =
            widths.iter().sum::<usize>() + COLUMN_GAP.len() * columns_count.saturating_sub(1);
        out.push_str(&"-".repeat(rule_width));
        out.push('\n');
        for row in &row_cells {
            push_line(&mut out, row, &widths, &right_aligned);
        }
        out
    }

    /// The table as CSV (RFC 4180): the header line then one line per row, lines ending in CRLF,
    /// and a field quoted when it holds a comma, a double quote, a line break or leading or
    /// trailing spaces, with its double quotes doubled. Every line has the same number of fields.
    pub fn to_csv(&self) -> String {
        let columns_count = self.columns_count();
        let mut out = String::new();
        for line in std::iter::once(&self.headers).chain(&self.rows) {
            for column in 0..columns_count {
                if column > 0 {
                    out.push(',');
                }
                push_csv_field(&mut out, cell(line, column));
            }
            out.push_str("\r\n");
        }
        out
    }

    /// Writes [`Table::to_csv`] to `path`; the error names the path.
    pub fn write_csv(&self, path: &Path) -> std::io::Result<()> {
        fs::write(path, self.to_csv()).map_err(|error| crate::io_error_naming(path, error))
    }
}

impl fmt::Display for Table {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.render())
    }
}

/// What separates two columns of rendered text.
const COLUMN_GAP: &str = "  ";

fn cell(cells: &[String], column: usize) -> &str {
    cells.get(column).map(String::as_str).unwrap_or("")
}

/// A cell's text on one line: a line break or tab inside a cell would break the alignment of
/// every column after it. The CSV keeps the original text.
fn single_line(text: &str) -> String {
    text.chars().map(|character| if character.is_control() { ' ' } else { character }).collect()
}

/// Width in terminal columns, counted as one per character: cells hold numbers, units (`µs`) and
/// names, none of which are double-width.
fn display_width(text: &str) -> usize {
    text.chars().count()
}

fn push_line(out: &mut String, cells: &[String], widths: &[usize], right_aligned: &[bool]) {
    let mut line = String::new();
    for (column, text) in cells.iter().enumerate() {
        if column > 0 {
            line.push_str(COLUMN_GAP);
        }
        let padding = " ".repeat(widths[column] - display_width(text));
        if right_aligned[column] {
            line.push_str(&padding);
            line.push_str(text);
        } else {
            line.push_str(text);
            line.push_str(&padding);
        }
    }
    out.push_str(line.trim_end());
    out.push('\n');
}

fn push_csv_field(out: &mut String, field: &str) {
    let needs_quotes =
        field.contains([',', '"', '\r', '\n']) || field.starts_with(' ') || field.ends_with(' ');
    if needs_quotes {
        out.push('"');
        out.push_str(&field.replace('"', "\"\""));
        out.push('"');
    } else {
        out.push_str(field);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CellKind {
    Number,
    Blank,
    Text,
}

/// Whether a cell reads as a number: an optional sign, digits with optional thousands commas or
/// underscores, an optional fraction and exponent, then optionally a unit made of letters, `/`
/// and `%`, after at most one space (`99%`, `3x`, `64 B`, `1.7 µs`, `12 ops/s`). Blank cells, `-`, `n/a` and `NaN` say "no value" and leave the
/// column's alignment to the others.
fn classify(text: &str) -> CellKind {
    let text = text.trim();
    if text.is_empty()
        || ["-", "n/a", "na", "nan", "none", "—"].contains(&text.to_lowercase().as_str())
    {
        return CellKind::Blank;
    }
    let number_end = text
        .char_indices()
        .find(|(_, character)| {
            !(character.is_ascii_digit()
                || matches!(character, '.' | ',' | '_' | '+' | '-' | 'e' | 'E'))
        })
        .map(|(index, _)| index)
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(number_end);
    let number: String =
        number.chars().filter(|character| !matches!(character, ',' | '_')).collect();
    if number.is_empty()
        || !number.starts_with(|c: char| c.is_ascii_digit() || matches!(c, '+' | '-' | '.'))
    {
        return CellKind::Text;
    }
    if number.parse::<f64>().is_err() {
        return CellKind::Text;
    }
    let unit = unit.strip_prefix(' ').unwrap_or(unit);
    let unit_is_plain =
        unit.chars().all(|character| character.is_alphabetic() || matches!(character, '/' | '%'));
    if unit_is_plain {
        CellKind::Number
    } else {
        CellKind::Text
    }
}

#[cfg(test)]
mod tests {
    use super::{classify, CellKind};

    #[test]
    fn numbers_are_recognised_with_separators_and_units() {
        for number in [
            "0",
            "42",
            "-3.5",
            "1,234,567",
            "1_000",
            "2.5e-3",
            "99.9%",
            "1.7 µs",
            "12 ops/s",
            "3x",
            ".5",
            "64B",
            "64 B",
        ] {
            assert_eq!(classify(number), CellKind::Number, "{number}");
        }
        for blank in ["", "  ", "-", "n/a", "NaN"] {
            assert_eq!(classify(blank), CellKind::Blank, "{blank}");
        }
        for text in ["direct", "64 B x", "e5", "1.2.3", "v1", "1-2", "abc 12", "12  µs"] {
            assert_eq!(classify(text), CellKind::Text, "{text}");
        }
    }
}
