//! What each key does. Keys change the dashboard's state and return the controls to send to
//! the engine; the engine confirms each through an event, which the log then shows.

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use super::app::{App, Overlay, PromptKind, RunState};
use super::log::Level;
use crate::Control;

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
    View,
    Compare,
    ByClass,
    Smooth,
    Window,
    LogScale,
    Help,
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
    key(Action::LogScale, &[Char('g')], "g", "log scale for the loss", Some(("g", "log scale")), false, true),
    key(Action::Help, &[Char('?')], "?", "this help (Esc or ? closes it)", Some(("?", "help")), true, true),
];

/// The help's lines: (keys, what they do).
pub fn help() -> impl Iterator<Item = (&'static str, &'static str)> {
    KEYS.iter().filter(|b| !b.keys.is_empty()).map(|b| (b.keys, b.help))
}

/// The footer's (keys, label) for a run that is `over`, in a `compact` layout or not; the
/// by-class key only for a run that counts `classes`.
pub fn footer(over: bool, compact: bool, classes: bool) -> Vec<(&'static str, &'static str)> {
    KEYS.iter()
        .filter(|b| if over { b.when_over } else { !compact || b.compact })
        .filter(|b| classes || b.action != Action::ByClass)
        .filter_map(|b| b.footer)
        .collect()
}

/// How many epochs the recent window shows.
pub const RECENT_EPOCHS: f64 = 2.0;

impl App {
    /// Handles one key; returns the controls it asks the engine for.
    pub fn on_key(&mut self, key: KeyEvent) -> Vec<Control> {
        if key.kind == KeyEventKind::Release {
            return Vec::new();
        }
        self.dirty = true;
        if key.code == KeyCode::Char('c') && key.modifiers.contains(KeyModifiers::CONTROL) {
            return self.request_stop();
        }
        match self.overlay.take() {
            Some(Overlay::Help) => {
                if !matches!(
                    key.code,
                    KeyCode::Esc | KeyCode::Char('?') | KeyCode::Char('q') | KeyCode::Enter
                ) {
                    self.overlay = Some(Overlay::Help);
                }
                Vec::new()
            }
            Some(Overlay::Classes) => {
                if !matches!(
                    key.code,
                    KeyCode::Esc | KeyCode::Char('c') | KeyCode::Char('q') | KeyCode::Enter
                ) {
                    self.overlay = Some(Overlay::Classes);
                }
                Vec::new()
            }
            Some(Overlay::ConfirmQuit) => match key.code {
                KeyCode::Char('y') | KeyCode::Char('Y') | KeyCode::Enter => self.request_stop(),
                KeyCode::Char('n') | KeyCode::Char('N') | KeyCode::Esc | KeyCode::Char('q') => Vec::new(),
                _ => {
                    self.overlay = Some(Overlay::ConfirmQuit);
                    Vec::new()
                }
            },
            Some(Overlay::Prompt { kind, input, error }) => self.prompt_key(key.code, kind, input, error),
            Some(Overlay::Baselines { entries, cursor }) => {
                self.baselines_key(key.code, entries, cursor);
                Vec::new()
            }
            None => self.main_key(key.code),
        }
    }

    fn request_stop(&mut self) -> Vec<Control> {
        self.overlay = None;
        if self.run.state.is_over() || !self.viewer.steerable {
            self.viewer.quit = true;
            return Vec::new();
        }
        self.viewer.stop_requested = true;
        vec![Control::Stop]
    }

    fn steering(&self) -> bool {
        self.viewer.steerable && matches!(self.run.state, RunState::Running | RunState::Paused)
    }

    fn main_key(&mut self, code: KeyCode) -> Vec<Control> {
        let Some(action) = KEYS.iter().find(|b| b.codes.contains(&code)).map(|b| b.action) else {
            self.dirty = false;
            return Vec::new();
        };
        let steering = self.steering();
        let none = Vec::new;
        match action {
            Action::PauseResume if steering => {
                vec![if self.run.state == RunState::Paused { Control::Resume } else { Control::Pause }]
            }
            Action::LrUp if steering => self.scale_lr(self.viewer.lr_factor),
            Action::LrDown if steering => self.scale_lr(1.0 / self.viewer.lr_factor),
            Action::SetLr if steering => {
                self.overlay =
                    Some(Overlay::Prompt { kind: PromptKind::Lr, input: String::new(), error: None });
                none()
            }
            Action::Save if steering => vec![Control::SaveNow],
            Action::SaveTo if steering => {
                self.overlay =
                    Some(Overlay::Prompt { kind: PromptKind::SaveDir, input: String::new(), error: None });
                none()
            }
            Action::Quit if self.run.state.is_over() || !self.viewer.steerable => {
                self.viewer.quit = true;
                none()
            }
            Action::Detach if self.viewer.attached && !self.run.state.is_over() => {
                self.viewer.detached = true;
                self.viewer.quit = true;
                none()
            }
            Action::Quit if code == KeyCode::Char('q') && !self.viewer.stop_requested => {
                self.overlay = Some(Overlay::ConfirmQuit);
                none()
            }
            Action::Help => {
                self.overlay = Some(Overlay::Help);
                none()
            }
            Action::ByClass if self.curves.data.no_classes => {
                self.note(Level::Info, "a run without classes has no per-class view");
                none()
            }
            Action::ByClass => {
                self.overlay = Some(Overlay::Classes);
                none()
            }
            Action::View => {
                self.curves.settings.view = self.curves.settings.view.next();
                none()
            }
            Action::Window => {
                self.curves.settings.recent = match self.curves.settings.recent {
                    Some(_) => None,
                    None => Some(RECENT_EPOCHS),
                };
                none()
            }
            Action::LogScale => {
                self.curves.settings.log_loss = !self.curves.settings.log_loss;
                none()
            }
            Action::Compare => {
                self.open_baselines();
                none()
            }
            Action::Smooth => {
                self.curves.settings.smoothing =
                    (self.curves.settings.smoothing + 1) % crate::record::smooth::WEIGHTS.len();
                none()
            }
            _ => {
                self.dirty = false;
                none()
            }
        }
    }

    fn scale_lr(&mut self, factor: f64) -> Vec<Control> {
        match self.run.lr {
            Some(lr) => vec![Control::SetLr { lr: lr * factor }],
            None => Vec::new(),
        }
    }

    fn prompt_key(
        &mut self,
        code: KeyCode,
        kind: PromptKind,
        mut input: String,
        error: Option<String>,
    ) -> Vec<Control> {
        let mut reopen = |input: String, error: Option<String>| {
            self.overlay = Some(Overlay::Prompt { kind, input, error });
            Vec::new()
        };
        match code {
            KeyCode::Esc => Vec::new(),
            KeyCode::Enter => match kind.parse(&input) {
                Ok(control) => vec![control],
                Err(error) => reopen(input, Some(error)),
            },
            KeyCode::Backspace => {
                input.pop();
                reopen(input, None)
            }
            KeyCode::Char(c) if kind.accepts(c, input.len()) => {
                input.push(c);
                reopen(input, None)
            }
            _ => reopen(input, error),
        }
    }
}
