"""What a metric's name says it is: an evaluation figure, a loss, an accuracy.

Frameworks and d2l's Animator hand the client named figures (`train_loss`, `val/acc`,
`eval_accuracy`, `test acc`); these rules sort them the way the dashboard shows them.
"""

import re
from typing import Any, Mapping, Optional, Sequence

_EVAL_PREFIXES = ("test", "val", "eval")
_WORDS = re.compile(r"[_\s/\-.]+")


def is_eval(name: str) -> bool:
    """`test acc`, `val_loss`, `validation/acc`, `eval_accuracy`."""
    return name.strip().lower().startswith(_EVAL_PREFIXES)


def has_word(name: str, words: Sequence[str]) -> bool:
    """Whether one of the name's words (split at `_`, `/`, `-`, `.`, spaces) is one of `words`."""
    return any(w in words for w in _WORDS.split(name.strip().lower()))


LOSS_WORDS = ("loss",)
ACC_WORDS = ("acc", "accuracy")


def pick(metrics: Mapping[str, Any], words: Sequence[str]) -> Optional[Any]:
    """The first training figure (not an evaluation one) whose name has one of `words`."""
    for name, value in metrics.items():
        if isinstance(name, str) and not is_eval(name) and has_word(name, words):
            return value
    return None
