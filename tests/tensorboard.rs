//! TensorBoard event files: every run writes them beside metrics.jsonl, and TensorBoard's own
//! reader (its Python package) reads back every scalar equal to the record's, and the resolved
//! settings as the HParams plugin's hyperparameters; `show RUN --tensorboard` writes them for a
//! run recorded without them, once.

use crate::common;
use common::Dpt;

use std::path::Path;

use serde_json::Value;

/// What TensorBoard's reader finds in `dir`.
fn read_back(dir: &Path) -> Value {
    let out = common::run_script("tensorboard_read.py", &[dir]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Every scalar the record implies is in `tb`, at its step, equal as f32; returns how many
/// were compared.
fn same_as_record(tb: &Value, records: &[Value]) -> usize {
    let scalars = &tb["scalars"];
    let mut expected: Vec<(&str, u64, f64)> = Vec::new();
    let mut step = 0;
    for r in records {
        match r["kind"].as_str() {
            Some("step") => {
                step = r["global_step"].as_u64().unwrap();
                let mut put = |tag, v: &Value| expected.push((tag, step, v.as_f64().unwrap()));
                put("train/loss", &r["loss"]);
                put("train/accuracy", &r["acc"]);
                put("lr", &r["lr"]);
                put("samples_per_sec", &r["samples_per_sec"]);
                put("grad_norm", &r["grad_norm"]);
                if r["timed_steps"].as_u64() != Some(0) {
                    expected.push((
                        "step/forward_backward_ms",
                        step,
                        r["timing"]["compute"].as_f64().unwrap() * 1e3,
                    ));
                    expected.push((
                        "step/allreduce_ms",
                        step,
                        r["timing"]["allreduce"].as_f64().unwrap() * 1e3,
                    ));
                }
            }
            Some("epoch") => {
                expected.push(("test/loss", step, r["test_loss"].as_f64().unwrap()));
                expected.push(("test/accuracy", step, r["test_acc"].as_f64().unwrap()));
                expected.push(("train/epoch_loss", step, r["train_loss"].as_f64().unwrap()));
            }
            _ => {}
        }
    }
    for tag in ["train/loss", "test/accuracy", "step/allreduce_ms"] {
        let written = expected.iter().filter(|e| e.0 == tag).count();
        assert_eq!(scalars[tag].as_array().map_or(0, Vec::len), written, "{tag}: one point per record");
    }
    for (tag, step, value) in &expected {
        let points = scalars[*tag].as_array().unwrap_or_else(|| panic!("no {tag} in {tb}"));
        let found =
            points.iter().find(|p| p[0].as_u64() == Some(*step)).unwrap_or_else(|| panic!("{tag} at {step}"));
        assert_eq!(found[1].as_f64().unwrap() as f32, *value as f32, "{tag} at step {step}");
    }
    expected.len()
}

#[test]
fn every_scalar_reads_back_equal_with_tensorboards_reader_and_old_runs_get_theirs() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let data = common::subset_dir();
    let out = Dpt::new()
        .args(["--headless", "--data", data.to_str().unwrap(), "--run-dir", run.to_str().unwrap()])
        .args(["--devices", "cpu:2", "--epochs", "2", "--log-every", "3", "--lr", "0.15"])
        .scratch_runtime()
        .output();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let tb = read_back(&run.join("tensorboard"));
    let compared = same_as_record(&tb, &common::records(&run));
    assert!(compared > 40, "{compared} scalars compared");
    assert!(tb["scalars"]["device/cpu/utilization"].as_array().is_some_and(|p| !p.is_empty()), "{tb}");
    let h = &tb["hparams"];
    assert_eq!(
        (h["optimizer.lr"].as_f64(), h["recipe.batch_size"].as_f64()),
        (Some(0.15), Some(256.0)),
        "{h}"
    );
    assert_eq!(h["model"], "lenet");

    // A run recorded without event files gets them from its record, once.
    std::fs::remove_dir_all(run.join("tensorboard")).unwrap();
    let show = |run: &Path| Dpt::new().args(["show", run.to_str().unwrap(), "--tensorboard"]).output();
    let out = show(&run);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("wrote "), "{out:?}");
    assert_eq!(same_as_record(&read_back(&run.join("tensorboard")), &common::records(&run)), compared);
    let again = show(&run);
    assert_eq!(again.status.code(), Some(2));
    let said = String::from_utf8_lossy(&again.stderr);
    assert!(said.contains("already holds event files; remove the folder to write them again"), "{said}");
    assert_eq!(said.trim().lines().count(), 1, "{said}");
}
