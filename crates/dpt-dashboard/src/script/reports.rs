//! A script run's requests made into the run's record: the start once rank 0 has stepped
//! (whether it reports an accuracy is known then), report windows of its steps with every
//! rank's step time, evaluations at any step, saves, failures and the summary. It owns the
//! ranks' hellos and the open window; the clock is handed in, so it is tested without threads.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::wire::{Hello, Status, Step};
use crate::model::Task;
use crate::record::script::{EvalStats, ScriptInfo};
use crate::record::{Change, FinishReason, Record, ReplicaTiming, RunInfo, StepStats, StepTiming, Summary};

/// How often a report window closes: about the dashboard's frame rate, so a run of fast steps
/// writes a few lines a second, not one per step.
pub const WINDOW: Duration = Duration::from_millis(200);

/// The steps of one report window.
#[derive(Debug, Default)]
struct Window {
    steps: usize,
    loss: (f64, usize),
    acc: (f64, usize),
    samples: f64,
    /// Each rank's step time, milliseconds summed, and steps.
    ranks: BTreeMap<usize, (f64, usize)>,
    lr: f64,
    scalars: BTreeMap<String, f64>,
}

/// What makes the record.
#[derive(Debug)]
pub struct Reports {
    command: Vec<String>,
    hellos: BTreeMap<usize, Hello>,
    info: Option<RunInfo>,
    window: Window,
    opened: Option<Instant>,
    began: Instant,
    began_unix: f64,
    /// Rank 0's latest step, the samples of every rank so far.
    step: usize,
    samples: f64,
    last_acc: Option<f64>,
    /// The ranks already named as stragglers (each once per run).
    straggled: Vec<bool>,
    failed: bool,
    ended: bool,
}

impl Reports {
    pub fn new(command: Vec<String>, now: Instant, unix: f64) -> Reports {
        Reports {
            command,
            hellos: BTreeMap::new(),
            info: None,
            window: Window::default(),
            opened: None,
            began: now,
            began_unix: unix,
            step: 0,
            samples: 0.0,
            last_acc: None,
            straggled: Vec::new(),
            failed: false,
            ended: false,
        }
    }

    pub fn hello(&mut self, hello: Hello) {
        self.hellos.insert(hello.rank, hello);
    }

    /// The label the run goes by (rank 0's, else any rank's, else the command's).
    pub fn label(&self) -> String {
        self.hellos
            .values()
            .map(|h| h.label.clone())
            .find(|l| !l.is_empty())
            .or_else(|| self.command.iter().find(|a| a.ends_with(".py")).cloned())
            .unwrap_or_else(|| "script".to_owned())
    }

    /// Whether anything was recorded (a start).
    pub fn started(&self) -> bool {
        self.info.is_some()
    }

    /// One rank's step: the records it completes.
    pub fn step(&mut self, rank: usize, s: &Step, now: Instant) -> Vec<Record> {
        let mut out = Vec::new();
        if rank == 0 && self.info.is_none() {
            let info = self.start_info(s);
            out.push(Record::Start(Box::new(info.clone())));
            self.info = Some(info);
        }
        let w = &mut self.window;
        if let Some(ms) = s.step_ms.filter(|m| m.is_finite() && *m >= 0.0) {
            let r = w.ranks.entry(rank).or_default();
            r.0 += ms;
            r.1 += 1;
        }
        let samples = s.samples.filter(|n| n.is_finite() && *n >= 0.0).unwrap_or(0.0);
        w.samples += samples;
        self.samples += samples;
        if rank != 0 {
            return out;
        }
        w.steps += 1;
        match s.loss {
            Some(l) => {
                w.loss.0 += l;
                w.loss.1 += 1;
            }
            // A loss that is not finite arrives as null, and stays in the window's mean.
            None => w.loss = (f64::NAN, w.loss.1 + 1),
        }
        if let Some(a) = s.acc.filter(|a| a.is_finite()) {
            w.acc.0 += a;
            w.acc.1 += 1;
        }
        if let Some(lr) = s.lr {
            w.lr = lr;
        }
        w.scalars.extend(s.scalars.iter().map(|(k, v)| (k.clone(), *v)));
        self.step = s.step;
        let opened = *self.opened.get_or_insert(now);
        if s.step == 1 || now.duration_since(opened) >= WINDOW {
            let window = self.close_window(now);
            let stragglers = self.stragglers(&window);
            out.push(window);
            out.extend(stragglers);
        }
        out
    }

    /// The ranks whose steps ran slower than the median rank's by more than the margin over a
    /// window, each named once per run (as a native run names its replicas). Ranks in one
    /// collective wait for each other, so this finds the ones whose own work differs.
    fn stragglers(&mut self, window: &Record) -> Vec<Record> {
        let Record::Step(s) = window else { return Vec::new() };
        let times: Vec<f64> = s.replicas.iter().map(|r| r.compute).collect();
        if times.len() < 2 || times.iter().any(|t| *t <= 0.0) {
            return Vec::new();
        }
        let Some(median) = crate::record::straggler::median(&times) else { return Vec::new() };
        self.straggled.resize(times.len(), false);
        crate::record::straggler::stragglers(&times)
            .into_iter()
            .filter(|&r| !std::mem::replace(&mut self.straggled[r], true))
            .map(|rank| {
                let device = self
                    .hellos
                    .get(&rank)
                    .and_then(|h| h.devices.first())
                    .map_or_else(|| "cpu".to_owned(), |d| d.label());
                Record::Event(Change::Straggler {
                    replica: rank,
                    device,
                    step_ms: times[rank] * 1e3,
                    median_ms: median * 1e3,
                    global_step: s.global_step,
                })
            })
            .collect()
    }

    /// Closes the open window (if it has rank 0's steps) into a step record.
    fn close_window(&mut self, now: Instant) -> Record {
        let w = std::mem::take(&mut self.window);
        self.opened = Some(now);
        // The time rank 0's steps took by the script's own clock, pauses left out.
        let seconds = w.ranks.get(&0).map_or(0.0, |t| t.0 / 1e3);
        let mean = |(sum, n): (f64, usize)| if n == 0 { f64::NAN } else { sum / n as f64 };
        let world = self.hellos.values().map(|h| h.world_size).max().unwrap_or(1).max(1);
        let replicas: Vec<ReplicaTiming> = (0..world)
            .map(|r| ReplicaTiming { data: 0.0, compute: w.ranks.get(&r).map_or(0.0, |&t| mean(t) / 1e3) })
            .collect();
        let slowest = replicas.iter().map(|r| r.compute).fold(0.0, f64::max);
        let total = self.info.as_ref().and_then(|i| i.script.as_ref()).and_then(|s| s.total_steps);
        Record::Step(Box::new(StepStats {
            epoch: 1,
            step: self.step,
            steps_per_epoch: total.unwrap_or(0),
            global_step: self.step,
            loss: mean(w.loss),
            acc: mean(w.acc),
            lr: w.lr,
            samples_per_sec: if seconds > 0.0 { w.samples / seconds } else { 0.0 },
            timing: StepTiming { compute: slowest, ..StepTiming::default() },
            replicas,
            timed_steps: Some(w.steps),
            scalars: w.scalars,
            ..StepStats::default()
        }))
    }

    /// Rank 0's evaluation at any step.
    pub fn eval(&mut self, rank: usize, step: usize, metrics: BTreeMap<String, f64>) -> Option<Record> {
        let e = EvalStats { global_step: step, metrics };
        if rank != 0 || !self.started() {
            return None;
        }
        self.last_acc = e.acc().or(self.last_acc);
        Some(Record::Eval(Box::new(e)))
    }

    pub fn saved(&self, step: usize, path: Option<String>) -> Record {
        Record::Event(Change::Saved {
            path: path.unwrap_or_else(|| "(the script's own)".into()),
            global_step: step,
        })
    }

    pub fn save_failed(&self, message: String) -> Record {
        Record::Event(Change::SaveFailed {
            path: String::new(),
            message,
            advice: "the run goes on; fix what the save function needs and ask again".into(),
        })
    }

    /// A rank finished: rank 0's open window closes; a failure is recorded with its rank and
    /// device.
    pub fn finish(
        &mut self,
        rank: usize,
        status: Status,
        message: Option<String>,
        now: Instant,
    ) -> Vec<Record> {
        let mut out = Vec::new();
        if rank == 0 && self.window.steps > 0 {
            out.push(self.close_window(now));
        }
        if status == Status::Failed && !self.failed {
            self.failed = true;
            let device = self.hellos.get(&rank).and_then(|h| h.devices.first()).map(|d| d.label());
            out.push(Record::Event(Change::Failed {
                replica: (self.world() > 1).then_some(rank),
                device,
                message: message.unwrap_or_else(|| "the script failed".into()),
            }));
        }
        out
    }

    /// The run is over, every rank finished (`stopped`: a stop was asked for or reported): the
    /// summary, unless a rank failed.
    pub fn summary(&mut self, stopped: bool, now: Instant) -> Option<Record> {
        if self.failed || self.ended || !self.started() {
            return None;
        }
        self.ended = true;
        let info = self.info.as_ref()?;
        let seconds = now.duration_since(self.began).as_secs_f64();
        Some(Record::Summary(Box::new(Summary {
            model: info.model,
            devices: info.devices.clone(),
            test_acc: self.last_acc,
            val_acc: None,
            sec_per_epoch: None,
            samples_per_sec: if seconds > 0.0 { self.samples / seconds } else { 0.0 },
            epochs_done: 0,
            global_steps: self.step,
            reason: if stopped { FinishReason::Stopped } else { FinishReason::Completed },
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
        })))
    }

    /// The script exited (`status` as the shell words it) with no summary recorded: the failure
    /// that says so, if the run had started and nothing said it failed.
    pub fn exited(&mut self, status: &str, ok: bool) -> Option<Record> {
        if self.failed || self.ended || !self.started() {
            return None;
        }
        self.failed = true;
        let message = if ok {
            format!("the script ended ({status}) without finishing the run (call run.finish(), or use `with dpt_tui.init(...)`)")
        } else {
            format!("the script exited ({status}) before finishing the run")
        };
        Some(Record::Event(Change::Failed { replica: None, device: None, message }))
    }

    fn world(&self) -> usize {
        self.hellos.values().map(|h| h.world_size).max().unwrap_or(1)
    }

    /// The start record: who the run is, from the hellos, and whether it counts accuracy, from
    /// its first step.
    fn start_info(&self, first: &Step) -> RunInfo {
        let first_hello = self.hellos.get(&0).or_else(|| self.hellos.values().next());
        let mut devices: Vec<_> = self
            .hellos
            .iter()
            .flat_map(|(rank, h)| {
                h.devices
                    .iter()
                    .map(move |d| crate::record::script::ScriptDevice { rank: *rank, ..d.clone() })
            })
            .collect();
        devices.sort_by_key(|d| d.rank);
        let ids = devices
            .iter()
            .map(|d| match (d.kind.as_str(), d.index) {
                ("cuda", Some(i)) => crate::device::DeviceId::Cuda(i),
                _ => crate::device::DeviceId::Cpu,
            })
            .collect();
        let world = self.world();
        // More than one rank: each rank's devices, which its samples and step times carry.
        let world_info = (world > 1).then(|| crate::record::run_info::WorldInfo {
            rank: 0,
            backend: "the script's own".into(),
            hosts: (0..world)
                .map(|r| self.hellos.get(&r).map_or_else(String::new, |h| h.host.clone()))
                .collect(),
            replicas: vec![1; world],
            devices: (0..world)
                .map(|r| {
                    let d = devices.iter().find(|d| d.rank == r);
                    vec![match d.map(|d| (d.kind.as_str(), d.index)) {
                        Some(("cuda", Some(i))) => crate::device::DeviceId::Cuda(i),
                        _ => crate::device::DeviceId::Cpu,
                    }]
                })
                .collect(),
        });
        let total_steps = first_hello.and_then(|h| h.total_steps);
        let mut settings = crate::settings::Settings::default();
        settings.recipe.epochs = 1;
        settings.recipe.steps = total_steps;
        RunInfo {
            task: if first.acc.is_some() { Task::Classify } else { Task::ModelLoss },
            devices: ids,
            steps_per_epoch: total_steps.unwrap_or(0),
            lr: first.lr.unwrap_or(0.0),
            cpu_threads_per_replica: 0,
            started_unix: Some(self.began_unix),
            timing: "the script's own clock, every step".into(),
            world: world_info,
            script: Some(ScriptInfo {
                label: self.label(),
                framework: first_hello.map_or_else(String::new, |h| h.framework.clone()),
                command: self.command.clone(),
                can: first_hello.map_or_else(Vec::new, |h| h.can.clone()),
                world_size: self.world(),
                devices,
                total_steps,
                config: first_hello.map_or_else(serde_json::Map::new, |h| h.config.clone()),
            }),
            settings,
            ..RunInfo::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::script::Capability;

    fn hello(rank: usize, world: usize) -> Hello {
        serde_json::from_value(serde_json::json!({
            "version": 1, "rank": rank, "world_size": world, "label": "tiny", "framework": "plain",
            "can": ["pause", "stop"], "devices": [{"kind": "cpu"}], "total_steps": 40
        }))
        .unwrap()
    }

    fn step(n: usize, loss: Option<f64>, ms: f64) -> Step {
        Step {
            step: n,
            loss,
            acc: None,
            samples: Some(8.0),
            lr: Some(0.1),
            step_ms: Some(ms),
            ..Step::default()
        }
    }

    #[test]
    fn rank_zero_starts_the_record_and_windows_average_its_steps_with_every_ranks_time() {
        let t0 = Instant::now();
        let mut r = Reports::new(vec!["python".into(), "train.py".into()], t0, 1e9);
        r.hello(hello(0, 2));
        r.hello(hello(1, 2));
        assert!(r.step(1, &step(1, Some(9.0), 30.0), t0).is_empty(), "rank 1 starts nothing");
        let first = r.step(0, &step(1, Some(2.0), 10.0), t0);
        // Rank 1's step took three times rank 0's: it is named a straggler.
        let [Record::Start(info), Record::Step(s1), Record::Event(Change::Straggler { replica: 1, .. })] =
            &first[..]
        else {
            panic!("{first:?}")
        };
        let script = info.script.as_ref().unwrap();
        assert_eq!((script.world_size, script.total_steps, script.devices.len()), (2, Some(40), 2));
        assert_eq!(script.can, [Capability::Pause, Capability::Stop]);
        assert_eq!(info.task, Task::ModelLoss, "no accuracy reported");
        assert_eq!(info.model_label(), "tiny");
        assert_eq!((s1.global_step, s1.loss), (1, 2.0));
        assert_eq!(s1.replicas.iter().map(|r| r.compute).collect::<Vec<_>>(), [0.010, 0.030]);
        // Steps inside the window wait; the one past it closes it with their mean.
        assert!(r.step(0, &step(2, Some(1.0), 10.0), t0 + Duration::from_millis(50)).is_empty());
        let closed = r.step(0, &step(3, Some(3.0), 20.0), t0 + WINDOW + Duration::from_millis(1));
        let [Record::Step(s3)] = &closed[..] else { panic!("{closed:?}") };
        assert_eq!((s3.global_step, s3.loss, s3.timed_steps), (3, 2.0, Some(2)));
        assert!((s3.replicas[0].compute - 0.015).abs() < 1e-12);
        // 16 samples in rank 0's 30 ms of steps (the wall clock would count a pause too).
        assert!((s3.samples_per_sec - 16.0 / 0.030).abs() < 1e-9, "{}", s3.samples_per_sec);
        assert!(s3.acc.is_nan());
        // Read back as a viewer reads it: the accuracy the script did not report stays absent.
        let line = serde_json::to_string(&closed[0]).unwrap();
        let Record::Step(back) = serde_json::from_str::<Record>(&line).unwrap() else { panic!("{line}") };
        assert!(back.acc.is_nan() && back.loss == 2.0, "{line}");
        // A loss that was not finite keeps the window's mean from looking healthy.
        r.step(0, &step(4, None, 10.0), t0 + WINDOW * 2);
        let done = r.finish(0, Status::Completed, None, t0 + WINDOW * 2);
        let [Record::Step(s4)] = &done[..] else { panic!("{done:?}") };
        assert!(s4.loss.is_nan());
        let Some(Record::Summary(sum)) = r.summary(false, t0 + WINDOW * 3) else { panic!() };
        assert_eq!((sum.global_steps, sum.reason), (4, FinishReason::Completed));
        assert!(r.summary(false, t0).is_none(), "once");
    }

    #[test]
    fn a_rank_slower_than_the_others_is_named_once() {
        let t0 = Instant::now();
        let mut r = Reports::new(Vec::new(), t0, 0.0);
        for rank in 0..3 {
            r.hello(hello(rank, 3));
        }
        for n in 1..=3 {
            // Rank 2's steps take twice the others'.
            for (rank, ms) in [(1, 10.0), (2, 20.0)] {
                r.step(rank, &step(n, Some(1.0), ms), t0);
            }
            let out = r.step(0, &step(n, Some(1.0), 10.0), t0 + WINDOW * n as u32);
            let named: Vec<&Record> = out.iter().filter(|o| matches!(o, Record::Event(_))).collect();
            if n == 1 {
                let [Record::Event(Change::Straggler { replica: 2, step_ms, median_ms, .. })] = named[..]
                else {
                    panic!("{out:?}")
                };
                assert_eq!((*step_ms, *median_ms), (20.0, 10.0));
            } else {
                assert!(named.is_empty(), "named once: {out:?}");
            }
        }
    }

    #[test]
    fn a_failure_is_recorded_once_with_its_rank_and_then_there_is_no_summary() {
        let t0 = Instant::now();
        let mut r = Reports::new(Vec::new(), t0, 0.0);
        r.hello(hello(0, 2));
        r.hello(hello(1, 2));
        assert!(r.exited("exit status 1", false).is_none(), "nothing started: nothing to record");
        r.step(0, &step(1, Some(1.0), 5.0), t0);
        let out = r.finish(1, Status::Failed, Some("ValueError: bad (train.py:9)".into()), t0);
        let [Record::Event(Change::Failed { replica: Some(1), device: Some(d), message })] = &out[..] else {
            panic!("{out:?}")
        };
        assert_eq!((d.as_str(), message.as_str()), ("cpu", "ValueError: bad (train.py:9)"));
        assert!(r.exited("exit status 1", false).is_none());
        assert!(r.summary(false, t0).is_none());
    }

    #[test]
    fn a_script_that_exits_without_finishing_is_recorded_failed() {
        let t0 = Instant::now();
        let mut r = Reports::new(Vec::new(), t0, 0.0);
        r.hello(hello(0, 1));
        r.step(0, &Step { acc: Some(0.5), ..step(1, Some(1.0), 5.0) }, t0);
        let Some(Record::Event(Change::Failed { message, .. })) = r.exited("killed by SIGKILL", false) else {
            panic!()
        };
        assert!(message.contains("killed by SIGKILL"), "{message}");
        assert!(r.eval(0, 1, [("val_acc".to_owned(), 0.7)].into()).is_some());
    }
}
