"""A loop that raises at its third step: the run is recorded failed with the exception's line."""
import dpt_tui

with dpt_tui.init(label="fails") as run:
    for step in range(1, 10):
        if step == 3:
            raise ValueError("the batch had no rows")
        run.step(loss=1.0 / step)
