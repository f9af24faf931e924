"""A recipient connection that checks delivery as it happens, for the delivery
invariant test (test_e2e_delivery_invariant.py).

It sends its own blocks and reads every transmission in arrival order, so what
it checks about its own connection is exact, not a guess across tasks:

- a MSG for a queue while another is in flight on this connection is a second
  message in flight, unless a SUB of that queue was sent since: the router
  then forgets what was in flight and may send one message (the head) again;
- a MSG whose ACK this connection sent (or saw succeed) comes again;
- per queue and sender, messages arrive in the order they were sent.

Everything it sees goes into a `Ledger` shared by the connections of one run,
which the test compares with the router's state once everything is quiet.
Bodies are ``b"<sender>:<seq>"``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import trio
import trio_websocket

from router.client import RecipientQueue
from router.protocol import crypto
from router.protocol.block import BatchPacker, decode_batch
from router.protocol.codec import decode_response, encode_command
from router.protocol.transmission import decode_transmission, encode_transmission
from router.protocol.types import (
    ACK,
    AUTH,
    DELD,
    END,
    ERR,
    GET,
    MSG,
    NO_MSG,
    OK,
    PING,
    SUB,
    Command,
    Transmission,
)

_ERR_NO_MSG, _ERR_AUTH = ERR(NO_MSG), ERR(AUTH)


@dataclass
class Ledger:
    """What the clients of one run did and saw."""

    sent: dict[bytes, set[bytes]] = field(default_factory=dict)  # rid -> bodies answered OK
    bodies: dict[bytes, bytes] = field(default_factory=dict)  # msg id -> body
    acked: set[bytes] = field(default_factory=set)  # msg ids whose ACK succeeded
    deleted: set[bytes] = field(default_factory=set)  # queues deleted (by DEL)
    violations: list[str] = field(default_factory=list)
    deliveries: int = 0  # MSGs received, pushed or as answers


@dataclass
class QueueView:
    """One queue as one connection sees it."""

    in_flight: bytes | None = None  # the message this connection holds unacknowledged
    acking: bytes | None = None  # the message whose ACK is on its way
    resets: int = 0  # SUBs sent while a message was in flight: each lets one come again
    acked: set[bytes] = field(default_factory=set)
    last_seq: dict[bytes, int] = field(default_factory=dict)  # sender -> last seq seen
    history: list[str] = field(default_factory=list)  # what happened, for the report

    def note(self, what: str) -> None:
        self.history.append(what)
        del self.history[:-8]


class ObservedRecipient:
    """One WebSocket to the router, used through `request`; `run` reads it."""

    def __init__(
        self,
        name: str,
        ws: trio_websocket.WebSocketConnection,
        session_id: bytes,
        queues: dict[bytes, RecipientQueue],
        ledger: Ledger,
    ) -> None:
        self.name = name
        self.session_id = session_id
        self.views: dict[bytes, QueueView] = {}
        self._ws = ws
        self._queues = queues
        self._ledger = ledger
        self._pending: dict[bytes, tuple[bytes, Command, list]] = {}
        self._answered = trio.Event()

    def view(self, rid: bytes) -> QueueView:
        return self.views.setdefault(rid, QueueView())

    # --- requests -------------------------------------------------------------------

    async def request(self, commands: list[tuple[bytes, Command]]) -> list:
        """Send the commands in one block; their responses, in order.

        A PING goes last in the block: the router answers a block's commands in
        order, so once its PONG is here, so is every MSG that answered a SUB.
        """
        packer = BatchPacker()
        slots: list[list] = []
        for rid, cmd in [*commands, (b"", PING())]:
            corr_id = os.urandom(24)
            command = encode_command(cmd)
            auth = b""
            if rid:
                seed = self._queues[rid].rcv_auth_seed
                auth = crypto.authorize(seed, self.session_id, corr_id, rid, command)
            assert packer.add(encode_transmission(Transmission(auth, corr_id, rid, command)))
            slot: list = []
            slots.append(slot)
            self._pending[corr_id] = (rid, cmd, slot)
            self._before_send(rid, cmd)
        await self._ws.send_message(packer.take_block())
        while not all(slots):
            self._answered = trio.Event()
            await self._answered.wait()
        return [slot[0] for slot in slots[:-1]]

    def _before_send(self, rid: bytes, cmd: Command) -> None:
        if not rid:
            return
        view = self.view(rid)
        view.note(f"> {type(cmd).__name__}")
        if isinstance(cmd, SUB):
            view.resets += 1
        elif isinstance(cmd, ACK):
            view.acking, view.in_flight, view.resets = cmd.msg_id, None, 0

    # --- reading ----------------------------------------------------------------------

    async def run(self) -> None:
        """Read until the connection closes."""
        try:
            while True:
                block = await self._ws.get_message()
                for raw in decode_batch(block):
                    self._receive(decode_transmission(raw))
        except trio_websocket.ConnectionClosed:
            pass

    def _receive(self, t: Transmission) -> None:
        resp = decode_response(t.command)
        entry = self._pending.pop(t.corr_id, None) if t.corr_id else None
        if entry is None:
            self._push(t.entity_id, resp)
            return
        rid, cmd, slot = entry
        if rid:
            self.view(rid).note(f"< {type(cmd).__name__}: {_short(resp)}")
        if isinstance(cmd, ACK):
            self._ack_answered(rid, cmd.msg_id, resp)
        elif isinstance(cmd, GET) and isinstance(resp, MSG):
            self._got(rid, resp)
        slot.append(resp)
        self._answered.set()

    def _push(self, rid: bytes, resp: object) -> None:
        self.view(rid).note(f"< push {_short(resp)}")
        if isinstance(resp, MSG):
            self._delivered(rid, resp)
        elif isinstance(resp, END | DELD):
            view = self.view(rid)
            view.in_flight, view.resets = None, 0
        else:
            self._violation(f"unexpected push {resp!r}")

    def _ack_answered(self, rid: bytes, msg_id: bytes, resp: object) -> None:
        view = self.view(rid)
        view.acking = None
        if isinstance(resp, OK | MSG):
            view.acked.add(msg_id)
            self._ledger.acked.add(msg_id)
        elif resp not in (_ERR_NO_MSG, _ERR_AUTH):
            self._violation(f"ACK answered {resp!r}")
        if isinstance(resp, MSG):
            self._delivered(rid, resp)

    def _got(self, rid: bytes, msg: MSG) -> None:
        """GET mode: the head again until it is acknowledged, never one acknowledged here."""
        view = self.view(rid)
        if msg.msg_id in view.acked:
            self._violation(f"GET returned {msg.msg_id.hex()[:8]} after its ACK")
        view.in_flight = msg.msg_id
        self._record(rid, msg)

    def _delivered(self, rid: bytes, msg: MSG) -> None:
        view = self.view(rid)
        mid = msg.msg_id
        if mid in view.acked or mid == view.acking:
            self._violation(f"{mid.hex()[:8]} delivered again after its ACK", view)
        elif view.in_flight is not None and not view.resets:
            self._violation(
                f"{mid.hex()[:8]} delivered while {view.in_flight.hex()[:8]} is in flight", view
            )
        elif view.in_flight is not None:
            view.resets -= 1
        view.in_flight = mid
        self._check_order(rid, view, self._record(rid, msg))

    def _record(self, rid: bytes, msg: MSG) -> bytes:
        body = crypto.decrypt_msg_body(self._queues[rid].box_key, msg.msg_id, msg.enc_body).body
        self._ledger.bodies[msg.msg_id] = body
        self._ledger.deliveries += 1
        return body

    def _check_order(self, rid: bytes, view: QueueView, body: bytes) -> None:
        sender, seq = body.split(b":")
        last = view.last_seq.get(sender, -1)
        if int(seq) < last:
            self._violation(f"{body!r} arrived after {sender!r}:{last}")
        view.last_seq[sender] = int(seq)

    def _violation(self, text: str, view: QueueView | None = None) -> None:
        history = "" if view is None else f" (after: {'; '.join(view.history)})"
        self._ledger.violations.append(f"{self.name}: {text}{history}")


def _short(resp: object) -> str:
    if isinstance(resp, MSG):
        return f"MSG {resp.msg_id.hex()[:8]}"
    return type(resp).__name__ if not isinstance(resp, ERR) else f"ERR {resp.error}"

