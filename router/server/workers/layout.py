"""Where each worker keeps its share of a data directory, and the count it was made for.

With `--workers N` (N > 1) worker i keeps its embedded store (journal, SQLite,
memory snapshot), its blocked queues and its stats log in `DIR/worker-i/`; the
identity stays in `DIR`, shared. `DIR/WORKERS` records N: the queues' owners are
a function of their ids and N (core/ownership.py), so the same directory under
another N would find each queue in the wrong worker's store. A start with
another count is refused in one line naming the command that moves the queues
(`workers-move`, move.py). The postgres store is shared by every worker, but its
queues' ids are the count's as well (a sender id of another worker than its
recipient id breaks delivery there too), so it records its count the same way
(docs/workers.md#another-count-of-workers).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from store.durability import atomic_write
from store.factory import KIND_FILE

from ..core.ownership import Ownership
from ..settings.config import ConfigError, RouterConfig

WORKERS_FILE = "WORKERS"
SHARED_STORES = frozenset({"postgres"})  # one store for every worker
MOVE_COMMAND = "smp-router workers-move --data-dir {data_dir} --workers {workers}"
MOVE_MARK = "WORKERS-MOVING"  # a move's switch in progress (move.py)


def worker_dir(data_dir: Path, index: int) -> Path:
    return data_dir / f"worker-{index}"


def recorded_workers(data_dir: Path) -> int | None:
    """The count of workers whose shares the directory holds (None: one process's)."""
    try:
        text = (data_dir / WORKERS_FILE).read_text().strip()
    except FileNotFoundError:
        return None
    if not text.isdigit() or int(text) < 2:
        raise ConfigError(f"{data_dir / WORKERS_FILE} does not hold a count of workers: {text!r}")
    return int(text)


def moving_to(data_dir: Path) -> int | None:
    """The count a move cut short in its switch was going to (None: no move)."""
    try:
        return int(json.loads((data_dir / MOVE_MARK).read_text())["to"])
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"{data_dir / MOVE_MARK} is damaged ({e}): the old shares are "
                          "in the newest workers-N.old-* directory") from e


def directory_workers(data_dir: Path | None) -> int | None:
    """The count of workers whose queues `data_dir` holds (1: one process's); None for a
    directory that holds none yet (or no directory)."""
    if data_dir is None:
        return None
    if (moving := moving_to(data_dir)) is not None:
        return moving  # check_worker_count refuses it, naming the command that finishes
    recorded = recorded_workers(data_dir)
    if recorded is not None:
        return recorded
    return 1 if (data_dir / KIND_FILE).exists() else None


def with_auto_workers(config: RouterConfig) -> tuple[RouterConfig, int | None]:
    """`workers = auto` on a data directory that holds queues keeps the directory's count
    (docs/workers.md#the-default): a relay that ran as one process starts as before, on
    any machine, and `workers-move` changes the count when the operator chooses. Returns
    the configuration and the directory's count if it was kept."""
    if not config.workers_auto:
        return config, None
    found = directory_workers(config.data_dir)
    if found is None:
        return config, None
    return replace(config, workers=found), found


def check_worker_count(config: RouterConfig) -> None:
    """Refuse (ConfigError, one line) a data directory made for another count of
    workers; record the count in a fresh directory started with several."""
    data_dir = config.data_dir
    if data_dir is None:
        return
    if (moving := moving_to(data_dir)) is not None:
        raise ConfigError(f"data directory {data_dir} is in the middle of a move to {moving} "
                          "workers: finish it with "
                          f"{MOVE_COMMAND.format(data_dir=data_dir, workers=moving)}")
    command = MOVE_COMMAND.format(data_dir=data_dir, workers=config.workers)
    recorded = recorded_workers(data_dir)
    held_by_one = recorded is None and (data_dir / KIND_FILE).exists()
    if recorded is None and not held_by_one and config.workers > 1:
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        atomic_write(data_dir / WORKERS_FILE, (f"{config.workers}\n".encode(),))
        return
    found = 1 if recorded is None else recorded
    if found != config.workers:
        raise ConfigError(
            f"data directory {data_dir} holds the queues of {_processes(found)}, not "
            f"{config.workers}: start it with --workers {found}, or move them first with: "
            f"{command}"
        )


def _processes(count: int) -> str:
    return "one process" if count == 1 else f"{count} workers"


def worker_config(config: RouterConfig, ownership: Ownership) -> RouterConfig:
    """The configuration worker `ownership.index` runs: its own share of the data
    directory (the identity is read from the shared one); the control and metrics
    ports and the stats log are the supervisor's (workers/operator.py, stats.py: a
    worker with `stats_log` set counts its active queues for it, writing nothing)."""
    if ownership.workers == 1:
        return config
    config = replace(config, control_port=None, metrics_port=None)
    if config.store in SHARED_STORES:  # one schema for every worker, a lock of its own each
        return replace(config, store_options={**config.store_options,
                                              "db_lock_index": ownership.index})
    if config.data_dir is None:
        return config
    return replace(config, data_dir=worker_dir(config.data_dir, ownership.index))
