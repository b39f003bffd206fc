"""Twenty steps and an evaluation, started with plain `python` (no `dpt-tui run`): `init` starts
the backend itself. Run by tests/script_runs.rs."""
import dpt_tui

with dpt_tui.init(label="counted", total_steps=20) as run:
    for i in range(1, 21):
        run.step(loss=1.0 / i, samples=4)
    run.eval(val_loss=0.5)
print("trained")
