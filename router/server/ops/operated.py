"""The router as the operation ports see it: what they read and what they may do.

The control port and the metrics endpoint are handed the running router, but
they know it by this type only. The router imports the ports to start them;
the ports import nothing above this folder, so no import goes round in a circle.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from store.interfaces import MessageStore, QueueStore

    from ..core.blocked import BlockedQueues
    from ..core.connection import Connection
    from ..core.counters import Counters, RouterStatistics
    from ..core.latency import Latencies
    from ..core.notifications import Notifications
    from ..core.relays import Relays
    from ..core.subscriptions import Subscriptions
    from ..edge.gate import SuspendGate
    from ..settings.config import RouterConfig
    from .memory import MemoryCensus


class OperatedRouter(Protocol):
    config: RouterConfig
    queues: QueueStore
    messages: MessageStore
    counters: Counters
    latencies: Latencies
    notifications: Notifications
    gate: SuspendGate
    blocked: BlockedQueues
    subscriptions: Subscriptions
    connections: Mapping[int, Connection]
    memory: MemoryCensus
    relays: Relays  # the proxy's pool

    def statistics(self) -> RouterStatistics: ...
    def connection_task_counts(self) -> dict[int, int]: ...
    async def delete_queue(self, recipient_id: bytes) -> bool: ...
    async def block_queue(self, recipient_id: bytes, reason: str) -> bool: ...
    def unblock_queue(self, recipient_id: bytes) -> bool: ...
    def save_now(self) -> str: ...
    draining: bool

    def suspend(self) -> None: ...
    def resume(self) -> None: ...
    def start_drain(self, period: float) -> bool: ...
