//! Rewind points as the dashboard knows them (the run's `snapshot` and `rewound` records) and
//! the `r` picker: choose a point, the lr to go on with (half the current one offered), and
//! whether to skip the batches trained on since. A pause for a loss that is not finite offers
//! the newest point straight away. While the picker is open it holds the run.

use crossterm::event::KeyCode;

use super::app::{App, Overlay};
use crate::record::{Change, Record};
use crate::Control;

/// A rewind point of the run.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub global_step: usize,
    /// The train loss of the last report before it.
    pub loss: Option<f64>,
    pub lr: f64,
    /// When it was taken (seconds since 1970); unknown for a checkpoint on disk.
    pub unix: Option<f64>,
    /// Where the data stood: 0-based epoch and step (unknown for a checkpoint on disk).
    pub position: Option<(usize, usize)>,
    /// A checkpoint kept on disk (`--keep-checkpoints`) rather than one in memory.
    pub on_disk: bool,
}

/// The points the engine keeps, as its records tell them (oldest first).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Points {
    pub kept: Vec<Point>,
    /// How many the engine keeps (`--snapshots`).
    pub keep: usize,
    /// The checkpoints kept on disk that are points too (one process, `--keep-checkpoints` K
    /// above 1: the newest K), by step.
    pub disk: Vec<usize>,
    /// How many checkpoints are kept on disk as points (0: none are points).
    pub keep_on_disk: usize,
}

impl Points {
    pub fn on_change(&mut self, change: &Change) {
        match change {
            Change::Snapshot { global_step, epoch, step, loss, lr, unix } => {
                self.kept.retain(|p| p.global_step != *global_step);
                self.kept.push(Point {
                    global_step: *global_step,
                    loss: *loss,
                    lr: *lr,
                    unix: Some(*unix),
                    position: Some((*epoch, *step)),
                    on_disk: false,
                });
                let extra = self.kept.len().saturating_sub(self.keep.max(1));
                self.kept.drain(..extra);
            }
            Change::Checkpointed { global_step, .. } if self.keep_on_disk > 1 => {
                self.disk.retain(|s| s != global_step);
                self.disk.push(*global_step);
                self.disk.sort_unstable();
                let extra = self.disk.len().saturating_sub(self.keep_on_disk);
                self.disk.drain(..extra);
            }
            // The points after it belong to the abandoned branch (a checkpoint on disk is
            // written over when the new branch reaches its step).
            Change::Rewound { to, .. } => {
                self.kept.retain(|p| p.global_step <= *to);
                self.disk.retain(|s| s <= to);
            }
            _ => {}
        }
    }

    /// Every point to go back to, oldest first: those in memory, and the checkpoints on disk
    /// at steps without one.
    pub fn all(&self) -> Vec<Point> {
        let mut all = self.kept.clone();
        for &s in &self.disk {
            if !all.iter().any(|p| p.global_step == s) {
                let point = Point {
                    global_step: s,
                    loss: None,
                    lr: f64::NAN,
                    unix: None,
                    position: None,
                    on_disk: true,
                };
                all.push(point);
            }
        }
        all.sort_by_key(|p| p.global_step);
        all
    }
}

impl Point {
    /// The batches trained on since this point with the run at `global_step`, the data where
    /// `data` says: what a rewind with skip passes over.
    pub fn batches_since(&self, data: &DataPosition, global_step: usize) -> usize {
        match (self.position, data.batch_at(global_step)) {
            (Some((epoch, step)), Some(now)) => now.saturating_sub(epoch * data.steps_per_epoch + step),
            // A checkpoint on disk: counted in steps (the same unless an earlier rewind skipped).
            _ => global_step.saturating_sub(self.global_step),
        }
    }
}

/// Where the run's data stands: the batch (counted from the run's first, over epochs) that
/// trains after a known step, from the last record that said both. Each step takes the next
/// batch, so the batch after any later step follows; a rewind or a resume says it anew (its
/// skipped batches included).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DataPosition {
    pub steps_per_epoch: usize,
    /// The step and the batch that trains after it; unknown before the first record with both.
    known: Option<(usize, usize)>,
}

impl DataPosition {
    /// Follows the run's records: its start (the batches an epoch has), its step reports, its
    /// rewinds and resumes.
    pub fn on_record(&mut self, record: &Record) {
        let spe = |n: usize| n.max(1);
        match record {
            Record::Start(info) => self.steps_per_epoch = spe(info.steps_per_epoch),
            Record::Step(s) => {
                self.steps_per_epoch = spe(s.steps_per_epoch);
                self.known = Some((s.global_step, (s.epoch.max(1) - 1) * self.steps_per_epoch + s.step));
            }
            Record::Event(Change::Rewound { to, epoch, step, skipped, .. }) => {
                self.known = Some((*to, epoch * self.steps_per_epoch + step + skipped));
            }
            Record::Event(Change::Restored { epoch, step, global_step }) => {
                self.known = Some((*global_step, epoch * self.steps_per_epoch + step));
            }
            _ => {}
        }
    }

    /// The batch that trains after `global_step` (at or after the last step said).
    pub fn batch_at(&self, global_step: usize) -> Option<usize> {
        let (step, batch) = self.known?;
        (global_step >= step).then(|| batch + (global_step - step))
    }
}

impl App {
    /// The hold to send now that the dashboard's state changed: on when the picker opened (by
    /// `r`, or offered after a loss that is not finite), off when it closed or the viewer
    /// leaves. A held run waits at a step boundary (`paused` at its step), so the points
    /// listed, the step the list says the run is at and the point chosen all stay as they are
    /// until the choice is sent.
    pub fn hold(&mut self) -> Option<Control> {
        let open = matches!(self.overlay, Some(Overlay::Rewind(_)));
        let want = open && self.viewer.steerable && !self.viewer.quit && !self.run.state.is_over();
        (want != self.viewer.holding).then(|| {
            self.viewer.holding = want;
            Control::Hold { on: want }
        })
    }
}

/// Where the picker is.
#[derive(Debug, Clone, PartialEq)]
pub enum Picker {
    /// Choosing a point (`cursor` into the points, the newest last).
    Choose { cursor: usize },
    /// The lr to go on with from the point at `step`.
    Lr { step: usize, input: String, error: Option<String> },
    /// Whether to skip the batches since the point.
    Skip { step: usize, lr: f64 },
    /// After a loss that is not finite: go back to the newest point with half the lr, skipping.
    Offer { step: usize, lr: f64 },
}

/// `lr` as the prompt offers it (shortest form that reads back the same).
pub fn lr_input(lr: f64) -> String {
    format!("{lr}")
}

impl Picker {
    /// The picker on a key: itself moved on (`None`: closed) and the control to send.
    pub fn key(
        self,
        code: KeyCode,
        points: &Points,
        lr_now: Option<f64>,
    ) -> (Option<Picker>, Option<Control>) {
        let half = |p: &Point| lr_now.unwrap_or(p.lr) / 2.0;
        match self {
            Picker::Choose { cursor } => match code {
                KeyCode::Up | KeyCode::Char('k') => {
                    (Some(Picker::Choose { cursor: cursor.saturating_sub(1) }), None)
                }
                KeyCode::Down | KeyCode::Char('j') => {
                    let last = points.all().len().saturating_sub(1);
                    (Some(Picker::Choose { cursor: (cursor + 1).min(last) }), None)
                }
                KeyCode::Enter => match points.all().get(cursor) {
                    Some(p) => (
                        Some(Picker::Lr { step: p.global_step, input: lr_input(half(p)), error: None }),
                        None,
                    ),
                    None => (None, None),
                },
                KeyCode::Esc | KeyCode::Char('q') | KeyCode::Char('r') => (None, None),
                _ => (Some(Picker::Choose { cursor }), None),
            },
            Picker::Lr { step, mut input, error } => match code {
                KeyCode::Esc => (None, None),
                KeyCode::Enter => {
                    match input.trim().parse::<f64>().ok().filter(|v| v.is_finite() && *v > 0.0) {
                        Some(lr) => (Some(Picker::Skip { step, lr }), None),
                        None => {
                            let error = Some(format!("'{}' is not a positive finite number", input.trim()));
                            (Some(Picker::Lr { step, input, error }), None)
                        }
                    }
                }
                KeyCode::Backspace => {
                    input.pop();
                    (Some(Picker::Lr { step, input, error: None }), None)
                }
                KeyCode::Char(c) if input.len() < 32 && (c.is_ascii_alphanumeric() || "+-.".contains(c)) => {
                    input.push(c);
                    (Some(Picker::Lr { step, input, error: None }), None)
                }
                _ => (Some(Picker::Lr { step, input, error }), None),
            },
            Picker::Skip { step, lr } | Picker::Offer { step, lr } => {
                let rewind = |skip| Some(Control::Rewind { global_step: step, lr: Some(lr), skip });
                match (code, &self) {
                    (KeyCode::Char('y') | KeyCode::Char('Y') | KeyCode::Enter, _) => (None, rewind(true)),
                    (KeyCode::Char('n') | KeyCode::Char('N'), Picker::Skip { .. }) => (None, rewind(false)),
                    (KeyCode::Char('n') | KeyCode::Char('N') | KeyCode::Esc, _) => (None, None),
                    _ => (Some(self), None),
                }
            }
        }
    }

    /// The offer after a loss that is not finite: the newest point, half the lr.
    pub fn offer(points: &Points, lr_now: Option<f64>) -> Option<Picker> {
        let p = points.all().pop()?;
        Some(Picker::Offer { step: p.global_step, lr: lr_now.unwrap_or(p.lr) / 2.0 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(step: usize) -> Change {
        Change::Snapshot { global_step: step, epoch: 0, step, loss: Some(1.0), lr: 0.1, unix: 0.0 }
    }

    fn points() -> Points {
        let mut p = Points { keep: 3, ..Points::default() };
        for s in [0, 10, 20, 30] {
            p.on_change(&snapshot(s));
        }
        p
    }

    #[test]
    fn the_newest_points_are_kept_and_a_rewind_drops_the_abandoned_ones() {
        let mut p = points();
        assert_eq!(p.kept.iter().map(|p| p.global_step).collect::<Vec<_>>(), [10, 20, 30]);
        p.on_change(&Change::Rewound { from: 35, to: 20, epoch: 0, step: 20, lr: 0.05, skipped: 0 });
        assert_eq!(p.kept.iter().map(|p| p.global_step).collect::<Vec<_>>(), [10, 20]);
    }

    #[test]
    fn choose_a_point_take_half_the_lr_and_skip() {
        let mut p = points();
        // Checkpoints on disk at 25 (listed) and 30 (in memory too: listed once).
        p.keep_on_disk = 5;
        for s in [25, 30] {
            p.on_change(&Change::Checkpointed { path: "c".into(), global_step: s });
        }
        let all: Vec<(usize, bool)> = p.all().iter().map(|p| (p.global_step, p.on_disk)).collect();
        assert_eq!(all, [(10, false), (20, false), (25, true), (30, false)]);
        let (next, sent) = Picker::Choose { cursor: 2 }.key(KeyCode::Up, &p, Some(0.2));
        assert_eq!((next.clone(), sent), (Some(Picker::Choose { cursor: 1 }), None));
        let (next, _) = next.unwrap().key(KeyCode::Enter, &p, Some(0.2));
        assert_eq!(next, Some(Picker::Lr { step: 20, input: "0.1".into(), error: None }));
        let (next, _) = next.unwrap().key(KeyCode::Backspace, &p, Some(0.2));
        let (next, _) = next.unwrap().key(KeyCode::Char('5'), &p, Some(0.2));
        let (next, _) = next.unwrap().key(KeyCode::Enter, &p, Some(0.2));
        assert_eq!(next, Some(Picker::Skip { step: 20, lr: 0.5 }));
        let (next, sent) = next.unwrap().key(KeyCode::Char('n'), &p, Some(0.2));
        assert_eq!(next, None);
        assert_eq!(sent, Some(Control::Rewind { global_step: 20, lr: Some(0.5), skip: false }));
    }

    /// A report every 10 steps of 25 an epoch: the step record at step 80 (epoch 4, step 5).
    fn reported_at_80() -> DataPosition {
        let mut data = DataPosition::default();
        let step = crate::record::StepStats {
            epoch: 4,
            step: 5,
            steps_per_epoch: 25,
            global_step: 80,
            ..Default::default()
        };
        data.on_record(&Record::Step(Box::new(step)));
        data
    }

    #[test]
    fn the_batches_since_a_point_count_to_the_step_the_run_is_at_not_the_last_report() {
        let data = reported_at_80();
        let at_80 = Point {
            global_step: 80,
            loss: None,
            lr: 0.1,
            unix: None,
            position: Some((3, 5)),
            on_disk: false,
        };
        // Paused at 86, six steps past the last report: six batches since the point at 80.
        assert_eq!(at_80.batches_since(&data, 86), 6);
        assert_eq!(at_80.batches_since(&data, 80), 0);
        // A checkpoint on disk (no position): counted in steps.
        let on_disk = Point { position: None, on_disk: true, ..at_80.clone() };
        assert_eq!(on_disk.batches_since(&data, 86), 6);
        // Nothing said yet about the data: steps.
        assert_eq!(at_80.batches_since(&DataPosition::default(), 83), 3);
    }

    #[test]
    fn a_rewind_that_skipped_moves_the_data_ahead_of_the_steps() {
        let mut data = reported_at_80();
        // Back from 86 to the point at 80 (epoch 3, step 5), the 6 batches since skipped: step
        // 80 trains batch 86 now, and step 84 batch 90.
        let rewound = Change::Rewound { from: 86, to: 80, epoch: 3, step: 5, lr: 0.05, skipped: 6 };
        data.on_record(&Record::Event(rewound));
        assert_eq!(data.batch_at(84), Some(90));
        let at_80 = Point {
            global_step: 80,
            loss: None,
            lr: 0.05,
            unix: None,
            position: Some((3, 5)),
            on_disk: false,
        };
        assert_eq!(at_80.batches_since(&data, 84), 10);
        // A resume says where the data is anew.
        data.on_record(&Record::Event(Change::Restored { epoch: 1, step: 0, global_step: 20 }));
        assert_eq!(data.batch_at(22), Some(27));
    }

    #[test]
    fn a_bad_lr_is_said_and_the_offer_skips() {
        let p = points();
        let lr = Picker::Lr { step: 10, input: "-1".into(), error: None };
        let (next, sent) = lr.key(KeyCode::Enter, &p, None);
        assert!(matches!(next, Some(Picker::Lr { error: Some(_), .. })) && sent.is_none());
        let offer = Picker::offer(&p, Some(0.4)).unwrap();
        assert_eq!(offer, Picker::Offer { step: 30, lr: 0.2 });
        assert_eq!(offer.clone().key(KeyCode::Esc, &p, None), (None, None));
        let (_, sent) = offer.key(KeyCode::Char('y'), &p, None);
        assert_eq!(sent, Some(Control::Rewind { global_step: 30, lr: Some(0.2), skip: true }));
    }
}
