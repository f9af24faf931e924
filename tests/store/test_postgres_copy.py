"""Moving a store into PostgreSQL and back by binary COPY (store/postgres/bulk.py) keeps
every byte: ids, keys, links, flags and bodies holding every byte value (tab, newline,
carriage return, backslash, NUL, quotes, commas) come back as they went in, read by
plain queries and by the paged export alike."""

from __future__ import annotations

from dataclasses import replace

import pytest
from postgres_server import schema_for, shared_server

from store import migrate_store, open_stores
from store.interfaces import Message, NotifierCreds, Party, QueueLinkData, QueueRecord
from store.postgres.bulk import PostgresExport
from store.postgres.database import PostgresDatabase
from store.postgres.queues import open_queue_store

EVERY_BYTE = bytes(range(256))
NASTY = b"\t\n\r\\\x00\"',|\x1f\x7f\xff"  # COPY text's and CSV's metacharacters, and more


def tricky(i: int, n: int) -> bytes:
    """`n` bytes, unique for `i`, made of every byte value and the metacharacters."""
    return (bytes([i]) + NASTY + EVERY_BYTE[i:] + EVERY_BYTE[:i])[:n]


def queues_with_every_byte(n: int) -> list[tuple[QueueRecord, QueueLinkData | None]]:
    out = []
    for i in range(n):
        notifier = NotifierCreds(tricky(i, 24)[::-1], EVERY_BYTE[i:] + NASTY, tricky(i, 32))
        rec = QueueRecord(
            recipient_id=tricky(i, 24), sender_id=b"s" + tricky(i, 23),
            recipient_key=NASTY + EVERY_BYTE, rcv_dh_secret=tricky(i, 32),
            sender_key=EVERY_BYTE[::-1] if i % 2 else None, snd_secure=bool(i % 2),
            notifier=notifier if i % 3 == 0 else None,
            more_recipient_keys=(b"\x00" * 3, NASTY) if i % 2 == 0 else (),
            updated_at=1_700_000_000 + i,
        )
        link = None
        if i % 2 == 0:
            link = QueueLinkData(b"l" + tricky(i, 23), NASTY + EVERY_BYTE, EVERY_BYTE + NASTY)
            rec = replace(rec, link_id=link.link_id, queue_mode=b"C")
        out.append((rec, link))
    return out


def messages_with_every_byte(i: int) -> list[Message]:
    return [Message(tricky(i, 24), 1_700_000_000 + j, NASTY[: j + 1],
                    (EVERY_BYTE * 3)[j:] + NASTY * j) for j in range(i % 4)]


async def test_every_byte_survives_a_copy_into_postgres_and_back(tmp_path):
    data = tmp_path / "data"
    queues = queues_with_every_byte(12)
    sent = {rec.recipient_id: messages_with_every_byte(i) for i, (rec, _) in enumerate(queues)}
    async with open_stores("journal", data) as stores:
        for rec, link in queues:
            assert await stores.queues.add_queue(rec, link) is None
            for m in sent[rec.recipient_id]:
                await stores.messages.write_message(rec.recipient_id, m, 100)
    n_messages = sum(map(len, sent.values()))
    database = {"db_connection": shared_server().url, "db_schema": schema_for(tmp_path)}

    async def holds_everything(kind: str, **settings) -> None:
        async with open_stores(kind, data, **settings) as stores:
            for rec, link in queues:
                assert await stores.queues.get_queue(Party.RECIPIENT, rec.recipient_id) == rec
                assert await stores.queues.get_link(rec.recipient_id) == link
                got = [m async for m in stores.messages.iter_messages(rec.recipient_id)]
                assert got == sent[rec.recipient_id], kind
            assert await stores.queues.queue_count() == len(queues)

    assert await migrate_store(data, "postgres", **database) == (len(queues), n_messages)
    await holds_everything("postgres", **database)  # read back by plain queries
    assert await migrate_store(data, "journal", source_settings=database) == (
        len(queues), n_messages)
    await holds_everything("journal")


@pytest.mark.parametrize("page_rows", [1, 5, 1000])
async def test_the_export_pages_through_every_queue_and_message_in_order(tmp_path, page_rows):
    db = PostgresDatabase(shared_server().url, schema=schema_for(tmp_path), pool_size=2)
    await db.open()
    try:
        store = await open_queue_store(db)
        queues = queues_with_every_byte(7)
        messages = [(rec.recipient_id, m) for i, (rec, _) in enumerate(queues)
                    for m in messages_with_every_byte(i)]
        links = [(rec.recipient_id, link) for rec, link in queues if link is not None]
        assert await store.bulk_import([rec for rec, _ in queues], messages, links) == (
            len(queues), len(messages))
        export = PostgresExport(db, page_rows=page_rows)
        pages = [page async for page in export.queue_pages()]
        assert all(0 < len(page) <= page_rows for page in pages)
        assert [row for page in pages for row in page] == queues  # the order of insertion
        pages = [page async for page in export.message_pages()]
        assert all(0 < len(page) <= page_rows for page in pages)
        # queue by queue (in recipient id order), each queue's oldest first
        assert [row for page in pages for row in page] == sorted(
            messages, key=lambda rm: rm[0])
        assert await export.message_count() == len(messages)
    finally:
        await db.close()
