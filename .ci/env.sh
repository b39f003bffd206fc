# Sourced by the set-up and test scripts: where the cached libtorch lives and how tch finds it.
# The 4.6 GB torch install is kept outside the clone, so every clone on this machine shares it.
DPT_CACHE="${DPT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dpt-tui}"
DPT_TORCH_VERSION="2.11.0"
DPT_TORCHVISION_VERSION="0.26.0"
DPT_TIMM_VERSION="1.0.22"
DPT_CUDA_CRT_VERSION="13.0.88"
DPT_CUDA_CCCL_VERSION="13.0.85"
# DPT_TORCH_INDEX (optional): a PyTorch index for another CUDA variant of the same release, e.g.
# https://download.pytorch.org/whl/cu126 for a driver older than CUDA 13; its own virtualenv.
DPT_TORCH_VARIANT="${DPT_TORCH_INDEX:+-${DPT_TORCH_INDEX##*/}}"
DPT_VENV="$DPT_CACHE/torch-$DPT_TORCH_VERSION$DPT_TORCH_VARIANT"
export DPT_CACHE DPT_TORCH_VERSION DPT_TORCHVISION_VERSION DPT_TIMM_VERSION DPT_TORCH_VARIANT DPT_CUDA_CRT_VERSION DPT_CUDA_CCCL_VERSION DPT_VENV
# tch's documented switch: ask the Python on PATH (our virtualenv's) where libtorch is.
export LIBTORCH_USE_PYTORCH=1
export VIRTUAL_ENV="$DPT_VENV"
export PATH="$DPT_VENV/bin:$PATH"
