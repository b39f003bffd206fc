//! The dashboard's keys as one table: the key handler (`keys.rs`), the footer and the help all
//! read it, as gitui's key list is read.

use crossterm::event::KeyCode;

/// What a key does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    PauseResume,
    LrUp,
    LrDown,
    SetLr,
    Save,
    SaveTo,
    Quit,
    Detach,
    /// Ctrl-C: handled before any overlay.
    StopNow,
    Rewind,
    View,
    NextScalar,
    Compare,
    ByClass,
    Smooth,
    Window,
    LogScale,
    Help,
}

impl Action {
    /// The control a run must take for the key to do anything (a script run takes only those
    /// its client announced).
    pub fn needs(self) -> Option<crate::record::script::Capability> {
        use crate::record::script::Capability;
        match self {
            Action::PauseResume => Some(Capability::Pause),
            Action::LrUp | Action::LrDown | Action::SetLr => Some(Capability::Lr),
            Action::Save | Action::SaveTo => Some(Capability::Save),
            Action::Rewind => Some(Capability::Rewind),
            _ => None,
        }
    }
}

/// One key of the dashboard: the one table the key handler, the footer and the help read (as
/// gitui's key list does).
pub struct Binding {
    pub action: Action,
    /// The key codes that trigger it (plain characters; Ctrl-C is matched apart).
    pub codes: &'static [KeyCode],
    /// The keys as the help writes them.
    pub keys: &'static str,
    pub help: &'static str,
    /// Its footer entry, keys and label (`None`: help only), and whether the compact footer
    /// (80 columns) and the footer of a finished run show it.
    pub footer: Option<(&'static str, &'static str)>,
    pub compact: bool,
    pub when_over: bool,
}

const fn key(
    action: Action,
    codes: &'static [KeyCode],
    keys: &'static str,
    help: &'static str,
    footer: Option<(&'static str, &'static str)>,
    compact: bool,
    when_over: bool,
) -> Binding {
    Binding { action, codes, keys, help, footer, compact, when_over }
}

use KeyCode::{Char, Esc};

/// Every key, in the order the help lists them.
pub const KEYS: &[Binding] = &[
    key(
        Action::PauseResume,
        &[Char(' '), Char('p')],
        "space / p",
        "pause or resume training",
        Some(("space", "pause")),
        true,
        false,
    ),
    key(
        Action::LrUp,
        &[Char('+'), Char('=')],
        "+ / -",
        "lr times or over 2 (an lr schedule is scaled from here on)",
        Some(("+/-", "lr x2 / /2")),
        true,
        false,
    ),
    key(Action::LrDown, &[Char('-'), Char('_')], "", "", None, false, false),
    key(
        Action::SetLr,
        &[Char('l')],
        "l",
        "type an exact lr (Enter applies, Esc cancels)",
        Some(("l", "set lr")),
        true,
        false,
    ),
    key(
        Action::Save,
        &[Char('s')],
        "s",
        "save the weights now (model.safetensors in the run directory)",
        Some(("s", "save")),
        true,
        false,
    ),
    key(
        Action::SaveTo,
        &[Char('S')],
        "S",
        "save into another folder from now on (when the run directory's disk is full)",
        None,
        false,
        false,
    ),
    key(
        Action::Quit,
        &[Char('q'), Esc],
        "q",
        "stop after this step and save (asks first); quit once finished",
        Some(("q", "quit")),
        true,
        true,
    ),
    key(
        Action::Detach,
        &[Char('d')],
        "d",
        "detach: close the dashboard, training goes on (dpt-tui attach)",
        None,
        false,
        false,
    ),
    key(
        Action::StopNow,
        &[],
        "Ctrl-C",
        "stop after the current step and save, without asking",
        None,
        false,
        false,
    ),
    key(
        Action::Rewind,
        &[Char('r')],
        "r",
        "back to a recent point: a new lr, the batches since skipped or not",
        Some(("r", "rewind")),
        false,
        false,
    ),
    key(
        Action::View,
        &[Char('v')],
        "v",
        "curves: loss, accuracy, d2l's, lr over its plan, grad norm",
        Some(("v", "view")),
        false,
        true,
    ),
    key(
        Action::Compare,
        &[Char('b')],
        "b",
        "compare: overlay runs beside this one as baselines",
        Some(("b", "compare")),
        false,
        true,
    ),
    key(
        Action::ByClass,
        &[Char('c')],
        "c",
        "the last evaluation by class: accuracy, top-5, confusion counts",
        Some(("c", "by class")),
        false,
        true,
    ),
    key(
        Action::Smooth,
        &[Char('m')],
        "m",
        "smoothing: off, 0.6, 0.9, 0.99 (TensorBoard's, raw curve faint)",
        Some(("m", "smooth")),
        false,
        true,
    ),
    key(
        Action::Window,
        &[Char('w')],
        "w",
        "curves: whole run or the last 2 epochs",
        Some(("w", "window")),
        false,
        true,
    ),
    key(
        Action::NextScalar,
        &[Char('n')],
        "n",
        "the next named figure a script reports (the scalars view)",
        None,
        false,
        true,
    ),
    key(Action::LogScale, &[Char('g')], "g", "log scale for the loss", Some(("g", "log scale")), false, true),
    key(Action::Help, &[Char('?')], "?", "this help (Esc or ? closes it)", Some(("?", "help")), true, true),
];

/// The help's lines: (keys, what they do).
pub fn help() -> impl Iterator<Item = (&'static str, &'static str)> {
    KEYS.iter().filter(|b| !b.keys.is_empty()).map(|b| (b.keys, b.help))
}

/// The footer's (keys, label) for a run that is `over`, in a `compact` layout or not; the
/// by-class key only for a run that counts `classes`, and a steering key only where the run
/// `can` take its control.
pub fn footer(
    over: bool,
    compact: bool,
    classes: bool,
    can: impl Fn(crate::record::script::Capability) -> bool,
) -> Vec<(&'static str, &'static str)> {
    KEYS.iter()
        .filter(|b| if over { b.when_over } else { !compact || b.compact })
        .filter(|b| classes || b.action != Action::ByClass)
        .filter(|b| b.action.needs().is_none_or(&can))
        .filter_map(|b| b.footer)
        .collect()
}
