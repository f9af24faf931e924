"""A service client over native TLS (the service tests, `bench service_subscribe`),
written from the reference's handshake and encodings (simplexmq master:
Transport.hs `SMPClientHandshake`, `clientService`, `CertChainPubKey`,
`SMPServerHandshakeResponse`; Protocol.hs `transmissionP`, `tEncodeAuth`,
`SUBS`/`SOKS`/`ENDS`/`ALLS`; Encoding.hs), not from the project's
client. The project's pure codec is used only for NEW and SEND and to read IDS and
MSG, which are not what this client tests.

The service's certificate is its TLS client certificate; the per-session Ed25519
key is signed by the leaf as an X.509 signed object; a queue key in the session
signs the identity certificate's SHA-256 before the usual authorized bytes, and
NEW, SUB and NSUB carry the session key's signature after the authorization.
"""

from __future__ import annotations

import datetime
import hashlib
import itertools
import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import trio
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.x509.oid import NameOID

from router.protocol.codec import decode_response, encode_command

BLOCK_SIZE = 16384
VERSION = 19
_ED25519_ALGORITHM = bytes.fromhex("300506032b6570")  # SEQUENCE { OID 1.3.101.112 }


# --- certificates -------------------------------------------------------------------------


@dataclass
class ServiceCert:
    """A service's TLS client certificate chain (leaf first) and the leaf's key."""

    chain: list[bytes]  # DER
    leaf_key: Ed25519PrivateKey
    folder: Path

    @property
    def identity(self) -> bytes:
        return self.chain[0] if len(self.chain) == 1 else self.chain[1]

    def files(self) -> tuple[Path, Path]:
        cert_path, key_path = self.folder / "chain.pem", self.folder / "key.pem"
        cert_path.write_text("".join(ssl.DER_cert_to_PEM_cert(c) for c in self.chain))
        key_path.write_bytes(self.leaf_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ))
        return cert_path, key_path


def _certificate(
    name: str, key: Ed25519PrivateKey, issuer: str, issuer_key: Ed25519PrivateKey, ca: bool
) -> bytes:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    return builder.sign(issuer_key, None).public_bytes(serialization.Encoding.DER)


def self_signed_cert() -> ServiceCert:
    key = Ed25519PrivateKey.generate()
    cert = _certificate("service", key, "service", key, ca=True)
    return ServiceCert([cert], key, Path(tempfile.mkdtemp(prefix="svc-cert-")))


def chain_of_two() -> ServiceCert:
    """An identity (CA) certificate and a leaf it signed, as the reference's services."""
    identity_key, leaf_key = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    identity = _certificate("service identity", identity_key, "service identity",
                            identity_key, ca=True)
    leaf = _certificate("service", leaf_key, "service identity", identity_key, ca=False)
    return ServiceCert([leaf, identity], leaf_key, Path(tempfile.mkdtemp(prefix="svc-cert-")))


# --- encodings (Encoding.hs) -------------------------------------------------------------


def ss(b: bytes) -> bytes:
    assert len(b) < 256
    return bytes((len(b),)) + b


def large(b: bytes) -> bytes:
    return len(b).to_bytes(2, "big") + b


def _der(tag: int, value: bytes) -> bytes:
    n = len(value)
    if n < 0x80:
        return bytes((tag, n)) + value
    length = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes((tag, 0x80 | len(length))) + length + value


def ed25519_spki(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def signed_key(session_spki: bytes, signer: Ed25519PrivateKey) -> bytes:
    """`X.SignedExact X.PubKey`: SEQUENCE { SPKI, algorithm, BIT STRING signature }."""
    signature = signer.sign(session_spki)
    return _der(0x30, session_spki + _ED25519_ALGORITHM + _der(0x03, b"\x00" + signature))


def pad(content: bytes) -> bytes:
    return len(content).to_bytes(2, "big") + content + b"#" * (BLOCK_SIZE - 2 - len(content))


def unpad(block: bytes) -> bytes:
    return block[2 : 2 + int.from_bytes(block[:2], "big")]


def client_hello(key_hash: bytes, role: bytes, chain: list[bytes], signed: bytes) -> bytes:
    """`SMPClientHandshake` at v19 without a client X25519 key (it is optional):
    version, keyHash, proxyServer = 'F', clientService = '1' role certChain signedKey."""
    cert_chain = bytes((len(chain),)) + b"".join(large(c) for c in chain)
    return (VERSION.to_bytes(2, "big") + ss(key_hash) + b"F"
            + b"1" + role + cert_chain + large(signed))


# --- the client ----------------------------------------------------------------------------


class HandshakeRefused(Exception):
    """The router's third block was an error (or the connection closed instead)."""


@dataclass
class Event:
    corr_id: bytes
    entity_id: bytes
    command: bytes


@dataclass
class ServiceSession:
    stream: trio.SSLStream
    session_id: bytes
    cert: ServiceCert
    session_key: Ed25519PrivateKey
    service_id: bytes
    buffer: bytes = b""
    events: list[Event] = field(default_factory=list)
    _corr_ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    @property
    def cert_hash(self) -> bytes:
        return hashlib.sha256(self.cert.identity).digest()

    async def receive_block(self) -> bytes:
        while len(self.buffer) < BLOCK_SIZE:
            data = await self.stream.receive_some(65536)
            if not data:
                raise EOFError("router closed the connection")
            self.buffer += data
        block, self.buffer = self.buffer[:BLOCK_SIZE], self.buffer[BLOCK_SIZE:]
        return block

    async def receive(self) -> list[Event]:
        """The transmissions of one block: `transmissionP` with serviceAuth (an empty
        authorization has no service signature field after it)."""
        content = unpad(await self.receive_block())
        out, pos = [], 1
        for _ in range(content[0]):
            n = int.from_bytes(content[pos : pos + 2], "big")
            t, pos = content[pos + 2 : pos + 2 + n], pos + 2 + n
            auth_len = t[0]
            i = 1 + auth_len
            if auth_len:
                i += 1 if t[i] == 0x30 else 2 + t[i + 1]
            corr = t[i + 1 : i + 1 + t[i]]
            i += 1 + t[i]
            entity = t[i + 1 : i + 1 + t[i]]
            i += 1 + t[i]
            out.append(Event(corr, entity, t[i:]))
        return out

    def transmission(
        self, entity_id: bytes, command: bytes, queue_key: Ed25519PrivateKey | None,
        *, service_signed: bool, service_key: Ed25519PrivateKey | None = None,
        by_session_key: bool = False,
    ) -> tuple[bytes, bytes]:
        """(corrId, transmission): `tEncodeAuth True` then corrId, entityId, command.
        A queue key signs the certificate hash then `authorized` when the command is
        service-signed (the reference's `authorized'`)."""
        corr_id = next(self._corr_ids).to_bytes(24, "big")
        authorized = ss(self.session_id) + ss(corr_id) + ss(entity_id) + command
        signer = self.session_key if service_key is None else service_key
        if by_session_key:
            auth = ss(signer.sign(authorized)) + b"0"  # SUBS: the session key, no service sig
        elif queue_key is None:
            auth = ss(b"")  # unsigned: no service signature field either
        else:
            signed = self.cert_hash + authorized if service_signed else authorized
            auth = ss(queue_key.sign(signed))
            auth += b"1" + ss(signer.sign(authorized)) if service_signed else b"0"
        return corr_id, auth + ss(corr_id) + ss(entity_id) + command

    async def command(
        self, entity_id: bytes, command: bytes, queue_key: Ed25519PrivateKey | None = None,
        *, service_signed: bool = False, service_key: Ed25519PrivateKey | None = None,
        by_session_key: bool = False,
    ) -> Event:
        corr_id, t = self.transmission(
            entity_id, command, queue_key, service_signed=service_signed,
            service_key=service_key, by_session_key=by_session_key,
        )
        await self.stream.send_all(pad(b"\x01" + large(t)))
        while True:
            for event in await self.receive():
                if event.corr_id == corr_id:
                    return event
                self.events.append(event)

    async def block(
        self, commands: list[tuple[bytes, bytes, Ed25519PrivateKey]], *, service_signed: bool
    ) -> list[Event]:
        """Several commands in one block (`batchTransmissions`), their answers in order."""
        pairs = [
            self.transmission(e, c, k, service_signed=service_signed) for e, c, k in commands
        ]
        content = bytes((len(pairs),)) + b"".join(large(t) for _, t in pairs)
        await self.stream.send_all(pad(content))
        answers: dict[bytes, Event] = {}
        while len(answers) < len(pairs):
            for event in await self.receive():
                if event.corr_id in {c for c, _ in pairs}:
                    answers[event.corr_id] = event
                else:
                    self.events.append(event)
        return [answers[c] for c, _ in pairs]

    async def next_event(self) -> Event:
        while not self.events:
            self.events.extend(await self.receive())
        return self.events.pop(0)

    def decode(self, event: Event) -> object:
        return decode_response(event.command, VERSION)

    async def subs(self, count: int, ids_hash: bytes, tag: bytes = b"SUBS") -> Event:
        """`SUBS n idsHash` (v19): entity id = service id, signed by the session key."""
        command = tag + b" " + count.to_bytes(8, "big", signed=True) + ss(ids_hash)
        return await self.command(self.service_id, command, by_session_key=True)

    async def aclose(self) -> None:
        await trio.aclose_forcefully(self.stream)


def parse_service_answer(command: bytes) -> tuple[bytes, int, bytes]:
    """(tag, n, idsHash) of `SOKS n idsHash` or `ENDS n idsHash` at v19."""
    tag, rest = command[:4], command[5:]
    return tag, int.from_bytes(rest[:8], "big", signed=True), rest[9 : 9 + rest[8]]


def encode(cmd: object) -> bytes:
    return encode_command(cmd, VERSION)  # type: ignore[arg-type]


async def connect_service(
    port: int, key_hash: bytes, cert: ServiceCert | None, role: bytes = b"M",
    *, hello_chain: list[bytes] | None = None, bad_key_signature: bool = False,
) -> ServiceSession:
    """TLS with the certificate as client certificate (none if `cert` is None), the
    router's hello, the client hello with `clientService`, and the third block."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["smp/1"])
    if cert is not None:
        context.load_cert_chain(*cert.files())
    tcp = await trio.open_tcp_stream("127.0.0.1", port)
    stream = trio.SSLStream(tcp, context)
    await stream.do_handshake()
    tls_unique = stream.get_channel_binding("tls-unique")
    session = ServiceSession(stream, b"", cert, Ed25519PrivateKey.generate(), b"")  # type: ignore[arg-type]
    hello = unpad(await session.receive_block())
    session.session_id = hello[5 : 5 + hello[4]]
    assert session.session_id == tls_unique
    if cert is None:
        return session
    signer = Ed25519PrivateKey.generate() if bad_key_signature else cert.leaf_key
    signed = signed_key(ed25519_spki(session.session_key), signer)
    chain = cert.chain if hello_chain is None else hello_chain
    await stream.send_all(pad(client_hello(key_hash, role, chain, signed)))
    try:
        answer = unpad(await session.receive_block())
    except (EOFError, trio.BrokenResourceError) as e:
        raise HandshakeRefused("closed without a third block") from e
    if answer[:1] == b"E":
        await session.aclose()
        raise HandshakeRefused(answer[1:].decode())
    assert answer[:1] == b"R", answer[:20]
    session.service_id = answer[2 : 2 + answer[1]]
    return session


async def plain_hello(session: ServiceSession, key_hash: bytes) -> None:
    """An ordinary client's hello (v19, no clientService): clientService = '0'."""
    await session.stream.send_all(pad(VERSION.to_bytes(2, "big") + ss(key_hash) + b"F0"))
