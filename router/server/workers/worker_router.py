"""One worker's router with its links to the other workers (docs/workers.md): its
hand-offs, and, behind the shared listening socket, the router's caps on
connections and NEW budgets asked of the supervisor's admission (admission.py).

A worker process starts its one (cli/serve.py); `workers_in_process` starts
several in one process (in_process.py).
"""

from __future__ import annotations

import socket
from functools import partial
from pathlib import Path

import trio

from ..core.limits import give_back_old_grants
from ..core.ownership import Ownership
from ..router import Router, RouterInfo, serve_router
from ..settings.config import RouterConfig
from .admission import SharedAdmission
from .handoff import Handoff
from .layout import worker_config


async def start_worker_router(
    nursery: trio.Nursery, config: RouterConfig, ownership: Ownership, group: str,
    identity_dir: Path | None, listening: socket.socket | None = None,
) -> RouterInfo:
    """Start worker `ownership.index` of the workers of `group` in `nursery`. Given the
    `listening` socket the workers share, it asks the router's admission for `group`
    (admission.py `serve_router_admission`); on a port of its own it keeps its caps
    and NEW budgets itself."""
    handoff = Handoff(ownership, group)
    await nursery.start(handoff.run)
    prepare = handoff.install
    admission = None
    if listening is not None:  # the router's caps, whichever worker accepts
        admission = SharedAdmission(group, ownership.workers)
        await nursery.start(admission.run)
        prepare = partial(_prepare_worker, handoff, admission)
    info: RouterInfo = await nursery.start(partial(
        serve_router, worker_config(config, ownership), ownership=ownership,
        listening=listening, identity_dir=identity_dir, prepare=prepare,
        shared_admission=admission,
    ))
    if admission is not None:
        nursery.start_soon(give_back_old_grants, info.router.commands.give_back_old_grants)
    return info


def _prepare_worker(handoff: Handoff, admission: SharedAdmission, router: Router) -> None:
    """A worker's router before it accepts: its hand-offs, and the router's NEW budgets
    borrowed from the supervisor (core/limits.py)."""
    handoff.install(router)
    router.commands.borrow_new_budgets_from(admission)
