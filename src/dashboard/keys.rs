//! What each key does. Keys change the dashboard's state and return the controls to send to
//! the engine; the engine confirms each through an event, which the log then shows.

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use super::app::{App, Overlay, PromptKind, RunState};
use crate::engine::Control;

/// Every key, for the help overlay: (keys, what they do).
pub const HELP: &[(&str, &str)] = &[
    ("space / p", "pause or resume training"),
    ("+ / -", "lr times or over 2 (an lr schedule is scaled from here on)"),
    ("l", "type an exact lr (Enter applies, Esc cancels)"),
    ("s", "save the weights now (model.safetensors in the run directory)"),
    ("S", "save into another folder from now on (when the run directory's disk is full)"),
    ("q", "stop after this step and save (asks first); quit once finished"),
    ("d", "detach: close the dashboard, training goes on (dpt-tui attach)"),
    ("Ctrl-C", "stop after the current step and save, without asking"),
    ("v", "curves: loss, accuracy, d2l's, lr over its plan, grad norm"),
    ("b", "compare: overlay runs beside this one as baselines"),
    ("c", "the last evaluation by class: accuracy, top-5, confusion counts"),
    ("m", "smoothing: off, 0.6, 0.9, 0.99 (TensorBoard's, raw curve faint)"),
    ("w", "curves: whole run or the last 2 epochs"),
    ("g", "log scale for the loss"),
    ("?", "this help (Esc or ? closes it)"),
];

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
        if self.state.is_over() || !self.steerable {
            self.quit = true;
            return Vec::new();
        }
        self.stop_requested = true;
        vec![Control::Stop]
    }

    fn steering(&self) -> bool {
        self.steerable && matches!(self.state, RunState::Running | RunState::Paused)
    }

    fn main_key(&mut self, code: KeyCode) -> Vec<Control> {
        match code {
            KeyCode::Char(' ') | KeyCode::Char('p') if self.steering() => {
                vec![if self.state == RunState::Paused { Control::Resume } else { Control::Pause }]
            }
            KeyCode::Char('+') | KeyCode::Char('=') if self.steering() => self.scale_lr(self.lr_factor),
            KeyCode::Char('-') | KeyCode::Char('_') if self.steering() => self.scale_lr(1.0 / self.lr_factor),
            KeyCode::Char('l') if self.steering() => {
                self.overlay =
                    Some(Overlay::Prompt { kind: PromptKind::Lr, input: String::new(), error: None });
                Vec::new()
            }
            KeyCode::Char('s') if self.steering() => vec![Control::SaveNow],
            KeyCode::Char('S') if self.steering() => {
                self.overlay =
                    Some(Overlay::Prompt { kind: PromptKind::SaveDir, input: String::new(), error: None });
                Vec::new()
            }
            KeyCode::Char('q') | KeyCode::Esc if self.state.is_over() => {
                self.quit = true;
                Vec::new()
            }
            KeyCode::Char('d') if self.attached && !self.state.is_over() => {
                self.detached = true;
                self.quit = true;
                Vec::new()
            }
            KeyCode::Char('q') | KeyCode::Esc if !self.steerable => {
                self.quit = true;
                Vec::new()
            }
            KeyCode::Char('q') if !self.stop_requested => {
                self.overlay = Some(Overlay::ConfirmQuit);
                Vec::new()
            }
            KeyCode::Char('?') => {
                self.overlay = Some(Overlay::Help);
                Vec::new()
            }
            KeyCode::Char('c') => {
                self.overlay = Some(Overlay::Classes);
                Vec::new()
            }
            KeyCode::Char('v') => {
                self.settings.view = self.settings.view.next();
                Vec::new()
            }
            KeyCode::Char('w') => {
                self.settings.recent = match self.settings.recent {
                    Some(_) => None,
                    None => Some(RECENT_EPOCHS),
                };
                Vec::new()
            }
            KeyCode::Char('g') => {
                self.settings.log_loss = !self.settings.log_loss;
                Vec::new()
            }
            KeyCode::Char('b') => {
                self.open_baselines();
                Vec::new()
            }
            KeyCode::Char('m') => {
                self.settings.smoothing =
                    (self.settings.smoothing + 1) % crate::record::smooth::WEIGHTS.len();
                Vec::new()
            }
            _ => {
                self.dirty = false;
                Vec::new()
            }
        }
    }

    fn scale_lr(&mut self, factor: f64) -> Vec<Control> {
        match self.lr {
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
