//! Alerts: the moments a user wants to hear about without watching — the run finished, failed,
//! stopped on a non-finite loss (or paused on one), or a replica straggles. The dashboard rings
//! the terminal bell for them (`--bell`); `--notify CMD` runs a command of the user's with the
//! event in its environment, so a message can reach a phone without dpt-tui holding any
//! credentials. The command runs beside the training, never in its way: it is started and left
//! to finish (a slow one is killed after [`NOTIFY_TIMEOUT`]), and its failure is only reported.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::record::{Change, FinishReason, Record};

/// How long a notify command may run before it is killed.
pub const NOTIFY_TIMEOUT: Duration = Duration::from_secs(60);

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlertKind {
    Finished,
    Failed,
    Nan,
    Straggler,
}

impl AlertKind {
    /// The name in `DPT_EVENT`.
    pub fn name(self) -> &'static str {
        match self {
            AlertKind::Finished => "finished",
            AlertKind::Failed => "failed",
            AlertKind::Nan => "nan",
            AlertKind::Straggler => "straggler",
        }
    }
}

/// An alert with what the notify command is told.
#[derive(Debug, Clone, PartialEq)]
pub struct Alert {
    pub kind: AlertKind,
    pub message: String,
    /// The last finished epoch (0 before the first).
    pub epoch: usize,
    pub test_acc: Option<f64>,
}

/// Follows a run's records and says which are alerts.
#[derive(Debug, Default)]
pub struct Alerts {
    epoch: usize,
    test_acc: Option<f64>,
    nan_said: bool,
}

impl Alerts {
    /// The alert `record` raises, if any.
    pub fn on_record(&mut self, record: &Record) -> Option<Alert> {
        let (kind, message) = match record {
            Record::Epoch(e) => {
                self.epoch = e.epoch;
                self.test_acc = Some(e.test_acc);
                return None;
            }
            Record::Event(Change::Failed { message, .. }) => (AlertKind::Failed, message.clone()),
            Record::Event(c @ Change::NotFinite { .. }) => {
                if std::mem::replace(&mut self.nan_said, true) {
                    return None;
                }
                let line = crate::record::text::Narrator::default().line(&Record::Event(c.clone()))?.text;
                (AlertKind::Nan, line.strip_prefix("warning: ").unwrap_or(&line).to_owned())
            }
            Record::Event(c @ Change::Straggler { .. }) => (
                AlertKind::Straggler,
                crate::record::text::Narrator::default().line(&Record::Event(c.clone()))?.text,
            ),
            Record::Summary(s) => {
                if s.test_acc.is_some() {
                    self.test_acc = s.test_acc;
                }
                let how = match s.reason {
                    FinishReason::Completed => "completed",
                    FinishReason::Stopped => "stopped",
                    FinishReason::StepLimit => "reached its step limit",
                    FinishReason::EarlyStopped => "stopped early (no more improvement)",
                    FinishReason::Preempted => "was preempted (checkpointed, to be run again)",
                    // The non-finite loss was the alert already.
                    FinishReason::Diverged => return None,
                };
                let acc = s.test_acc.map_or("n/a".to_owned(), |a| format!("{a:.3}"));
                (AlertKind::Finished, format!("the run {how} after {} epochs, test acc {acc}", s.epochs_done))
            }
            _ => return None,
        };
        Some(Alert { kind, message, epoch: self.epoch, test_acc: self.test_acc })
    }
}

/// The environment a notify command gets for `alert` of the run in `run_dir`.
pub fn environment(alert: &Alert, run_dir: &std::path::Path) -> Vec<(&'static str, String)> {
    vec![
        ("DPT_EVENT", alert.kind.name().to_owned()),
        ("DPT_RUN_DIR", run_dir.display().to_string()),
        ("DPT_EPOCH", alert.epoch.to_string()),
        ("DPT_TEST_ACC", alert.test_acc.map_or_else(String::new, |a| format!("{a:.4}"))),
        ("DPT_MESSAGE", alert.message.clone()),
    ]
}

/// Starts `command` (through `sh -c`) for `alert`; the thread returned waits for it, kills it
/// after [`NOTIFY_TIMEOUT`], and reports a failure on stderr. Never blocks the caller.
pub fn notify(
    command: &str,
    alert: &Alert,
    run_dir: &std::path::Path,
) -> Option<std::thread::JoinHandle<()>> {
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(command).stdin(Stdio::null()).envs(environment(alert, run_dir));
    let kind = alert.kind.name();
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("dpt-tui: warning: --notify could not start 'sh' for '{kind}': {e}");
            return None;
        }
    };
    let watcher = std::thread::Builder::new().name("dpt-notify".into()).spawn(move || {
        let deadline = Instant::now() + NOTIFY_TIMEOUT;
        loop {
            match child.try_wait() {
                Ok(Some(status)) if status.success() => return,
                Ok(Some(status)) => {
                    eprintln!("dpt-tui: warning: the --notify command for '{kind}' exited with {status}");
                    return;
                }
                Ok(None) if Instant::now() > deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    eprintln!(
                        "dpt-tui: warning: the --notify command for '{kind}' ran over {} s and was killed",
                        NOTIFY_TIMEOUT.as_secs()
                    );
                    return;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(100)),
                Err(e) => {
                    eprintln!("dpt-tui: warning: lost the --notify command for '{kind}': {e}");
                    return;
                }
            }
        }
    });
    match watcher {
        Ok(w) => Some(w),
        Err(e) => {
            eprintln!("dpt-tui: warning: cannot watch the --notify command: {e}");
            None
        }
    }
}

/// Runs `command` for every alert among `records` until they end (a thread of its own), then
/// waits for the commands it started (each at most [`NOTIFY_TIMEOUT`]).
pub fn spawn_notifier(
    command: String,
    run_dir: PathBuf,
    records: impl IntoIterator<Item = Record> + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new().name("dpt-notifier".into()).spawn(move || {
        let mut alerts = Alerts::default();
        let mut running = Vec::new();
        for record in records {
            if let Some(alert) = alerts.on_record(&record) {
                running.extend(notify(&command, &alert, &run_dir));
            }
        }
        for r in running {
            let _ = r.join();
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{EpochStats, Summary};

    fn epoch(n: usize, acc: f64) -> Record {
        Record::Epoch(Box::new(EpochStats {
            epoch: n,
            train_loss: 1.0,
            train_acc: 0.5,
            test_loss: 1.0,
            test_acc: acc,
            epoch_seconds: 1.0,
            eval_seconds: 0.1,
            samples_per_sec: 100.0,
            lr: 0.1,
            ema_test_acc: None,
            ema_test_loss: None,
            top5_acc: None,
            per_class_acc: None,
            confusion: None,
        }))
    }

    #[test]
    fn finish_failure_nan_and_stragglers_are_alerts_and_nothing_else() {
        let mut a = Alerts::default();
        assert_eq!(a.on_record(&epoch(1, 0.7)), None);
        assert_eq!(a.on_record(&Record::Event(Change::Paused { global_step: 3 })), None);
        let nan = Record::Event(Change::NotFinite { global_step: 9, then: dpt_core::policies::OnNan::Pause });
        let got = a.on_record(&nan).unwrap();
        assert_eq!((got.kind, got.epoch, got.test_acc), (AlertKind::Nan, 1, Some(0.7)));
        assert!(got.message.starts_with("the loss is not finite at step 9: paused"), "{}", got.message);
        assert_eq!(a.on_record(&nan), None, "said once");
        let straggler = Record::Event(Change::Straggler {
            replica: 1,
            device: "cuda:1".into(),
            step_ms: 20.0,
            median_ms: 10.0,
            global_step: 50,
        });
        assert!(a.on_record(&straggler).unwrap().message.contains("replica 1 (cuda:1)"));
        let failed = Record::Event(Change::Failed { replica: None, device: None, message: "boom".into() });
        assert_eq!(a.on_record(&failed).unwrap().kind, AlertKind::Failed);
        let summary = Summary {
            val_acc: None,
            model: crate::model::ModelKind::Lenet,
            devices: vec![],
            test_acc: Some(0.81),
            sec_per_epoch: Some(1.0),
            samples_per_sec: 1.0,
            epochs_done: 2,
            global_steps: 10,
            reason: FinishReason::Completed,
            peak_rss_mib: None,
            val_loss: None,
            perplexity: None,
            tokens_per_sec: None,
            bottleneck: None,
            flops_per_sample: None,
            model_flops: None,
            mfu: None,
            peak_flops: None,
            peak_device_mib: Vec::new(),
        };
        let done = a.on_record(&Record::Summary(Box::new(summary.clone()))).unwrap();
        assert_eq!(done.kind, AlertKind::Finished);
        assert_eq!(done.test_acc, Some(0.81));
        let env = environment(&done, std::path::Path::new("/runs/a"));
        assert!(
            env.contains(&("DPT_EVENT", "finished".into()))
                && env.contains(&("DPT_TEST_ACC", "0.8100".into()))
        );
        let diverged = Summary { reason: FinishReason::Diverged, ..summary };
        assert_eq!(a.on_record(&Record::Summary(Box::new(diverged))), None);
    }
}
