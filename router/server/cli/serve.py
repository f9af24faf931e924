"""`smp-router serve`: run the router until SIGINT, SIGTERM or the end of a drain,
after printing the one line other tools wait for (its signals: lifecycle.py).
"""

from __future__ import annotations

import gc
import logging
import os
from dataclasses import replace
from functools import partial

import trio

from ..ops.gc_policy import GcPolicy
from ..ops.info import information_page
from ..router import Router, RouterInfo, serve_router
from ..settings.config import (
    WILDCARD_HOSTS,
    RouterConfig,
)
from ..workers.handoff import group_of_supervisor
from ..workers.layout import worker_config
from ..workers.operations import serve_operations
from ..workers.seat import WorkerSeat, stop_when_supervisor_gone
from ..workers.worker_router import start_worker_router
from .lifecycle import SIGNALS, Reload, Reloaded, run_until_stopped

log = logging.getLogger("smp-router")


async def serve(config: RouterConfig, reload: Reload, seat: WorkerSeat | None = None) -> None:
    """Serve until stopped; as one worker of several if the supervisor gave a `seat`
    (docs/workers.md)."""
    with trio.open_signal_receiver(*SIGNALS) as signals:
        async with trio.open_nursery() as nursery:
            if seat is None:
                info: RouterInfo = await nursery.start(serve_router, config)
            else:
                group = group_of_supervisor(os.getppid())
                # The router's caps and operation ports are the supervisor's (docs/workers.md).
                info = await start_worker_router(
                    nursery, config, seat.ownership, group,
                    seat.identity_dir or config.data_dir, seat.listening_socket())
                await nursery.start(partial(serve_operations, info.router, group, seat.index,
                                            metrics=config.metrics_port is not None))
                nursery.start_soon(stop_when_supervisor_gone, nursery.cancel_scope)
                reload = _worker_reload(reload, seat)
            show_information(info)
            freeze_loaded_state()
            if config.public_host is None and config.host in WILDCARD_HOSTS:
                log.warning("listening on every interface: the address names this machine "
                            "as %s; set public_host if clients know it by another name",
                            config.advertised_host)
            start_gc_policy(nursery, info.router)
            print(ready_line(info), flush=True)
            await run_until_stopped(info, reload, show_information, signals)
            nursery.cancel_scope.cancel()


def _worker_reload(reload: Reload, seat: WorkerSeat) -> Reload:
    """A SIGHUP's configuration as this worker runs it (its share of the data directory)."""

    def reload_worker() -> Reloaded:
        reloaded = reload()
        return replace(reloaded, config=worker_config(reloaded.config, seat.ownership))

    return reload_worker


def ready_line(info: RouterInfo) -> str:
    """The line `serve` prints once it accepts clients: the smp:// address first (SMP
    over TLS, what SimpleX apps speak), then the WebSocket URL of the same port."""
    return f"smp-router listening at {info.address} and {info.url}"


def show_information(info: RouterInfo) -> None:
    """The information page of the configuration in effect (again after a SIGHUP)."""
    info.router.info_page = information_page(info.router.config, info.address)


def freeze_loaded_state() -> None:
    """Keep what is alive once the stores are loaded out of later full collections.

    Queue records, stored messages and the program itself live as long as the
    process; a full gc pass walks every tracked object, which with 100k loaded
    queues is about 100 ms of a stalled router (bench/RESULTS.md). Frozen
    objects are still freed by reference counting when they go.
    """
    gc.collect()
    gc.freeze()


def start_gc_policy(nursery: trio.Nursery, router: Router) -> GcPolicy:
    """Keep the collector's pauses short from now on (gc_policy.py)."""
    policy = GcPolicy()
    nursery.start_soon(policy.run, lambda: router.counters.connections_total)
    return policy
