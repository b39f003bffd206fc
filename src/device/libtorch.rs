//! The libtorch this process loaded, against the one it was built with. A torch upgraded (or
//! another environment's taken) under a built binary is said in one line at start, with the
//! way out, rather than failing later on a missing symbol. (A libtorch too different to load at
//! all stops the dynamic loader before `main`; this catches the ones that load.)

use std::path::{Path, PathBuf};

/// The folder the `libtorch_cpu.so` mapped into this process lives in, from
/// `/proc/self/maps`' text.
pub fn loaded_dir(maps: &str) -> Option<PathBuf> {
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.ends_with("/libtorch_cpu.so"))
        .and_then(|p| Path::new(p).parent().map(Path::to_path_buf))
}

/// The `__version__` of the wheel whose `lib/` is `lib` (its `version.py`, beside `lib/`).
pub fn version_of(lib: &Path) -> Option<String> {
    let text = std::fs::read_to_string(lib.parent()?.join("version.py")).ok()?;
    text.lines()
        .find(|l| l.starts_with("__version__") && l.contains('='))
        .and_then(|l| l.split('=').nth(1))
        .map(|v| v.trim().trim_matches(['\'', '"']).to_owned())
}

/// Whether the libtorch in `maps` is the `built` one (`2.11.0+cu130`); why not, in one line.
/// Nothing to say when either is unknown (a libtorch without `version.py`).
pub fn check(built: &str, maps: &str) -> Result<(), String> {
    let Some(lib) = loaded_dir(maps) else { return Ok(()) };
    let Some(loaded) = version_of(&lib) else { return Ok(()) };
    if built.is_empty() || loaded == built {
        return Ok(());
    }
    Err(format!(
        "this dpt-tui was built against torch {built} but loads torch {loaded} from {}: build it again with 'bash .ci/setup' (DPT_PYTHON names the Python whose torch to use)",
        lib.display()
    ))
}

/// [`check`] of this process against the torch it was built with.
pub fn check_this_process() -> Result<(), String> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    check(super::driver::TORCH_BUILD, &maps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_torch_under_the_binary_is_said_with_both_versions() {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("torch").join("lib");
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::write(
            lib.parent().unwrap().join("version.py"),
            "__version__ = '2.12.0+cu130'\ncuda = '13.0'\n",
        )
        .unwrap();
        let maps = format!(
            "7f00-7f01 r-xp 00000000 08:01 1234 /usr/lib/libc.so.6\n7f10-7f20 r-xp 00000000 08:01 99 {}/libtorch_cpu.so\n",
            lib.display()
        );
        assert_eq!(loaded_dir(&maps), Some(lib.clone()));
        let e = check("2.11.0+cu130", &maps).unwrap_err();
        assert!(e.contains("built against torch 2.11.0+cu130 but loads torch 2.12.0+cu130"), "{e}");
        assert_eq!(check("2.12.0+cu130", &maps), Ok(()));
        assert_eq!(
            check("2.11.0+cu130", "7f00-7f01 r-xp 0 08:01 1 /usr/lib/libc.so.6\n"),
            Ok(()),
            "no libtorch mapped"
        );
    }

    #[test]
    fn this_process_loads_the_torch_it_was_built_with() {
        assert_eq!(check_this_process(), Ok(()));
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        assert!(loaded_dir(&maps).is_some(), "the test binary maps libtorch_cpu.so");
    }
}
