//! Rewind: a run that goes back to a rewind point, with a new lr and the batches since skipped,
//! ends with the very weights of a run resumed from the checkpoint of that step with the same
//! lr and skip: on one process (the engine's own API) and on two (the binary, steered from
//! an attached viewer, as the dashboard steers it).

use crate::common;
use common::{until_record, Dpt};

use std::time::Duration;

use dpt_core::device::DeviceId;
use dpt_tui::engine::checkpoint_every::CheckpointEvery;
use dpt_tui::engine::{Continuation, Control, Engine, Record, Resume, TrainConfig};
use dpt_tui::model::ModelKind;
use dpt_tui::persist::checkpoint::Checkpoint;
use dpt_tui::record::Change;

const WAIT: Duration = Duration::from_secs(120);

/// Two CPU replicas of LeNet, 8 steps an epoch for 3 epochs, a rewind point and a kept
/// checkpoint every 4 steps.
fn config(dir: &std::path::Path) -> TrainConfig {
    let mut cfg = TrainConfig::new(ModelKind::Lenet, vec![DeviceId::Cpu; 2]);
    cfg.settings.recipe.epochs = 3;
    cfg.settings.recipe.batch_size = 64;
    cfg.settings.placement.log_every = 1;
    cfg.settings.checkpoints.every = CheckpointEvery::Steps(4);
    cfg.settings.checkpoints.keep = 20;
    cfg.settings.checkpoints.snapshot_every = CheckpointEvery::Steps(4);
    cfg.settings.checkpoints.snapshots = 3;
    cfg.run_dir = Some(dir.to_owned());
    cfg
}

/// [`config`], its steps 50 ms slower (replica 0 waits), so that a pause lands within a step
/// or two of where it is asked.
fn slowed(dir: &std::path::Path) -> TrainConfig {
    let mut cfg = config(dir);
    cfg.kit.faults.slow_replica = Some((0, 50));
    cfg
}

/// The run of [`config`] resumed from the checkpoint `run` kept at step 8, at lr 0.05, `skip`
/// batches skipped.
fn resumed_from_step_8(
    run: &std::path::Path,
    skip: usize,
    data: std::sync::Arc<dpt_tui::data::Dataset>,
) -> dpt_tui::engine::Outcome {
    let other = tempfile::tempdir().unwrap();
    let path = run.join("checkpoints").join("step-000000008.safetensors");
    let mut cfg = config(other.path());
    let resume = Resume::new(Checkpoint::read(&path).unwrap(), ModelKind::Lenet, None, &path).unwrap();
    cfg.kit.resume = Some(Box::new(Resume { then: Continuation { lr: Some(0.05), skip }, ..resume }));
    Engine::start(cfg, data).unwrap().join().unwrap()
}

fn bits(named: &[(String, tch::Tensor)]) -> Vec<(String, Vec<u32>)> {
    named
        .iter()
        .map(|(n, t)| {
            let v: Vec<f32> = t.flatten(0, -1).try_into().unwrap();
            (n.clone(), v.into_iter().map(f32::to_bits).collect())
        })
        .collect()
}

#[test]
fn a_rewind_with_skip_ends_as_a_resume_with_the_same_lr_and_skip() {
    let tmp = tempfile::tempdir().unwrap();
    let data = common::subset(512, 100);
    let engine = Engine::start(slowed(tmp.path()), data.clone()).unwrap();
    let records = engine.events().clone();
    let controls = engine.controls();

    // Pause in the second epoch, after the points at steps 4, 8 and 12 (the one at 0 dropped).
    let (_, mut before) =
        until_record(&records, WAIT, |r| matches!(r, Record::Step(s) if s.global_step >= 13));
    controls.send(Control::Pause).unwrap();
    let (paused, more) = until_record(&records, WAIT, |r| matches!(r, Record::Event(Change::Paused { .. })));
    before.extend(more);
    let Record::Event(Change::Paused { global_step: at }) = paused else { unreachable!() };
    let points: Vec<usize> = before
        .iter()
        .filter_map(|r| match r {
            Record::Event(Change::Snapshot { global_step, .. }) => Some(*global_step),
            _ => None,
        })
        .collect();
    assert_eq!(&points[..4], [0, 4, 8, 12], "a point every 4 steps: {points:?}");

    // A step without a point is refused, naming the points kept.
    controls.send(Control::Rewind { global_step: 6, lr: Some(0.05), skip: true }).unwrap();
    let (refused, _) = until_record(&records, WAIT, |r| matches!(r, Record::Event(Change::Refused { .. })));
    let Record::Event(Change::Refused { reason }) = refused else { unreachable!() };
    assert!(reason.contains("no rewind point at step 6") && reason.contains("8, 12"), "{reason}");

    controls.send(Control::Rewind { global_step: 8, lr: Some(0.05), skip: true }).unwrap();
    let (rewound, _) = until_record(&records, WAIT, |r| matches!(r, Record::Event(Change::Rewound { .. })));
    let Record::Event(Change::Rewound { from, to, lr, skipped, epoch, step }) = rewound else {
        unreachable!()
    };
    assert_eq!((from, to, lr, epoch, step), (at, 8, 0.05, 1, 0));
    assert_eq!(skipped, at - 8, "the batches from the point to the pause");
    let (next, _) = until_record(&records, WAIT, |r| matches!(r, Record::Step(_)));
    let Record::Step(next) = next else { unreachable!() };
    assert_eq!((next.global_step, next.lr), (9, 0.05), "the run goes on from the point");

    // A save asked for now writes the data's place, ahead of the global step by the skip.
    controls.send(Control::Pause).unwrap();
    let (paused, _) = until_record(&records, WAIT, |r| matches!(r, Record::Event(Change::Paused { .. })));
    let Record::Event(Change::Paused { global_step: now }) = paused else { unreachable!() };
    let elsewhere = tempfile::tempdir().unwrap();
    controls.send(Control::SaveTo { dir: elsewhere.path().to_owned() }).unwrap();
    until_record(
        &records,
        WAIT,
        |r| matches!(r, Record::Event(Change::Checkpointed { path, .. }) if path.contains(elsewhere.path().to_str().unwrap())),
    );
    let saved = Checkpoint::read(&elsewhere.path().join("checkpoint.safetensors")).unwrap().state;
    assert_eq!(saved.global_step, now);
    assert_eq!(
        saved.epoch * 8 + saved.step,
        now + skipped,
        "the data's place: {:?}",
        (saved.epoch, saved.step)
    );
    controls.send(Control::Resume).unwrap();
    let outcome = engine.join().unwrap();
    assert_eq!(outcome.summary.global_steps, 24 - skipped, "the skipped batches are not trained on");
    let rewound = bits(&outcome.final_params);

    // The same from the checkpoint kept at step 8, resumed with the lr and the skip.
    let resumed = resumed_from_step_8(tmp.path(), skipped, data);
    assert_eq!(resumed.summary.global_steps, outcome.summary.global_steps);
    assert_eq!(bits(&resumed.final_params), rewound, "bit-identical weights");

    // And without the skip, going back trains the same batches again, at the new lr.
    assert_ne!(skipped, 0);
}

#[test]
fn a_checkpoint_kept_on_disk_is_a_rewind_point_of_a_one_process_run() {
    let tmp = tempfile::tempdir().unwrap();
    let data = common::subset(512, 100);
    let mut cfg = slowed(tmp.path());
    cfg.settings.checkpoints.snapshots = 0;
    let engine = Engine::start(cfg, data.clone()).unwrap();
    let (records, controls) = (engine.events().clone(), engine.controls());
    until_record(&records, WAIT, |r| matches!(r, Record::Step(s) if s.global_step >= 13));
    controls.send(Control::Pause).unwrap();
    let (paused, _) = until_record(&records, WAIT, |r| matches!(r, Record::Event(Change::Paused { .. })));
    let Record::Event(Change::Paused { global_step: at }) = paused else { unreachable!() };
    controls.send(Control::Rewind { global_step: 6, lr: None, skip: false }).unwrap();
    let (refused, _) = until_record(&records, WAIT, |r| matches!(r, Record::Event(Change::Refused { .. })));
    let Record::Event(Change::Refused { reason }) = refused else { unreachable!() };
    // Step 12's may still be on its way to the disk (the checkpoint thread writes it).
    assert!(reason.contains("the points are at steps 4, 8"), "the checkpoints on disk: {reason}");
    controls.send(Control::Rewind { global_step: 8, lr: Some(0.05), skip: true }).unwrap();
    let (rewound, _) = until_record(&records, WAIT, |r| matches!(r, Record::Event(Change::Rewound { .. })));
    let Record::Event(Change::Rewound { to, skipped, .. }) = rewound else { unreachable!() };
    assert_eq!((to, skipped), (8, at - 8));
    let outcome = engine.join().unwrap();

    let resumed = resumed_from_step_8(tmp.path(), skipped, data);
    assert_eq!(bits(&resumed.final_params), bits(&outcome.final_params), "bit-identical weights");
}

#[test]
fn a_hold_keeps_the_run_at_one_step_until_every_holder_lets_go_and_a_pause_outlasts_it() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = Engine::start(config(tmp.path()), common::subset(512, 100)).unwrap();
    let (records, controls) = (engine.events().clone(), engine.controls());
    until_record(&records, WAIT, |r| matches!(r, Record::Step(s) if s.global_step >= 6));
    // Two viewers' dialogs open.
    controls.send(Control::Hold { on: true }).unwrap();
    controls.send(Control::Hold { on: true }).unwrap();
    let (paused, _) = until_record(&records, WAIT, |r| matches!(r, Record::Event(Change::Paused { .. })));
    let Record::Event(Change::Paused { global_step: at }) = paused else { unreachable!() };
    // Another viewer's `p` does not let the run go from under them.
    controls.send(Control::Resume).unwrap();
    let (refused, first) =
        until_record(&records, WAIT, |r| matches!(r, Record::Event(Change::Refused { .. })));
    assert!(matches!(refused, Record::Event(Change::Refused { reason }) if reason.contains("rewind dialog")));
    // One closes; a user pauses under the other, which then closes too.
    controls.send(Control::Hold { on: false }).unwrap();
    controls.send(Control::Pause).unwrap();
    controls.send(Control::Hold { on: false }).unwrap();
    // An lr change, said at the step it is applied at: the run is still where it was held.
    controls.send(Control::SetLr { lr: 0.05 }).unwrap();
    let (changed, between) =
        until_record(&records, WAIT, |r| matches!(r, Record::Event(Change::LrChanged { .. })));
    assert!(matches!(changed, Record::Event(Change::LrChanged { global_step, .. }) if global_step == at));
    controls.send(Control::Resume).unwrap();
    let (resumed, more) =
        until_record(&records, WAIT, |r| matches!(r, Record::Event(Change::Resumed { .. })));
    assert_eq!(resumed, Record::Event(Change::Resumed { global_step: at }));
    let held: Vec<&Record> = first.iter().chain(&between).chain(&more).collect();
    assert!(
        !held.iter().any(|r| matches!(
            r,
            Record::Step(_) | Record::Event(Change::Snapshot { .. } | Change::Paused { .. })
        )),
        "no step, no point and no second pause while held: {held:?}"
    );
    let outcome = engine.join().unwrap();
    assert_eq!(outcome.summary.global_steps, 24, "the run went on to its end");
}

/// The flags of the two-process runs: 6 steps an epoch for 4 epochs, a rewind point and a
/// kept checkpoint every 2 steps, one CPU replica per rank, `extra`.
fn two_rank_flags(extra: &[&str]) -> Vec<String> {
    let mut flags: Vec<&str> = vec!["--epochs", "4", "--devices", "cpu:1", "--dist-timeout", "60"];
    flags.extend(["--snapshot-every", "2steps", "--checkpoint-every", "2steps", "--keep-checkpoints", "20"]);
    flags.extend(extra);
    common::training(&flags)
}

/// Starts two ranks with `args` and `env`, rank 0 into `run`.
fn two_ranks(args: &[String], run: &std::path::Path, env: &[(&str, &str)]) -> Vec<std::process::Child> {
    let port = common::free_port();
    (0..2)
        .map(|r| {
            let mut c = Dpt::new();
            c.args(args).rank(r, 2, port);
            for (k, v) in env {
                c.env(k, v);
            }
            if r == 0 {
                c.run_dir(run);
            }
            c.piped().spawn()
        })
        .collect()
}

#[test]
fn on_two_processes_a_rewind_with_skip_ends_as_a_resume_with_the_same_lr_and_skip() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    // 100 ms more a step on each rank, so that the pause lands where it is asked.
    let ranks = two_ranks(&two_rank_flags(&[]), &run, &[("DPT_INJECT_FAULT", "slow-replica=0@100")]);
    common::until(WAIT, "socket served by rank 0", || dpt_tui::remote::client::server_info(&run).is_some());
    let viewer = dpt_tui::remote::client::attach(&run, false).unwrap();
    let (_, mut seen) =
        until_record(&viewer.records, WAIT, |r| matches!(r, Record::Step(s) if s.global_step >= 9));
    viewer.controls.send(Control::Pause).unwrap();
    let (_, more) =
        until_record(&viewer.records, WAIT, |r| matches!(r, Record::Event(Change::Paused { .. })));
    seen.extend(more);
    let points: Vec<usize> = seen
        .iter()
        .filter_map(|r| match r {
            Record::Event(Change::Snapshot { global_step, .. }) => Some(*global_step),
            _ => None,
        })
        .collect();
    // The middle one of the three kept.
    let to = points[points.len() - 2];
    viewer.controls.send(Control::Rewind { global_step: to, lr: Some(0.05), skip: true }).unwrap();
    let (rewound, _) =
        until_record(&viewer.records, WAIT, |r| matches!(r, Record::Event(Change::Rewound { .. })));
    let Record::Event(Change::Rewound { to: back, skipped, .. }) = rewound else { unreachable!() };
    assert_eq!(back, to);
    assert!(skipped >= 2, "{skipped}");
    let outputs: Vec<String> =
        ranks.into_iter().map(|c| common::ok(&c.wait_with_output().unwrap())).collect();
    assert!(outputs[1].contains("rewound from step"), "rank 1 went back too:\n{}", outputs[1]);

    // Both ranks resumed from the checkpoint kept at that step, with the lr and the skip.
    let path = run.join("checkpoints").join(format!("step-{to:09}.safetensors"));
    let other = tmp.path().join("resumed");
    let skip = skipped.to_string();
    let resume = ["--resume", path.to_str().unwrap(), "--resume-lr", "0.05", "--skip-batches", &skip];
    for c in two_ranks(&two_rank_flags(&resume), &other, &[]) {
        common::ok(&c.wait_with_output().unwrap());
    }
    let read = |dir: &std::path::Path| {
        let mut w = tch::Tensor::read_safetensors(dir.join("model.safetensors")).unwrap();
        w.sort_by(|a, b| a.0.cmp(&b.0));
        bits(&w)
    };
    assert_eq!(read(&other), read(&run), "bit-identical weights");
}

#[test]
fn the_same_resume_command_run_again_does_not_skip_or_set_the_lr_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let dpt = |extra: &[&str]| {
        Dpt::new().args(common::training(&[["--epochs", "3"].as_slice(), extra].concat())).output()
    };
    // 600 images in batches of 100: 6 steps an epoch. Two steps, checkpointed at the end.
    common::ok(&dpt(&["--run-dir", run.to_str().unwrap(), "--max-steps", "2"]));
    // Resumed with a skip of one batch and an lr; two more steps: data position (0, 5).
    let continued = |max: &str| {
        dpt(&[
            "--resume",
            run.to_str().unwrap(),
            "--skip-batches",
            "1",
            "--resume-lr",
            "0.02",
            "--max-steps",
            max,
        ])
    };
    let first = common::ok(&continued("4"));
    assert!(!first.contains("without applying them again"), "{first}");
    // The same command again (as a requeue runs it), resuming the run's newer checkpoint.
    let again = common::ok(&continued("6"));
    assert!(
        again.contains("were applied at step 2; continuing from step 4 without applying them again"),
        "{again}"
    );
    let steps: Vec<(u64, u64, u64)> = common::records(&run)
        .iter()
        .filter(|r| r["kind"] == "step")
        .map(|r| {
            (r["global_step"].as_u64().unwrap(), r["epoch"].as_u64().unwrap(), r["step"].as_u64().unwrap())
        })
        .collect();
    // Steps 5 and 6 train the data at (0, 5) and (1, 0): epoch 2's first step, not its second
    // (a second skip would have made it that).
    assert_eq!(steps.last(), Some(&(6, 2, 1)), "{steps:?}");
    let lrs: Vec<f64> = common::records(&run)
        .iter()
        .filter(|r| r["event"] == "lr_changed")
        .map(|r| r["to"].as_f64().unwrap())
        .collect();
    assert_eq!(lrs, vec![0.02], "the lr set once");
}
