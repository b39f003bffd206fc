//! What the recorder knows to give each report window and the summary their verdict: the run's
//! facts, every device's latest reading and the run's split so far.

use super::{verdict, Bottleneck, Evidence, RunSplit};
use crate::monitor::{DeviceSample, MonitorMsg};
use crate::record::{Record, RunInfo};

/// The recorder's state for verdicts.
#[derive(Default)]
pub struct Diagnosis {
    info: Option<RunInfo>,
    /// The latest reading of each (rank, device).
    devices: Vec<DeviceSample>,
    run: RunSplit,
}

impl Diagnosis {
    /// Keeps the newest reading of each device.
    pub fn read(&mut self, msg: &MonitorMsg) {
        let MonitorMsg::Samples(samples) = msg else { return };
        for s in samples {
            match self.devices.iter_mut().find(|d| d.device == s.device && d.rank == s.rank) {
                Some(held) => *held = s.clone(),
                None => self.devices.push(s.clone()),
            }
        }
    }

    /// Every device's latest reading.
    pub fn devices(&self) -> &[DeviceSample] {
        &self.devices
    }

    /// Gives a report window its verdict, and the summary the run's; a start begins the
    /// attempt's split anew.
    pub fn judge(&mut self, record: &mut Record) {
        match record {
            // A script's step is timed whole, with no split to judge from.
            Record::Start(info) if info.script.is_some() => self.info = None,
            Record::Start(info) => {
                self.info = Some((**info).clone());
                self.run = RunSplit::default();
            }
            Record::Step(s) => {
                self.run.add(s);
                if let Some(info) = &self.info {
                    s.bottleneck = verdict(&Evidence { info, step: s, devices: &self.devices });
                }
            }
            Record::Summary(summary) => {
                if let (Some(info), Some(step)) = (&self.info, self.run.stats()) {
                    summary.bottleneck = verdict(&Evidence { info, step: &step, devices: &self.devices });
                }
            }
            Record::Epoch(_) | Record::Event(_) | Record::Eval(_) => {}
        }
    }
}

/// A recorded run's verdicts, for `dpt-tui show RUN --why`: the run's, each report window's
/// cause counted, and the last window's. Verdicts the record holds are taken as they are (they
/// saw the devices' readings); a record without them (older versions) is judged from its step
/// figures alone. The attempt after the last start is the one judged.
#[derive(Debug, Default, PartialEq)]
pub struct Account {
    pub run: Option<Bottleneck>,
    /// How many report windows each cause limited, most first.
    pub windows: Vec<(super::Cause, usize)>,
    /// The last judged window: its global step and verdict.
    pub last: Option<(usize, Bottleneck)>,
    /// Timed steps the run's verdict rests on.
    pub timed_steps: usize,
}

impl Account {
    pub fn of(records: &[Record]) -> Account {
        let start = records.iter().rposition(|r| matches!(r, Record::Start(_))).unwrap_or(0);
        let mut replay = Diagnosis::default();
        let mut account = Account::default();
        for record in &records[start..] {
            let mut judged = record.clone();
            replay.judge(&mut judged);
            match (record, judged) {
                (Record::Step(held), Record::Step(fresh)) => {
                    if let Some(b) = held.bottleneck.clone().or(fresh.bottleneck) {
                        match account.windows.iter_mut().find(|(c, _)| *c == b.cause) {
                            Some((_, n)) => *n += 1,
                            None => account.windows.push((b.cause, 1)),
                        }
                        account.last = Some((held.global_step, b));
                    }
                }
                (Record::Summary(held), Record::Summary(fresh)) => {
                    account.run = held.bottleneck.clone().or(fresh.bottleneck);
                }
                _ => {}
            }
        }
        account.timed_steps = replay.run.stats().and_then(|s| s.timed_steps).unwrap_or(0);
        if account.run.is_none() {
            // A run still going, or one that ended without a summary: judged so far.
            account.run = replay
                .info
                .as_ref()
                .zip(replay.run.stats())
                .and_then(|(info, step)| verdict(&Evidence { info, step: &step, devices: &[] }));
        }
        account.windows.sort_by_key(|w| std::cmp::Reverse(w.1));
        account
    }
}
