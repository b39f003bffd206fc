//! The run as the start record describes it, from the coordinator's configuration and state.

use super::Coordinator;
use crate::record::RunInfo;

impl Coordinator {
    /// The start record's account of this run: model, devices, the training recipe, the data,
    /// where it resumed, how steps are timed and how gradients are reduced.
    pub(super) fn run_info(&self, steps_per_epoch: usize) -> RunInfo {
        let cfg = self.cfg();
        RunInfo {
            model: cfg.model(),
            task: cfg.task(),
            devices: cfg.devices.clone(),
            param_count: self.update.replicas.param_count(),
            steps_per_epoch,
            lr: self.steps.lr,
            lr_scale: Some(self.steps.plan.scale),
            train_samples: self.facts.train_len,
            test_samples: self.facts.test_len,
            val_samples: self.facts.val_len,
            test_split: self.facts.test_is_val.then(|| "val".to_owned()),
            augment: (!cfg.augment().is_none()).then(|| cfg.augment().describe()),
            cpu_threads_per_replica: cfg.cpu_threads,
            resumed_at: cfg.kit.resume.as_ref().map(|r| r.state.global_step),
            started_unix: Some(crate::unix_now()),
            snapshot_bytes: self.facts.snapshot_bytes,
            bus_bandwidth: self.facts.bus_bandwidth,
            allreduce: self.exchange.reduction.describe(&cfg.devices, self.exchange.world.as_deref()),
            restart: cfg.restart.clone(),
            data: Some(self.facts.data.clone()),
            normalize: Some(cfg.normalization.clone()),
            math: self.facts.math.clone(),
            timing: self.report.clock.as_ref().map(|c| c.describe()).unwrap_or_default(),
            world: self.exchange.world.as_ref().map(|w| crate::record::stats::WorldInfo {
                rank: w.rank,
                backend: format!("{:?}", w.backend).to_lowercase(),
                hosts: w.hosts.clone(),
                replicas: w.replicas.clone(),
                devices: w.devices.clone(),
            }),
            settings: cfg.settings.clone(),
        }
    }
}
