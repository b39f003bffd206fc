//! The PyTorch side of the bench: which Python runs it, and the scripts it runs. The scripts are
//! the PyTorch loops this project's benchmarks and tests compare with (`assets/pytorch/`: the
//! seeds' models in `seed_models.py`, the GPT in `gpt.py`), compiled into the binary and written
//! to the bench's scratch folder, so the binary alone is the kit on a machine without the
//! sources.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cli::bench_args::PythonArg;
use dpt_tui::device::driver::TORCH_BUILD;

/// The seeds' models in PyTorch, with `--steps` for the bench.
const SEED_MODELS: &str = include_str!("../../../assets/pytorch/seed_models.py");
/// nanoGPT's architecture, its TorchScript export and its plain loop (`bench`).
const GPT: &str = include_str!("../../../assets/pytorch/gpt.py");

/// A Python whose torch is this binary's release.
#[derive(Debug, Clone, PartialEq)]
pub struct Python {
    pub path: PathBuf,
    /// `torch.__version__`.
    pub torch: String,
}

/// Whether the bench has a PyTorch side.
#[derive(Debug, Clone, PartialEq)]
pub enum PytorchSide {
    Run(Python),
    /// No PyTorch side, and why (said in the bench's first line).
    Skip(String),
}

/// The Python `--python` names (`none`: no PyTorch side), else the set-up's own virtualenv's
/// when it is there; a named Python without torch, or with another torch release, is refused
/// in one line.
pub fn choose(asked: Option<&PythonArg>) -> Result<PytorchSide, String> {
    let path = match asked {
        Some(PythonArg::None) => return Ok(PytorchSide::Skip("--python none".into())),
        Some(PythonArg::Path(p)) => p.clone(),
        None => match own_venv_python() {
            Some(p) => p,
            None => return Ok(PytorchSide::Skip("no Python with torch found: name one with --python PY".into())),
        },
    };
    match check(&path) {
        Ok(python) => Ok(PytorchSide::Run(python)),
        // The set-up's own Python that fails its check is said, not fatal: the bench runs alone.
        Err(e) if asked.is_none() => Ok(PytorchSide::Skip(e)),
        Err(e) => Err(e),
    }
}

/// The set-up's virtualenv's Python (`DPT_VENV`, else the cache's default place).
fn own_venv_python() -> Option<PathBuf> {
    let venv = match std::env::var_os("DPT_VENV") {
        Some(v) => PathBuf::from(v),
        None => dpt_tui::data::cache_base()?.join(format!("torch-{}", TORCH_BUILD.split('+').next()?)),
    };
    let python = venv.join("bin/python");
    python.is_file().then_some(python)
}

/// `major.minor` of a torch version (`2.11.0+cu130` → `2.11`).
fn release(version: &str) -> &str {
    let mut dots = version.match_indices('.').map(|(i, _)| i);
    let second = dots.nth(1).unwrap_or(version.len());
    &version[..second.min(version.find('+').unwrap_or(version.len()))]
}

/// Asks `path` for its torch's version; refuses one without torch or of another release.
fn check(path: &Path) -> Result<Python, String> {
    let shown = path.display();
    let out = Command::new(path)
        .args(["-c", "import torch; print(torch.__version__)"])
        .output()
        .map_err(|e| format!("--python {shown} does not run: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "--python {shown} has no torch (import torch failed): install torch=={} there, or name another Python",
            release(TORCH_BUILD)
        ));
    }
    let torch = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if release(&torch) != release(TORCH_BUILD) {
        return Err(format!(
            "--python {shown} has torch {torch} and this dpt-tui loads torch {TORCH_BUILD}: the comparison needs the same release; name a Python with torch {}",
            release(TORCH_BUILD)
        ));
    }
    Ok(Python { path: path.to_owned(), torch })
}

/// The PyTorch side's scripts, as written into the scratch folder.
#[derive(Debug, Clone)]
pub struct Scripts {
    /// The seeds' models (`seed_models.py`).
    pub seed_models: PathBuf,
    /// The GPT (`gpt.py`): its TorchScript export and its plain loop.
    pub gpt: PathBuf,
}

impl Scripts {
    /// Writes the scripts into `dir`.
    pub fn write(dir: &Path) -> std::io::Result<Scripts> {
        let scripts = Scripts { seed_models: dir.join("seed_models.py"), gpt: dir.join("gpt.py") };
        std::fs::write(&scripts.seed_models, SEED_MODELS)?;
        std::fs::write(&scripts.gpt, GPT)?;
        Ok(scripts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_is_major_and_minor() {
        assert_eq!(release("2.11.0+cu130"), "2.11");
        assert_eq!(release("2.11.0"), "2.11");
        assert_eq!(release("2.9.1"), "2.9");
        assert_eq!(release("2.12"), "2.12");
    }

    #[test]
    fn a_python_without_torch_or_with_another_is_refused_in_a_line() {
        let dir = tempfile::tempdir().expect("temp");
        let fake = |name: &str, body: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write");
            let mut perm = std::fs::metadata(&path).expect("meta").permissions();
            std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
            std::fs::set_permissions(&path, perm).expect("chmod");
            path.display().to_string()
        };
        let at = |path: String| Some(PythonArg::Path(path.into()));
        let none = fake("no-torch", "echo 'ModuleNotFoundError: torch' >&2; exit 1");
        let e = choose(at(none).as_ref()).expect_err("refused");
        assert!(e.contains("has no torch"), "{e}");
        let old = fake("old-torch", "echo 2.9.1+cu128");
        let e = choose(at(old).as_ref()).expect_err("refused");
        assert!(e.contains("has torch 2.9.1+cu128") && e.contains("same release"), "{e}");
        let same = fake("same-torch", "echo 2.11.0+cpu");
        let torch = match choose(at(same).as_ref()) {
            Ok(PytorchSide::Run(p)) => p.torch,
            other => panic!("{other:?}"),
        };
        assert_eq!(torch, "2.11.0+cpu");
        assert!(matches!(choose(Some(&PythonArg::None)), Ok(PytorchSide::Skip(_))));
        let missing = choose(at("/nonexistent/python".into()).as_ref()).expect_err("refused");
        assert!(missing.contains("does not run"), "{missing}");
    }

    #[test]
    fn the_scripts_travel_in_the_binary() {
        let dir = tempfile::tempdir().expect("temp");
        let scripts = Scripts::write(dir.path()).expect("written");
        assert!(std::fs::read_to_string(scripts.seed_models).expect("seed").contains("def timed_steps"));
        assert!(std::fs::read_to_string(scripts.gpt).expect("gpt").contains("def bench("));
    }
}
