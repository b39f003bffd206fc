//! What a run trained by the user's own script (`dpt-tui run -- CMD`, the `dpt_tui` Python
//! client) records beyond a native run: who it is, what it can be asked to do, its devices as
//! the script named them, and its evaluations and named scalars at any step.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A control a run can take from a viewer. A native run takes them all; a script run those its
/// client announced (a loop without an optimizer cannot change its lr).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Capability {
    Pause,
    Stop,
    Lr,
    Save,
    Rewind,
    /// One a newer client announced that this build does not know.
    #[serde(other)]
    Unknown,
}

impl Capability {
    /// What a viewer is told when it asks a run for a control the run cannot take.
    pub fn refusal(self, label: &str) -> String {
        match self {
            Capability::Rewind => {
                format!("{label} trains in its own loop: a rewind cannot go back inside it")
            }
            Capability::Lr => format!("{label} gave dpt_tui.init no optimizer: its lr cannot be changed"),
            Capability::Save => {
                format!("{label} gave dpt_tui.init no save function: it cannot be saved from here")
            }
            Capability::Pause | Capability::Stop | Capability::Unknown => {
                format!("{label} does not take this control")
            }
        }
    }
}

/// A script's own configuration: any JSON object (`dpt_tui.init(config=...)`).
pub type ScriptConfig = serde_json::Map<String, serde_json::Value>;

/// A device as the script named it (any kind torch has: `cuda`, `cpu`, `mps`, `xpu`…).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ScriptDevice {
    /// torch's device type (`cuda`, `cpu`, `mps`).
    pub kind: String,
    /// Its index among the rank's devices of that kind.
    #[serde(default)]
    pub index: Option<usize>,
    /// The device's name (`NVIDIA H100 80GB HBM3`).
    #[serde(default)]
    pub name: Option<String>,
    /// The GPU's UUID as NVML writes it (`GPU-…`), which is how its figures are found.
    #[serde(default)]
    pub uuid: Option<String>,
    /// The rank whose device it is.
    #[serde(default)]
    pub rank: usize,
}

impl ScriptDevice {
    /// `cuda:1`, `cpu`, `mps:0`.
    pub fn label(&self) -> String {
        match self.index {
            Some(i) if self.kind != "cpu" => format!("{}:{i}", self.kind),
            _ => self.kind.clone(),
        }
    }
}

/// The start record's part for a script run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ScriptInfo {
    /// The model or script, as the script names it (free text).
    pub label: String,
    /// `plain`, `animator`, `lightning`, `hf`.
    pub framework: String,
    /// The command `dpt-tui run` started (empty when the script started the backend itself).
    #[serde(default)]
    pub command: Vec<String>,
    /// The controls the script takes.
    pub can: Vec<Capability>,
    /// Processes (torchrun's ranks).
    pub world_size: usize,
    /// Each rank's device.
    #[serde(default)]
    pub devices: Vec<ScriptDevice>,
    /// The optimizer steps the run will take, if the script said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_steps: Option<usize>,
    /// The script's own configuration, as it gave it.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub config: ScriptConfig,
}

impl ScriptInfo {
    pub fn can(&self, capability: Capability) -> bool {
        self.can.contains(&capability)
    }
}

/// An evaluation at any step (a script's `run.eval(...)`): named figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EvalStats {
    /// The optimizer steps done when it was evaluated.
    pub global_step: usize,
    /// Each figure by the name the script gave it (`val_loss`, `eval_accuracy`).
    pub metrics: BTreeMap<String, f64>,
}

impl EvalStats {
    /// The figure named `loss` or ending in `_loss` / ` loss` (`val_loss`, `test loss`).
    pub fn loss(&self) -> Option<f64> {
        self.find(&["loss"])
    }

    /// The figure named `acc`/`accuracy` or ending so (`val_acc`, `eval_accuracy`).
    pub fn acc(&self) -> Option<f64> {
        self.find(&["acc", "accuracy"])
    }

    fn find(&self, names: &[&str]) -> Option<f64> {
        self.metrics.iter().find_map(|(key, &v)| {
            let last = key.rsplit(['_', ' ', '/', '-']).next().unwrap_or(key);
            names.iter().any(|n| last.eq_ignore_ascii_case(n)).then_some(v)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_capability_reads_as_unknown_and_evals_find_their_loss_and_accuracy() {
        let can: Vec<Capability> = serde_json::from_str(r#"["pause","lr","teleport"]"#).unwrap();
        assert_eq!(can, [Capability::Pause, Capability::Lr, Capability::Unknown]);
        let eval = EvalStats {
            global_step: 3,
            metrics: [
                ("eval_accuracy".to_owned(), 0.5),
                ("val_loss".to_owned(), 1.25),
                ("lossy".to_owned(), 9.0),
            ]
            .into(),
        };
        assert_eq!(eval.loss(), Some(1.25));
        assert_eq!(eval.acc(), Some(0.5));
        assert_eq!(EvalStats::default().loss(), None);
    }
}
