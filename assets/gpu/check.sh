#!/usr/bin/env bash
# On a GPU machine, in one call of about 6 minutes: every figure the GPU step is judged by.
# Needs python3 with torch 2.11 (no toolchain) and gpu-kit/ from assets/gpu/prepare.sh; writes
# into $OUT (default gpu-out/) and prints summary.md at the end:
#   - doctor;
#   - the synchronizations per step in steady state (DPT_SYNC_DEBUG=1, lenet on cuda:0);
#   - the seed's own runs on one GPU: lenet and resnet18, 10 epochs each on Fashion-MNIST, with
#     their seconds per epoch and test accuracy;
#   - lenet and mnist-net with their steps as CUDA graphs (the default) and with
#     --cuda-graphs off, 3 epochs each;
#   - `dpt-tui bench` of the "after" binary, then of the "before" one when the kit has it, each
#     against PyTorch's loops on the same GPU.
# DEVICE, EPOCHS, MODELS and BUDGET change cuda:0, 10, "lenet resnet18" and 150s (a dry run on a
# CPU machine: DEVICE=cpu EPOCHS=1 MODELS=lenet BUDGET=60s).
set -u
device=${DEVICE:-cuda:0}
epochs=${EPOCHS:-10}
models=${MODELS:-lenet resnet18}
budget=${BUDGET:-150s}
kit=${KIT:-gpu-kit}
out=${OUT:-gpu-out}
mkdir -p "$out"
py=${PYTHON:-python3}
export LD_LIBRARY_PATH=$("$py" -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
for side in after before; do
  if [ -f "$kit/dpt-tui-$side.xz" ]; then
    "$py" -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
      "$kit/dpt-tui-$side.xz" "$out/dpt-tui-$side"
    chmod +x "$out/dpt-tui-$side"
  fi
done
dpt="$out/dpt-tui-after"
data="$kit/fashion-mnist"
"$dpt" doctor >"$out/doctor.txt" 2>&1
run() { # name, flags...
  local name=$1
  shift
  "$dpt" --headless --devices "$device" --data "$data" --checkpoint-every 0 --run-dir "$out/$name" "$@" \
    >"$out/$name.out" 2>"$out/$name.err"
}
DPT_SYNC_DEBUG=1 run sync-lenet --model lenet --epochs 2 --log-every 20
for model in $models; do
  run "$model" --model "$model" --epochs "$epochs"
done
# CUDA graphs against kernel by kernel: the seed's launch-bound models, 3 epochs each way.
for model in lenet mnist-net; do
  [ "$model" = lenet ] || run "$model" --model "$model" --epochs 3
  run "$model-eager" --model "$model" --epochs 3 --cuda-graphs off
done
timeout 200 "$dpt" bench --devices "$device" --budget "$budget" --python "$py" --out "$out/bench-after" >"$out/bench-after.out" 2>&1
if [ -x "$out/dpt-tui-before" ]; then
  timeout 200 "$out/dpt-tui-before" bench --devices "$device" --budget "$budget" --python "$py" --out "$out/bench-before" \
    >"$out/bench-before.out" 2>&1
fi
rm -f "$out"/dpt-tui-after "$out"/dpt-tui-before
"$py" "$(dirname "$0")/summary.py" "$out" | tee "$out/summary.md"
