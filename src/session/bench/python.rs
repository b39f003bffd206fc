//! The PyTorch side of the bench: which Python runs it, and the scripts it runs. The scripts are
//! the ones this project's own benchmarks and tests compare with (the seeds' models in
//! `tests/benches/pytorch_seed.py`, the GPT in `tests/scripts/gpt.py`), compiled into the binary
//! and written to the bench's scratch folder, so the binary alone is the kit on a machine
//! without the sources.

use std::path::{Path, PathBuf};
use std::process::Command;

use dpt_tui::device::driver::TORCH_BUILD;

/// The seeds' models in PyTorch, with `--steps` for the bench.
const SEED_SCRIPT: &str = include_str!("../../../tests/benches/pytorch_seed.py");
/// nanoGPT's architecture, its TorchScript export and its plain loop (`bench`).
const GPT_SCRIPT: &str = include_str!("../../../tests/scripts/gpt.py");

/// A Python whose torch is this binary's release.
#[derive(Debug, Clone, PartialEq)]
pub struct Python {
    pub path: PathBuf,
    /// `torch.__version__`.
    pub torch: String,
}

/// The Python `--python` names (`none`: no PyTorch side), else the set-up's own virtualenv's
/// when it is there; a named Python without torch, or with another torch release, is refused
/// in one line. `Ok(None)`: no PyTorch side, and why.
pub fn choose(asked: Option<&str>) -> Result<Result<Python, String>, String> {
    let path = match asked {
        Some("none") => return Ok(Err("--python none".into())),
        Some(p) => PathBuf::from(p),
        None => match own_venv_python() {
            Some(p) => p,
            None => return Ok(Err("no Python with torch found: name one with --python PY".into())),
        },
    };
    match check(&path) {
        Ok(python) => Ok(Ok(python)),
        // The set-up's own Python that fails its check is said, not fatal: the bench runs alone.
        Err(e) if asked.is_none() => Ok(Err(e)),
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

/// The scripts, written into `dir`: (the seeds' script, the GPT script).
pub fn write_scripts(dir: &Path) -> std::io::Result<(PathBuf, PathBuf)> {
    let seed = dir.join("pytorch_seed.py");
    let gpt = dir.join("gpt.py");
    std::fs::write(&seed, SEED_SCRIPT)?;
    std::fs::write(&gpt, GPT_SCRIPT)?;
    Ok((seed, gpt))
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
        let none = fake("no-torch", "echo 'ModuleNotFoundError: torch' >&2; exit 1");
        let e = choose(Some(&none)).expect_err("refused");
        assert!(e.contains("has no torch"), "{e}");
        let old = fake("old-torch", "echo 2.9.1+cu128");
        let e = choose(Some(&old)).expect_err("refused");
        assert!(e.contains("has torch 2.9.1+cu128") && e.contains("same release"), "{e}");
        let same = fake("same-torch", "echo 2.11.0+cpu");
        assert_eq!(choose(Some(&same)).map(|p| p.map(|p| p.torch)), Ok(Ok("2.11.0+cpu".to_owned())));
        assert!(matches!(choose(Some("none")), Ok(Err(_))));
        let missing = choose(Some("/nonexistent/python")).expect_err("refused");
        assert!(missing.contains("does not run"), "{missing}");
    }

    #[test]
    fn the_scripts_travel_in_the_binary() {
        let dir = tempfile::tempdir().expect("temp");
        let (seed, gpt) = write_scripts(dir.path()).expect("written");
        assert!(std::fs::read_to_string(seed).expect("seed").contains("def timed_steps"));
        assert!(std::fs::read_to_string(gpt).expect("gpt").contains("def bench("));
    }
}
