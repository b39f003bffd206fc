//! Compiles dpt-tui's C++ shims (`csrc/`) against the libtorch torch-sys found, with the flags
//! torch-sys uses (C++17, the C++11 ABI), the c10d compile definitions, Gloo's headers from the
//! repository's `third_party/gloo` and CUDA's and NCCL's from the wheel's `nvidia/` packages
//! (plus `nvidia-cuda-crt` and `nvidia-cuda-cccl`, which `.ci/setup` installs). Without the CUDA
//! headers the NCCL half is `c10d_no_nccl.cpp`, which refuses each call with a message.

use std::path::{Path, PathBuf};

fn main() {
    // Built without libtorch (`--no-default-features`): no shim to compile or link.
    if std::env::var_os("CARGO_FEATURE_TORCH").is_none() {
        return;
    }
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    println!("cargo:rerun-if-changed=csrc");
    println!("cargo:rerun-if-changed=../../third_party/gloo");
    let Ok(lib) = std::env::var("DEP_TCH_LIBTORCH_LIB") else {
        panic!(
            "torch-sys did not report its libtorch folder; set up with .ci/setup (LIBTORCH_USE_PYTORCH=1)"
        );
    };
    let lib = PathBuf::from(lib);
    let cuda_half = compile_shim(&lib);
    // This package's own test executables start without LD_LIBRARY_PATH too (a link argument
    // reaches only the package's own targets; the main package sets its own).
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    println!("cargo:rustc-link-search=native={}", lib.display());
    println!("cargo:rustc-link-lib=dylib=torch_cpu");
    println!("cargo:rustc-link-lib=dylib=c10");
    // The CUDA half calls libc10_cuda (device count, the caching allocator's statistics)
    // directly; with `--as-needed` it stays linked only where those calls are made.
    if cuda_half && lib.join("libc10_cuda.so").exists() {
        println!("cargo:rustc-link-lib=dylib=c10_cuda");
    }
}

/// The wheel's `nvidia/<name>/include`, if present.
fn nvidia_include(torch: &Path, name: &str) -> Option<PathBuf> {
    let dir = torch.parent()?.join("nvidia").join(name).join("include");
    dir.is_dir().then_some(dir)
}

/// Compiles the shim; whether with its CUDA and NCCL half.
fn compile_shim(lib: &Path) -> bool {
    let torch = lib.parent().expect("libtorch's lib folder has a parent");
    let include = torch.join("include");
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .std("c++17")
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        // As libtorch itself was built (and as PyTorch's extensions are): some of its classes
        // have debug-only members, at::RecordFunction's `inputs_valid_` among them, so a shim
        // built without NDEBUG reads a layout libtorch does not have.
        .define("NDEBUG", None)
        .define("USE_DISTRIBUTED", None)
        .define("USE_C10D_GLOO", None)
        .include("csrc")
        .include("../../third_party/gloo")
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        // libtorch's headers are not ours to warn about.
        .warnings(false)
        // Without DWARF of libtorch's headers (most of the objects and of their build time); a
        // crash in a shim is named by its message, caught at the boundary.
        .debug(false)
        .flag_if_supported("-Wno-unused-parameter")
        // All the shims in one translation unit (csrc/shims.cpp): libtorch's headers, parsed
        // once instead of once per file, were most of the build's C++ time (94 s of compiler
        // time in six files against 28 s in one, on 2 cores).
        .file("csrc/shims.cpp");
    let cuda = nvidia_include(torch, "cu13").or_else(|| nvidia_include(torch, "cuda_runtime"));
    let nccl = nvidia_include(torch, "nccl");
    // A user's own torch (`.ci/env.sh`): CUDA's crt/ and nv/ headers come from dpt-tui's cache.
    println!("cargo:rerun-if-env-changed=DPT_CUDA_HEADERS");
    let extra = std::env::var_os("DPT_CUDA_HEADERS").map(|d| PathBuf::from(d).join("nvidia/cu13/include"));
    let has = |file: &str| cuda.iter().chain(extra.iter()).any(|d| d.join(file).exists());
    let cuda_half = match (cuda.clone(), nccl) {
        (Some(cuda), Some(nccl)) if has("crt/host_config.h") && has("nv/target") => {
            build
                .define("USE_C10D_NCCL", None)
                .define("USE_CUDA", None)
                .define("DPT_HAVE_NCCL", "1")
                .include(cuda)
                .include(nccl);
            if let Some(extra) = extra.filter(|d| d.is_dir()) {
                build.include(extra);
            }
            true
        }
        _ => {
            println!(
                "cargo:warning=CUDA or NCCL headers missing next to {} (run .ci/setup): building without the NCCL half",
                torch.display()
            );
            build.define("DPT_HAVE_NCCL", "0");
            false
        }
    };
    build.compile("dpt_c10d");
    cuda_half
}
