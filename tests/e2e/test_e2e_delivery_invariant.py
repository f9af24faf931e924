"""The delivery invariant under random interleavings, on every store and delivery mode.

Each run starts clients against the real router on loopback and lets them act at
once, each from its own seeded random script: two senders send pipelined blocks of
SENDs, two subscribers SUB and ACK (several commands per block) and now and then
reconnect, a poller GETs and ACKs, and the owner may DEL a queue. When every script
is done and the router is quiet, the test checks:

- every subscribed queue with a waiting message has exactly one message in flight
  to its subscriber: the router's `delivered` is the head, and the subscriber's
  connection holds that very message;
- no connection got a second message of a queue while one was in flight (unless it
  sent SUB again), nor a message again after acknowledging it (observed_recipient.py);
- nothing lost or invented: every SEND answered OK was acknowledged or is still
  stored, once, in the order it was sent.

An END never overtakes the answers of the block in progress (the router holds it
until they are out), so a client always knows whether it is still subscribed: an
END is the last word on a queue unless a later SUB answered OK.

`SMP_INVARIANT_SEED` changes the scripts; a failure names the seed to run again.
The default run is small (`RUNS` per combination, about 30 s in all on two cores);
the `stress` run does `STRESS_RUNS`. Each prints how many interleavings it ran.
"""

from __future__ import annotations

import itertools
import os
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import pytest
import trio
import trio.testing
from e2e_helpers import create_queues, raw_connection
from observed_recipient import Ledger, ObservedRecipient

from router.client import RecipientQueue, SMPClient, open_client
from router.protocol.types import ACK, AUTH, ERR, GET, OK, SEND, SUB
from router.server import RouterConfig, RouterInfo, serve_router
from router.server.workers.in_process import workers_in_process

STORE_POLICIES = [
    ("memory", "batch"),
    ("journal", "never"),
    ("journal", "batch"),
    ("journal", "always"),
    ("sqlite", "batch"),
]
RUNS = 6
STRESS_RUNS = 60
BASE_SEED = int(os.environ.get("SMP_INVARIANT_SEED", "0"))

QUEUES = 4
SENDER_STEPS = 6  # blocks of 1..20 SENDs per sender
SUBSCRIBER_STEPS = 24
POLLER_STEPS = 10
# The router's END/DELD batching, kept short; quiet means quiet for longer than it.
END_BATCH = 0.01
QUIET = 0.1


@dataclass
class Totals:
    runs: int = 0
    commands: int = 0
    deliveries: int = 0


@dataclass
class Run:
    """One interleaving: its router, queues, ledger and lanes."""

    info: RouterInfo
    queues: dict[bytes, RecipientQueue]
    rng: random.Random
    # The worker the subscribers and the poller connect to, if not `info`'s (docs/workers.md).
    receivers: RouterInfo | None = None
    ledger: Ledger = field(default_factory=Ledger)
    subscribers: dict[str, ObservedRecipient] = field(default_factory=dict)
    checked: trio.Event = field(default_factory=trio.Event)  # the lanes may close now
    commands: int = 0
    _seq: int = 0
    _done: int = 0
    _all_done: trio.Event = field(default_factory=trio.Event)

    def script_done(self) -> None:
        self._done += 1
        self._all_done.set()

    async def scripts_done(self, count: int) -> None:
        while self._done < count:
            await self._all_done.wait()
            self._all_done = trio.Event()

    @property
    def receivers_info(self) -> RouterInfo:
        return self.info if self.receivers is None else self.receivers

    def lane_rng(self) -> random.Random:
        return random.Random(self.rng.getrandbits(64))

    def live(self) -> list[bytes]:
        return [rid for rid in self.queues if rid not in self.ledger.deleted]

    def next_body(self, sender: int) -> bytes:
        self._seq += 1
        return b"%d:%d" % (sender, self._seq)


async def _shuffle(rng: random.Random) -> None:
    """A few scheduler passes, so the lanes' commands interleave differently."""
    for _ in range(rng.randint(0, 3)):
        await trio.lowlevel.checkpoint()


# --- lanes ------------------------------------------------------------------------------


async def _sender_lane(run: Run, client: SMPClient, index: int) -> None:
    rng = run.lane_rng()
    rids = list(run.queues)
    for _ in range(SENDER_STEPS):
        targets = [rng.choice(rids) for _ in range(rng.randint(1, 20))]
        bodies = [run.next_body(index) for _ in targets]
        requests = [
            (run.queues[rid].sender_id, SEND(b"F", body), None)
            for rid, body in zip(targets, bodies, strict=True)
        ]
        run.commands += len(requests)
        responses = await client.commands(requests)
        for rid, body, resp in zip(targets, bodies, responses, strict=True):
            if resp == OK():
                run.ledger.sent.setdefault(rid, set()).add(body)
            elif not (resp == ERR(AUTH) and rid in run.ledger.deleted):
                run.ledger.violations.append(f"SEND to {rid.hex()[:8]} answered {resp!r}")
        await _shuffle(rng)
    run.script_done()


async def _subscriber_step(run: Run, rec: ObservedRecipient, rng: random.Random) -> None:
    in_flight = [rid for rid, view in rec.views.items() if view.in_flight is not None]
    live = run.live()
    if in_flight and rng.random() < 0.65:
        rids = rng.sample(in_flight, rng.randint(1, len(in_flight)))
        commands = [(rid, ACK(rec.views[rid].in_flight)) for rid in rids]  # type: ignore[arg-type]
    elif live:
        commands = [(rid, SUB()) for rid in rng.sample(live, rng.randint(1, min(3, len(live))))]
    else:
        return
    run.commands += len(commands)
    for (rid, cmd), resp in zip(commands, await rec.request(commands), strict=True):
        if isinstance(cmd, SUB) and resp != OK() and rid not in run.ledger.deleted:
            run.ledger.violations.append(f"{rec.name}: SUB {rid.hex()[:8]} answered {resp!r}")


async def _subscriber_lane(run: Run, name: str) -> None:
    rng = run.lane_rng()
    steps = SUBSCRIBER_STEPS
    for epoch in itertools.count():  # a connection per epoch: each reconnect starts one
        async with (
            raw_connection(run.receivers_info) as (ws, session_id),
            trio.open_nursery() as nursery,
        ):
            rec = ObservedRecipient(f"{name}.{epoch}", ws, session_id, run.queues, run.ledger)
            nursery.start_soon(rec.run)
            while steps and rng.random() > 0.08:
                steps -= 1
                await _subscriber_step(run, rec, rng)
                await _shuffle(rng)
            if not steps:
                run.subscribers[name] = rec
                run.script_done()
                await run.checked.wait()
                nursery.cancel_scope.cancel()
                return
            steps -= 1  # the reconnect itself
            nursery.cancel_scope.cancel()


async def _poller_lane(run: Run) -> None:
    rng = run.lane_rng()
    async with (
        raw_connection(run.receivers_info) as (ws, session_id),
        trio.open_nursery() as nursery,
    ):
        rec = ObservedRecipient("poller", ws, session_id, run.queues, run.ledger)
        nursery.start_soon(rec.run)
        for _ in range(POLLER_STEPS):
            held = [rid for rid, view in rec.views.items() if view.in_flight is not None]
            if held and rng.random() < 0.5:
                rid = rng.choice(held)
                await rec.request([(rid, ACK(rec.views[rid].in_flight))])  # type: ignore[arg-type]
            elif run.live():
                await rec.request([(rng.choice(run.live()), GET())])
            run.commands += 1
            await _shuffle(rng)
        run.script_done()
        nursery.cancel_scope.cancel()


async def _owner_lane(run: Run, owner: SMPClient) -> None:
    rng = run.lane_rng()
    if rng.random() < 0.5:
        for _ in range(rng.randint(0, 300)):
            await trio.lowlevel.checkpoint()
        rid = rng.choice(list(run.queues))
        run.ledger.deleted.add(rid)  # before the DEL: a SEND may be refused before it returns
        run.commands += 1
        await owner.delete(run.queues[rid])
    run.script_done()


# --- the check ------------------------------------------------------------------------------


async def _check(run: Run) -> list[str]:
    problems = list(run.ledger.violations)
    router = run.info.router
    acked_bodies = {run.ledger.bodies[mid] for mid in run.ledger.acked if mid in run.ledger.bodies}
    by_session = {rec.session_id: rec for rec in run.subscribers.values()}
    for rid in run.live():
        stored = [m async for m in router.messages.iter_messages(rid)]
        name = rid.hex()[:8]
        problems += _check_stored(name, stored, run.ledger.sent.get(rid, set()), acked_bodies)
        holder = router.subscriptions.subscriber_of(rid)
        if holder is None:
            continue
        rec = by_session.get(holder.conn.session_id)
        sub = holder.queues[rid]
        held = None if rec is None else rec.view(rid).in_flight
        in_flight = router.subscriptions.delivered(sub)
        delivered = None if in_flight is None else in_flight[0]
        stored_ids = [m.msg_id for m in stored]
        if stored and delivered is None:
            problems.append(f"{name}: {len(stored)} waiting, subscribed, nothing in flight")
        if delivered is not None and held != delivered:
            problems.append(f"{name}: the router has a message in flight the client does not")
        if delivered in stored_ids and stored_ids[0] != delivered:
            problems.append(f"{name}: the message in flight is not the head")
        if delivered is None and held in stored_ids:
            problems.append(f"{name}: the client holds a message the router does not count")
        if rid in holder.deliveries:
            problems.append(f"{name}: still waiting in the deliveries map")
    for rec in run.subscribers.values():
        for rid, view in rec.views.items():
            holder = router.subscriptions.subscriber_of(rid)
            conn = None if holder is None else holder.conn
            mine = conn is not None and conn.session_id == rec.session_id
            if view.in_flight is not None and rid not in run.ledger.deleted and not mine:
                owner = None if conn is None else by_session.get(conn.session_id)
                own_conn = router.connection_for_session(rec.session_id)
                own = None if own_conn is None else router.subscriptions.subscriber_for(own_conn)
                others = "; ".join(
                    f"{r.name}: {' '.join(r.view(rid).history)}" for r in run.subscribers.values()
                    if r is not rec
                )
                problems.append(
                    f"{rec.name}: holds a message of {rid.hex()[:8]} unsubscribed"
                    f" (after: {'; '.join(view.history)}) registry: "
                    f"{None if owner is None else owner.name}, own sub: "
                    f"{None if own is None else own.queues.get(rid)}; {others}"
                )
    return problems


def _check_stored(
    name: str, stored: list, sent: set[bytes], acked_bodies: set[bytes]
) -> list[str]:
    bodies = [m.body for m in stored]
    problems = []
    if len(set(bodies)) != len(bodies) or not set(bodies) <= sent:
        problems.append(f"{name}: stored messages that were not sent once")
    if set(bodies) & acked_bodies:
        problems.append(f"{name}: acknowledged messages are still stored")
    lost = sent - set(bodies) - acked_bodies
    if lost:
        problems.append(f"{name}: {len(lost)} sent message(s) neither acknowledged nor stored")
    seqs: dict[bytes, int] = {}
    for body in bodies:
        sender, seq = body.split(b":")
        if int(seq) < seqs.get(sender, -1):
            problems.append(f"{name}: stored out of order")
        seqs[sender] = int(seq)
    return problems


# --- driving ------------------------------------------------------------------------------------


async def run_interleaving(info: RouterInfo, seed: int, totals: Totals,
                           receivers: RouterInfo | None = None) -> list[str]:
    """One random interleaving against the router; the problems found. With
    `receivers` (another worker), the subscribers, the poller and one sender connect
    there, the owner of the queues and the other sender to `info`'s worker."""
    async with (
        open_client(info.address) as owner,
        open_client(info.address) as sender_a,
        open_client((receivers or info).address) as sender_b,
    ):
        queues = {q.recipient_id: q for q in await create_queues(owner, QUEUES)}
        run = Run(info, queues, random.Random(seed), receivers)
        scripts: list[Callable[[], Awaitable[None]]] = [
            lambda: _sender_lane(run, sender_a, 0),
            lambda: _sender_lane(run, sender_b, 1),
            lambda: _subscriber_lane(run, "sub-a"),
            lambda: _subscriber_lane(run, "sub-b"),
            lambda: _poller_lane(run),
            lambda: _owner_lane(run, owner),
        ]
        async with trio.open_nursery() as nursery:
            for script in scripts:
                nursery.start_soon(script)
            await run.scripts_done(len(scripts))
            await trio.testing.wait_all_tasks_blocked(QUIET)
            problems = await _check(run)
            run.checked.set()
    totals.runs += 1
    totals.commands += run.commands
    totals.deliveries += run.ledger.deliveries
    return [f"seed {seed}: {p}" for p in problems]


async def _run_combination(nursery: trio.Nursery, config: RouterConfig, runs: int) -> Totals:
    # one process: the check reads the queues' worker; the runs across workers are below
    info = await nursery.start(serve_router, config)
    totals = Totals()
    problems: list[str] = []
    for i in range(runs):
        problems += await run_interleaving(info, BASE_SEED * 1_000_003 + i, totals)
        if problems:
            break
    print(
        f"\n{config.store}/{config.fsync}/{config.delivery}: {totals.runs} interleavings, "
        f"{totals.commands} commands, {totals.deliveries} deliveries"
    )
    assert not problems, "\n".join(problems[:20])
    return totals


def _config(tmp_path, store: str, fsync: str, delivery: str) -> RouterConfig:
    return RouterConfig(
        host="127.0.0.1", port=0, store=store, fsync=fsync, delivery=delivery,
        data_dir=None if store == "memory" else tmp_path / "data",
        quota=10_000, end_batch_interval=END_BATCH,
    )


@pytest.mark.parametrize("store, fsync", STORE_POLICIES)
async def test_every_subscribed_queue_with_a_waiting_message_has_one_in_flight(
    nursery, tmp_path, store, fsync, delivery
):
    with trio.fail_after(120):
        await _run_combination(nursery, _config(tmp_path, store, fsync, delivery), RUNS)


@pytest.mark.stress
@pytest.mark.parametrize("store, fsync", STORE_POLICIES)
async def test_many_interleavings_keep_the_delivery_invariant(
    nursery, tmp_path, store, fsync, delivery
):
    with trio.fail_after(1800):
        await _run_combination(nursery, _config(tmp_path, store, fsync, delivery), STRESS_RUNS)


# --- across worker processes (docs/workers.md) ---------------------------------------------


INTERLEAVING_TIMEOUT = 120  # s: one that hangs is named by its seed
ACROSS_WORKERS = [("memory", "batch"), ("journal", "batch"), ("sqlite", "batch")]


async def _run_across_workers(tmp_path, store: str, fsync: str, delivery: str,
                              runs: int) -> None:
    config = _config(tmp_path, store, fsync, delivery)
    totals = Totals()
    problems: list[str] = []
    async with workers_in_process(config) as (owner, front):
        for i in range(runs):
            seed = BASE_SEED * 1_000_003 + i
            with trio.move_on_after(INTERLEAVING_TIMEOUT) as scope:
                problems += await run_interleaving(owner, seed, totals, receivers=front)
            if scope.cancelled_caught:
                problems.append(f"seed {seed}: not done in {INTERLEAVING_TIMEOUT} s")
            if problems:
                break
    print(f"\nacross workers {store}/{fsync}/{delivery}: {totals.runs} interleavings, "
          f"{totals.commands} commands, {totals.deliveries} deliveries")
    assert not problems, "\n".join(problems[:20])


@pytest.mark.parametrize("store, fsync", ACROSS_WORKERS[:2])
async def test_the_invariant_holds_with_the_queues_in_another_worker(
    tmp_path, store, fsync, delivery
):
    """The queues live in worker 0; the subscribers, the poller and one sender are
    clients of worker 1, so every command of theirs is handed to worker 0."""
    with trio.fail_after(120):
        await _run_across_workers(tmp_path, store, fsync, delivery, RUNS)


@pytest.mark.stress
@pytest.mark.parametrize("store, fsync", ACROSS_WORKERS)
async def test_many_interleavings_keep_the_invariant_across_workers(
    tmp_path, store, fsync, delivery
):
    with trio.fail_after(1800):
        await _run_across_workers(tmp_path, store, fsync, delivery, STRESS_RUNS)
