"""NEW budgets for the router as a whole with several workers (core/limits.py,
docs/workers.md#one-router-to-the-operator): the supervisor's buckets are the truth, a
worker borrows a batch of tokens once its grant is spent, so a client whose NEWs all land
in one worker gets the whole budget and the workers together never exceed it."""

from __future__ import annotations

import secrets
import signal
from contextlib import AsyncExitStack

import pytest
import trio
from operated import ADMIN, CONTROL, clients_on_both_workers, control, operated
from supervised import serving

from router.server.core import limits
from router.server.core.limits import (
    GRANT_BATCH,
    Loan,
    NewQueueLimits,
    RouterBudgets,
    give_back_old_grants,
)
from router.server.edge.admission import AdmissionLimits
from router.server.settings.config import RouterConfig
from router.server.workers.admission import SharedAdmission, serve_admission

BURST = 20
CONFIG = RouterConfig(new_queue_address_rate=0.001, new_queue_address_burst=BURST,
                      new_queue_total_rate=0.001, new_queue_total_burst=BURST + 5)
WIDE = AdmissionLimits(1000, 1000, 1000, None)


class Conn:
    """A connection as the limits key it (weakly)."""


async def allowed(worker: NewQueueLimits, count: int, remote: str = "10.0.0.1:5000") -> int:
    conn = Conn()
    return sum([await worker.allow(conn, remote) for _ in range(count)])


async def two_workers(nursery: trio.Nursery, config: RouterConfig = CONFIG
                      ) -> tuple[RouterBudgets, list[NewQueueLimits]]:
    """Two workers' NEW limits borrowing from one supervisor over the real link."""
    group = secrets.token_hex(8)
    budgets = RouterBudgets(config)
    await nursery.start(serve_admission, group, WIDE, budgets)
    workers = []
    for _ in range(2):
        link = SharedAdmission(group)
        await nursery.start(link.run)
        workers.append(NewQueueLimits(config, 2, link))
    return budgets, workers


async def test_one_address_in_one_worker_gets_the_whole_burst():
    async with trio.open_nursery() as nursery:
        _, (first, second) = await two_workers(nursery)
        assert await allowed(first, BURST + 3) == BURST  # not BURST / 2 as a share would
        assert await allowed(second, 3) == 0  # the address's budget is spent everywhere
        assert await allowed(second, 1, "10.0.0.2:1") == 1  # another address: its own
        nursery.cancel_scope.cancel()


class Counted:
    """A worker's link to the supervisor, counting its round trips."""

    def __init__(self, link: SharedAdmission) -> None:
        self.link = link
        self.round_trips = 0

    async def borrow(self, key: str, wanted: int) -> Loan:
        self.round_trips += 1
        return await self.link.borrow(key, wanted)

    def give_back(self, key: str, tokens: int) -> None:
        self.link.give_back(key, tokens)


async def counted_worker(nursery: trio.Nursery, group: str, config: RouterConfig
                         ) -> tuple[Counted, NewQueueLimits]:
    link = SharedAdmission(group)
    await nursery.start(link.run)
    counted = Counted(link)
    return counted, NewQueueLimits(config, 2, counted)


async def test_a_flood_of_refused_news_costs_one_round_trip_per_worker_not_one_each(
        monkeypatch):
    monkeypatch.setattr(limits, "REFUSAL_LIFETIME", 60.0)  # the flood within one refusal
    group = secrets.token_hex(8)
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_admission, group, WIDE, RouterBudgets(CONFIG))
        first, first_limits = await counted_worker(nursery, group, CONFIG)
        second, second_limits = await counted_worker(nursery, group, CONFIG)
        assert await allowed(first_limits, BURST) == BURST
        first.round_trips = 0
        assert await allowed(first_limits, 500) == 0
        assert await allowed(second_limits, 500) == 0
        assert (first.round_trips, second.round_trips) == (1, 1)  # not 500 each
        # Only that address is refused without asking.
        assert await allowed(first_limits, 1, "10.0.0.2:1") == 1
        assert first.round_trips == 2
        nursery.cancel_scope.cancel()


async def test_past_the_routers_budget_a_flood_from_many_addresses_is_refused_in_the_worker(
        monkeypatch):
    monkeypatch.setattr(limits, "REFUSAL_LIFETIME", 60.0)  # the flood within one refusal
    config = RouterConfig(new_queue_address_rate=0.001, new_queue_address_burst=100,
                          new_queue_total_rate=0.001, new_queue_total_burst=10)
    group = secrets.token_hex(8)
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_admission, group, WIDE, RouterBudgets(config))
        counted, worker = await counted_worker(nursery, group, config)
        assert await allowed(worker, 10) == 10  # the router's burst, from one address
        counted.round_trips = 0
        assert sum([await allowed(worker, 2, f"10.0.{i // 250}.{i % 250}:1")
                    for i in range(300)]) == 0
        assert counted.round_trips == 1  # not one per address
        nursery.cancel_scope.cancel()


async def test_a_refused_address_gets_news_again_once_its_bucket_refills(mock_clock):
    config = RouterConfig(new_queue_address_rate=2.0, new_queue_address_burst=4)
    group = secrets.token_hex(8)
    async with trio.open_nursery() as nursery:
        budgets = RouterBudgets(config)
        await nursery.start(serve_admission, group, WIDE, budgets)
        counted, worker = await counted_worker(nursery, group, config)
        assert await allowed(worker, 4 + 100) == 4
        assert counted.round_trips == 2  # the burst, then one refusal for the flood
        mock_clock.jump(0.4)  # a token in 0.5 s: refused without asking meanwhile
        assert await allowed(worker, 10) == 0 and counted.round_trips == 2
        mock_clock.jump(0.15)
        assert await allowed(worker, 10) == 1  # the refilled token, then refused again
        assert counted.round_trips == 4
        # A bucket slow to refill is asked again after REFUSAL_LIFETIME at most, for the
        # tokens another worker may have given back meanwhile.
        slow = RouterConfig(new_queue_address_rate=0.001, new_queue_address_burst=4)
        await nursery.start(serve_admission, group + "s", WIDE, RouterBudgets(slow))
        counted, worker = await counted_worker(nursery, group + "s", slow)
        assert await allowed(worker, 4 + 100) == 4 and counted.round_trips == 2
        mock_clock.jump(limits.REFUSAL_LIFETIME + 0.01)
        assert await allowed(worker, 100) == 0 and counted.round_trips == 3
        nursery.cancel_scope.cancel()


async def test_two_workers_together_never_exceed_the_routers_budget(monkeypatch):
    monkeypatch.setattr(limits, "GRANT_LIFETIME", 0.2)
    async with trio.open_nursery() as nursery:
        _, (first, second) = await two_workers(nursery)
        took = 0
        for _ in range(BURST):  # turn about: each holds a grant the other cannot use
            took += await allowed(first, 1) + await allowed(second, 1)
        assert BURST - 2 * GRANT_BATCH <= took <= BURST
        # The grants a worker did not use go back once old: the rest of the burst, no more.
        await trio.sleep(0.3)
        took += await allowed(first, BURST) + await allowed(second, BURST)
        assert took == BURST
        # The router's own budget (BURST + 5) holds over addresses too.
        others = sum([await allowed(w, 10, f"10.0.1.{i}:1") for i in range(3)
                      for w in (first, second)])
        assert others == 5
        nursery.cancel_scope.cancel()


async def test_a_grant_unused_goes_back_with_no_new_in_its_worker(monkeypatch):
    """Tokens a worker holds for an address go back once old even if no NEW of any
    client comes to that worker again (`give_back_old_grants`, which each worker runs):
    a client of the address on the other worker gets them."""
    monkeypatch.setattr(limits, "GRANT_LIFETIME", 0.2)
    monkeypatch.setattr(limits, "REFUSAL_LIFETIME", 0.2)
    config = RouterConfig(new_queue_address_rate=0.001, new_queue_address_burst=GRANT_BATCH)
    async with trio.open_nursery() as nursery:
        _, (first, second) = await two_workers(nursery, config)
        assert await allowed(first, 1) == 1  # the first holds the rest of its batch
        assert await allowed(second, 1) == 0
        await trio.sleep(0.5)
        assert await allowed(second, 1) == 0  # only a NEW of the first's gave them back
        nursery.start_soon(give_back_old_grants, first.give_back_old)
        await trio.sleep(0.5)
        assert await allowed(second, GRANT_BATCH) == GRANT_BATCH - 1
        nursery.cancel_scope.cancel()


async def test_a_worker_that_dies_loses_its_grant_and_makes_no_tokens():
    group = secrets.token_hex(8)
    budgets = RouterBudgets(CONFIG)
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_admission, group, WIDE, budgets)
        async with trio.open_nursery() as worker_process:
            link = SharedAdmission(group)
            await worker_process.start(link.run)
            assert await allowed(NewQueueLimits(CONFIG, 2, link), 1) == 1  # a batch borrowed
            worker_process.cancel_scope.cancel()  # the worker dies holding the rest
        await trio.sleep(0.05)
        assert budgets.lend("10.0.0.1", BURST) == BURST - GRANT_BATCH
        nursery.cancel_scope.cancel()


async def test_a_borrow_unanswered_refuses_its_new_and_stalls_no_one(monkeypatch):
    monkeypatch.setattr(limits, "BORROW_TIMEOUT", 0.3)

    class Silent:
        """A supervisor that never answers."""

        async def borrow(self, key: str, wanted: int) -> Loan:
            await trio.sleep_forever()

        def give_back(self, key: str, tokens: int) -> None:
            raise AssertionError("nothing was granted")

    worker = NewQueueLimits(CONFIG, 2, Silent())
    others = NewQueueLimits(RouterConfig(), 2)  # another client, no budgets: never waits
    async with trio.open_nursery() as nursery:
        results: list[bool] = []

        async def waiting() -> None:
            results.append(await worker.allow(Conn(), "10.0.0.1:1"))

        nursery.start_soon(waiting)
        await trio.sleep(0.05)
        assert await others.allow(Conn(), "10.0.0.9:1")  # while the other NEW waits
        assert results == []
    assert results == [False]


async def test_a_grant_that_comes_after_its_new_gave_up_goes_back():
    link = SharedAdmission(secrets.token_hex(8))
    with trio.move_on_after(0.05):
        await link.borrow("10.0.0.1", GRANT_BATCH)
    assert link._lines.receive_nowait() == f"B 1 {GRANT_BATCH} 10.0.0.1"
    link._take("G 1 5 10.0.0.1")
    assert link._lines.receive_nowait() == "R 5 10.0.0.1"
    link._take("W 2 0.5 10.0.0.1")  # a late refusal: nothing to give back
    with pytest.raises(trio.WouldBlock):
        link._lines.receive_nowait()


async def test_no_supervisor_is_a_refusal():
    link = SharedAdmission(secrets.token_hex(8))
    link._lose()  # its link ended
    assert await NewQueueLimits(CONFIG, 2, link).allow(Conn(), "10.0.0.1:1") is False


def budget_args(burst: int) -> tuple[str, ...]:
    return ("--store", "memory", "--new-queues-per-second-per-address", "0.001",
            "--new-queues-burst-per-address", str(burst))


async def test_two_workers_of_the_command_line_give_one_address_its_whole_burst(tmp_path):
    burst = 6
    async with operated(tmp_path, *budget_args(burst)) as r:
        async with AsyncExitStack() as stack:
            clients = await clients_on_both_workers(r.address, r.control_port, stack)
            created = []
            for client in (clients[0], clients[-1]):  # the whole burst in the first's worker
                created.append(0)
                for _ in range(burst + 1):
                    try:
                        await client.create_queue()
                        created[-1] += 1
                    except Exception as e:  # noqa: BLE001 - the refusal is checked below
                        assert "NEW_RATE_LIMIT" in repr(e), e
            assert created == [burst, 0]  # not burst / 2 in each worker
        (stats,) = await control(r.control_port, "stats")
        assert f"new_queues_rate_limited: {burst + 2}" in stats


async def test_the_tokens_a_worker_holds_unused_reach_the_other_without_its_news(tmp_path):
    """Through the command line: one NEW in a worker borrows a batch; the rest, unused
    there, is the other worker's client's once the grant is old, without another NEW in
    the first worker."""
    async with operated(tmp_path, *budget_args(GRANT_BATCH)) as r:
        async with AsyncExitStack() as stack:
            clients = await clients_on_both_workers(r.address, r.control_port, stack)
            assert await created(clients[0], 1) == 1
            assert await created(clients[-1], 1) == 0  # held by the first's worker
            await trio.sleep(2 * limits.GRANT_LIFETIME + limits.REFUSAL_LIFETIME + 0.2)
            assert await created(clients[-1], GRANT_BATCH) == GRANT_BATCH - 1


def limits_ini(path, burst: int) -> None:
    path.write_text(f"[AUTH]\ncontrol_port_admin_password = {ADMIN}\n"
                    f"[STORE_LOG]\ndata_dir = {path.parent / 'data'}\n"
                    f"[LIMITS]\nnew_queues_per_second_per_address = 0.001\n"
                    f"new_queues_burst_per_address = {burst}\n")


async def created(client, attempts: int) -> int:
    made = 0
    for _ in range(attempts):
        try:
            await client.create_queue()
            made += 1
        except Exception as e:  # noqa: BLE001 - the refusal is checked here
            assert "NEW_RATE_LIMIT" in repr(e), e
    return made


async def test_sighup_gives_the_supervisor_and_the_workers_the_new_budget(tmp_path):
    ini = tmp_path / "r.ini"
    limits_ini(ini, 3)
    log_file = tmp_path / "router.log"
    async with serving(log_file, "--config", str(ini), "--workers", "2", "--store", "memory",
                       "--control-port", "0") as (process, address):
        port = int(CONTROL.search(log_file.read_text())[1])

        async def sighup() -> None:
            reloads = log_file.read_text().count("SIGHUP: configuration reloaded")
            process.send_signal(signal.SIGHUP)
            with trio.fail_after(30):
                while log_file.read_text().count("SIGHUP: configuration reloaded") < reloads + 2:
                    await trio.sleep(0.05)

        async with AsyncExitStack() as stack:
            clients = await clients_on_both_workers(address, port, stack)
            first, last = clients[0], clients[-1]
            assert (await created(first, 4), await created(last, 2)) == (3, 0)
            limits_ini(ini, 6)
            await sighup()  # every bucket at its new size, the supervisor's too
            assert (await created(first, 7), await created(last, 2)) == (6, 0)
            await sighup()  # nothing changed: the buckets stay as they are
            await trio.sleep(limits.REFUSAL_LIFETIME + 0.1)  # the workers ask again
            assert (await created(first, 2), await created(last, 2)) == (0, 0)
            limits_ini(ini, 3)
            await sighup()  # back to the first budget
            assert (await created(last, 4), await created(first, 2)) == (3, 0)
    assert "Traceback" not in log_file.read_text()


async def test_above_the_budget_at_most_the_grants_the_workers_hold(mock_clock, monkeypatch):
    """docs/workers.md: over any period, an address's NEWs are at most burst + rate x
    period plus what the workers held unused when it began, a grant (8) per worker; the
    worst case, reached: both hold a grant while the bucket refills to full."""
    monkeypatch.setattr(limits, "GRANT_LIFETIME", 10.0)
    config = RouterConfig(new_queue_address_rate=16.0, new_queue_address_burst=8)
    group = secrets.token_hex(8)
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_admission, group, WIDE, RouterBudgets(config))
        (_, first), (_, second) = [await counted_worker(nursery, group, config)
                                   for _ in range(2)]
        assert await allowed(first, 1) == 1  # holds 7 of the 8 it borrowed
        mock_clock.jump(0.5)  # the bucket full again
        assert await allowed(second, 1) == 1  # holds 7 too
        mock_clock.jump(0.5)
        # The period begins: no time passes in it (rate x period = 0).
        burst_of_news = await allowed(first, 100) + await allowed(second, 100)
        assert burst_of_news == 8 + 2 * (GRANT_BATCH - 1)
        nursery.cancel_scope.cancel()
