//! Plain-text progress for pipes, CI and `--headless`: every record's line, as the record's
//! narrator words it (a line per report window, one per epoch, the reference programs' closing summary).

use std::io::Write;

use crate::record::text::Narrator;
use crate::record::Record;

/// Prints records as lines of text.
#[derive(Default)]
pub struct HeadlessPrinter {
    narrator: Narrator,
}

impl HeadlessPrinter {
    /// Prints the line of `record` to `out`; errors of a closed pipe are ignored so training
    /// goes on.
    pub fn print(&mut self, record: &Record, out: &mut impl Write) {
        if let Some(line) = self.narrator.line(record) {
            let _ = writeln!(out, "{}", line.text);
            let _ = out.flush();
        }
    }
}
