"""workers_split: a hand-off's byte work per SUB of a block, outside the event loop.

    python -m bench workers_split [--base TREE] [--repeats 5] [--version 10]

A block of 100 signed SUBs, half of them another worker's (two workers), as the
storm's (`workers_storm`). Timed, each the best of several loops, per SUB of the
block: the front's sort of the block by owner (`Handoff._split`); and the owner's
answers handed back: the shadow's 50 `OK`s and the mark of the part's end written
as its connection writes them (`Connection._write`'s packing, then the shadow's
transport makes the frame) and taken in by the front (`_write_to_front`, to the
connection's pending list). The CPU of everything else a hand-off costs (frames
through the links, the scheduler's passes, the shadow's dispatcher) is not in it:
`workers_steps` and `workers_storm` measure those. With `--base TREE` (e.g. a `git
archive` of main) each repeat runs both trees, one after the other, each in a
process of its own; the figure is the least of the repeats (the noise of a shared
machine only adds).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from random import Random
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent.parent
SUBS = 100
LOOPS = 2_000


def _best(work: Callable[[], object], loops: int, rounds: int = 5) -> float:
    """Seconds per call of `work`: the best round's."""
    work()
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(loops):
            work()
        best = min(best, (time.perf_counter() - started) / loops)
    return best


def _measure(version: int) -> dict[str, float]:
    """This tree's figures, in microseconds per SUB of the block."""
    from router.protocol.block import encode_batches
    from router.protocol.transmission import encode_transmission
    from router.protocol.types import Transmission
    from router.server.core import connection
    from router.server.core.ownership import Ownership
    from router.server.workers import handoff

    ownership = Ownership(2, 0)
    random = Random(SUBS)  # the same block in every tree
    block = encode_batches([encode_transmission(
        Transmission(random.randbytes(64), random.randbytes(24), random.randbytes(24),
                     b"SUB"), version) for _ in range(SUBS)])[0]
    front_handoff = handoff.Handoff(ownership, "bench-split")
    conn = SimpleNamespace(id=7, version=version, service_id=None, outbox_full=lambda: False)
    parts = front_handoff._split(conn, block)[0]  # type: ignore[arg-type, index]
    elsewhere = len(parts[1])

    # The owner's answers: its part's OKs and the mark of their end, as a shadow writes.
    answers = [encode_transmission(Transmission(b"", random.randbytes(24),
                                                random.randbytes(24), b"OK"), version)
               for _ in range(elsewhere)] + [handoff._PART_DONE]
    frames: list[object] = []
    links = SimpleNamespace(send_nowait=lambda peer, frame: frames.append(frame) or True)
    shadow = handoff.ShadowTransport(SimpleNamespace(links=links), 0, conn.id, "bench")  # type: ignore[arg-type]
    # What `Connection._write` packs a write into for this transport (a tree before
    # `_packer` pads every write).
    pack = getattr(connection, "_packer", lambda transport: connection._packed)(shadow)
    taken: list[list[bytes]] = []
    conn.leave = taken.append
    front = front_handoff._front(SimpleNamespace(conn=conn))  # type: ignore[arg-type]
    front.add_owner(1)

    def hand_back() -> list[bytes]:
        shadow.parts_answered = 1  # the write after a part's answers: one frame, no window
        shadow.send_blocks_now(pack(answers))
        front_handoff._write_to_front(1, frames.pop())
        return taken.pop()

    assert hand_back() == answers[:-1] and front.owners.answered == 1
    sort = _best(lambda: front_handoff._split(conn, block), LOOPS)  # type: ignore[arg-type]
    back = _best(hand_back, LOOPS)
    return {"front's sort of the block": sort / SUBS * 1e6,
            "the owner's answers handed back": back / SUBS * 1e6,
            "SUBs of the block handed off": float(elsewhere)}


def _run_tree(tree: Path, version: int) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", "--version", str(version)],
        cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True,
        text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise SystemExit(f"workers_split in {tree} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench workers_split",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--base", type=Path, help="another checkout, run beside this one")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--version", type=int, default=10, help="the clients' SMP version")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_measure(args.version)))
        return 0
    trees = {"this": HERE} | ({"base": args.base.resolve()} if args.base else {})
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for _ in range(args.repeats):
        for name, tree in trees.items():
            runs[name].append(_run_tree(tree, args.version))
    names = list(trees)
    print(f"| us per SUB of a block of {SUBS} SUBs, v{args.version} (least of "
          f"{args.repeats}) | {' | '.join(names)} |")
    print("|---|" + "---|" * len(names))
    for key in runs[names[0]][0]:
        cells = [f"{min(run[key] for run in runs[name]):.3f}" for name in names]
        print(f"| {key} | {' | '.join(cells)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
