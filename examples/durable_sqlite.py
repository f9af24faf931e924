"""Exactly-once processing: the durable subscriber and one SQLite transaction.

An application keeps an account balance in SQLite and receives deposits as
messages on an SMP queue. For each message it adds the amount AND records the
message's msgId in one transaction. The durable subscriber acknowledges a
message only after that transaction has committed, so a crash in between
brings the message back; the recorded msgId then says it was already applied,
and it is just acknowledged. Every deposit is applied exactly once.

    # create the queue, send 20 deposits, and stop hard after the 7th is applied
    python examples/durable_sqlite.py smp://<keyHash>@127.0.0.1:5224 --db bank.db \\
        --send 20 --crash-after 7
    # run again: the 7th comes back, is found in the database and only ACKed
    python examples/durable_sqlite.py smp://<keyHash>@127.0.0.1:5224 --db bank.db

The queue's credentials are kept in the same database, so a later run picks
up the same queue. A run ends when every deposit it knows was sent is applied.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
from functools import partial

import trio

from router.client import RecipientQueue, open_client
from router.client.agent_state import ConnectFailed, QueuesDown, QueuesUp
from router.client.backoff import Backoff
from router.client.durable import DurableMessage, open_durable_subscriber
from router.protocol import crypto

SCHEMA = """
CREATE TABLE IF NOT EXISTS queue (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    recipient_id BLOB, sender_id BLOB, rcv_auth_seed BLOB, rcv_auth_key BLOB,
    rcv_dh_priv BLOB, srv_dh_key BLOB, box_key BLOB, snd_secure INTEGER,
    sender_seed BLOB, sent INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS processed (msg_id BLOB PRIMARY KEY, ts INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS account (name TEXT PRIMARY KEY, balance INTEGER NOT NULL);
INSERT OR IGNORE INTO account VALUES ('main', 0);
"""

QUEUE_FIELDS = (
    "recipient_id, sender_id, rcv_auth_seed, rcv_auth_key, rcv_dh_priv, srv_dh_key, box_key, "
    "snd_secure"
)

CRASH_EXIT_CODE = 3


class Bank:
    """The application's database. sqlite3 blocks, so every call runs on a worker
    thread, one at a time (the connection is shared by those threads)."""

    def __init__(self, path: str) -> None:
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.executescript(SCHEMA)
        self._limiter = trio.CapacityLimiter(1)

    async def _run(self, fn, *args):
        return await trio.to_thread.run_sync(partial(fn, *args), limiter=self._limiter)

    # --- the exactly-once pattern ---------------------------------------------------------

    async def apply(self, message: DurableMessage) -> bool:
        """Apply the deposit and record its msgId in ONE transaction; False if already done."""
        return await self._run(self._apply, message)

    def _apply(self, message: DurableMessage) -> bool:
        amount = int(message.body.decode().removeprefix("deposit "))
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            try:
                db.execute("INSERT INTO processed VALUES (?, ?)", (message.msg_id, message.ts))
            except sqlite3.IntegrityError:
                db.execute("ROLLBACK")
                return False  # applied before: the message only needs its ACK
            db.execute("UPDATE account SET balance = balance + ? WHERE name = 'main'", (amount,))
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        return True

    async def is_processed(self, message: DurableMessage) -> bool:
        """The durable subscriber's hook: is this msgId recorded already?"""
        return await self._run(self._is_processed, message.msg_id)

    def _is_processed(self, msg_id: bytes) -> bool:
        row = self._db.execute("SELECT 1 FROM processed WHERE msg_id = ?", (msg_id,)).fetchone()
        return row is not None

    # --- bookkeeping of the example -----------------------------------------------------------

    async def queue(self) -> tuple[RecipientQueue, bytes] | None:
        row = await self._run(
            lambda: self._db.execute(f"SELECT {QUEUE_FIELDS}, sender_seed FROM queue").fetchone()
        )
        if row is None:
            return None
        *fields, sender_seed = row
        fields[-1] = bool(fields[-1])
        return RecipientQueue(*fields), sender_seed

    async def save_queue(self, q: RecipientQueue, sender_seed: bytes) -> None:
        values = (
            q.recipient_id, q.sender_id, q.rcv_auth_seed, q.rcv_auth_key, q.rcv_dh_priv,
            q.srv_dh_key, q.box_key, int(q.snd_secure), sender_seed,
        )
        await self._run(
            self._db.execute,
            f"INSERT INTO queue (id, {QUEUE_FIELDS}, sender_seed) VALUES (1, ?,?,?,?,?,?,?,?,?)",
            values,
        )

    async def count_sent(self) -> None:
        await self._run(self._db.execute, "UPDATE queue SET sent = sent + 1")

    async def totals(self) -> tuple[int, int, int]:
        """(deposits sent, deposits applied, balance)."""
        def read() -> tuple[int, int, int]:
            sent = self._db.execute("SELECT sent FROM queue").fetchone()[0]
            done = self._db.execute("SELECT count(*) FROM processed").fetchone()[0]
            balance = self._db.execute("SELECT balance FROM account").fetchone()[0]
            return sent, done, balance
        return await self._run(read)


async def ensure_queue(bank: Bank, address: str) -> tuple[RecipientQueue, bytes]:
    """The queue from the database, or a new one (secured with a fresh sender key)."""
    saved = await bank.queue()
    if saved is not None:
        return saved
    async with open_client(address) as client:
        queue = await client.create_queue()
        sender_seed, sender_key = crypto.new_ed25519()
        await client.secure_queue(queue, sender_key)
    await bank.save_queue(queue, sender_seed)
    return queue, sender_seed


async def send_deposits(bank: Bank, address: str, queue: RecipientQueue, seed: bytes, n: int):
    sent, _, _ = await bank.totals()
    async with open_client(address) as client:
        for i in range(sent + 1, sent + n + 1):
            await client.send(queue.sender_id, f"deposit {i}".encode(), sender_seed=seed)
            await bank.count_sent()


def show_status(event) -> None:
    if isinstance(event, QueuesUp):
        print("subscribed", flush=True)
    elif isinstance(event, QueuesDown):
        print("connection lost, reconnecting", flush=True)
    elif isinstance(event, ConnectFailed):
        print(f"cannot connect ({event.reason}), retrying in {event.retry_in:.1f}s", flush=True)


async def receive(bank: Bank, address: str, queue: RecipientQueue, crash_after: int | None):
    applied = 0
    async with open_durable_subscriber(
        is_processed=bank.is_processed, on_event=show_status, backoff=Backoff(initial=0.2)
    ) as subscriber:
        subscriber.add_queues(address, [queue])
        async for message in subscriber:  # asking for the next message ACKs this one
            if await bank.apply(message):
                applied += 1
                print(f"applied {message.body.decode()}", flush=True)
            if crash_after is not None and applied == crash_after:
                # Committed, not yet acknowledged: the worst moment to stop.
                print("crashing before the ACK", flush=True)
                os._exit(CRASH_EXIT_CODE)
            sent, done, _ = await bank.totals()
            if done >= sent:
                await subscriber.ack()  # leaving the loop would not acknowledge the last one
                break
        duplicates = subscriber.statistics().duplicates
    print(f"redelivered and only acknowledged: {duplicates}", flush=True)


async def main(address: str, db_path: str, send: int, crash_after: int | None) -> None:
    bank = Bank(db_path)
    queue, sender_seed = await ensure_queue(bank, address)
    if send:
        await send_deposits(bank, address, queue, sender_seed, send)
    sent, done, _ = await bank.totals()
    if done < sent:
        await receive(bank, address, queue, crash_after)
    sent, done, balance = await bank.totals()
    print(f"deposits sent {sent}, applied {done}, balance {balance}", flush=True)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("address", help="the router, smp://<keyHash>@host:port")
    parser.add_argument("--db", required=True, help="the application's SQLite database")
    parser.add_argument("--send", type=int, default=0, help="deposits to send first")
    parser.add_argument(
        "--crash-after", type=int, default=None,
        help="stop hard after applying this many deposits, before acknowledging the last",
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    args = parse_args(sys.argv[1:])
    trio.run(main, args.address, args.db, args.send, args.crash_after)
