"""`serve --workers N` through the real command line (docs/workers.md): the workers
share the one address, a worker killed is started again and the address serves on,
SIGTERM, SIGHUP and SIGUSR2 reach every worker, and a data directory made for another
count of workers is refused in one line."""

from __future__ import annotations

import os
import signal
from contextlib import AsyncExitStack

import trio
from supervised import Supervised, alive, run, serving, supervised

from router.client import open_client
from router.server.core.ownership import Ownership


async def test_workers_without_a_data_directory_answer_with_one_identity(tmp_path,
                                                                          monkeypatch):
    """The identity is made once, by the supervisor, even when no data directory keeps
    it: a client finds the printed address's identity whichever worker accepts it, and
    the run's identity is gone with the router."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # where the router keeps it for the run
    log_file = tmp_path / "router.log"
    async with serving(log_file, "--workers", "2", "--store", "memory") as (process, address):
        assert len(list(tmp_path.glob("smp-router-identity-*"))) == 1
        router = Supervised(process, address, log_file)
        for paused in router.worker_pids():
            os.kill(paused, signal.SIGSTOP)  # the other worker accepts
            try:
                with trio.fail_after(20):
                    async with open_client(address) as client:  # checks the identity
                        await client.ping()
            finally:
                os.kill(paused, signal.SIGCONT)
    assert list(tmp_path.glob("smp-router-identity-*")) == []


async def test_the_workers_share_the_address_and_each_takes_connections(tmp_path):
    async with supervised(tmp_path / "data", "--store", "memory", "--log-level", "debug") as r:
        pids = r.worker_pids()
        assert len(pids) == 2 and all(alive(pid) for pid in pids)
        # Both workers wait on the one socket: connections land on either. They are
        # kept open, so that a worker over its share of them leaves the next to the
        # other (docs/workers.md#the-listener) whatever worker the kernel wakes first.
        async with AsyncExitStack() as held:
            for _ in range(60):
                client = await held.enter_async_context(open_client(r.address))
                await client.ping()
                log = r.log()
                if all(f"worker-{i} router.server.router: <Connection" in log
                       for i in (0, 1)):
                    break
            else:
                raise AssertionError(f"connections all landed on one worker\n{r.log()}")
    assert not any(alive(pid) for pid in pids)


async def test_a_killed_worker_is_started_again_with_its_durable_queues(tmp_path):
    async with supervised(tmp_path / "data", "--store", "journal") as r:
        first, second = r.worker_pids()
        # A queue of worker 0's, with a message: NEW runs in the connection's worker,
        # which mints the ids for itself (docs/workers.md#ownership).
        owner_of = Ownership(2, 0).owner_of
        async with AsyncExitStack() as held:  # kept open: see the test above
            for _ in range(60):
                client = await held.enter_async_context(open_client(r.address))
                queue = await client.create_queue(snd_secure=False)
                if owner_of(queue.recipient_id) == 0:
                    await client.send(queue.sender_id, b"kept")
                    break
            else:
                raise AssertionError("no connection landed on worker 0")
        os.kill(first, signal.SIGKILL)
        await r.until_logged(lambda log: "worker 0 is serving again" in log, "the restart")
        assert f"worker 0 (pid {first}) ended: killed by SIGKILL" in r.log()
        assert alive(second) and not alive(first)
        # Whichever worker the connection lands on, GET runs in worker 0, restarted
        # from its journal.
        async with open_client(r.address) as client:
            event = await client.get(queue)
            assert event is not None and event.body == b"kept"


async def test_sighup_reaches_every_worker(tmp_path):
    async with supervised(tmp_path / "data", "--store", "memory") as r:
        r.process.send_signal(signal.SIGHUP)
        await r.until_logged(
            lambda log: all(f"worker-{i} smp-router: SIGHUP: configuration reloaded" in log
                            for i in (0, 1)), "both workers reloading")
        assert "SIGHUP: passed on to 2 workers" in r.log()
        async with open_client(r.address) as client:  # still serving
            await client.ping()


async def test_sigusr2_drains_every_worker_and_ends_the_router(tmp_path):
    async with supervised(tmp_path / "data", "--store", "memory", "--drain-period", "0.2") as r:
        pids = r.worker_pids()
        r.process.send_signal(signal.SIGUSR2)
        with trio.fail_after(30):
            assert await r.process.wait() == 0
        assert "stopping: every worker has ended" in r.log()
        assert all(f"worker-{i} smp-router: stopping: drained" in r.log() for i in (0, 1))
        assert not any(alive(pid) for pid in pids)


async def test_a_worker_ends_when_its_supervisor_dies(tmp_path):
    async with supervised(tmp_path / "data", "--store", "memory") as r:
        pids = r.worker_pids()
        r.process.kill()
        await r.process.wait()
        with trio.fail_after(30):
            while any(alive(pid) for pid in pids):
                await trio.sleep(0.05)
        assert "the supervisor is gone: stopping" in r.log()


async def test_a_data_directory_of_another_count_of_workers_is_refused(tmp_path):
    data = tmp_path / "data"
    async with supervised(data, "--store", "journal"):
        pass
    assert (data / "WORKERS").read_text() == "2\n"
    assert (data / "worker-0" / "journal-store").is_dir()
    assert (data / "worker-1" / "journal-store").is_dir()
    code, out, err = await run("serve", "--data-dir", str(data), "--port", "0",
                               "--store", "journal")
    assert code == 2 and out == ""
    assert err == (f"smp-router: error: data directory {data} holds the queues of 2 workers, "
                   "not 1: start it with --workers 2, or move them first with: smp-router "
                   f"workers-move --data-dir {data} --workers 1\n")
    # A directory one process made: refused with several workers.
    single = tmp_path / "single"
    single.mkdir()
    (single / "STORE_KIND").write_text("journal\n")
    code, out, err = await run("serve", "--data-dir", str(single), "--port", "0",
                               "--workers", "3")
    assert code == 2 and out == ""
    assert f"data directory {single} holds the queues of one process, not 3" in err
    assert err.count("\n") == 1


async def test_a_worker_that_cannot_start_stops_the_router_in_one_line_each(tmp_path):
    data = tmp_path / "data"
    (data / "worker-1").mkdir(parents=True)
    (data / "WORKERS").write_text("2\n")
    (data / "worker-1" / "STORE_KIND").write_text("sqlite\n")  # not the journal asked for
    code, out, err = await run("serve", "--data-dir", str(data), "--port", "0", "--workers",
                               "2", "--store", "journal")
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert f"data directory {data / 'worker-1'} holds a 'sqlite' store" in err
    assert lines[-1] == "smp-router: error: worker 1 could not start (exit code 2)"
