//! The settings' values that are words on the command line and strings in files: the model
//! (a built-in name or a TorchScript file) and the collective backend.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::model::ModelKind;

/// A built-in model, or the path of the user's TorchScript file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum ModelChoice {
    Builtin(ModelKind),
    File(PathBuf),
}

impl Default for ModelChoice {
    fn default() -> Self {
        ModelChoice::Builtin(ModelKind::Lenet)
    }
}

impl ModelChoice {
    /// The kind of model: a built-in one, or `torchscript` for a file.
    pub fn kind(&self) -> ModelKind {
        match self {
            ModelChoice::Builtin(kind) => *kind,
            ModelChoice::File(_) => ModelKind::Script,
        }
    }

    /// The TorchScript file, for a model of the user's.
    pub fn file(&self) -> Option<&std::path::Path> {
        match self {
            ModelChoice::File(path) => Some(path),
            ModelChoice::Builtin(_) => None,
        }
    }
}

impl std::str::FromStr for ModelChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if let Ok(kind) = s.parse::<ModelKind>() {
            return Ok(ModelChoice::Builtin(kind));
        }
        let looks_like_file = s.contains('/')
            || [".pt", ".pth", ".ts", ".torchscript"].iter().any(|ext| s.ends_with(ext))
            || std::path::Path::new(s).is_file();
        if looks_like_file {
            Ok(ModelChoice::File(PathBuf::from(s)))
        } else {
            Err(format!(
                "unknown model '{s}'; use lenet, resnet18, mnist-net or the path of a TorchScript file"
            ))
        }
    }
}

impl std::fmt::Display for ModelChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModelChoice::Builtin(kind) => f.write_str(kind.name()),
            ModelChoice::File(path) => write!(f, "{}", path.display()),
        }
    }
}

crate::string_form!(ModelChoice);

/// The collective backend across processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DistBackend {
    /// NCCL when every rank trains on GPUs of its own, else Gloo (chosen at the rendezvous).
    #[default]
    Auto,
    Gloo,
    Nccl,
}

crate::names!(DistBackend, "backend", { Auto => "auto", Gloo => "gloo", Nccl => "nccl" });
