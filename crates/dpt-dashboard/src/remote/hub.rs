//! The hub: one thread that keeps the run's history (a [`History`], bounded however long the
//! run) and fans every record and device sample out to its subscribers (the headless printer, attached viewers). A subscriber that
//! falls behind by more than its channel holds is dropped, never waited for: a slow or vanished
//! viewer cannot slow training.

use std::collections::VecDeque;
use std::thread::JoinHandle;

use crossbeam_channel::{bounded, never, select, unbounded, Receiver, Sender, TrySendError};

use super::protocol::Snapshot;
use crate::monitor::MonitorMsg;
use crate::record::history::History;
use crate::record::Record;

/// How many monitor readings a snapshot carries (two minutes at the default 1 s).
const MONITOR_HISTORY: usize = 120;

/// What subscribers receive.
#[derive(Debug, Clone, PartialEq)]
pub enum HubMsg {
    Record(Record),
    Monitor(MonitorMsg),
}

impl HubMsg {
    /// The record this message carries, if it is one (not a device sample).
    pub fn record(self) -> Option<Record> {
        match self {
            HubMsg::Record(r) => Some(r),
            HubMsg::Monitor(_) => None,
        }
    }
}

struct Subscribe {
    capacity: usize,
    reply: Sender<(Snapshot, Receiver<HubMsg>)>,
}

/// A handle to subscribe to the hub; clone freely.
#[derive(Clone)]
pub struct Hub {
    requests: Sender<Subscribe>,
}

impl Hub {
    /// Starts the `dpt-hub` thread over the engine's (recorded) records and the monitor;
    /// `history` holds what came before (a resumed run's earlier records). `first` are the
    /// capacities of subscriptions made before the thread starts, one per entry: they miss
    /// nothing even when the run ends before [`Hub::subscribe`] could be asked (a one-step
    /// run), which is what the job's own printer needs.
    #[allow(clippy::type_complexity)]
    pub fn spawn(
        history: History,
        records: Receiver<Record>,
        monitor: Receiver<MonitorMsg>,
        first: &[usize],
    ) -> std::io::Result<(Hub, Vec<(Snapshot, Receiver<HubMsg>)>, JoinHandle<()>)> {
        let (requests, incoming) = unbounded::<Subscribe>();
        let (subscribers, subscriptions): (Vec<_>, Vec<_>) = first
            .iter()
            .map(|&capacity| {
                let (tx, rx) = bounded(capacity.max(1));
                let snapshot = Snapshot { records: history.records().to_vec(), monitor: Vec::new() };
                (tx, (snapshot, rx))
            })
            .unzip();
        let handle = std::thread::Builder::new()
            .name("dpt-hub".into())
            .spawn(move || run(history, records, monitor, incoming, subscribers))?;
        Ok((Hub { requests }, subscriptions, handle))
    }

    /// The run so far and a channel of what follows, without a gap between them; `None` once
    /// the run is over and the hub has stopped.
    pub fn subscribe(&self, capacity: usize) -> Option<(Snapshot, Receiver<HubMsg>)> {
        let (reply, answer) = bounded(1);
        self.requests.send(Subscribe { capacity, reply }).ok()?;
        answer.recv().ok()
    }
}

fn run(
    mut history: History,
    records: Receiver<Record>,
    monitor: Receiver<MonitorMsg>,
    requests: Receiver<Subscribe>,
    mut subscribers: Vec<Sender<HubMsg>>,
) {
    let mut samples: VecDeque<MonitorMsg> = VecDeque::new();
    let (mut monitor, mut requests) = (monitor, requests);
    let publish = |subs: &mut Vec<Sender<HubMsg>>, msg: HubMsg| {
        subs.retain(|s| match s.try_send(msg.clone()) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
        });
    };
    loop {
        select! {
            recv(records) -> r => match r {
                Ok(record) => {
                    history.push(record.clone());
                    publish(&mut subscribers, HubMsg::Record(record));
                }
                // The run is over: closing the subscribers' channels tells them so.
                Err(_) => return,
            },
            recv(monitor) -> msg => match msg {
                Ok(msg) => {
                    if samples.len() == MONITOR_HISTORY {
                        samples.pop_front();
                    }
                    samples.push_back(msg.clone());
                    publish(&mut subscribers, HubMsg::Monitor(msg));
                }
                Err(_) => monitor = never(),
            },
            recv(requests) -> req => {
                let Ok(Subscribe { capacity, reply }) = req else {
                    // Nobody can subscribe any more; stop listening for it (no busy loop).
                    requests = never();
                    continue;
                };
                let (tx, rx) = bounded(capacity.max(1));
                let snapshot =
                    Snapshot { records: history.records().to_vec(), monitor: samples.iter().cloned().collect() };
                if reply.send((snapshot, rx)).is_ok() {
                    subscribers.push(tx);
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Change;

    #[test]
    fn snapshot_then_live_and_slow_subscribers_are_dropped() {
        let (etx, erx) = unbounded();
        let (_mtx, mrx) = unbounded::<MonitorMsg>();
        let (hub, _, handle) = Hub::spawn(History::default(), erx, mrx, &[]).unwrap();
        etx.send(Record::Event(Change::Paused { global_step: 1 })).unwrap();
        let (snap, rx) = hub.subscribe(8).unwrap();
        // The first event is either in the snapshot or live, never both, never lost.
        let mut seen: Vec<Record> = snap.records.clone();
        let (_slow_snap, slow) = hub.subscribe(1).unwrap();
        for i in 2..6 {
            etx.send(Record::Event(Change::Resumed { global_step: i })).unwrap();
        }
        drop(etx);
        handle.join().unwrap();
        seen.extend(rx.iter().map(|m| match m {
            HubMsg::Record(r) => r,
            HubMsg::Monitor(_) => unreachable!(),
        }));
        assert_eq!(seen.len(), 5, "{seen:?}");
        // The slow subscriber got at most what fits, then was dropped.
        assert!(slow.iter().count() <= 1);
        assert!(hub.subscribe(4).is_none(), "no subscriptions after the run");
    }

    #[test]
    fn a_subscription_made_at_the_start_sees_a_run_that_ended_before_anyone_asked() {
        let (etx, erx) = unbounded();
        let (_mtx, mrx) = unbounded::<MonitorMsg>();
        let mut earlier = History::default();
        earlier.push(Record::Event(Change::Paused { global_step: 0 }));
        // The whole run is over before the hub's thread even starts.
        for i in 1..4 {
            etx.send(Record::Event(Change::Resumed { global_step: i })).unwrap();
        }
        drop(etx);
        let (hub, mut first, handle) = Hub::spawn(earlier, erx, mrx, &[8, 8]).unwrap();
        handle.join().unwrap();
        assert!(hub.subscribe(4).is_none(), "a subscription asked for now finds the run over");
        assert_eq!(first.len(), 2);
        let (snapshot, live) = first.pop().unwrap();
        assert_eq!(snapshot.records, vec![Record::Event(Change::Paused { global_step: 0 })]);
        let steps: Vec<usize> = live
            .iter()
            .filter_map(HubMsg::record)
            .map(|r| match r {
                Record::Event(Change::Resumed { global_step }) => global_step,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(steps, [1, 2, 3]);
    }
}
