//! Aligned columns, the way talosctl prints them (Go's tabwriter, padding 3): rows are buffered
//! and written on [`TabWriter::flush`], each cell padded to its column's width plus three
//! spaces, the last cell unpadded, no trailing whitespace. A width is what the terminal shows
//! (a CJK character takes two columns, a combining accent none), not a count of characters as
//! Go's tabwriter has it, so ids and values in any script line up.
//!
//! Cells are text from outside (a node's ids, values and messages): their control characters
//! are escaped ([`crate::terminal::escape_controls`]), so a cell stays on its line and cannot
//! steer the terminal.
//!
//! Column widths are **sticky**: a flush aligns its rows with everything flushed before, so a
//! streaming table (`get -w`, `events`) stays aligned as long as later cells are no wider (a
//! wider one widens its column from then on, up to [`MAX_COLUMN_WIDTH`]). Go's tabwriter
//! forgets widths between flushes, and has no limit.

use std::borrow::Cow;
use std::io::{self, Write};

use unicode_width::UnicodeWidthStr;

use crate::terminal::escape_controls;

/// The spaces between columns.
pub const PADDING: usize = 3;

/// The widest a column grows, in terminal columns. A wider cell (a node's value of a
/// megabyte) is written whole but overflows its column instead of widening it: only its own
/// row is pushed out of line, not every row of the table — and, widths being sticky, not
/// every row a watch prints after it.
pub const MAX_COLUMN_WIDTH: usize = 128;

/// A table written in flushes.
///
/// ```
/// let mut table = cosi_cli::table::TabWriter::default();
/// table.row(["NODE", "ID"]);
/// table.row(["10.0.0.1", "etcd"]);
/// let mut out = Vec::new();
/// table.flush(&mut out).unwrap();
/// assert_eq!(String::from_utf8(out).unwrap(), "NODE       ID\n10.0.0.1   etcd\n");
/// ```
#[derive(Debug, Default)]
pub struct TabWriter {
    widths: Vec<usize>,
    pending: Vec<Vec<String>>,
}

impl TabWriter {
    /// Buffers a row; control characters in its cells are escaped.
    pub fn row<I, S>(&mut self, cells: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.pending.push(
            cells
                .into_iter()
                .map(|cell| {
                    let cell = cell.into();
                    match escape_controls(&cell) {
                        Cow::Borrowed(_) => cell,
                        Cow::Owned(escaped) => escaped,
                    }
                })
                .collect(),
        );
    }

    /// Writes the buffered rows, aligned with every row flushed so far.
    pub fn flush(&mut self, out: &mut dyn Write) -> io::Result<()> {
        for row in &self.pending {
            // The last cell is never padded, so it does not widen its column.
            for (i, cell) in row.iter().enumerate().take(row.len().saturating_sub(1)) {
                if self.widths.len() <= i {
                    self.widths.resize(i + 1, 0);
                }
                let width = cell.width();
                if width <= MAX_COLUMN_WIDTH {
                    self.widths[i] = self.widths[i].max(width);
                }
            }
        }
        for row in self.pending.drain(..) {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                line.push_str(cell);
                if i + 1 < row.len() {
                    let pad = self.widths[i].saturating_sub(cell.width()) + PADDING;
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            writeln!(out, "{}", line.trim_end())?;
        }
        out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flushed(table: &mut TabWriter) -> String {
        let mut out = Vec::new();
        table.flush(&mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn widths_stick_across_flushes_and_only_grow() {
        let mut table = TabWriter::default();
        table.row(["NODE", "*", "ID", "VERSION"]);
        table.row(["n1", "+", "abc", "1"]);
        assert_eq!(
            flushed(&mut table),
            "NODE   *   ID    VERSION\nn1     +   abc   1\n"
        );
        table.row(["n1", " ", "a", "2"]);
        assert_eq!(flushed(&mut table), "n1         a     2\n");
        table.row(["n1", "-", "abcdefg", "3"]);
        assert_eq!(flushed(&mut table), "n1     -   abcdefg   3\n");
    }

    proptest::proptest! {
        /// Any rows, flushed in any batches: every cell but the last starts where its column
        /// starts in the widest row so far, columns are at least three spaces apart, and no
        /// line ends in a space.
        #[test]
        fn cells_line_up_and_lines_have_no_trailing_spaces(
            rows in proptest::collection::vec(
                proptest::collection::vec("[a-z]{1,6}", 3),
                1..12,
            ),
            cut in 0usize..12,
        ) {
            let mut table = TabWriter::default();
            let cut = cut.min(rows.len());
            let mut text = String::new();
            for batch in [&rows[..cut], &rows[cut..]] {
                for row in batch {
                    table.row(row.clone());
                }
                text.push_str(&flushed(&mut table));
            }
            let lines: Vec<&str> = text.lines().collect();
            proptest::prop_assert_eq!(lines.len(), rows.len());
            let widths = |upto: usize, column: usize| {
                rows[..upto].iter().map(|r| r[column].len()).max().unwrap_or(0)
            };
            for (i, (line, row)) in lines.iter().zip(&rows).enumerate() {
                proptest::prop_assert!(!line.ends_with(' '));
                // Rows flushed in the first batch align with that batch; later ones with all.
                let seen = if i < cut { cut } else { rows.len() };
                let second = widths(seen, 0) + PADDING;
                let third = second + widths(seen, 1) + PADDING;
                proptest::prop_assert_eq!(&line[..row[0].len()], row[0].as_str());
                proptest::prop_assert_eq!(&line[second..second + row[1].len()], row[1].as_str());
                proptest::prop_assert_eq!(&line[third..], row[2].as_str());
            }
        }
    }

    #[test]
    fn control_characters_in_cells_are_escaped_and_counted_as_written() {
        let mut table = TabWriter::default();
        table.row(["\u{1b}[2J", "b"]);
        table.row(["a", "up\rdown\n"]);
        assert_eq!(
            flushed(&mut table),
            "\\u{1b}[2J   b\na           up\\rdown\\n\n"
        );
    }

    #[test]
    fn cells_are_as_wide_as_the_terminal_shows_them() {
        // CJK characters take two columns; a combining accent takes none.
        let mut table = TabWriter::default();
        table.row(["ノード", "x"]);
        table.row(["e\u{301}", "y"]);
        table.row(["abc", "z"]);
        assert_eq!(
            flushed(&mut table),
            "ノード   x\ne\u{301}        y\nabc      z\n"
        );
    }

    #[test]
    fn a_cell_wider_than_the_limit_overflows_instead_of_widening_its_column() {
        let long = "x".repeat(MAX_COLUMN_WIDTH + 1);
        let mut table = TabWriter::default();
        table.row(["NAME", "V"]);
        table.row([long.as_str(), "1"]);
        table.row(["ab", "2"]);
        assert_eq!(
            flushed(&mut table),
            format!("NAME   V\n{long}   1\nab     2\n")
        );
        // Nor does it widen the column for the rows of later flushes (a watch).
        table.row(["abc", "3"]);
        assert_eq!(flushed(&mut table), "abc    3\n");
    }

    #[test]
    fn empty_trailing_cells_leave_no_trailing_spaces() {
        let mut table = TabWriter::default();
        table.row(["a", "b", ""]);
        assert_eq!(flushed(&mut table), "a   b\n");
    }
}
