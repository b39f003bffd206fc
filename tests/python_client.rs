//! The Python client's own unit tests (`python/tests/`, standard-library `unittest`), run by the
//! set-up's Python, so the test command covers the client with the frameworks it serves.

use crate::common;

#[test]
fn the_python_clients_unit_tests_pass() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new(common::python())
        .args(["-m", "unittest", "discover", "-s", "python/tests", "-t", "python"])
        .current_dir(root)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("DPT_TUI_ENDPOINT")
        .env_remove("DPT_DISABLED")
        .output()
        .expect("the set-up's Python runs");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    // unittest's last line: `OK` (with skips counted), never an empty run.
    assert!(!text.contains("Ran 0 tests"), "{text}");
}
