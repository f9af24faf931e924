"""A burst of connections splits between the workers (docs/workers.md#the-listener):
every idle worker is woken by the one listening socket, and a worker holding more
than its share of the router's connections leaves the backlog to the others a moment,
so a crowd reconnecting at once does not land in whichever worker ran first."""

from __future__ import annotations

import os
import signal

import psutil
import trio
from operated import operated

from router.server.edge.listener import SHARE_BATCH
from router.server.workers.admission import SHARE_SLACK

CROWD = 200
# A worker's share may be off by its first batch before it hears the others' counts
# (SHARE_SLACK) and by a batch taken after a wait (SHARE_BATCH). Accepting all of a
# wake-up's backlog (256 at most), one worker took the whole crowd.
BOUND = CROWD // 8


def sockets_per_worker(pids: list[int], port: int) -> list[int]:
    """The connections each worker holds on the router's port."""
    return [sum(1 for c in psutil.Process(pid).net_connections("tcp")
                if c.laddr and c.laddr.port == port and c.raddr) for pid in pids]


async def test_a_crowd_waiting_in_the_backlog_is_shared_by_the_workers(tmp_path):
    assert SHARE_SLACK + SHARE_BATCH < BOUND
    async with operated(tmp_path, "--store", "memory", "--max-pending", str(4 * CROWD),
                        "--max-pending-per-address", str(4 * CROWD),
                        "--max-connections-per-address", str(4 * CROWD),
                        "--upgrade-timeout", "120") as r:
        port = int(r.address.rsplit(":", 1)[1])
        pids = r.worker_pids()
        crowd: list[trio.SocketStream] = []
        # The whole crowd in the kernel's backlog before either worker runs, as when a
        # restarting relay's clients all reconnect at once.
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            async with trio.open_nursery() as nursery:
                for _ in range(CROWD):
                    nursery.start_soon(
                        lambda: _append(crowd, trio.open_tcp_stream("127.0.0.1", port)))
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        try:
            with trio.fail_after(60):
                while sum(shares := sockets_per_worker(pids, port)) < CROWD:
                    await trio.sleep(0.05)
            assert all(abs(share - CROWD / 2) <= BOUND for share in shares), shares
        finally:
            for stream in crowd:
                await stream.aclose()


async def _append(streams: list[trio.SocketStream], opening) -> None:  # type: ignore[no-untyped-def]
    streams.append(await opening)
