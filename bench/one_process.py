"""The flags that keep a router a bench starts to one process, whatever the machine.

Since `workers = auto` is the default (docs/workers.md#the-default), `smp-router
serve` without `--workers` runs as many workers as the machine has usable cores
(from 3 on): a bench of one process must say so. A source tree from before that
default (another checkout, to compare) runs one process without the flag, and one
from before worker processes would refuse it.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def one_process(tree: Path | None = None) -> list[str]:
    """`--workers 1` for the router of `tree` (this checkout by default) if its default
    is `auto`; nothing for an older tree."""
    tree = HERE if tree is None else tree
    return ["--workers", "1"] if (tree / "router/server/settings/workers.py").exists() else []
