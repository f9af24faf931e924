"""Hypothesis strategies for SMP values, shared by the codec property tests."""

from __future__ import annotations

from hypothesis import strategies as st

from router.protocol import (
    ACK,
    ALLS,
    DEL,
    DELD,
    END,
    ENDS,
    ERR,
    GET,
    IDS,
    INFO,
    KEY,
    LDEL,
    LGET,
    LKEY,
    LNK,
    LSET,
    MSG,
    NDEL,
    NEW,
    NID,
    NKEY,
    NMSG,
    NSUB,
    NSUBS,
    OFF,
    OK,
    PFWD,
    PING,
    PKEY,
    PONG,
    PRES,
    PRXY,
    QUE,
    RFWD,
    RKEY,
    RRES,
    SEND,
    SKEY,
    SOK,
    SOKS,
    SUB,
    SUBS,
    CmdErr,
    ErrorType,
    NewNotifier,
    QueueLink,
    Transmission,
    ed448_spki,
    ed25519_spki,
    versions,
    x25519_spki,
)

short = st.binary(max_size=255)
int64s = st.integers(min_value=-(2**63), max_value=2**63 - 1)

ed25519_keys = st.binary(min_size=32, max_size=32).map(ed25519_spki)
x25519_keys = st.binary(min_size=32, max_size=32).map(x25519_spki)
ed448_keys = st.binary(min_size=57, max_size=57).map(ed448_spki)
auth_keys = st.one_of(ed25519_keys, x25519_keys, ed448_keys)

_password_bytes = [
    b for b in range(256) if chr(b).isprintable() and not chr(b).isspace() and chr(b) not in "@:/"
]
passwords = st.lists(st.sampled_from(_password_bytes), max_size=40).map(bytes)
send_flags = st.builds(
    lambda first, rest: first + rest,
    st.sampled_from([b"T", b"F"]),
    st.binary(max_size=6).map(lambda b: b.replace(b" ", b"x")),
)
# Printable ASCII hosts without spaces, as router addresses are written.
proxy_hosts = st.lists(
    st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=60),
    min_size=1, max_size=4,
).map(tuple)
ports = st.one_of(st.just(""), st.integers(1, 65535).map(str))
cert_chains = st.lists(st.binary(max_size=300), min_size=1, max_size=4).map(tuple)
bodies = st.one_of(st.binary(max_size=300), st.integers(0, 16064).map(lambda n: b"\x00" * n))

commands = st.one_of(
    st.sampled_from([PING(), SUB(), GET(), OFF(), DEL(), QUE(), NDEL(), NSUB(), SUBS(), NSUBS()]),
    st.builds(NEW, auth_keys, x25519_keys, st.none() | passwords, st.booleans(), st.booleans()),
    st.builds(KEY, auth_keys),
    st.builds(SKEY, auth_keys),
    st.builds(SEND, send_flags, bodies),
    st.builds(ACK, short),
    st.builds(NKEY, auth_keys, x25519_keys),
    st.builds(PRXY, proxy_hosts, ports, short, st.none() | passwords),
    st.builds(PFWD, st.integers(0, 0xFFFF), x25519_keys, st.binary(max_size=300)),
    st.builds(RFWD, st.binary(max_size=300)),
)

_token_ss = st.builds(lambda b: bytes((len(b),)) + b, short)


def _proxy_errors(wire_errors: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    transport = st.one_of(
        st.sampled_from([b"BLOCK", b"VERSION", b"LARGE_MSG", b"SESSION", b"NO_AUTH"]),
        st.sampled_from([b"PARSE", b"IDENTITY", b"BAD_AUTH", b"BAD_SERVICE"]).map(
            lambda e: b"HANDSHAKE " + e
        ),
    )
    network = st.one_of(
        st.sampled_from([b"UNKNOWNCA", b"FAILED", b"TIMEOUT"]),
        st.builds(lambda t, s: t + b" " + s, st.sampled_from([b"CONNECT", b"TLS", b"SUBSCRIBE"]),
                  _token_ss),
    )
    broker = st.one_of(
        st.sampled_from([b"TIMEOUT", b"HOST", b"NO_SERVICE", b"NETWORK"]),
        st.builds(lambda t, s: t + b" " + s, st.sampled_from([b"RESPONSE", b"UNEXPECTED"]),
                  _token_ss),
        transport.map(lambda e: b"TRANSPORT " + e),
        network.map(lambda e: b"NETWORK " + e),
    )
    return st.one_of(
        st.sampled_from([b"BASIC_AUTH", b"NO_SESSION"]),
        broker.map(lambda e: b"BROKER " + e),
        wire_errors.map(lambda e: b"PROTOCOL " + e),
    )


def _error_bytes(e: ErrorType) -> bytes:
    from router.protocol import encode_error

    return encode_error(e)


errors: st.SearchStrategy[ErrorType] = st.deferred(
    lambda: st.one_of(
        st.sampled_from(
            [ErrorType(t) for t in ("BLOCK", "SESSION", "AUTH", "QUOTA", "NO_MSG", "LARGE_MSG",
                                    "INTERNAL", "CRYPTO", "SERVICE", "EXPIRED", "DUPLICATE_")]
        ),
        st.sampled_from(list(CmdErr)).map(lambda c: ErrorType("CMD", c)),
        st.text().map(lambda t: ErrorType("STORE", t)),
        st.builds(
            lambda reason, notice: ErrorType("BLOCKED", reason + notice),
            st.sampled_from(["reason=spam", "reason=content"]),
            st.one_of(st.just(""), st.text().map(lambda t: ",notice=" + t)),
        ),
        _proxy_errors(errors.map(_error_bytes)).map(lambda b: ErrorType("PROXY", b)),
    )
)

responses = st.one_of(
    st.sampled_from([END(), DELD(), OK(), PONG(), ALLS()]),
    st.builds(IDS, short, short, x25519_keys, st.booleans()),
    st.builds(MSG, short, st.one_of(st.binary(max_size=300), st.just(b"\x01" * 16122))),
    st.builds(NID, short, x25519_keys),
    st.builds(NMSG, st.binary(min_size=24, max_size=24), short),
    st.builds(INFO, st.text()),
    st.builds(ERR, errors),
    st.builds(SOKS, int64s),
    st.builds(ENDS, int64s),
    st.builds(
        PKEY, short, st.integers(0, 0xFFFF), st.integers(0, 0xFFFF), cert_chains,
        st.binary(max_size=300),
    ),
    st.builds(RRES, st.binary(max_size=300)),
    st.builds(PRES, st.binary(max_size=300)),
)

transmissions = st.builds(Transmission, short, short, short, st.binary(max_size=200))


# --- per version (docs/protocol.md#version-table) ------------------------------------------

codec_versions = st.integers(versions.CODEC_VERSION_MIN, versions.CODEC_VERSION_MAX)
link_data = st.one_of(st.binary(max_size=300), st.just(b"\x02" * 13000))


def _new_at(v: int) -> st.SearchStrategy[NEW]:
    head = (auth_keys, x25519_keys, st.none() | passwords, st.booleans())
    if not versions.has_short_links(v):
        return st.builds(NEW, *head, st.booleans())
    messaging = st.builds(QueueLink, short, link_data, link_data, st.none())
    contact = st.builds(QueueLink, short, link_data, link_data, short)
    notifiers = (
        st.none() | st.builds(NewNotifier, auth_keys, x25519_keys)
        if versions.has_new_notifier(v) else st.none()
    )
    return st.one_of(
        st.builds(NEW, *head, st.none(), st.none(), notifiers),
        st.builds(NEW, *head, st.just(True), st.none() | messaging, notifiers),
        st.builds(NEW, *head, st.just(False), st.none() | contact, notifiers),
    )


def commands_at(v: int) -> st.SearchStrategy:
    return st.one_of(
        commands.filter(lambda c: not isinstance(c, NEW)),
        _new_at(v),
        st.sampled_from([LDEL(), LGET()]),
        st.builds(LKEY, auth_keys),
        st.builds(LSET, short, link_data, link_data),
        st.lists(auth_keys, min_size=1, max_size=4).map(lambda ks: RKEY(tuple(ks))),
    )


def _ids_at(v: int) -> st.SearchStrategy[IDS]:
    head = (short, short, x25519_keys)
    if not versions.has_short_links(v):
        return st.builds(IDS, *head, st.booleans())
    service = st.none() | short if versions.has_service_field(v) else st.none()
    notifier = (st.none() | st.builds(NID, short, x25519_keys)
                if versions.has_new_notifier(v) else st.none())
    return st.builds(IDS, *head, st.none() | st.booleans(), st.none() | short, service, notifier)


def responses_at(v: int) -> st.SearchStrategy:
    return st.one_of(
        responses.filter(lambda r: not isinstance(r, IDS)),
        _ids_at(v),
        st.builds(LNK, short, link_data, link_data),
        st.builds(SOK, st.none() | short),
    )


service_sigs = st.none() | st.binary(min_size=64, max_size=64)


def transmissions_at(v: int) -> st.SearchStrategy[Transmission]:
    if not versions.has_service_field(v):
        return transmissions
    return st.one_of(
        st.builds(Transmission, st.just(b""), short, short, st.binary(max_size=200)),
        st.builds(Transmission, short.filter(bool), short, short, st.binary(max_size=200),
                  service_sigs),
    )
