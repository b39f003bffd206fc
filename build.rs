//! Link-time fixes for libtorch taken from a PyTorch wheel, and the C++ shim over c10d.
//!
//! torch-sys (a direct dependency for this reason) tells us where `libtorch*.so` lives through
//! `DEP_TCH_LIBTORCH_LIB`. We add that folder as an rpath so the binary and the test executables
//! start without `LD_LIBRARY_PATH`, and we force `libtorch_cuda.so` to stay linked: with the
//! linker's default `--as-needed`, nothing in our code references a CUDA symbol directly, the
//! library is dropped, and libtorch then never registers its CUDA backend on a GPU machine.
//!
//! `src/dist/c10d_shim.cpp` (stores, Gloo, collectives) and `src/dist/c10d_nccl.cpp` (NCCL) are
//! compiled against the wheel's headers with the flags torch-sys uses (C++17, the C++11 ABI),
//! the c10d compile definitions, Gloo's headers from `third_party/gloo` and CUDA's and NCCL's
//! from the wheel's `nvidia/` packages (plus `nvidia-cuda-crt` and `nvidia-cuda-cccl`, which
//! `.ci/setup` installs).

use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    println!("cargo:rerun-if-changed=src/dist/c10d_shim.h");
    println!("cargo:rerun-if-changed=src/dist/dpt_api.h");
    println!("cargo:rerun-if-changed=src/dist/c10d_shim.cpp");
    println!("cargo:rerun-if-changed=src/dist/c10d_nccl.cpp");
    println!("cargo:rerun-if-changed=src/dist/jit_shim.cpp");
    println!("cargo:rerun-if-changed=src/dist/autograd_shim.cpp");
    println!("cargo:rerun-if-changed=src/dist/rng_shim.cpp");
    println!("cargo:rerun-if-changed=third_party/gloo");
    let Ok(lib) = std::env::var("DEP_TCH_LIBTORCH_LIB") else {
        panic!(
            "torch-sys did not report its libtorch folder; set up with .ci/setup (LIBTORCH_USE_PYTORCH=1)"
        );
    };
    let lib = PathBuf::from(lib);
    torch_build(&lib);
    compile_shim(&lib);
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

/// The wheel's `nvidia/<name>/include`, if present.
fn nvidia_include(torch: &Path, name: &str) -> Option<PathBuf> {
    let dir = torch.parent()?.join("nvidia").join(name).join("include");
    dir.is_dir().then_some(dir)
}

fn compile_shim(lib: &Path) {
    let torch = lib.parent().expect("libtorch's lib folder has a parent");
    let include = torch.join("include");
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .std("c++17")
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        .define("USE_DISTRIBUTED", None)
        .define("USE_C10D_GLOO", None)
        .include("src/dist")
        .include("third_party/gloo")
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        // libtorch's headers are not ours to warn about.
        .warnings(false)
        .flag_if_supported("-Wno-unused-parameter")
        .file("src/dist/c10d_shim.cpp")
        .file("src/dist/jit_shim.cpp")
        .file("src/dist/autograd_shim.cpp")
        .file("src/dist/rng_shim.cpp");
    let cuda = nvidia_include(torch, "cu13").or_else(|| nvidia_include(torch, "cuda_runtime"));
    let nccl = nvidia_include(torch, "nccl");
    match (cuda, nccl) {
        (Some(cuda), Some(nccl))
            if cuda.join("crt/host_config.h").exists() && cuda.join("nv/target").exists() =>
        {
            build
                .define("USE_C10D_NCCL", None)
                .define("USE_CUDA", None)
                .define("DPT_HAVE_NCCL", "1")
                .include(cuda)
                .include(nccl)
                .file("src/dist/c10d_nccl.cpp");
        }
        _ => {
            println!(
                "cargo:warning=CUDA or NCCL headers missing next to {} (run .ci/setup): building without the NCCL half",
                torch.display()
            );
            build.define("DPT_HAVE_NCCL", "0").file("src/dist/c10d_no_nccl.cpp");
        }
    }
    build.compile("dpt_c10d");
}
