"""dpt_tui: a training script watched and steered from the dpt-tui terminal dashboard.

    import dpt_tui
    run = dpt_tui.init(config=vars(args), optimizer=opt, save=save_checkpoint)
    for step in range(steps):
        ...
        opt.step()
        if run.step(loss=loss, samples=batch_size):
            break
    run.finish()

Start it as `dpt-tui run -- python train.py` (or `torchrun` inside it). Standard library only;
torch is used when the script has imported it. `DPT_DISABLED=1` turns every call into nothing.
Lightning and Hugging Face users add `dpt_tui.LightningCallback()` or `dpt_tui.HFCallback()` to
their trainer's callbacks; d2l users swap `d2l.Animator` for `dpt_tui.Animator`.
"""

from typing import Any

from .animator import Animator
from .run import Run, init

__version__ = "0.1.0"


def LightningCallback() -> Any:
    """A Lightning callback reporting to dpt-tui; see `dpt_tui.lightning.LightningCallback`."""
    from .lightning import LightningCallback as make

    return make()


def HFCallback() -> Any:
    """A Hugging Face TrainerCallback reporting to dpt-tui; see `dpt_tui.hf.HFCallback`."""
    from .hf import HFCallback as make

    return make()


__all__ = ["init", "Run", "Animator", "LightningCallback", "HFCallback", "__version__"]
