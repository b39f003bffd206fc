//! Every rank's device figures on rank 0's dashboard: the other ranks publish their latest
//! samples to the store beside the collectives, and rank 0 collects them with its own. Neither
//! side ever waits on a collective for it, so a slow store cannot slow training.

use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use dpt_core::monitor::{DeviceSample, MonitorMsg};
use dpt_sys::c10d::Store;

fn key(rank: usize) -> String {
    format!("monitor/{rank}")
}

/// A rank other than 0: passes each reading of its monitor to the store, stamped with the rank
/// and host. Ends with the monitor.
pub fn spawn_publisher(
    store: Store,
    rank: usize,
    host: String,
    readings: Receiver<MonitorMsg>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name("dpt-publish".into()).spawn(move || {
        for msg in readings {
            if let MonitorMsg::Samples(mut samples) = msg {
                for s in &mut samples {
                    s.rank = Some(rank);
                    s.host = Some(host.clone());
                }
                let json = serde_json::to_vec(&samples).expect("samples serialize");
                // A store that went away ends the run elsewhere; figures are best effort.
                let _ = store.set(&key(rank), &json);
            }
        }
    })
}

/// Rank 0: every `period`, reads the other ranks' latest readings and passes them on with its
/// own. Ends when `stop` is dropped or `out` goes away.
pub fn spawn_collector(
    store: Store,
    ranks: usize,
    period: Duration,
    out: Sender<MonitorMsg>,
    stop: Receiver<()>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name("dpt-collect".into()).spawn(move || loop {
        match stop.recv_timeout(period) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        for rank in 1..ranks {
            let k = key(rank);
            if !store.check(&[k.as_str()]).unwrap_or(false) {
                continue;
            }
            let samples =
                store.get(&k).ok().and_then(|b| serde_json::from_slice::<Vec<DeviceSample>>(&b).ok());
            if let Some(samples) = samples {
                if out.send(MonitorMsg::Samples(samples)).is_err() {
                    return;
                }
            }
        }
    })
}
