"""Block encryption under the connection (docs/protocol.md#block-encryption):
`EncryptedTransport` seals every block it sends and opens every block it receives.

The connection code above it keeps sending and receiving plain padded blocks; this
wrapper replaces each by its box, in order (each direction's chain advances once per
block, so the order is fixed by the connection's one writing task at a time, which
seals a write's blocks together and in order). A block that does not open ends the
connection: the two chains can no longer agree.
"""

from __future__ import annotations

from router.protocol.block_encryption import BlockCipher
from router.protocol.types import ProtocolError

from .block_stream import BlockStream, TransportClosed, block_ready_check, sends_now


class EncryptedTransport:
    """A BlockStream whose blocks are boxes on the wire."""

    __slots__ = ("inner", "_cipher", "remote", "web_challenge")

    def __init__(self, inner: BlockStream, cipher: BlockCipher) -> None:
        self.inner = inner
        self._cipher = cipher
        self.remote = inner.remote
        self.web_challenge = inner.web_challenge

    @property
    def stalled(self) -> bool:
        return self.inner.stalled

    async def receive_block(self) -> bytes:
        block = await self.inner.receive_block()
        try:
            return self._cipher.open_to_plain_block(block)
        except ProtocolError as e:
            raise TransportClosed(f"a block does not decrypt: {e}") from e

    async def send_block(self, block: bytes) -> None:
        await self.inner.send_block(self._seal(block))

    async def send_blocks(self, blocks: list[bytes]) -> None:
        await self.inner.send_blocks([self._seal(block) for block in blocks])

    def can_send_now(self) -> bool:
        inner = sends_now(self.inner)
        return inner is not None and inner.can_send_now()

    def send_blocks_now(self, blocks: list[bytes]) -> bool:
        inner = sends_now(self.inner)
        assert inner is not None
        return inner.send_blocks_now([self._seal(block) for block in blocks])

    def block_ready(self) -> bool:
        return block_ready_check(self.inner)()

    def _seal(self, block: bytes) -> bytes:
        return self._cipher.seal_plain_block(block)

    def established(self) -> None:
        self.inner.established()

    async def aclose(self, timeout: float) -> None:
        await self.inner.aclose(timeout)
