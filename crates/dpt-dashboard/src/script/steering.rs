//! The controls of a script run: which step every rank carries each one out at, and what the
//! record says of it. It owns the schedule and each rank's progress; the backend thread feeds it
//! the ranks' requests and the viewers' controls one at a time, which is what makes the step
//! the same on every rank (`docs/reference/script-protocol.md`, "Every rank at the same step").

use std::collections::BTreeMap;

use super::wire::{Order, Scheduled};
use crate::record::script::Capability;
use crate::record::Change;
use crate::Control;

/// One rank's progress.
#[derive(Debug, Default)]
struct Rank {
    /// The highest step it reported.
    step: usize,
    /// How many of the schedule's entries it has been told.
    told: usize,
    finished: bool,
}

/// A scheduled order and the record it makes once the first rank carries it out.
#[derive(Debug)]
struct Entry {
    scheduled: Scheduled,
    change: Option<Change>,
}

/// The schedule and the ranks.
#[derive(Debug)]
pub struct Steering {
    can: Vec<Capability>,
    /// The script's name, for refusals.
    label: String,
    schedule: Vec<Entry>,
    /// How many entries have been recorded (the first rank reached them).
    recorded: usize,
    ranks: BTreeMap<usize, Rank>,
    /// The step the run is (or is about to be) paused after.
    paused_at: Option<usize>,
    stopping: bool,
    /// The scale on the script's lr now in the schedule.
    scale: f64,
    /// The lr the last report used (or the one a pending change sets), and from which step on
    /// reports carry the latest scale.
    lr: Option<f64>,
    lr_from_step: usize,
}

impl Steering {
    pub fn new(label: &str, can: Vec<Capability>) -> Steering {
        Steering {
            can,
            label: label.to_owned(),
            schedule: Vec::new(),
            recorded: 0,
            ranks: BTreeMap::new(),
            paused_at: None,
            stopping: false,
            scale: 1.0,
            lr: None,
            lr_from_step: 0,
        }
    }

    /// A rank said hello: what it must be told (everything scheduled so far).
    pub fn join(&mut self, rank: usize) -> Vec<Scheduled> {
        let r = self.ranks.entry(rank).or_default();
        r.finished = false;
        r.told = self.schedule.len();
        self.schedule.iter().map(|e| e.scheduled).collect()
    }

    /// `rank` reported `step` (a step done, or a poll while paused), with the lr it used: what
    /// it has not been told yet, and the records of the orders it is the first to reach.
    pub fn reached(&mut self, rank: usize, step: usize, lr: Option<f64>) -> (Vec<Scheduled>, Vec<Change>) {
        if let Some(lr) = lr.filter(|l| l.is_finite() && *l > 0.0) {
            if step >= self.lr_from_step {
                self.lr = Some(lr);
            }
        }
        let r = self.ranks.entry(rank).or_default();
        r.step = r.step.max(step);
        let news = self.schedule[r.told..].iter().map(|e| e.scheduled).collect();
        r.told = self.schedule.len();
        let mut changes = Vec::new();
        while let Some(e) = self.schedule.get_mut(self.recorded).filter(|e| e.scheduled.at_step <= step) {
            changes.extend(e.change.take());
            self.recorded += 1;
        }
        (news, changes)
    }

    /// `rank` sent `finish`: it no longer decides where controls land.
    pub fn finish(&mut self, rank: usize) {
        self.ranks.entry(rank).or_default().finished = true;
    }

    /// Whether every rank that joined has finished (and one has).
    pub fn all_finished(&self) -> bool {
        !self.ranks.is_empty() && self.ranks.values().all(|r| r.finished)
    }

    /// Whether a stop is scheduled.
    pub fn stopping(&self) -> bool {
        self.stopping
    }

    /// A viewer's control: scheduled (`Ok`), or refused with the reason.
    pub fn ask(&mut self, control: Control) -> Result<(), String> {
        if self.stopping {
            return Err("the run is stopping".into());
        }
        // Before anything below moves the pause.
        let at = self.next_step();
        let (order, change) = match control {
            Control::Pause if self.paused_at.is_some() => return Ok(()),
            Control::Pause => {
                self.need(Capability::Pause)?;
                self.paused_at = Some(at);
                (Order::Pause, Some(Change::Paused { global_step: at }))
            }
            Control::Resume => {
                if self.paused_at.take().is_none() {
                    return Ok(());
                }
                (Order::Resume, Some(Change::Resumed { global_step: at }))
            }
            Control::Stop | Control::Preempt => {
                self.need(Capability::Stop)?;
                self.stopping = true;
                (Order::Stop, Some(Change::StopRequested { global_step: at }))
            }
            Control::SaveNow => {
                self.need(Capability::Save)?;
                (Order::Save, None)
            }
            Control::SetLr { lr } => {
                self.need(Capability::Lr)?;
                if !(lr.is_finite() && lr > 0.0) {
                    return Err(format!("the lr must be positive and finite, not {lr}"));
                }
                let Some(from) = self.lr else {
                    return Err(format!(
                        "{} has not reported its lr yet: try again after a step",
                        self.label
                    ));
                };
                self.scale *= lr / from;
                self.lr = Some(lr);
                self.lr_from_step = at + 1;
                (
                    Order::LrScale { scale: self.scale },
                    Some(Change::LrChanged { from, to: lr, global_step: at }),
                )
            }
            Control::Rewind { .. } => return Err(Capability::Rewind.refusal(&self.label)),
            Control::SaveTo { .. } => {
                return Err(format!("{} saves where its own save function writes", self.label))
            }
            // A rewind dialog's hold: there are no rewind points to keep.
            Control::Hold { .. } => return Ok(()),
        };
        self.schedule.push(Entry { scheduled: Scheduled { at_step: at, order }, change });
        Ok(())
    }

    fn need(&self, capability: Capability) -> Result<(), String> {
        if self.can.contains(&capability) {
            Ok(())
        } else {
            Err(capability.refusal(&self.label))
        }
    }

    /// Where a control asked for now lands: at the pause, or one past the furthest live rank,
    /// never before an earlier control.
    fn next_step(&self) -> usize {
        let furthest = self.ranks.values().filter(|r| !r.finished).map(|r| r.step).max().unwrap_or(0);
        let after_earlier = self.schedule.last().map_or(0, |e| e.scheduled.at_step);
        self.paused_at.unwrap_or(furthest + 1).max(after_earlier)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Steering {
        Steering::new("train.py", vec![Capability::Pause, Capability::Stop, Capability::Lr, Capability::Save])
    }

    fn orders(s: &[Scheduled]) -> Vec<(usize, Order)> {
        s.iter().map(|s| (s.at_step, s.order)).collect()
    }

    #[test]
    fn a_control_lands_one_past_the_furthest_rank_and_every_rank_hears_of_it_before_it_gets_there() {
        let mut s = all();
        s.join(0);
        s.join(1);
        s.reached(0, 10, Some(0.1));
        s.reached(1, 9, Some(0.1));
        s.ask(Control::Pause).unwrap();
        // Rank 1 is behind: it hears of the pause at step 10 and carries it out at 11.
        let (news, changes) = s.reached(1, 10, None);
        assert_eq!(orders(&news), [(11, Order::Pause)]);
        assert!(changes.is_empty(), "nobody reached step 11 yet");
        let (news, changes) = s.reached(0, 11, None);
        assert_eq!(orders(&news), [(11, Order::Pause)]);
        assert_eq!(changes, [Change::Paused { global_step: 11 }]);
        // While paused, the ranks poll at 11: controls land there too, resume included.
        s.ask(Control::SetLr { lr: 0.05 }).unwrap();
        s.ask(Control::Resume).unwrap();
        let (news, changes) = s.reached(1, 11, None);
        assert_eq!(orders(&news), [(11, Order::LrScale { scale: 0.5 }), (11, Order::Resume)]);
        assert_eq!(
            changes,
            [Change::LrChanged { from: 0.1, to: 0.05, global_step: 11 }, Change::Resumed { global_step: 11 }]
        );
        let (news, _) = s.reached(0, 11, None);
        assert_eq!(orders(&news), [(11, Order::LrScale { scale: 0.5 }), (11, Order::Resume)]);
    }

    #[test]
    fn lr_changes_scale_from_the_lr_the_steps_used_and_a_late_report_does_not_undo_one() {
        let mut s = all();
        s.join(0);
        assert!(s.ask(Control::SetLr { lr: 0.2 }).unwrap_err().contains("has not reported its lr"));
        s.reached(0, 3, Some(0.4));
        s.ask(Control::SetLr { lr: 0.2 }).unwrap();
        let mut told = s.reached(0, 4, Some(0.4)).0;
        // Step 4 still ran at the old scale: its lr is not the rate now asked for.
        assert_eq!(s.lr, Some(0.2));
        // The script's schedule halved its own lr meanwhile: step 5 ran at 0.4 / 2 x 0.5.
        told.extend(s.reached(0, 5, Some(0.1)).0);
        s.ask(Control::SetLr { lr: 0.05 }).unwrap();
        told.extend(s.reached(0, 6, Some(0.1)).0);
        assert_eq!(orders(&told), [(4, Order::LrScale { scale: 0.5 }), (6, Order::LrScale { scale: 0.25 })]);
        assert!(s.ask(Control::SetLr { lr: f64::NAN }).is_err());
    }

    #[test]
    fn what_a_script_cannot_do_is_refused_with_its_reason_and_a_finished_rank_does_not_count() {
        let mut s = Steering::new("loop.py", vec![Capability::Pause, Capability::Stop]);
        s.join(0);
        s.join(1);
        s.reached(0, 5, Some(1.0));
        s.reached(1, 50, Some(1.0));
        assert!(s.ask(Control::SetLr { lr: 0.1 }).unwrap_err().contains("no optimizer"));
        assert!(s.ask(Control::SaveNow).unwrap_err().contains("no save function"));
        assert!(s
            .ask(Control::Rewind { global_step: 1, lr: None, skip: false })
            .unwrap_err()
            .contains("rewind"));
        s.finish(1);
        assert!(!s.all_finished());
        s.ask(Control::Stop).unwrap();
        let (news, changes) = s.reached(0, 6, None);
        assert_eq!(orders(&news), [(6, Order::Stop)]);
        assert_eq!(changes, [Change::StopRequested { global_step: 6 }]);
        assert!(s.stopping());
        assert_eq!(s.ask(Control::Pause).unwrap_err(), "the run is stopping");
        s.finish(0);
        assert!(s.all_finished());
    }

    #[test]
    fn a_rank_that_joins_late_is_told_everything_scheduled() {
        let mut s = all();
        s.join(0);
        s.reached(0, 2, Some(0.1));
        s.ask(Control::Pause).unwrap();
        assert_eq!(orders(&s.join(1)), [(3, Order::Pause)]);
        let (news, _) = s.reached(1, 1, None);
        assert!(news.is_empty(), "told once");
    }
}
