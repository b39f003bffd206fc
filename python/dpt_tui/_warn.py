"""One-line notices on stderr, each said at most once per process.

The client never uses the `warnings` module: a script run with `-W error` would turn a notice
about the dashboard into an exception that ends the training.
"""

import sys

_said = set()


def warn_once(key: str, text: str) -> None:
    """Print `dpt_tui: text` on stderr unless a notice with this key was already printed."""
    if key in _said:
        return
    _said.add(key)
    try:
        sys.stderr.write(f"dpt_tui: {text}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # a closed stderr must not end the training either


def say(text: str) -> None:
    """Print `dpt_tui: text` on stderr, every time."""
    try:
        sys.stderr.write(f"dpt_tui: {text}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
