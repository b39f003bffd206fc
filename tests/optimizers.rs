//! Each optimizer against PyTorch's own: the same TorchScript model from the same weights,
//! full-batch steps on the same images (so the data order cannot matter), dpt-tui on one and
//! two replicas, `torch.optim` in the virtualenv's Python (`tests/scripts/optim_reference.py`);
//! and a run resumed mid-way ends where a straight run does.

use crate::common;

use std::collections::HashMap;
use std::sync::Arc;

use dpt_core::device::DeviceId;
use dpt_core::optim::loss_scale::LossScaling;
use dpt_tui::engine::optim::schedule::{Schedule, Shape};
use dpt_tui::engine::optim::{OptimConfig, OptimizerKind, Zero};
use dpt_tui::engine::{Engine, Outcome, Resume, TrainConfig};
use dpt_tui::model::script::ScriptModel;
use dpt_tui::model::ModelKind;
use dpt_tui::persist::checkpoint::Checkpoint;

/// Training images, all in one batch.
const N: usize = 64;
const STEPS: usize = 5;

fn config(model: &Arc<ScriptModel>, optim: OptimConfig, replicas: usize) -> TrainConfig {
    let mut cfg = TrainConfig::for_script(Arc::clone(model), vec![DeviceId::Cpu; replicas]);
    cfg.settings.recipe.batch_size = N;
    cfg.settings.recipe.epochs = STEPS;
    cfg.settings.optimizer = optim;
    cfg.settings.placement.check_replicas = true;
    cfg
}

fn train(cfg: TrainConfig) -> Outcome {
    let engine = Engine::start(cfg, common::subset(N, 16)).expect("engine starts");
    for _ in engine.events().iter() {}
    engine.join().expect("training succeeds")
}

/// What a test trains with besides the model and data.
#[derive(Clone, Copy)]
struct Recipe {
    optim: OptimConfig,
    clip: Option<f64>,
    label_smoothing: f64,
    /// Micro-batches per replica (PyTorch's side always takes the whole batch at once).
    accumulate: usize,
    ema: Option<f64>,
    /// Dynamic loss scaling, and the step whose scaled loss overflows (on replica 0).
    loss_scale: Option<(LossScaling, usize)>,
}

impl From<OptimConfig> for Recipe {
    fn from(optim: OptimConfig) -> Self {
        Recipe { optim, clip: None, label_smoothing: 0.0, accumulate: 1, ema: None, loss_scale: None }
    }
}

/// PyTorch's parameters after `STEPS` full-batch steps with `recipe`.
fn reference(model: &std::path::Path, recipe: Recipe) -> HashMap<String, Vec<f64>> {
    let optim = recipe.optim;
    let spec = serde_json::json!({
        "optimizer": optim.kind.name(),
        "lr": optim.lr,
        "momentum": optim.momentum,
        "nesterov": optim.nesterov,
        "weight_decay": optim.weight_decay,
        "betas": [optim.betas.0, optim.betas.1],
        "eps": optim.eps,
        "decay_all": optim.decay_all,
        "clip": recipe.clip,
        "label_smoothing": recipe.label_smoothing,
        "ema": recipe.ema,
        "loss_scale": recipe.loss_scale.map(|(l, _)| serde_json::json!({"init": l.init, "interval": l.growth_interval})),
        "overflow_at": recipe.loss_scale.map(|(_, s)| vec![s]).unwrap_or_default(),
    });
    let data = common::subset_dir();
    let (model, data) = (model.to_str().unwrap(), data.to_str().unwrap());
    let out = common::run_script(
        "optim_reference.py",
        &[model, data, &N.to_string(), &STEPS.to_string(), &spec.to_string()],
    );
    assert!(out.status.success(), "optim_reference.py: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON parameters")
}

fn check(recipe: impl Into<Recipe>) -> Vec<Outcome> {
    check_model("mlp", recipe)
}

fn check_model(kind: &str, recipe: impl Into<Recipe>) -> Vec<Outcome> {
    let recipe = recipe.into();
    let dir = tempfile::tempdir().unwrap();
    let path = common::make_model(kind, 1, dir.path());
    let model = Arc::new(ScriptModel::read(&path).unwrap());
    let theirs = reference(&path, recipe);
    let what = format!(
        "{}, clip {:?}, smoothing {}, accumulate {}",
        recipe.optim.describe(),
        recipe.clip,
        recipe.label_smoothing,
        recipe.accumulate
    );
    let mut outcomes = Vec::new();
    // One replica, two, two with the optimizer state split between them (--zero 1), and two
    // with the gradient sums split too (--zero 2).
    for (replicas, zero) in [(1, Zero::Off), (2, Zero::Off), (2, Zero::States), (2, Zero::Gradients)] {
        let mut cfg = config(&model, OptimConfig { zero, ..recipe.optim }, replicas);
        cfg.settings.recipe.clip_grad_norm = recipe.clip;
        cfg.settings.recipe.label_smoothing = recipe.label_smoothing;
        cfg.settings.recipe.accumulate = recipe.accumulate;
        let ours = train(cfg);
        let e = common::relative_error(&ours, &theirs, &model);
        eprintln!("{what}, {replicas} replica(s): {e:.2e} from PyTorch");
        assert!(e < 1e-4, "{what} on {replicas} replica(s) is {e} away from PyTorch's");
        outcomes.push(ours);
    }
    // The sharded update is the same arithmetic on the same values: bit-equal weights.
    let bits = |o: &Outcome| -> Vec<(String, Vec<f32>)> {
        o.final_params.iter().map(|(n, t)| (n.clone(), Vec::try_from(&t.reshape([-1])).unwrap())).collect()
    };
    assert_eq!(bits(&outcomes[1]), bits(&outcomes[2]), "{what}: --zero 1 ends with the weights of --zero 0");
    // Stage 2 sums the same bucket values in the same order within a process; only the clipping
    // norm is summed from the shards' (in another order).
    if recipe.clip.is_none() {
        assert_eq!(
            bits(&outcomes[1]),
            bits(&outcomes[3]),
            "{what}: --zero 2 ends with the weights of --zero 0"
        );
    } else {
        for ((n, a), (_, b)) in bits(&outcomes[1]).iter().zip(&bits(&outcomes[3])) {
            let scale = a.iter().map(|v| v.abs()).fold(1e-12f32, f32::max);
            let far = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max) / scale;
            assert!(far < 1e-5, "{what}: --zero 2's {n} is {far} away from --zero 0's");
        }
    }
    outcomes
}

fn adam(kind: OptimizerKind, weight_decay: f64, decay_all: bool) -> OptimConfig {
    OptimConfig {
        kind,
        weight_decay,
        decay_all,
        betas: (0.85, 0.99),
        eps: 1e-6,
        ..OptimConfig::sgd(3e-3, 0.0, 0.0)
    }
}

/// dpt-tui's fused step on its flat buffers against `torch.optim.*(fused=True)` on the same
/// tensors (three parameters, the last frozen; mean gradients, no `grad_scale`): bit for bit
/// after three steps, the gradient left as it was.
fn fused_equals_torch_fused(optim: OptimConfig) {
    use dpt_tui::engine::flat::Layout;
    use dpt_tui::engine::optim::OptimizerState;
    use dpt_tui::model::{Init, TensorSpec};
    let steps = 3usize;
    let shapes: [&[i64]; 3] = [&[4, 3], &[3], &[2, 2]];
    let spec = serde_json::json!({
        "optimizer": optim.kind.name(), "lr": optim.lr, "momentum": optim.momentum,
        "nesterov": optim.nesterov, "weight_decay": optim.weight_decay,
        "betas": [optim.betas.0, optim.betas.1], "eps": optim.eps, "decay_all": optim.decay_all,
        "steps": steps, "shapes": shapes, "frozen": [2],
    });
    let out = common::run_script("fused_reference.py", &[&spec.to_string()]);
    assert!(out.status.success(), "fused_reference.py: {}", String::from_utf8_lossy(&out.stderr));
    let theirs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let floats = |v: &serde_json::Value| -> Vec<f32> {
        v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
    };
    let specs: Vec<TensorSpec> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| TensorSpec {
            name: format!("t{i}"),
            shape: s.to_vec(),
            init: Init::Zeros,
            frozen: i == 2,
        })
        .collect();
    let layout = Layout::new(&specs, false);
    // The tensors back to back, laid out in the flat buffer as the layout places them (aligned).
    let laid = |values: Vec<f32>| {
        let flat = tch::Tensor::zeros([layout.total()], tch::kind::FLOAT_CPU);
        layout.load_logical(&flat, &tch::Tensor::from_slice(&values));
        flat
    };
    let logical = |flat: &tch::Tensor| -> Vec<f32> {
        let parts: Vec<tch::Tensor> = layout.views(flat).iter().map(|v| v.reshape([-1])).collect();
        Vec::try_from(&tch::Tensor::cat(&parts, 0)).unwrap()
    };
    let params = laid(floats(&theirs["initial"]));
    let mut state = OptimizerState::new(
        optim,
        &params,
        &layout,
        |i| !specs[i].frozen,
        (dpt_core::optim::Span { start: 0, len: layout.total() }, &[]),
    );
    for grads in theirs["grads"].as_array().unwrap() {
        let grad = laid(floats(grads));
        state.step((&grad, 0), (optim.lr, None), None);
        assert_eq!(logical(&grad), floats(grads), "the gradient is only read");
    }
    // A step flagged by the loss scaler's `found_inf` changes nothing and is not counted.
    let before: Vec<f32> = Vec::try_from(&params).unwrap();
    let overflowed = tch::Tensor::from_slice(&[1.0f32]);
    state.step((&laid(floats(&theirs["grads"][0])), 0), (optim.lr, None), Some(&overflowed));
    assert_eq!(Vec::<f32>::try_from(&params).unwrap(), before, "{}: a skipped step", optim.describe());
    let ours = logical(&params);
    let want = floats(&theirs["final"]);
    let differ = ours.iter().zip(&want).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
    assert_eq!(differ, 0, "{}: {ours:?} against PyTorch's {want:?}", optim.describe());
    assert_eq!(
        ours[ours.len() - 4..],
        floats(&theirs["initial"])[ours.len() - 4..],
        "the frozen tensor stays"
    );
}

#[test]
fn fused_steps_equal_torch_optims_fused_kernels_bit_for_bit() {
    fused_equals_torch_fused(OptimConfig::sgd(0.1, 0.0, 1e-2));
    fused_equals_torch_fused(OptimConfig::sgd(0.1, 0.9, 1e-2));
    fused_equals_torch_fused(OptimConfig { nesterov: true, ..OptimConfig::sgd(0.1, 0.9, 1e-2) });
    fused_equals_torch_fused(adam(OptimizerKind::Adam, 0.1, false));
    fused_equals_torch_fused(adam(OptimizerKind::AdamW, 0.5, false));
    fused_equals_torch_fused(adam(OptimizerKind::AdamW, 0.5, true));
}

#[test]
fn sgd_with_momentum_and_weight_decay_equals_torch_optim_sgd() {
    check(OptimConfig::sgd(0.1, 0.9, 1e-2));
}

#[test]
fn nesterov_sgd_equals_torch_optim_sgd() {
    check(OptimConfig { nesterov: true, ..OptimConfig::sgd(0.1, 0.9, 1e-2) });
}

#[test]
fn adam_equals_torch_optim_adam() {
    check(adam(OptimizerKind::Adam, 0.1, false));
}

#[test]
fn adamw_decays_matrices_only_as_timm_does_and_equals_torch_optim_adamw() {
    check(adam(OptimizerKind::AdamW, 0.5, false));
}

#[test]
fn adamw_with_decay_on_every_tensor_equals_torch_optim_adamw() {
    check(adam(OptimizerKind::AdamW, 0.5, true));
}

/// `cfg` with a cosine schedule with warm-up, the weights' EMA, and dynamic loss scaling whose
/// scaled gradient overflows on replica 1 at step 1: what a checkpoint must carry besides the
/// weights and the optimizer state.
fn riding_along(mut cfg: TrainConfig) -> TrainConfig {
    cfg.settings.schedule = Schedule { shape: Shape::Cosine, warmup_steps: 2, min_lr: 1e-4, gamma: 0.1 };
    cfg.settings.recipe.ema = Some(0.7);
    cfg.settings.precision.scale_loss(LossScaling { init: 1024.0, growth_interval: 3 });
    cfg.kit.faults.grad_overflow = vec![(1, 1)];
    cfg
}

#[test]
fn an_adamw_run_resumed_mid_way_ends_where_a_straight_run_does() {
    let dir = tempfile::tempdir().unwrap();
    let path = common::make_model("mlp", 1, dir.path());
    let model = Arc::new(ScriptModel::read(&path).unwrap());
    let optim = adam(OptimizerKind::AdamW, 0.05, false);
    // A cosine schedule, the weights' EMA and dynamic loss scaling with an overflow before the
    // checkpoint ride along: the resumed run needs the scale, the growth count and the skipped
    // steps.
    let recipe = |cfg: TrainConfig, dir: &std::path::Path| {
        std::fs::create_dir_all(dir).unwrap();
        TrainConfig { run_dir: Some(dir.to_owned()), ..riding_along(cfg) }
    };
    let straight_dir = dir.path().join("straight");
    let straight = train(recipe(config(&model, optim, 2), &straight_dir));
    let run = dir.path().join("run");
    let mut first = recipe(config(&model, optim, 2), &run);
    first.settings.placement.max_steps = Some(3);
    train(first);
    let ckpt = Checkpoint::read(&run).unwrap();
    let mut slots: Vec<&str> = ckpt.optimizer.iter().map(|(s, _)| s.as_str()).collect();
    slots.sort_unstable();
    assert_eq!(slots, ["exp_avg", "exp_avg_sq"]);
    assert_eq!(ckpt.state.settings.optimizer.kind, OptimizerKind::AdamW);
    let scaler = ckpt.state.loss_scaler.expect("the scaler is checkpointed");
    assert_eq!((scaler.scale, scaler.growth_tracker, scaler.skipped), (512.0, 1, 1));
    let resume = Resume::new(ckpt, ModelKind::Script, Some(&model), &run).unwrap();
    let mut rest = recipe(config(&model, resume.state.settings.optimizer, 2), &run);
    rest.kit.resume = Some(Box::new(resume));
    let resumed = train(rest);
    let d = common::max_relative_difference(&straight, &resumed);
    assert!(d < 1e-6, "the resumed run differs by {d}");
    let ema = |d: &std::path::Path| {
        let mut named = tch::Tensor::read_safetensors(d.join("model_ema.safetensors")).unwrap();
        named.sort_by(|a, b| a.0.cmp(&b.0));
        named
    };
    for ((n, a), (m, b)) in ema(&straight_dir).iter().zip(&ema(&run)) {
        assert_eq!(n, m);
        assert!(a.allclose(b, 1e-6, 1e-7, false), "the EMA of {n} differs after the resume");
    }
}

#[test]
fn clipping_the_gradient_norm_equals_clip_grad_norm() {
    // Plain SGD moves by exactly lr × the clipped gradient, so a wrong norm shows at once.
    check(Recipe { clip: Some(0.05), ..Recipe::from(OptimConfig::sgd(0.5, 0.0, 0.0)) });
    check(Recipe { clip: Some(0.05), ..Recipe::from(adam(OptimizerKind::AdamW, 0.05, false)) });
}

#[test]
fn label_smoothing_equals_cross_entropy_with_label_smoothing() {
    check(Recipe { label_smoothing: 0.2, ..Recipe::from(OptimConfig::sgd(0.5, 0.9, 0.0)) });
}

#[test]
fn accumulating_micro_batches_equals_the_whole_batch_at_once() {
    // 64 samples: 4 micro-batches of 16 on one replica, of 8 on each of two.
    check(Recipe { accumulate: 4, ..Recipe::from(adam(OptimizerKind::AdamW, 0.05, false)) });
}

/// A run with `recipe`'s loss scaling: its outcome, and each window's loss scale and skipped
/// steps; with `late`, each window is reported a window later (a GPU run's rule).
fn train_scaled(
    model: &Arc<ScriptModel>,
    recipe: Recipe,
    replicas: usize,
    late: bool,
) -> (Outcome, Vec<(f64, usize)>) {
    let mut cfg = config(model, recipe.optim, replicas);
    cfg.kit.faults.late_report = late;
    let (scaling, overflow) = recipe.loss_scale.expect("a loss-scaled recipe");
    cfg.settings.precision.scale_loss(scaling);
    cfg.settings.recipe.clip_grad_norm = recipe.clip;
    cfg.kit.faults.grad_overflow = vec![(0, overflow)];
    cfg.settings.placement.log_every = 1;
    let engine = Engine::start(cfg, common::subset(N, 16)).expect("engine starts");
    let windows = engine
        .events()
        .iter()
        .filter_map(|r| match r {
            dpt_tui::record::Record::Step(s) => s.loss_scale.zip(s.skipped_steps),
            _ => None,
        })
        .collect();
    (engine.join().expect("training succeeds"), windows)
}

#[test]
fn dynamic_loss_scaling_skips_an_overflowing_step_and_rescales_as_grad_scaler_does() {
    let dir = tempfile::tempdir().unwrap();
    let path = common::make_model("mlp", 1, dir.path());
    let model = Arc::new(ScriptModel::read(&path).unwrap());
    // Step 1 overflows: halved to 512 and skipped (Adam's step count leaves it out); two clean
    // steps later it doubles back to 1024.
    let scaling = LossScaling { init: 1024.0, growth_interval: 2 };
    let recipe = Recipe {
        loss_scale: Some((scaling, 1)),
        clip: Some(0.5),
        ..Recipe::from(adam(OptimizerKind::AdamW, 0.05, false))
    };
    let theirs = reference(&path, recipe);
    // Under --zero 2 each replica checks its own shard of the sums; the overflow on one skips
    // the step on both. Reported a window later, the scale and the skipped steps are the same.
    for (replicas, zero, late) in
        [(1, Zero::Off, false), (1, Zero::Off, true), (2, Zero::Off, false), (2, Zero::Gradients, false)]
    {
        let recipe = Recipe { optim: OptimConfig { zero, ..recipe.optim }, ..recipe };
        let (ours, windows) = train_scaled(&model, recipe, replicas, late);
        let e = common::relative_error(&ours, &theirs, &model);
        eprintln!("loss scaling, {replicas} replica(s), --zero {zero}: {e:.2e} from PyTorch");
        assert!(e < 1e-4, "loss scaling on {replicas} replica(s) is {e} away from PyTorch's");
        let scales: Vec<f64> = windows.iter().map(|w| w.0).collect();
        assert_eq!(scales, [1024.0, 512.0, 512.0, 1024.0, 1024.0]);
        assert_eq!(windows.iter().map(|w| w.1).sum::<usize>(), 1);
        assert_eq!(scales.last(), theirs["loss_scale"].first(), "GradScaler's final scale");
    }
}

/// Each window's gradient norm in a run of batches of `batch` logging every `log_every` steps,
/// with `clip`.
fn window_norms(model: &Arc<ScriptModel>, batch: usize, log_every: usize, clip: Option<f64>) -> Vec<f64> {
    let mut cfg = config(model, OptimConfig::sgd(0.1, 0.0, 0.0), 2);
    cfg.settings.recipe.batch_size = batch;
    cfg.settings.placement.log_every = log_every;
    cfg.settings.recipe.clip_grad_norm = clip;
    let engine = Engine::start(cfg, common::subset(N, 16)).unwrap();
    let norms: Vec<f64> = engine
        .events()
        .iter()
        .filter_map(|r| match r {
            dpt_tui::record::Record::Step(s) => s.grad_norm,
            _ => None,
        })
        .collect();
    engine.join().unwrap();
    norms
}

#[test]
fn the_gradient_norm_is_reported_with_each_window() {
    let dir = tempfile::tempdir().unwrap();
    let model = Arc::new(ScriptModel::read(&common::make_model("mlp", 1, dir.path())).unwrap());
    let whole = window_norms(&model, N, 1, None);
    assert_eq!(whole.len(), STEPS);
    assert!(whole.iter().all(|n| n.is_finite() && *n > 0.0), "{whole:?}");
    assert!(whole.iter().all(|n| *n > 4.0 * 0.05), "the clipping test's max norm engages: {whole:?}");
    // Four steps an epoch, windows of three: without clipping a window takes the norm of its
    // last step only (the epoch's last step ends one too); with clipping every step's is taken,
    // and the window's is their mean.
    let every_step = window_norms(&model, N / 4, 1, None);
    assert_eq!(every_step.len(), 4 * STEPS);
    let ends: Vec<usize> = (1..=4 * STEPS).filter(|s| s % 4 == 3 || s % 4 == 0).collect();
    let last_of_each: Vec<f64> = ends.iter().map(|s| every_step[s - 1]).collect();
    assert_eq!(window_norms(&model, N / 4, 3, None), last_of_each);
    let clipped = window_norms(&model, N / 4, 3, Some(1e9));
    let means: Vec<f64> = ends
        .iter()
        .enumerate()
        .map(|(w, &end)| {
            let start = if w == 0 { 0 } else { ends[w - 1] };
            every_step[start..end].iter().sum::<f64>() / (end - start) as f64
        })
        .collect();
    for (a, b) in clipped.iter().zip(&means) {
        assert!(
            (a - b).abs() <= 1e-9 * b,
            "a clipped run's window norm is its steps' mean: {clipped:?} {means:?}"
        );
    }
    assert_eq!(clipped.len(), means.len());
}

#[test]
fn a_frozen_backbone_stays_as_it_was_and_the_head_trains_as_in_pytorch() {
    for optim in [OptimConfig::sgd(0.1, 0.9, 1e-2), adam(OptimizerKind::AdamW, 0.5, true)] {
        let outcomes = check_model("frozen-mlp", optim);
        let dir = tempfile::tempdir().unwrap();
        let start = ScriptModel::read(&common::make_model("frozen-mlp", 1, dir.path())).unwrap();
        let frozen: Vec<&str> = start.params.iter().filter(|p| p.frozen).map(|p| p.name.as_str()).collect();
        assert_eq!(frozen, ["fc1.weight", "fc1.bias"]);
        let mut offset = 0;
        let initial_params = start.initial_values().unwrap().0;
        for spec in &start.params {
            let n = spec.numel() as usize;
            if spec.frozen {
                let initial = initial_params.narrow(0, offset as i64, n as i64).view(spec.shape.as_slice());
                for out in &outcomes {
                    let (_, t) = out.final_params.iter().find(|(name, _)| *name == spec.name).unwrap();
                    assert!(
                        t.equal(&initial),
                        "{} moved (weight decay and momentum must not touch it)",
                        spec.name
                    );
                }
            }
            offset += n;
        }
    }
}

#[test]
fn the_weights_moving_average_equals_timms_model_ema_and_is_evaluated_and_saved() {
    let dir = tempfile::tempdir().unwrap();
    let path = common::make_model("mlp", 1, dir.path());
    let model = Arc::new(ScriptModel::read(&path).unwrap());
    let recipe = Recipe { ema: Some(0.6), ..Recipe::from(adam(OptimizerKind::AdamW, 0.05, false)) };
    let theirs = reference(&path, recipe);
    let run = dir.path().join("run");
    std::fs::create_dir_all(&run).unwrap();
    let mut cfg = config(&model, recipe.optim, 2);
    cfg.settings.recipe.ema = recipe.ema;
    cfg.run_dir = Some(run.clone());
    let engine = Engine::start(cfg, common::subset(N, 16)).unwrap();
    let epochs: Vec<_> = engine
        .events()
        .iter()
        .filter_map(|r| match r {
            dpt_tui::record::Record::Epoch(e) => Some(*e),
            _ => None,
        })
        .collect();
    engine.join().unwrap();
    assert!(
        epochs.iter().all(|e| e.ema_test_acc.is_some() && e.ema_test_loss.is_some()),
        "evaluated each epoch"
    );
    let ema = tch::Tensor::read_safetensors(run.join("model_ema.safetensors")).unwrap();
    let mut worst = 0.0f64;
    for (name, t) in &ema {
        let ours: Vec<f32> = Vec::try_from(&t.reshape([-1])).unwrap();
        let theirs = &theirs[&format!("ema.{name}")];
        for (a, b) in ours.iter().zip(theirs) {
            worst = worst.max((*a as f64 - b).abs());
        }
    }
    assert!(worst < 1e-5, "the EMA is {worst} away from PyTorch's");
    // And it is not the raw weights.
    let raw = tch::Tensor::read_safetensors(run.join("model.safetensors")).unwrap();
    assert!(!raw[0].1.equal(&ema.iter().find(|(n, _)| *n == raw[0].0).unwrap().1));
    // A checkpoint carries it, so a resume continues the same average.
    let ckpt = Checkpoint::read(&run).unwrap();
    assert_eq!(ckpt.ema.as_ref().map(|(p, _)| p.len()), Some(4));
}

#[test]
fn init_from_loads_weights_by_name_and_names_what_it_could_not() {
    let dir = tempfile::tempdir().unwrap();
    let source = Arc::new(ScriptModel::read(&common::make_model("mlp", 1, dir.path())).unwrap());
    let first = dir.path().join("first");
    std::fs::create_dir_all(&first).unwrap();
    let mut cfg = config(&source, OptimConfig::sgd(0.1, 0.0, 0.0), 1);
    cfg.run_dir = Some(first.clone());
    let trained = train(cfg);
    // A model with a new 3-class head: the body loads, the head keeps its own initial values.
    let target = Arc::new(ScriptModel::read(&common::make_model("few-classes", 1, dir.path())).unwrap());
    let mut cfg = config(&target, OptimConfig::sgd(0.1, 0.0, 0.0), 2);
    cfg.settings.placement.max_steps = Some(0);
    cfg.kit.init_from = Some(Box::new(dpt_tui::persist::init_from::InitFrom::read(&first).unwrap()));
    let engine = Engine::start(cfg, common::subset(N, 16)).unwrap();
    let report = engine
        .events()
        .iter()
        .find_map(|r| match r {
            dpt_tui::record::Record::Event(c @ dpt_tui::record::Change::InitFrom { .. }) => Some(c),
            _ => None,
        })
        .expect("the run says what it loaded");
    let started = engine.join().unwrap();
    let dpt_tui::record::Change::InitFrom { loaded, missing, unused, .. } = report else { unreachable!() };
    assert_eq!(loaded, 2);
    assert_eq!(
        missing,
        [
            "fc2.weight (shape [10, 64] in the file, [3, 64] in the model)",
            "fc2.bias (shape [10] in the file, [3] in the model)"
        ]
    );
    assert!(unused.is_empty());
    let tensor =
        |o: &Outcome, name: &str| o.final_params.iter().find(|(n, _)| n == name).unwrap().1.shallow_clone();
    assert!(
        tensor(&started, "fc1.weight").equal(&tensor(&trained, "fc1.weight")),
        "the body comes from the file"
    );
}

#[test]
fn a_checkpoint_moves_between_sharded_and_whole_optimizer_states_and_replica_counts() {
    // Two replicas with the state split (--zero 1), then one with it whole, then three split
    // again: each resumes the other's checkpoint, and the chain ends where a straight run does.
    let dir = tempfile::tempdir().unwrap();
    let path = common::make_model("mlp", 1, dir.path());
    let model = Arc::new(ScriptModel::read(&path).unwrap());
    let optim = adam(OptimizerKind::AdamW, 0.05, false);
    // The EMA, a schedule and the loss scale ride along; the overflow is found on replica 1 at
    // step 1, and the step is skipped on every shard.
    let run_in = |cfg: TrainConfig, run: &std::path::Path| TrainConfig {
        run_dir: Some(run.to_owned()),
        ..riding_along(cfg)
    };
    let straight = train(riding_along(config(&model, optim, 2)));
    let run = dir.path().join("run");
    std::fs::create_dir_all(&run).unwrap();
    let legs = [(2, Zero::States, Some(2)), (1, Zero::Off, Some(4)), (3, Zero::States, None)];
    let mut last = None;
    for (replicas, zero, max_steps) in legs {
        let mut cfg = run_in(config(&model, OptimConfig { zero, ..optim }, replicas), &run);
        cfg.settings.placement.max_steps = max_steps;
        if last.is_some() {
            let ckpt = Checkpoint::read(&run).unwrap();
            let mut slots: Vec<&str> = ckpt.optimizer.iter().map(|(s, _)| s.as_str()).collect();
            slots.sort_unstable();
            assert_eq!(slots, ["exp_avg", "exp_avg_sq"], "the whole state, whatever wrote it");
            cfg.kit.resume =
                Some(Box::new(Resume::new(ckpt, ModelKind::Script, Some(&model), &run).unwrap()));
        }
        let outcome = train(cfg);
        if last.is_none() {
            let ckpt = Checkpoint::read(&run).unwrap();
            let scaler = ckpt.state.loss_scaler.expect("the scaler is checkpointed");
            assert_eq!(scaler.skipped, 1, "the overflow found on one shard skipped the step");
        }
        last = Some(outcome);
    }
    let d = common::max_relative_difference(&straight, &last.expect("three legs"));
    assert!(d < 1e-5, "the chain 2 (sharded) -> 1 -> 3 (sharded) differs from a straight run by {d}");
}
