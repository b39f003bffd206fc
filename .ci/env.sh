# Sourced by the set-up and test scripts: where the cached libtorch lives and how tch finds it.
# The 4.6 GB torch install is kept outside the clone, so every clone on this machine shares it.
DPT_CACHE="${DPT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dpt-tui}"
DPT_TORCH_VERSION="2.11.0"
DPT_TORCHVISION_VERSION="0.26.0"
DPT_TIMM_VERSION="1.0.22"
DPT_MATURIN_VERSION="1.16.0"
DPT_CUDA_CRT_VERSION="13.0.88"
DPT_CUDA_CCCL_VERSION="13.0.85"
# DPT_TORCH_INDEX (optional): a PyTorch index for another CUDA variant of the same release, e.g.
# https://download.pytorch.org/whl/cu126 for a driver older than CUDA 13; its own virtualenv.
DPT_TORCH_VARIANT="${DPT_TORCH_INDEX:+-${DPT_TORCH_INDEX##*/}}"
DPT_VENV="$DPT_CACHE/torch-$DPT_TORCH_VERSION$DPT_TORCH_VARIANT"
export DPT_CACHE DPT_TORCH_VERSION DPT_TORCHVISION_VERSION DPT_TIMM_VERSION DPT_TORCH_VARIANT DPT_CUDA_CRT_VERSION DPT_CUDA_CCCL_VERSION DPT_VENV

# The torch to build against: the user's own when DPT_PYTHON names a Python (or a virtualenv or
# conda environment is active) whose torch is 2.11 — found without importing it, passed to tch as
# LIBTORCH=<its folder>, nothing installed into that environment — else dpt-tui's cached one.
# DPT_OWN_TORCH=1 (the test command's) always takes the cached one.
dpt_user_python=""
if [ -z "${DPT_OWN_TORCH:-}" ]; then
    if [ -n "${DPT_PYTHON:-}" ]; then
        dpt_user_python="$DPT_PYTHON"
    elif [ -n "${VIRTUAL_ENV:-}" ] && [ "$VIRTUAL_ENV" != "$DPT_VENV" ] && [ -x "$VIRTUAL_ENV/bin/python" ]; then
        dpt_user_python="$VIRTUAL_ENV/bin/python"
    elif [ -n "${CONDA_PREFIX:-}" ] && [ -x "$CONDA_PREFIX/bin/python" ]; then
        dpt_user_python="$CONDA_PREFIX/bin/python"
    fi
fi
unset DPT_USER_TORCH DPT_USER_PYTHON LIBTORCH
if [ -n "$dpt_user_python" ]; then
    # "VERSION<tab>FOLDER" of its torch, or nothing.
    dpt_found=$("$dpt_user_python" -c 'import importlib.metadata as m, importlib.util as u
s = u.find_spec("torch")
print(m.version("torch"), s.submodule_search_locations[0], sep="\t")' 2>/dev/null || true)
    dpt_version="${dpt_found%%$'\t'*}"
    dpt_dir="${dpt_found#*$'\t'}"
    if [ -z "$dpt_found" ]; then
        [ -n "${DPT_PYTHON:-}" ] && echo "dpt-tui: $DPT_PYTHON has no torch; using dpt-tui's own torch $DPT_TORCH_VERSION (install torch $DPT_TORCH_VERSION there to build against it)" >&2
    elif [ "$(printf %s "$dpt_version" | cut -d. -f1,2)" != "${DPT_TORCH_VERSION%.*}" ]; then
        echo "dpt-tui: the torch of $dpt_user_python is $dpt_version and dpt-tui is built for torch ${DPT_TORCH_VERSION%.*} (tch 0.24): using its own torch $DPT_TORCH_VERSION instead (pip install torch==$DPT_TORCH_VERSION there to build against yours)" >&2
    elif [ ! -d "$dpt_dir/lib" ] || [ ! -d "$dpt_dir/include" ]; then
        echo "dpt-tui: the torch $dpt_version of $dpt_user_python has no lib/ and include/ in $dpt_dir; using dpt-tui's own torch $DPT_TORCH_VERSION" >&2
    else
        export DPT_USER_TORCH="$dpt_version" DPT_USER_PYTHON="$dpt_user_python" LIBTORCH="$dpt_dir" LIBTORCH_CXX11_ABI=1
        # CUDA's crt/ and nv/ headers for the NCCL shim, in dpt-tui's own cache (setup fetches them).
        export DPT_CUDA_HEADERS="$DPT_CACHE/cuda-headers-$DPT_CUDA_CRT_VERSION"
    fi
    unset dpt_found dpt_version dpt_dir
fi
unset dpt_user_python
if [ -n "${DPT_USER_TORCH:-}" ]; then
    unset LIBTORCH_USE_PYTORCH
else
    unset DPT_CUDA_HEADERS
    # tch's documented switch: ask the Python on PATH (our virtualenv's) where libtorch is.
    export LIBTORCH_USE_PYTORCH=1
    export VIRTUAL_ENV="$DPT_VENV"
    export PATH="$DPT_VENV/bin:$PATH"
fi
