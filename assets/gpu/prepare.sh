#!/usr/bin/env bash
# Builds, on this machine, what assets/gpu/check.sh runs on a GPU machine that has torch 2.11 and
# CUDA but no toolchain: this tree's release binary ("after"), and with a git revision the one to
# compare it with ("before"), each stripped and xz-compressed, and Fashion-MNIST, into gpu-kit/
# (ignored by git; name it in the device call's `carry`). About 45 MB in all.
#   assets/gpu/prepare.sh [BEFORE_REVISION]
set -euo pipefail
cd "$(dirname "$0")/../.."
source .ci/env.sh
unset RUSTC_WORKSPACE_WRAPPER RUSTFLAGS
kit=gpu-kit
mkdir -p "$kit"
target=${DPT_RELEASE_TARGET:-$DPT_CACHE/release-target}
pack() { # tree name
  (cd "$1" && CARGO_TARGET_DIR="$target" cargo build --release --locked --bin dpt-tui)
  strip -o "$kit/dpt-tui-$2" "$target/release/dpt-tui"
  xz -T0 -f "$kit/dpt-tui-$2"
}
pack . after
if [ $# -gt 0 ]; then
  tree=$(mktemp -d)/before
  git worktree add -q --detach "$tree" "$1"
  pack "$tree" before
  git worktree remove --force "$tree"
fi
data=${DPT_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
mkdir -p "$kit/fashion-mnist"
cp "$data"/*-ubyte.gz "$kit/fashion-mnist/"
du -sh "$kit"
