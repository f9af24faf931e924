"""A history of what clients saw across router crashes, and the checker of its rules.

The crash test records every SEND (when it was issued, when and how it was
answered), every MSG the recipient got and every ACK it made, in the order the
test saw them (one Trio thread, so appending gives a total order). `check`
then holds the router to its promises:

- lost:          every message answered OK is delivered (by the end of the history);
- phantom:       nothing is delivered that was never sent;
- refused:       nothing answered ERR is delivered (an ERR means "not stored");
- msg_id:        a message keeps its msgId across restarts, and a msgId names one message;
- order:         per queue, first deliveries follow the order the messages were stored
                 in: A before B whenever A was answered OK before B was sent, or was
                 sent in an earlier run of the router (a crash in between);
- acked_again:   a message whose ACK the router answered is never delivered again.

Messages are told apart by their bodies, which the test makes unique.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class Outcome(Enum):
    OK = "ok"
    ERROR = "error"  # the router answered ERR
    UNKNOWN = "unknown"  # no answer: the router died first


@dataclass(slots=True)
class Send:
    queue: bytes  # recipient id
    body: bytes
    run: int  # which start of the router it was sent to
    started: int  # history tick when the SEND was issued
    answered: int | None = None  # tick of the answer, None while unknown
    outcome: Outcome = Outcome.UNKNOWN


@dataclass(frozen=True, slots=True)
class Delivery:
    queue: bytes
    msg_id: bytes
    body: bytes
    run: int
    tick: int


@dataclass(frozen=True, slots=True)
class Ack:
    queue: bytes
    msg_id: bytes
    tick: int  # when the router's answer arrived


@dataclass(frozen=True, slots=True)
class Violation:
    rule: str
    detail: str


@dataclass
class History:
    sends: list[Send] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)
    acks: list[Ack] = field(default_factory=list)
    _tick: int = 0

    def tick(self) -> int:
        self._tick += 1
        return self._tick

    # --- recording ---------------------------------------------------------------

    def send_started(self, queue: bytes, body: bytes, run: int) -> Send:
        send = Send(queue, body, run, self.tick())
        self.sends.append(send)
        return send

    def send_answered(self, send: Send, outcome: Outcome) -> None:
        send.outcome = outcome
        send.answered = self.tick() if outcome is not Outcome.UNKNOWN else None

    def delivered(self, queue: bytes, msg_id: bytes, body: bytes, run: int) -> None:
        self.deliveries.append(Delivery(queue, msg_id, body, run, self.tick()))

    def acked(self, queue: bytes, msg_id: bytes) -> None:
        """The router answered this ACK (OK, or the next MSG): the message is gone."""
        self.acks.append(Ack(queue, msg_id, self.tick()))

    # --- figures -----------------------------------------------------------------

    def count(self, outcome: Outcome) -> int:
        return sum(1 for s in self.sends if s.outcome is outcome)


def check(history: History) -> list[Violation]:
    """Every broken rule, one Violation per offending message (empty: the history is fine)."""
    sent = {(s.queue, s.body): s for s in history.sends}
    firsts = _first_deliveries(history.deliveries)
    return [
        *_lost(history.sends, firsts),
        *_phantom_or_refused(history.deliveries, sent),
        *_msg_ids(history.deliveries),
        *_order(history.sends, firsts),
        *_acked_again(history.acks, history.deliveries),
    ]


def _first_deliveries(deliveries: list[Delivery]) -> dict[tuple[bytes, bytes], Delivery]:
    firsts: dict[tuple[bytes, bytes], Delivery] = {}
    for d in deliveries:
        firsts.setdefault((d.queue, d.body), d)
    return firsts


def _lost(sends: list[Send], firsts: dict) -> list[Violation]:
    return [
        Violation("lost", f"{s.body!r} to {s.queue.hex()[:8]} was answered OK, never delivered")
        for s in sends
        if s.outcome is Outcome.OK and (s.queue, s.body) not in firsts
    ]


def _phantom_or_refused(deliveries: list[Delivery], sent: dict) -> list[Violation]:
    out = []
    for d in deliveries:
        s = sent.get((d.queue, d.body))
        if s is None:
            out.append(Violation("phantom", f"{d.body!r} delivered, never sent to that queue"))
        elif s.outcome is Outcome.ERROR:
            out.append(Violation("refused", f"{d.body!r} was answered ERR, yet delivered"))
    return out


def _msg_ids(deliveries: list[Delivery]) -> list[Violation]:
    out = []
    id_of: dict[tuple[bytes, bytes], bytes] = {}
    body_of: dict[bytes, bytes] = {}
    for d in deliveries:
        known = id_of.setdefault((d.queue, d.body), d.msg_id)
        if known != d.msg_id:
            out.append(Violation("msg_id", f"{d.body!r} delivered again with another msgId"))
        other = body_of.setdefault(d.msg_id, d.body)
        if other != d.body:
            out.append(Violation("msg_id", f"msgId {d.msg_id.hex()[:8]} names two messages"))
    return out


def _order(sends: list[Send], firsts: dict) -> list[Violation]:
    """A must be first delivered before B when A was answered OK before B was sent, or
    was sent to an earlier run. Each B is checked against the latest-delivered A of
    each kind (a sweep, so long histories stay cheap)."""
    by_queue: dict[bytes, list[tuple[Send, Delivery]]] = {}
    for s in sends:
        d = firsts.get((s.queue, s.body))
        if d is not None and s.outcome is not Outcome.ERROR:
            by_queue.setdefault(s.queue, []).append((s, d))
    found: dict[tuple[bytes, bytes], Violation] = {}
    for pairs in by_queue.values():
        for a, b in [*_answered_before_sent(pairs), *_earlier_run(pairs)]:
            found.setdefault(
                (a.body, b.body), Violation("order", f"{b.body!r} delivered before {a.body!r}")
            )
    return list(found.values())


Pair = tuple[Send, Delivery]


def _latest(best: Pair | None, candidate: Pair) -> Pair:
    return candidate if best is None or candidate[1].tick > best[1].tick else best


def _answered_before_sent(pairs: list[Pair]) -> list[tuple[Send, Send]]:
    answered = sorted(
        (p for p in pairs if p[0].answered is not None), key=lambda p: p[0].answered or 0
    )
    out, best, j = [], None, 0
    for b, db in sorted(pairs, key=lambda p: p[0].started):
        while j < len(answered) and (answered[j][0].answered or 0) < b.started:
            best, j = _latest(best, answered[j]), j + 1
        if best is not None and best[1].tick > db.tick:
            out.append((best[0], b))
    return out


def _earlier_run(pairs: list[Pair]) -> list[tuple[Send, Send]]:
    latest_in_run: dict[int, Pair] = {}
    for p in pairs:
        latest_in_run[p[0].run] = _latest(latest_in_run.get(p[0].run), p)
    before_run: dict[int, Pair | None] = {}
    best: Pair | None = None
    for run in sorted(latest_in_run):
        before_run[run] = best
        best = _latest(best, latest_in_run[run])
    out = []
    for b, db in pairs:
        a = before_run[b.run]
        if a is not None and a[1].tick > db.tick:
            out.append((a[0], b))
    return out


def _acked_again(acks: list[Ack], deliveries: list[Delivery]) -> list[Violation]:
    acked_at = {}
    for a in acks:
        acked_at.setdefault(a.msg_id, a.tick)
    return [
        Violation("acked_again", f"{d.body!r} delivered again after its ACK was answered")
        for d in deliveries
        if d.msg_id in acked_at and d.tick > acked_at[d.msg_id]
    ]
