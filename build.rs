//! Link-time fixes for libtorch taken from a PyTorch wheel, and the wheel's version for
//! `dpt-tui doctor` (the C++ shims are compiled by `crates/dpt-sys`).
//!
//! torch-sys (a direct dependency for this reason) tells us where `libtorch*.so` lives through
//! `DEP_TCH_LIBTORCH_LIB`. We add that folder as an rpath so the binary and the test executables
//! start without `LD_LIBRARY_PATH`, and we force `libtorch_cuda.so` to stay linked: with the
//! linker's default `--as-needed`, nothing in our code references a CUDA symbol directly, the
//! library is dropped, and libtorch then never registers its CUDA backend on a GPU machine.

use std::path::{Path, PathBuf};

fn main() {
    // Built without training (`--no-default-features`): nothing of libtorch to link.
    if std::env::var_os("CARGO_FEATURE_TRAIN").is_none() {
        return;
    }
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    let Ok(lib) = std::env::var("DEP_TCH_LIBTORCH_LIB") else {
        panic!(
            "torch-sys did not report its libtorch folder; set up with .ci/setup (LIBTORCH_USE_PYTORCH=1)"
        );
    };
    let lib = PathBuf::from(lib);
    torch_build(&lib);
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    println!("cargo:rustc-link-search=native={}", lib.display());
    println!("cargo:rustc-link-lib=dylib=torch_cpu");
    println!("cargo:rustc-link-lib=dylib=c10");
    if lib.join("libtorch_cuda.so").exists() {
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
        println!("cargo:rustc-link-arg=-ltorch_cuda");
        println!("cargo:rustc-link-arg=-lc10_cuda");
        println!("cargo:rustc-link-arg=-ltorch");
        println!("cargo:rustc-link-arg=-Wl,--as-needed");
    }
}

/// The wheel's version and the CUDA version it was built for, from `torch/version.py`, as
/// `DPT_TORCH_BUILD` (`2.11.0+cu130`) and `DPT_TORCH_CUDA` (`13.0`, empty for a CPU-only build)
/// for `dpt-tui doctor` and the driver messages.
fn torch_build(lib: &Path) {
    let file = lib.parent().map(|t| t.join("version.py"));
    if let Some(f) = &file {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    let text = file.and_then(|f| std::fs::read_to_string(f).ok()).unwrap_or_default();
    let value = |key: &str| {
        text.lines()
            .find(|l| l.starts_with(key) && l.contains('='))
            .and_then(|l| l.split('=').nth(1))
            .map(|v| v.trim().trim_matches(['\'', '"']).to_owned())
            .filter(|v| v != "None")
            .unwrap_or_default()
    };
    println!("cargo:rustc-env=DPT_TORCH_BUILD={}", value("__version__"));
    println!("cargo:rustc-env=DPT_TORCH_CUDA={}", value("cuda"));
}
