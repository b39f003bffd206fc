//! What each key does. Keys change the dashboard's state and return the controls to send to
//! the engine; the engine confirms each through an event, which the log then shows. Which key
//! does what is the table in `bindings.rs`.

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use super::app::{App, Overlay, PromptKind, RunState};
pub use super::bindings::{footer, help, Action, KEYS};
use super::log::Level;
use crate::Control;

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
            // From a sweep's board, Ctrl-C goes back to it as Esc does: the board's own Ctrl-C
            // closes it, and stopping a trial (for good) takes its own key there.
            if self.viewer.returns {
                self.viewer.detached = !self.run.state.is_over();
                self.viewer.quit = true;
                return Vec::new();
            }
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
            Some(Overlay::Rewind(picker)) => {
                let (next, control) = picker.key(key.code, &self.run.points, self.run.lr);
                self.overlay = next.map(Overlay::Rewind);
                control.into_iter().collect()
            }
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
        // A key the run cannot take says why, and asks nothing.
        let lacking = action.needs().zip(self.run.info.as_ref()).filter(|(c, info)| !info.can(*c));
        if let (true, Some((capability, info))) = (steering, lacking) {
            let reason = capability.refusal(&info.model_label());
            self.note(Level::Info, &reason);
            return none();
        }
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
            Action::Quit if code == KeyCode::Esc && self.viewer.returns => {
                self.viewer.detached = !self.run.state.is_over();
                self.viewer.quit = true;
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
            Action::Rewind if steering && self.run.points.all().is_empty() => {
                self.note(
                    Level::Info,
                    "no rewind point yet: one is taken every --snapshot-every (--snapshots K keeps K)",
                );
                none()
            }
            Action::Rewind if steering => {
                let cursor = self.run.points.all().len() - 1;
                self.overlay = Some(Overlay::Rewind(super::rewind::Picker::Choose { cursor }));
                none()
            }
            Action::Help => {
                self.overlay = Some(Overlay::Help);
                none()
            }
            Action::ByClass if !self.curves.data.counts_classes() => {
                let why = if self.curves.data.script {
                    "a script run reports no counts per class: no per-class view"
                } else {
                    "a run without classes has no per-class view"
                };
                self.note(Level::Info, why);
                none()
            }
            Action::ByClass => {
                self.overlay = Some(Overlay::Classes);
                none()
            }
            Action::View => {
                let has_scalars = !self.curves.data.scalars.is_empty();
                self.curves.settings.view = self.curves.settings.view.next_for(has_scalars);
                none()
            }
            Action::NextScalar if self.curves.data.scalars.is_empty() => {
                self.note(
                    Level::Info,
                    "this run reports no named figures (run.step(name=value) in a script)",
                );
                none()
            }
            Action::NextScalar => {
                let count = self.curves.data.scalars.len();
                self.curves.settings.scalar = (self.curves.settings.scalar + 1) % count;
                self.curves.settings.view = super::curves::CurveView::Scalars;
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
