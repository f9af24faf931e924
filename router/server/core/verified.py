"""What the dispatcher hands to the command handlers: a verified command, and the
`ERR` transmission both of them answer failures with (docs/protocol.md#transmissions).

Its own module so that the dispatcher, which holds the handlers, and the
handlers, which take its output, both import it and not each other.
"""

from __future__ import annotations

from dataclasses import dataclass

from router.protocol.codec import encode_response_transmission
from router.protocol.types import ERR, Command, ErrorType
from router.protocol.versions import LEGACY_VERSION
from store.interfaces import QueueRecord


@dataclass(frozen=True, slots=True)
class Verified:
    """A command whose credentials and authorization passed; `queue` as looked up;
    `version` the connection's, which its answer is encoded at."""

    corr_id: bytes
    entity_id: bytes
    command: Command
    queue: QueueRecord | None
    version: int = LEGACY_VERSION


def error_transmission(
    corr_id: bytes, entity_id: bytes, error: ErrorType, version: int = LEGACY_VERSION
) -> bytes:
    return encode_response_transmission(corr_id, entity_id, ERR(error), version)
