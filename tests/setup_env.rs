//! `.ci/env.sh`'s choice of torch: the user's own when its Python's torch is 2.11, found without
//! importing it; another minor, or none, said in one line and dpt-tui's own taken; the test
//! command's `DPT_OWN_TORCH` always its own. Fake environments: a venv whose site-packages holds a
//! `torch` package and its metadata only.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A virtualenv at `dir` whose torch says it is `version` (a `lib/` and `include/` beside it).
fn fake_env(dir: &Path, version: &str) -> PathBuf {
    let ok = Command::new("python3").args(["-m", "venv", "--without-pip"]).arg(dir).status().unwrap();
    assert!(ok.success(), "python3 -m venv");
    let python = dir.join("bin").join("python");
    let out = Command::new(&python)
        .args(["-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
        .output()
        .unwrap();
    let site = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    for d in ["torch/lib", "torch/include", &format!("torch-{version}.dist-info")] {
        std::fs::create_dir_all(site.join(d)).unwrap();
    }
    // A torch that cannot be imported: the choice must not import it.
    std::fs::write(site.join("torch/__init__.py"), "raise SystemExit('imported')\n").unwrap();
    std::fs::write(
        site.join(format!("torch-{version}.dist-info/METADATA")),
        format!("Metadata-Version: 2.1\nName: torch\nVersion: {version}\n"),
    )
    .unwrap();
    python
}

/// What `.ci/env.sh` chose under `env`: (LIBTORCH, LIBTORCH_USE_PYTORCH, stderr).
fn choice(env: &[(&str, &Path)], own: bool) -> (String, String, String) {
    let mut c = Command::new("bash");
    c.current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "-c",
            "source .ci/env.sh; printf '%s\\n%s\\n' \"${LIBTORCH:-}\" \"${LIBTORCH_USE_PYTORCH:-}\"",
        ])
        .env_remove("VIRTUAL_ENV")
        .env_remove("CONDA_PREFIX")
        .env_remove("DPT_PYTHON")
        .env_remove("DPT_OWN_TORCH");
    for (k, v) in env {
        c.env(k, v);
    }
    if own {
        c.env("DPT_OWN_TORCH", "1");
    }
    let out = c.output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut lines = text.lines().map(str::to_owned);
    (
        lines.next().unwrap_or_default(),
        lines.next().unwrap_or_default(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_users_torch_2_11_is_taken_and_another_minor_refused_in_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let fits = fake_env(&tmp.path().join("fits"), "2.11.1");
    let (libtorch, use_pytorch, err) = choice(&[("DPT_PYTHON", &fits)], false);
    assert!(libtorch.ends_with("/torch") && libtorch.contains("fits"), "{libtorch} {err}");
    assert_eq!(use_pytorch, "", "tch is given LIBTORCH, not asked to import torch");
    assert_eq!(err, "");

    // An active virtualenv counts as well; the test command's own torch wins over both.
    let (libtorch, ..) = choice(&[("VIRTUAL_ENV", &tmp.path().join("fits"))], false);
    assert!(libtorch.contains("fits"), "{libtorch}");
    let (libtorch, use_pytorch, _) = choice(&[("DPT_PYTHON", &fits)], true);
    assert_eq!((libtorch.as_str(), use_pytorch.as_str()), ("", "1"));

    let old = fake_env(&tmp.path().join("old"), "2.9.1");
    let (libtorch, use_pytorch, err) = choice(&[("DPT_PYTHON", &old)], false);
    assert_eq!((libtorch.as_str(), use_pytorch.as_str()), ("", "1"), "its own torch instead");
    assert!(
        err.contains("is 2.9.1 and dpt-tui is built for torch 2.11")
            && err.contains("using its own torch 2.11.0"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}
