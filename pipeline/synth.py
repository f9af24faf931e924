"""Large synthetic store logs for tests and benchmarks (docs/store-log.md format).

Churn resembles a busy router: services are stored (`add_service`, first),
queues are created (some with a notifier, some already secured), secured, given
and relieved of notifiers, tied to services, suspended and deleted, always as the
router's store would allow (a queue is secured once; only live queues change).
Same seed, same bytes.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import random
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

ED25519_SPKI_PREFIX = bytes.fromhex("302a300506032b6570032100")
X25519_SPKI_PREFIX = bytes.fromhex("302a300506032b656e032100")
START_TS = 1714521600  # 2024-05-01T00:00:00Z

# record kind -> weight; deletes keep the live set growing slowly, as on a real router
WEIGHTS = {
    "create": 34,
    "secure": 20,
    "add_notifier": 10,
    "delete_notifier": 4,
    "set_service": 6,
    "suspend": 2,
    "delete": 16,
}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii")


def line(payload: str) -> str:
    """A store log line: CRC-32 in 8 lowercase hex digits, a space, the payload, LF."""
    return f"{zlib.crc32(payload.encode('ascii')):08x} {payload}\n"


class _Queue:
    __slots__ = ("rid", "secured", "notifier", "off")

    def __init__(self, rid: str, secured: bool, notifier: bool) -> None:
        self.rid = rid
        self.secured = secured
        self.notifier = notifier
        self.off = False


class SyntheticLog:
    """Generates records one by one; `live` is the queues that exist at this point."""

    def __init__(self, seed: int = 1) -> None:
        self.rng = random.Random(seed)
        self.ts = START_TS
        self.live: list[_Queue] = []
        self.services = [_b64(self.rng.randbytes(24)) for _ in range(8)]
        self._unstored = list(self.services)  # written as add_service lines first
        kinds = list(WEIGHTS)
        self._kinds = self.rng.choices(kinds, weights=list(WEIGHTS.values()), k=4096)
        self._next = 0

    def _key(self, prefix: bytes) -> str:
        return _b64(prefix + self.rng.randbytes(32))

    def _id(self) -> str:
        return _b64(self.rng.randbytes(24))

    def _kind(self) -> str:
        kind = self._kinds[self._next]
        self._next = (self._next + 1) % len(self._kinds)
        if self._next == 0:
            self.rng.shuffle(self._kinds)
        return kind

    def record(self) -> str:
        """The payload of the next record."""
        self.ts += self.rng.random() < 0.3
        if self._unstored:
            return self._add_service(self._unstored.pop(0))
        kind = self._kind() if len(self.live) > 16 else "create"
        if kind == "create":
            return self._create()
        index = self.rng.randrange(len(self.live))
        return getattr(self, f"_{kind}")(index, self.live[index])

    def _create(self) -> str:
        rid, secured = self._id(), self.rng.random() < 0.3
        notifier = self.rng.random() < 0.1
        fields = [
            f"create ts={self.ts} rid={rid} sid={self._id()}",
            f"rkey={self._key(ED25519_SPKI_PREFIX)} rdh={_b64(self.rng.randbytes(32))}",
        ]
        if secured:
            fields.append(f"skey={self._key(ED25519_SPKI_PREFIX)}")
        fields.append(f"secure={int(self.rng.random() < 0.8)} status=active")
        if notifier:
            fields.append(self._notifier_fields())
        self.live.append(_Queue(rid, secured, notifier))
        return " ".join(fields)

    def _add_service(self, svc: str) -> str:
        cert = self.rng.randbytes(200)  # opaque to the store: any DER it was given
        role = self.rng.choice("MNP")
        chash = _b64(hashlib.sha256(cert).digest())
        return f"add_service ts={self.ts} svc={svc} role={role} cert={_b64(cert)} chash={chash}"

    def _notifier_fields(self) -> str:
        return (
            f"nid={self._id()} nkey={self._key(ED25519_SPKI_PREFIX)} "
            f"ndh={_b64(self.rng.randbytes(32))}"
        )

    def _secure(self, index: int, q: _Queue) -> str:
        if q.secured:
            return self._set_service(index, q)
        q.secured = True
        return f"secure ts={self.ts} rid={q.rid} skey={self._key(ED25519_SPKI_PREFIX)}"

    def _add_notifier(self, index: int, q: _Queue) -> str:
        q.notifier = True
        return f"add_notifier ts={self.ts} rid={q.rid} {self._notifier_fields()}"

    def _delete_notifier(self, index: int, q: _Queue) -> str:
        if not q.notifier:
            return self._add_notifier(index, q)
        q.notifier = False
        return f"delete_notifier ts={self.ts} rid={q.rid}"

    def _set_service(self, index: int, q: _Queue) -> str:
        party = "n" if q.notifier and self.rng.random() < 0.4 else "r"
        svc = "" if self.rng.random() < 0.2 else f" svc={self.rng.choice(self.services)}"
        return f"set_service ts={self.ts} rid={q.rid} party={party}{svc}"

    def _suspend(self, index: int, q: _Queue) -> str:
        if q.off:  # the store writes a suspension once
            return self._set_service(index, q)
        q.off = True
        return f"suspend ts={self.ts} rid={q.rid}"

    def _delete(self, index: int, q: _Queue) -> str:
        self.live[index] = self.live[-1]
        self.live.pop()
        return f"delete ts={self.ts} rid={q.rid}"


def synthetic_lines(records: int, seed: int = 1) -> Iterator[str]:
    """`records` store log lines (with LF)."""
    gen = SyntheticLog(seed)
    for _ in range(records):
        yield line(gen.record())


def write_synthetic_log(path: str | Path, records: int, seed: int = 1) -> int:
    """Write a synthetic store log; returns its size in bytes."""
    started = time.monotonic()
    gen = SyntheticLog(seed)
    size, chunk = 0, 100_000
    with open(path, "w", encoding="ascii", newline="\n") as f:
        for done in range(0, records, chunk):
            text = "".join(line(gen.record()) for _ in range(min(chunk, records - done)))
            f.write(text)
            size += len(text)
            if done and done % 1_000_000 == 0:
                log.info("synth: %d records", done)
    log.info(
        "synth: %d records, %d live queues, %.1f MB in %.1f s",
        records,
        len(gen.live),
        size / 1e6,
        time.monotonic() - started,
    )
    return size
