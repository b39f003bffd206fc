//! The event log pane's lines: epoch summaries, lr changes, pauses, saves, warnings, errors.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

pub use crate::record::text::Level;

/// One line of the log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogLine {
    /// Wall-clock time, `HH:MM:SS`.
    pub time: String,
    pub level: Level,
    pub text: String,
}

/// The most recent lines, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventLog {
    lines: VecDeque<LogLine>,
    capacity: usize,
}

impl Default for EventLog {
    fn default() -> Self {
        EventLog { lines: VecDeque::new(), capacity: 500 }
    }
}

impl EventLog {
    pub fn push(&mut self, time: String, level: Level, text: impl Into<String>) {
        if self.lines.len() == self.capacity {
            self.lines.pop_front();
        }
        self.lines.push_back(LogLine { time, level, text: text.into() });
    }

    /// The last `n` lines, oldest first.
    pub fn tail(&self, n: usize) -> impl Iterator<Item = &LogLine> {
        self.lines.iter().skip(self.lines.len().saturating_sub(n))
    }

    pub fn len(&self) -> usize {
        self.lines.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }
}
