//! The board's keys as one table: its key handler (`board.rs`), its footer and its help
//! (`view.rs`) all read it, as the dashboard's own `bindings.rs` is read.

use crossterm::event::KeyCode;

/// What a key of the board's table does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Down,
    Up,
    First,
    Last,
    Open,
    Sort,
    Reverse,
    StopTrial,
    SetLr,
    StopSweep,
    Close,
    Help,
}

/// One key of the board.
pub struct Binding {
    pub key: Key,
    /// The key codes that trigger it.
    pub codes: &'static [KeyCode],
    /// The keys as the help writes them, and the help's line (`""`: not in the help).
    pub keys: &'static str,
    pub help: &'static str,
    /// Its footer entry, keys and label (`None`: help only).
    pub footer: Option<(&'static str, &'static str)>,
    /// The footer's and the help's keys where the board draws with ASCII only.
    pub ascii: Option<(&'static str, &'static str)>,
    /// It stops or steers a trial or the sweep: refused, and left out of the footer, read-only.
    pub steers: bool,
}

const fn key(
    key: Key,
    codes: &'static [KeyCode],
    keys: &'static str,
    help: &'static str,
    footer: Option<(&'static str, &'static str)>,
    steers: bool,
) -> Binding {
    Binding { key, codes, keys, help, footer, ascii: None, steers }
}

use KeyCode::{Char, Down, End, Enter, Esc, Home, Up};

/// Every key, in the order the footer and the help list them.
pub const KEYS: &[Binding] = &[
    Binding {
        key: Key::Down,
        codes: &[Down, Char('j')],
        keys: "↑ ↓  j k",
        help: "select a trial (Home, End)",
        footer: Some(("↑↓", "select")),
        ascii: Some(("j/k", "j k")),
        steers: false,
    },
    key(Key::Up, &[Up, Char('k')], "", "", None, false),
    key(Key::First, &[Home], "", "", None, false),
    key(Key::Last, &[End], "", "", None, false),
    key(
        Key::Open,
        &[Enter],
        "Enter",
        "open the trial's own dashboard; Esc there comes back",
        Some(("Enter", "open trial")),
        false,
    ),
    key(
        Key::Sort,
        &[Char('s')],
        "s",
        "sort by the next column (best figures first)",
        Some(("s", "sort")),
        false,
    ),
    key(Key::Reverse, &[Char('r')], "r", "reverse the order", Some(("r", "reverse")), false),
    key(
        Key::StopTrial,
        &[Char('x')],
        "x",
        "stop the trial: it checkpoints, its place goes to the next",
        Some(("x", "stop trial")),
        true,
    ),
    key(Key::SetLr, &[Char('l')], "l", "set the running trial's learning rate", Some(("l", "lr")), true),
    key(
        Key::StopSweep,
        &[Char('X')],
        "X",
        "stop the sweep: the same command continues it",
        Some(("X", "stop sweep")),
        true,
    ),
    key(
        Key::Close,
        &[Char('q'), Esc],
        "q  Esc",
        "close the board; the sweep goes on (dpt-tui attach SWEEP)",
        Some(("q", "close")),
        false,
    ),
    key(Key::Help, &[Char('?')], "?", "", Some(("?", "help")), false),
];

/// The binding of `code`, if the board has one.
pub fn of(code: KeyCode) -> Option<&'static Binding> {
    KEYS.iter().find(|b| b.codes.contains(&code))
}

/// The footer's (keys, label), the steering keys left out where the board is `read_only`.
pub fn footer(read_only: bool, ascii: bool) -> Vec<(&'static str, &'static str)> {
    KEYS.iter()
        .filter(|b| !(read_only && b.steers))
        .filter_map(|b| {
            b.footer.map(|(keys, label)| (b.ascii.filter(|_| ascii).map_or(keys, |a| a.0), label))
        })
        .collect()
}

/// The help's lines: (keys, what they do).
pub fn help(ascii: bool) -> Vec<(&'static str, &'static str)> {
    KEYS.iter()
        .filter(|b| !b.help.is_empty())
        .map(|b| (b.ascii.filter(|_| ascii).map_or(b.keys, |a| a.1), b.help))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_code_has_one_key_and_every_steering_key_is_in_the_footer() {
        let mut seen = Vec::new();
        for b in KEYS {
            for code in b.codes {
                assert!(!seen.contains(code), "{code:?} bound twice");
                seen.push(*code);
            }
        }
        let all = footer(false, false);
        let read_only = footer(true, false);
        for b in KEYS.iter().filter(|b| b.steers) {
            let entry = b.footer.expect("a steering key is in the footer");
            assert!(all.contains(&entry) && !read_only.contains(&entry), "{:?}", b.key);
        }
        assert_eq!(footer(false, true)[0].0, "j/k");
        assert_eq!(help(true)[0].0, "j k");
    }
}
