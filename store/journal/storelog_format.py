"""The store log's line format (docs/store-log.md): a change as one line of text.

`encode_record` and `decode_record` turn a change of the queue table
(store/queue_table.py) into a line's payload and back; `compact_records` is
the reference compactor, pure, that any other compactor (the Spark pipeline)
must equal line for line.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from typing import TypeVar

from ..interfaces import (
    QUEUE_MODES,
    SERVICE_ROLES,
    NotifierCreds,
    Party,
    QueueLinkData,
    QueueRecord,
    QueueStatus,
    ServiceRecord,
)
from ..queue_table import (
    AddNotifier,
    AddService,
    CreateQueue,
    DeleteLink,
    DeleteNotifier,
    DeleteQueue,
    LogRecord,
    QueueTable,
    SecureQueue,
    SetLink,
    SetRecipientKeys,
    SetService,
    SuspendQueue,
    replay,
)
from .logfile import encode_line, line_payload

E = TypeVar("E")
_INT = re.compile(r"-?[0-9]+")
_B64 = re.compile(r"[A-Za-z0-9_-]*={0,2}")
_STATUS = {QueueStatus.ACTIVE: "active", QueueStatus.OFF: "off"}
_STATUS_BY_NAME = {v: k for k, v in _STATUS.items()}
_PARTY = {Party.RECIPIENT: "r", Party.NOTIFIER: "n"}
_PARTY_BY_NAME = {v: k for k, v in _PARTY.items()}
_MODE_BY_NAME = {m.decode("ascii"): m for m in QUEUE_MODES}
_ROLE_BY_NAME = {r.decode("ascii"): r for r in SERVICE_ROLES}
_FIELDS = {  # every field a record may have, in the order they are written
    "add_service": ("ts svc role cert chash", "ts svc role cert chash"),
    "create": (
        "ts rid sid rkey rdh skey secure status nid nkey ndh rsvc nsvc mode lid lfix lusr rkeys",
        "ts rid sid rkey rdh secure status",
    ),
    "secure": ("ts rid skey", "ts rid skey"),
    "add_notifier": ("ts rid nid nkey ndh", "ts rid nid nkey ndh"),
    "delete_notifier": ("ts rid", "ts rid"),
    "suspend": ("ts rid", "ts rid"),
    "set_service": ("ts rid party svc", "ts rid party"),
    "set_link": ("ts rid lid lfix lusr", "ts rid lid lfix lusr"),
    "delete_link": ("ts rid", "ts rid"),
    "set_recipient_keys": ("ts rid rkey rkeys", "ts rid rkey"),
    "delete": ("ts rid", "ts rid"),
}


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii")


def unb64(text: str) -> bytes:
    if not _B64.fullmatch(text) or len(text) % 4:
        raise ValueError(f"not padded base64url: {text[:20]!r}")
    return base64.b64decode(text, altchars=b"-_", validate=True)


def _more_keys(keys: tuple[bytes, ...]) -> str | None:
    """The recipient keys after the first (RKEY), comma-separated; None for none."""
    return ",".join(b64(k) for k in keys) if keys else None


def _unmore_keys(f: dict[str, str]) -> tuple[bytes, ...]:
    return tuple(unb64(k) for k in f["rkeys"].split(",")) if "rkeys" in f else ()


def _link_fields(link: QueueLinkData | None) -> list[tuple[str, str | None]]:
    return [
        ("lid", None if link is None else b64(link.link_id)),
        ("lfix", None if link is None else b64(link.fixed_data)),
        ("lusr", None if link is None else b64(link.user_data)),
    ]


def _create_fields(r: QueueRecord, link: QueueLinkData | None) -> list[tuple[str, str | None]]:
    n = r.notifier
    return [
        ("ts", str(r.updated_at)),
        ("rid", b64(r.recipient_id)),
        ("sid", b64(r.sender_id)),
        ("rkey", b64(r.recipient_key)),
        ("rdh", b64(r.rcv_dh_secret)),
        ("skey", None if r.sender_key is None else b64(r.sender_key)),
        ("secure", "1" if r.snd_secure else "0"),
        ("status", _STATUS[r.status]),
        ("nid", None if n is None else b64(n.notifier_id)),
        ("nkey", None if n is None else b64(n.notifier_key)),
        ("ndh", None if n is None else b64(n.rcv_ntf_dh_secret)),
        ("rsvc", None if r.rcv_service_id is None else b64(r.rcv_service_id)),
        ("nsvc", None if r.ntf_service_id is None else b64(r.ntf_service_id)),
        ("mode", None if r.queue_mode is None else r.queue_mode.decode("ascii")),
        *_link_fields(link),
        ("rkeys", _more_keys(r.more_recipient_keys)),
    ]


def _fields(rec: LogRecord) -> tuple[str, list[tuple[str, str | None]]]:
    if isinstance(rec, CreateQueue):
        return "create", _create_fields(rec.record, rec.link)
    if isinstance(rec, AddService):
        s = rec.service
        return "add_service", [
            ("ts", str(s.created_at)),
            ("svc", b64(s.service_id)),
            ("role", s.role.decode("ascii")),
            ("cert", b64(s.cert)),
            ("chash", b64(s.cert_hash)),
        ]
    head = [("ts", str(rec.ts)), ("rid", b64(rec.recipient_id))]
    if isinstance(rec, SecureQueue):
        return "secure", head + [("skey", b64(rec.sender_key))]
    if isinstance(rec, AddNotifier):
        n = rec.notifier
        return "add_notifier", head + [
            ("nid", b64(n.notifier_id)),
            ("nkey", b64(n.notifier_key)),
            ("ndh", b64(n.rcv_ntf_dh_secret)),
        ]
    if isinstance(rec, SetService):
        svc = None if rec.service_id is None else b64(rec.service_id)
        return "set_service", head + [("party", _PARTY[rec.party]), ("svc", svc)]
    if isinstance(rec, SetLink):
        return "set_link", head + _link_fields(rec.link)
    if isinstance(rec, SetRecipientKeys):
        return "set_recipient_keys", head + [
            ("rkey", b64(rec.keys[0])),
            ("rkeys", _more_keys(rec.keys[1:])),
        ]
    names = {
        DeleteNotifier: "delete_notifier",
        SuspendQueue: "suspend",
        DeleteLink: "delete_link",
        DeleteQueue: "delete",
    }
    return names[type(rec)], head


def encode_record(rec: LogRecord) -> str:
    """The payload of a record's line (without checksum and LF)."""
    op, fields = _fields(rec)
    return " ".join([op, *(f"{k}={v}" for k, v in fields if v is not None)])


def _split(payload: str) -> tuple[str, dict[str, str]]:
    op, *pairs = payload.split(" ")
    if op not in _FIELDS:
        raise ValueError(f"unknown record {op!r}")
    allowed, required = (set(s.split()) for s in _FIELDS[op])
    fields: dict[str, str] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or key not in allowed or key in fields:
            raise ValueError(f"bad field {key!r} in {op}")
        fields[key] = value
    if missing := required - fields.keys():
        raise ValueError(f"{op} lacks {', '.join(sorted(missing))}")
    return op, fields


def _int(text: str) -> int:
    if not _INT.fullmatch(text):
        raise ValueError(f"not an integer: {text[:20]!r}")
    return int(text)


def _opt(fields: dict[str, str], key: str) -> bytes | None:
    return unb64(fields[key]) if key in fields else None


def _enum(table: dict[str, E], text: str, what: str) -> E:
    if text not in table:
        raise ValueError(f"unknown {what} {text!r}")
    return table[text]


def _notifier(f: dict[str, str]) -> NotifierCreds | None:
    present = [k for k in ("nid", "nkey", "ndh") if k in f]
    if not present:
        return None
    if len(present) != 3:
        raise ValueError("a notifier needs nid, nkey and ndh")
    return NotifierCreds(unb64(f["nid"]), unb64(f["nkey"]), unb64(f["ndh"]))


def _link(f: dict[str, str]) -> QueueLinkData | None:
    present = [k for k in ("lid", "lfix", "lusr") if k in f]
    if not present:
        return None
    if len(present) != 3:
        raise ValueError("a link needs lid, lfix and lusr")
    return QueueLinkData(unb64(f["lid"]), unb64(f["lfix"]), unb64(f["lusr"]))


def _decode_create(f: dict[str, str]) -> CreateQueue:
    if f["secure"] not in ("0", "1"):
        raise ValueError(f"secure must be 0 or 1, not {f['secure']!r}")
    link = _link(f)
    return CreateQueue(
        QueueRecord(
            recipient_id=unb64(f["rid"]),
            sender_id=unb64(f["sid"]),
            recipient_key=unb64(f["rkey"]),
            rcv_dh_secret=unb64(f["rdh"]),
            sender_key=_opt(f, "skey"),
            snd_secure=f["secure"] == "1",
            status=_enum(_STATUS_BY_NAME, f["status"], "status"),
            notifier=_notifier(f),
            rcv_service_id=_opt(f, "rsvc"),
            ntf_service_id=_opt(f, "nsvc"),
            updated_at=_int(f["ts"]),
            queue_mode=_enum(_MODE_BY_NAME, f["mode"], "queue mode") if "mode" in f else None,
            link_id=None if link is None else link.link_id,
            more_recipient_keys=_unmore_keys(f),
        ),
        link,
    )


def decode_record(payload: str) -> LogRecord:
    """The record of a line's payload; ValueError if it is not one."""
    op, f = _split(payload)
    if op == "create":
        return _decode_create(f)
    if op == "add_service":
        return AddService(ServiceRecord(
            service_id=unb64(f["svc"]),
            role=_enum(_ROLE_BY_NAME, f["role"], "service role"),
            cert=unb64(f["cert"]),
            cert_hash=unb64(f["chash"]),
            created_at=_int(f["ts"]),
        ))
    ts, rid = _int(f["ts"]), unb64(f["rid"])
    if op == "secure":
        return SecureQueue(ts, rid, unb64(f["skey"]))
    if op == "add_notifier":
        notifier = _notifier(f)
        assert notifier is not None  # all three fields are required for add_notifier
        return AddNotifier(ts, rid, notifier)
    if op == "set_service":
        return SetService(ts, rid, _enum(_PARTY_BY_NAME, f["party"], "party"), _opt(f, "svc"))
    if op == "set_link":
        link = _link(f)
        assert link is not None  # all three fields are required for set_link
        return SetLink(ts, rid, link)
    if op == "set_recipient_keys":
        return SetRecipientKeys(ts, rid, (unb64(f["rkey"]), *_unmore_keys(f)))
    plain = {
        "delete_notifier": DeleteNotifier,
        "suspend": SuspendQueue,
        "delete_link": DeleteLink,
        "delete": DeleteQueue,
    }
    return plain[op](ts, rid)


def snapshot_record(table: QueueTable, record: QueueRecord) -> CreateQueue:
    """The `create` of a compacted log that makes the queue as it is, its link included."""
    return CreateQueue(record, table.links.get(record.recipient_id))


def snapshot_changes(table: QueueTable) -> list[LogRecord]:
    """The changes of a compacted log: one `add_service` per service, one `create` per queue."""
    services = [] if table.services is None else table.services.by_id.values()
    return [
        *(AddService(s) for s in services),
        *(snapshot_record(table, r) for r in table.queues.values()),
    ]


def snapshot_lines(table: QueueTable) -> list[str]:
    """The compacted log of a state: one `add_service` line per service and one
    `create` line per queue, sorted, without LF."""
    lines = (encode_line(encode_record(rec)) for rec in snapshot_changes(table))
    return sorted(line[:-1].decode("ascii") for line in lines)


def compact_records(lines: Iterable[str]) -> list[str]:
    """Compact a log given as its lines (checksum included, LF optional).

    The reference for any other compactor (the Spark pipeline): its output,
    sorted, must equal this list line for line. A line that fails its checksum
    or does not parse raises ValueError.
    """
    records = []
    for no, line in enumerate(lines, 1):
        payload = line_payload(line.rstrip("\n").encode("ascii"))
        if payload is None:
            raise ValueError(f"line {no}: checksum mismatch")
        records.append(decode_record(payload))
    return snapshot_lines(replay(records))
