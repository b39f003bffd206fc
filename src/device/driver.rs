//! Whether the NVIDIA driver can run this build's libtorch. A driver supports CUDA up to a
//! version (NVML's `nvmlSystemGetCudaDriverVersion`, e.g. 12040 = 12.4); the PyTorch wheel the
//! build links was built for one CUDA version (`torch/version.py`, read by `build.rs`), and
//! needs a driver that supports at least that one (NVIDIA's minor-version compatibility: any
//! driver of the same CUDA major's branch, R580 for CUDA 13). An older driver is the most likely
//! first result on a fleet that has not moved to the R580 branch, so `dpt-tui doctor` says it in
//! its first line, with the fix.

/// The PyTorch build this binary links (`2.11.0+cu130`).
pub const TORCH_BUILD: &str = env!("DPT_TORCH_BUILD");

/// The CUDA version that build was made for (`13.0`), `None` for a CPU-only build.
pub fn torch_cuda() -> Option<&'static str> {
    Some(env!("DPT_TORCH_CUDA")).filter(|v| !v.is_empty())
}

/// The driver branch NVIDIA's data-center support matrix lists for a CUDA major version.
fn branch_for(major: u32) -> Option<&'static str> {
    match major {
        13 => Some("R580"),
        12 => Some("R525"),
        _ => None,
    }
}

/// `12040` → (12, 4).
fn cuda_of(driver_cuda: i32) -> (u32, u32) {
    let v = driver_cuda.max(0) as u32;
    (v / 1000, (v % 1000) / 10)
}

/// "13.0" → (13, 0).
fn parse_cuda(text: &str) -> Option<(u32, u32)> {
    let (major, minor) = text.split_once('.')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// What doctor's first line says.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub ok: bool,
    pub line: String,
    /// The way out, when not ok.
    pub fix: Option<String>,
}

/// The verdict on `driver` (its version, e.g. `550.54.15`, `None` without a driver) whose CUDA
/// is `driver_cuda` (NVML's number), for a libtorch `torch_build` made for `torch_cuda`.
pub fn verdict(
    driver: Option<&str>,
    driver_cuda: Option<i32>,
    torch_build: &str,
    torch_cuda: Option<&str>,
) -> Verdict {
    let ok = |line: String| Verdict { ok: true, line, fix: None };
    let Some(driver) = driver else {
        return ok("no NVIDIA driver (NVML not found): this machine trains on the CPU".to_owned());
    };
    let Some(needed) = torch_cuda.and_then(parse_cuda) else {
        return Verdict {
            ok: false,
            line: format!("NVIDIA driver {driver}, but torch {torch_build} is a CPU-only build: the GPUs cannot be used"),
            fix: Some("set up again with the default PyPI torch (a CUDA build): bash .ci/setup".to_owned()),
        };
    };
    let Some(has) = driver_cuda.map(cuda_of) else {
        return ok(format!(
            "NVIDIA driver {driver} (its CUDA version unknown); torch {torch_build} needs CUDA {}.{}",
            needed.0, needed.1
        ));
    };
    let branch = branch_for(needed.0).map_or(String::new(), |b| format!(" (the {b} branch or newer)"));
    // Since CUDA 11 a driver runs every minor version of its CUDA major.
    if has >= needed || (has.0 == needed.0 && needed.0 >= 11) {
        return ok(format!(
            "NVIDIA driver {driver} supports CUDA {}.{}: enough for torch {torch_build} (CUDA {}.{})",
            has.0, has.1, needed.0, needed.1
        ));
    }
    Verdict {
        ok: false,
        line: format!(
            "NVIDIA driver {driver} supports CUDA {}.{} only; torch {torch_build} needs CUDA {}.{}: libtorch cannot use the GPUs",
            has.0, has.1, needed.0, needed.1
        ),
        fix: Some(format!(
            "install an NVIDIA driver for CUDA {}.{}{branch}, or set up a torch build for CUDA {}.x (docs/getting-started.md, 'GPU drivers')",
            needed.0, needed.1, has.0
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_driver_older_than_the_wheels_cuda_fails_with_the_fix() {
        let v = verdict(Some("550.54.15"), Some(12040), "2.11.0+cu130", Some("13.0"));
        assert!(!v.ok);
        assert_eq!(
            v.line,
            "NVIDIA driver 550.54.15 supports CUDA 12.4 only; torch 2.11.0+cu130 needs CUDA 13.0: libtorch cannot use the GPUs"
        );
        let fix = v.fix.unwrap();
        assert!(fix.contains("CUDA 13.0 (the R580 branch or newer)") && fix.contains("CUDA 12.x"), "{fix}");
    }

    #[test]
    fn the_same_major_or_a_newer_one_is_enough() {
        // Minor-version compatibility: any CUDA 13 driver runs a 13.0 build.
        for cuda in [13000, 13020, 14000] {
            let v = verdict(Some("580.95.05"), Some(cuda), "2.11.0+cu130", Some("13.0"));
            assert!(v.ok && v.line.starts_with("NVIDIA driver 580.95.05 supports CUDA 1"), "{v:?}");
        }
    }

    #[test]
    fn no_driver_and_cpu_builds_are_said_plainly() {
        assert!(verdict(None, None, "2.11.0+cu130", Some("13.0")).ok);
        let cpu = verdict(Some("580.95.05"), Some(13000), "2.11.0+cpu", None);
        assert!(!cpu.ok && cpu.line.contains("CPU-only build"), "{cpu:?}");
        let unknown = verdict(Some("580.95.05"), None, "2.11.0+cu130", Some("13.0"));
        assert!(unknown.ok && unknown.line.contains("unknown"));
        assert_eq!(torch_cuda(), Some("13.0"), "the build read torch/version.py");
        assert!(TORCH_BUILD.starts_with("2.11.0"));
    }
}
