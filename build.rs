//! Link-time fixes for libtorch taken from a PyTorch wheel.
//!
//! torch-sys (a direct dependency for this reason) tells us where `libtorch*.so` lives through
//! `DEP_TCH_LIBTORCH_LIB`. We add that folder as an rpath so the binary and the test executables
//! start without `LD_LIBRARY_PATH`, and we force `libtorch_cuda.so` to stay linked: with the
//! linker's default `--as-needed`, nothing in our code references a CUDA symbol directly, the
//! library is dropped, and libtorch then never registers its CUDA backend on a GPU machine.

use std::path::Path;

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    let Ok(lib) = std::env::var("DEP_TCH_LIBTORCH_LIB") else {
        println!("cargo:warning=torch-sys did not report its libtorch folder; no rpath is set");
        return;
    };
    println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    if Path::new(&lib).join("libtorch_cuda.so").exists() {
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
        println!("cargo:rustc-link-arg=-ltorch_cuda");
        println!("cargo:rustc-link-arg=-ltorch");
        println!("cargo:rustc-link-arg=-Wl,--as-needed");
    }
}
