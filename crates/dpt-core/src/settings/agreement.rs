//! What every rank of a multi-process run must set alike, from the settings tree: all of it
//! less what is each rank's own — the data's path (a node may keep its own copy), the model
//! files' paths (compared by name), and the placement but for what decides the collectives each
//! rank starts (the buckets, the report cadence, the step limit, the replica check). A field
//! added to the tree is shared unless it is named here as a rank's own.

use serde::Serialize;
use serde_json::{Map, Value};

use super::{Placement, Settings};

/// The placement every rank must share.
#[derive(Serialize)]
struct SharedPlacement {
    bucket_cap_mb: f64,
    log_every: usize,
    max_steps: Option<usize>,
    check_replicas: bool,
}

impl From<&Placement> for SharedPlacement {
    fn from(p: &Placement) -> Self {
        SharedPlacement {
            bucket_cap_mb: p.bucket_cap_mb,
            log_every: p.log_every,
            max_steps: p.max_steps,
            check_replicas: p.check_replicas,
        }
    }
}

/// The settings every rank must agree on, keyed `section.key` so that a rank that differs is
/// told which setting.
pub fn shared(settings: &Settings) -> Map<String, Value> {
    let mut tree = serde_json::to_value(settings).expect("settings serialize");
    if let Some(data) = tree.get_mut("data").and_then(Value::as_object_mut) {
        data.remove("path");
    }
    let model = &settings.model;
    if let Some(file) = model.name.file() {
        tree["model"]["name"] = file.file_name().map(|n| n.to_string_lossy().into_owned()).into();
    }
    tree["model"]["init_from"] = model.init_from.is_some().into();
    tree["placement"] = serde_json::to_value(SharedPlacement::from(&settings.placement)).expect("serializes");
    super::flat(&tree)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_ranks_own_placement_and_paths_may_differ_the_rest_may_not() {
        let a = Settings::default();
        let mut b = a.clone();
        (b.placement.devices, b.placement.cpu_threads) = ("cuda:1".into(), Some(3));
        b.data.path = "/node2/copy".into();
        assert_eq!(shared(&a), shared(&b));
        b.placement.bucket_cap_mb = 50.0;
        b.recipe.label_smoothing = 0.1;
        let (sa, sb) = (shared(&a), shared(&b));
        let differ: Vec<&String> = sa.keys().filter(|k| sa[*k] != sb[*k]).collect();
        assert_eq!(differ, ["placement.bucket_cap_mb", "recipe.label_smoothing"]);
    }
}
