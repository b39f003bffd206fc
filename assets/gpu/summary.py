"""The figures of assets/gpu/check.sh's folder as Markdown: doctor's verdict, the syncs per step
in steady state, the seed runs' seconds per epoch and test accuracy, and the benches' tables.
Standard library only (a GPU machine's bare Python)."""
import json
import os
import sys


def records(run):
    path = os.path.join(run, "metrics.jsonl")
    if not os.path.isfile(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main(out):
    print("## GPU check\n")
    doctor = os.path.join(out, "doctor.txt")
    if os.path.isfile(doctor):
        lines = [l.rstrip() for l in open(doctor) if l.strip()]
        print("doctor: " + (lines[-1] if lines else "(no output)") + "\n")
    steps = [r for r in records(os.path.join(out, "sync-lenet")) if r.get("kind") == "step"]
    syncs = [r.get("cuda_syncs") for r in steps[1:] if r.get("cuda_syncs") is not None]
    if syncs:
        print(f"syncs per step in steady state (lenet, {len(syncs)} windows after the first): "
              f"{min(syncs):.2f} to {max(syncs):.2f}, last {syncs[-1]:.2f}\n")
    else:
        print("syncs per step: no step record counted them (see sync-lenet.err)\n")
    print("| run | steps | epochs | seconds per epoch (mean of epochs 2 on) | last test accuracy |")
    print("| --- | --- | --- | --- | --- |")
    for name in ("lenet", "lenet-eager", "mnist-net", "mnist-net-eager", "resnet18"):
        if not os.path.isdir(os.path.join(out, name)):
            continue
        said = records(os.path.join(out, name))
        start = next((r for r in said if r.get("kind") == "start"), {})
        steps = start.get("cuda_graphs", "?").split(":")[0]
        fell_back = [r for r in said if "could not capture" in str(r.get("message", ""))]
        if fell_back:
            steps += " (capture failed: " + fell_back[0]["message"].split(": ", 1)[-1] + ")"
        epochs = [r for r in said if r.get("kind") == "epoch"]
        if not epochs:
            print(f"| {name} | {steps} | 0 | - | - (see {name}.err) |")
            continue
        later = [e["epoch_seconds"] for e in epochs[1:]] or [epochs[0]["epoch_seconds"]]
        print(f"| {name} | {steps} | {len(epochs)} | {sum(later) / len(later):.2f} | {epochs[-1]['test_acc']:.4f} |")
    for side in ("after", "before"):
        md = os.path.join(out, f"bench-{side}", "bench.md")
        if os.path.isfile(md):
            print(f"\n### bench, {side}\n")
            print(open(md).read())


if __name__ == "__main__":
    main(sys.argv[1])
