"""Commands and responses (docs/protocol.md#command-table) and the credential rules
(docs/protocol.md#credentials).

A command or response is ``TAG`` or ``TAG SP params``. Decoding splits off the
tag, looks up its parser and requires the parameters to be consumed exactly:
an unknown tag is `CMD UNKNOWN`, anything else that does not parse is
`CMD SYNTAX`. Parameter-less values are shared singletons, so the hot path
(SEND, ACK, SUB in; MSG, OK out) allocates little beyond the bytes it returns.

Every function takes the connection's negotiated version; the differences between
versions (NEW, IDS, SOK, DELD, ERR BLOCKED) are decided by the predicates of
`versions` (docs/protocol.md#version-table), never by a number here.
"""

from __future__ import annotations

from collections.abc import Callable

from . import versions
from .encoding import Parser, encode_key, int64, large, maybe, ss, ss_len, utf8, word16
from .errors import decode_error, encode_error
from .types import (
    ACK,
    ALLS,
    CMD_HAS_AUTH,
    CMD_NO_AUTH,
    CMD_NO_ENTITY,
    CMD_SYNTAX,
    CMD_UNKNOWN,
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
    NO_IDS_HASH,
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
    Command,
    ErrorType,
    NewNotifier,
    ProtocolError,
    QueueLink,
    Response,
    Transmission,
)

# SEND body limit at v8..v10 (docs/protocol.md#limits); `versions.max_message_length` per version.
MAX_MESSAGE_LENGTH = versions.max_message_length(versions.LEGACY_VERSION)
MAX_SEND_FLAGS = 7  # 'T'/'F' plus up to 6 reserved bytes before the SP

# --- parameter-less singletons ------------------------------------------------

_PING, _SUB, _GET, _OFF, _DEL, _QUE, _NDEL, _NSUB, _LDEL, _LGET = (
    PING(), SUB(), GET(), OFF(), DEL(), QUE(), NDEL(), NSUB(), LDEL(), LGET()
)
_END, _DELD, _OK, _PONG, _ALLS = END(), DELD(), OK(), PONG(), ALLS()

# --- helpers ---------------------------------------------------------------------


Parse = Callable[[bytes, int, int], object]  # (data, where the SP is or -1, version)


def _params(data: bytes, space_at: int) -> Parser:
    """A parser over the parameters after ``TAG SP``; `CMD SYNTAX` if there is no SP."""
    if space_at < 0:
        raise ProtocolError(CMD_SYNTAX, "missing parameters")
    return Parser(data, space_at + 1)


def _no_params(value: object) -> Parse:
    def parse(data: bytes, space_at: int, v: int) -> object:
        if space_at >= 0:
            raise ProtocolError(CMD_SYNTAX, "unexpected parameters")
        return value

    return parse


def _ids_hash(p: Parser) -> bytes:
    ids_hash = p.short_string()
    if len(ids_hash) != len(NO_IDS_HASH):
        raise p.fail("an ids hash has 16 bytes")
    return ids_hash


def _parse_service_sub(cls: type) -> Parse:
    """SUBS / NSUBS (docs/protocol.md#service-subscriptions): no parameters before v19
    (the reference reads them as -1 and no hash), the count and ids hash from v19."""

    def parse(data: bytes, i: int, v: int) -> object:
        if not versions.has_service_subscriptions(v):
            if i >= 0:
                raise ProtocolError(CMD_SYNTAX, "unexpected parameters")
            return cls()
        p = _params(data, i)
        n = p.int64()
        ids_hash = _ids_hash(p)
        p.end()
        return cls(n, ids_hash)

    return parse


# Password characters the reference accepts (printable, not space, '@', ':', '/'),
# judged on Latin-1 as Haskell's Char8 does.
_PASSWORD_BYTES = frozenset(
    b for b in range(256)
    if chr(b).isprintable() and not chr(b).isspace() and chr(b) not in "@:/"
)


def _password(p: Parser) -> bytes:
    pw = p.short_string()
    if not all(b in _PASSWORD_BYTES for b in pw):
        raise p.fail("invalid character in basic auth")
    return pw


def _sub_mode(p: Parser) -> bool:
    b = p.byte()
    if b == 0x53:  # 'S': create and subscribe
        return True
    if b == 0x43:  # 'C': only create
        return False
    raise p.fail("subMode must be S or C")


# --- commands --------------------------------------------------------------------


def _link_data(p: Parser) -> tuple[bytes, bytes]:
    """The two encrypted parts of short-link data: large(fixed) large(user)."""
    return p.large(), p.large()


def _queue_request(p: Parser) -> tuple[bool, QueueLink | None]:
    """queueReqData (v15): ``'M' Maybe(ss(sndId) linkData)`` or
    ``'C' Maybe(ss(linkId) ss(sndId) linkData)``; (sndSecure, link)."""
    mode = p.byte()
    if mode == 0x4D:  # 'M'
        def messaging() -> QueueLink:
            sender_id = p.short_string()
            return QueueLink(sender_id, *_link_data(p))

        return True, p.maybe(messaging)
    if mode == 0x43:  # 'C'
        def contact() -> QueueLink:
            link_id = p.short_string()
            sender_id = p.short_string()
            fixed, user = _link_data(p)
            return QueueLink(sender_id, fixed, user, link_id)

        return False, p.maybe(contact)
    raise p.fail("queue mode must be M or C")


def _parse_new(data: bytes, i: int, v: int) -> NEW:
    p = _params(data, i)
    rcv_auth_key = p.key()
    rcv_dh_key = p.dh_key()
    basic_auth = p.maybe(lambda: _password(p))
    subscribe = _sub_mode(p)
    snd_secure: bool | None
    link = notifier = None
    if versions.has_short_links(v):
        request = p.maybe(lambda: _queue_request(p))
        snd_secure, link = (None, None) if request is None else request
        if versions.has_new_notifier(v):
            notifier = p.maybe(lambda: NewNotifier(p.key(), p.dh_key()))
    else:
        snd_secure = p.bool_()
    p.end()
    return NEW(rcv_auth_key, rcv_dh_key, basic_auth, subscribe, snd_secure, link, notifier)


def _parse_key_cmd(cls: type) -> Parse:
    def parse(data: bytes, i: int, v: int) -> object:
        p = _params(data, i)
        key = p.key()
        p.end()
        return cls(key)

    return parse


def _parse_send(data: bytes, i: int, v: int) -> SEND:
    # flags: 'T'/'F' then reserved non-space bytes, at most MAX_SEND_FLAGS before the SP.
    if i < 0:
        raise ProtocolError(CMD_SYNTAX, "missing parameters")
    start = i + 1
    j = data.find(b" ", start, start + MAX_SEND_FLAGS + 1)
    if j <= start or data[start] not in b"TF":
        raise ProtocolError(CMD_SYNTAX, "bad SEND flags")
    return SEND(data[start:j], data[j + 1 :])


def _parse_ack(data: bytes, i: int, v: int) -> ACK:
    # Lean path: "ACK " ss(msgId) and nothing else.
    if i < 0 or i + 1 >= len(data):
        raise ProtocolError(CMD_SYNTAX, "bad ACK")
    end = i + 2 + data[i + 1]
    if end != len(data):
        raise ProtocolError(CMD_SYNTAX, "bad ACK")
    return ACK(data[i + 2 : end])


def _parse_nkey(data: bytes, i: int, v: int) -> NKEY:
    p = _params(data, i)
    notifier_key = p.key()
    dh_key = p.dh_key()
    p.end()
    return NKEY(notifier_key, dh_key)


def _parse_rkey(data: bytes, i: int, v: int) -> RKEY:
    p = _params(data, i)
    n = p.byte()
    if n == 0:
        raise p.fail("RKEY needs at least one key")
    keys = tuple(p.key() for _ in range(n))
    p.end()
    return RKEY(keys)


def _parse_lset(data: bytes, i: int, v: int) -> LSET:
    p = _params(data, i)
    link_id = p.short_string()
    fixed, user = _link_data(p)
    p.end()
    return LSET(link_id, fixed, user)


# --- private message routing (docs/protocol.md#private-message-routing) -----------

MAX_PROXY_HOSTS = 255  # the host list's count is one byte


def _host(p: Parser) -> str:
    """One host of a router address: printable ASCII without spaces, as the reference's
    host names, IP addresses and onion names all are."""
    raw = p.short_string()
    if not raw or not all(0x21 <= b <= 0x7E for b in raw):
        raise p.fail("bad host")
    return raw.decode()


def _port(p: Parser) -> str:
    raw = p.short_string()
    if not raw.isdigit() and raw:
        raise p.fail("bad port")
    return raw.decode()


def _parse_prxy(data: bytes, i: int, v: int) -> PRXY:
    p = _params(data, i)
    n = p.byte()
    if n == 0:
        raise p.fail("PRXY needs at least one host")
    hosts = tuple(_host(p) for _ in range(n))
    port = _port(p)
    key_hash = p.short_string()
    basic_auth = p.maybe(lambda: _password(p))
    p.end()
    return PRXY(hosts, port, key_hash, basic_auth)


def _parse_pfwd(data: bytes, i: int, v: int) -> PFWD:
    p = _params(data, i)
    version = p.word16()
    client_key = p.dh_key()
    return PFWD(version, client_key, p.rest())


def _parse_rfwd(data: bytes, i: int, v: int) -> RFWD:
    return RFWD(_params(data, i).rest())


def _encode_prxy(c: PRXY, v: int) -> bytes:
    if not 1 <= len(c.hosts) <= MAX_PROXY_HOSTS:
        raise ValueError("PRXY needs 1 to 255 hosts")
    return b"".join((
        b"PRXY ", bytes((len(c.hosts),)), *(ss(h.encode()) for h in c.hosts),
        ss(c.port.encode()), ss(c.key_hash), maybe(c.basic_auth, ss),
    ))


def _encode_pfwd(c: PFWD, v: int) -> bytes:
    return b"".join((b"PFWD ", word16(c.version), encode_key(c.client_key), c.enc_transmission))


# Tags are known at every version, as the reference parses them: a command a version
# does not define is still answered (short links before v15, say).
_COMMAND_PARSERS: dict[bytes, Parse] = {
    b"PING": _no_params(_PING),
    b"NEW": _parse_new,
    b"SUB": _no_params(_SUB),
    b"KEY": _parse_key_cmd(KEY),
    b"SKEY": _parse_key_cmd(SKEY),
    b"SEND": _parse_send,
    b"ACK": _parse_ack,
    b"GET": _no_params(_GET),
    b"OFF": _no_params(_OFF),
    b"DEL": _no_params(_DEL),
    b"QUE": _no_params(_QUE),
    b"NKEY": _parse_nkey,
    b"NDEL": _no_params(_NDEL),
    b"NSUB": _no_params(_NSUB),
    b"SUBS": _parse_service_sub(SUBS),
    b"NSUBS": _parse_service_sub(NSUBS),
    b"RKEY": _parse_rkey,
    b"LSET": _parse_lset,
    b"LDEL": _no_params(_LDEL),
    b"LKEY": _parse_key_cmd(LKEY),
    b"LGET": _no_params(_LGET),
    b"PRXY": _parse_prxy,
    b"PFWD": _parse_pfwd,
    b"RFWD": _parse_rfwd,
}


def decode_command(data: bytes, version: int = versions.LEGACY_VERSION) -> Command:
    """One command at `version`; `ProtocolError(CMD UNKNOWN)` for an unknown tag, `CMD SYNTAX`
    otherwise."""
    # Tags are at most 5 bytes: look for the SP only there, not through a SEND body.
    i = data.find(b" ", 0, 6)
    parse = _COMMAND_PARSERS.get(data if i < 0 else data[:i])
    if parse is None:
        raise ProtocolError(CMD_UNKNOWN)
    return parse(data, i, version)  # type: ignore[return-value]


def _encode_link(link: QueueLink, contact: bool) -> bytes:
    if contact != (link.link_id is not None):
        raise ValueError("a contact queue's link carries its link id, a messaging queue's does not")
    head = ss(link.link_id) if link.link_id is not None else b""
    return b"".join((head, ss(link.sender_id), large(link.fixed_data), large(link.user_data)))


def _encode_queue_request(c: NEW) -> bytes:
    if c.snd_secure is None:
        if c.link is not None:
            raise ValueError("link data needs a queue mode")
        return b"0"
    mode = b"M" if c.snd_secure else b"C"
    return b"1" + mode + maybe(c.link, lambda link: _encode_link(link, not c.snd_secure))


def _encode_new_notifier(n: NewNotifier) -> bytes:
    return encode_key(n.notifier_key) + encode_key(n.rcv_ntf_dh_key)


def _encode_new(c: NEW, v: int) -> bytes:
    auth = b"0" if c.basic_auth is None else b"1" + ss(c.basic_auth)
    head = b"".join((
        b"NEW ", encode_key(c.rcv_auth_key), encode_key(c.rcv_dh_key), auth,
        b"S" if c.subscribe else b"C",
    ))
    if not versions.has_short_links(v):
        if c.link is not None or c.notifier is not None:
            raise ValueError("link data and notifier credentials need v15 / v17")
        return head + (b"T" if c.snd_secure else b"F")
    tail = _encode_queue_request(c)
    if versions.has_new_notifier(v):
        tail += maybe(c.notifier, _encode_new_notifier)
    elif c.notifier is not None:
        raise ValueError("notifier credentials in NEW need v17")
    return head + tail


_COMMAND_ENCODERS: dict[type, Callable[[object, int], bytes]] = {
    PING: lambda c, v: b"PING",
    NEW: _encode_new,  # type: ignore[dict-item]
    SUB: lambda c, v: b"SUB",
    KEY: lambda c, v: b"KEY " + encode_key(c.sender_key),  # type: ignore[attr-defined]
    SKEY: lambda c, v: b"SKEY " + encode_key(c.sender_key),  # type: ignore[attr-defined]
    SEND: lambda c, v: b"".join((b"SEND ", c.flags, b" ", c.body)),  # type: ignore[attr-defined]
    ACK: lambda c, v: b"ACK " + ss(c.msg_id),  # type: ignore[attr-defined]
    GET: lambda c, v: b"GET",
    OFF: lambda c, v: b"OFF",
    DEL: lambda c, v: b"DEL",
    QUE: lambda c, v: b"QUE",
    NKEY: lambda c, v: (  # type: ignore[attr-defined]
        b"NKEY " + encode_key(c.notifier_key) + encode_key(c.rcv_ntf_dh_key)
    ),
    NDEL: lambda c, v: b"NDEL",
    NSUB: lambda c, v: b"NSUB",
    SUBS: lambda c, v: _service_figures(b"SUBS", c.count, c.ids_hash, v),  # type: ignore[attr-defined]
    NSUBS: lambda c, v: _service_figures(b"NSUBS", c.count, c.ids_hash, v),  # type: ignore[attr-defined]
    PRXY: _encode_prxy,  # type: ignore[dict-item]
    PFWD: _encode_pfwd,  # type: ignore[dict-item]
    RFWD: lambda c, v: b"RFWD " + c.enc_fwd_transmission,  # type: ignore[attr-defined]
    RKEY: lambda c, v: (  # type: ignore[attr-defined]
        b"RKEY " + bytes((len(c.rcv_keys),)) + b"".join(encode_key(k) for k in c.rcv_keys)
    ),
    LSET: lambda c, v: (  # type: ignore[attr-defined]
        b"LSET " + ss(c.link_id) + large(c.fixed_data) + large(c.user_data)
    ),
    LDEL: lambda c, v: b"LDEL",
    LKEY: lambda c, v: b"LKEY " + encode_key(c.sender_key),  # type: ignore[attr-defined]
    LGET: lambda c, v: b"LGET",
}


def encode_command(cmd: Command, version: int = versions.LEGACY_VERSION) -> bytes:
    return _COMMAND_ENCODERS[type(cmd)](cmd, version)


# --- responses -------------------------------------------------------------------------


def _parse_ids(data: bytes, i: int, v: int) -> IDS:
    p = _params(data, i)
    rcv_id = p.short_string()
    snd_id = p.short_string()
    dh = p.dh_key()
    snd_secure: bool | None = None
    link_id = service_id = notifier = None
    if versions.has_short_links(v):
        mode = p.maybe(p.byte)
        if mode is not None:
            if mode not in (0x4D, 0x43):
                raise p.fail("queue mode must be M or C")
            snd_secure = mode == 0x4D
        link_id = p.maybe(p.short_string)
        if versions.has_service_field(v):
            service_id = p.maybe(p.short_string)
        if versions.has_new_notifier(v):
            notifier = p.maybe(lambda: NID(p.short_string(), p.dh_key()))
    elif versions.has_sender_auth_key(v):
        snd_secure = p.bool_()
    p.end()
    return IDS(rcv_id, snd_id, dh, snd_secure, link_id, service_id, notifier)


def _parse_msg(data: bytes, i: int, v: int) -> MSG:
    p = _params(data, i)
    msg_id = p.short_string()
    return MSG(msg_id, p.rest())


def _parse_nid(data: bytes, i: int, v: int) -> NID:
    p = _params(data, i)
    notifier_id = p.short_string()
    dh = p.dh_key()
    p.end()
    return NID(notifier_id, dh)


def _parse_nmsg(data: bytes, i: int, v: int) -> NMSG:
    p = _params(data, i)
    nonce = p.take(24)
    enc_meta = p.short_string()
    p.end()
    return NMSG(nonce, enc_meta)


def _parse_count(cls: type) -> Parse:
    """SOKS / ENDS: the count, and from v19 the ids hash."""

    def parse(data: bytes, i: int, v: int) -> object:
        p = _params(data, i)
        n = p.int64()
        if not versions.has_service_subscriptions(v):
            p.end()
            return cls(n)
        ids_hash = _ids_hash(p)
        p.end()
        return cls(n, ids_hash)

    return parse


def _service_figures(tag: bytes, count: int, ids_hash: bytes, v: int) -> bytes:
    if not versions.has_service_subscriptions(v):
        return tag
    return b"".join((tag, b" ", int64(count), ss(ids_hash)))


def _service_answer(tag: bytes, count: int, ids_hash: bytes, v: int) -> bytes:
    if not versions.has_service_subscriptions(v):
        return tag + b" " + int64(count)
    return b"".join((tag, b" ", int64(count), ss(ids_hash)))


def _parse_info(data: bytes, i: int, v: int) -> INFO:
    return INFO(utf8(_params(data, i).rest()))


def _parse_err(data: bytes, i: int, v: int) -> ERR:
    if i < 0:
        raise ProtocolError(CMD_SYNTAX, "missing error")
    return ERR(decode_error(data[i + 1 :]))


def _parse_lnk(data: bytes, i: int, v: int) -> LNK:
    p = _params(data, i)
    sender_id = p.short_string()
    fixed, user = _link_data(p)
    p.end()
    return LNK(sender_id, fixed, user)


def _parse_sok(data: bytes, i: int, v: int) -> SOK:
    p = _params(data, i)
    service_id = p.maybe(p.short_string)
    p.end()
    return SOK(service_id)


def _parse_pkey(data: bytes, i: int, v: int) -> PKEY:
    p = _params(data, i)
    session_id = p.short_string()
    min_version, max_version = p.word16(), p.word16()
    n = p.byte()
    if n == 0:
        raise p.fail("PKEY needs a certificate")
    chain = tuple(p.large() for _ in range(n))
    signed_key = p.large()
    p.end()
    return PKEY(session_id, min_version, max_version, chain, signed_key)


def _encode_pkey(r: PKEY, v: int) -> bytes:
    if not 1 <= len(r.cert_chain) <= 255:
        raise ValueError("PKEY needs 1 to 255 certificates")
    return b"".join((
        b"PKEY ", ss(r.session_id), word16(r.min_version), word16(r.max_version),
        bytes((len(r.cert_chain),)), *(large(c) for c in r.cert_chain), large(r.signed_key),
    ))


def _parse_tail(cls: type) -> Parse:
    return lambda data, i, v: cls(_params(data, i).rest())


_RESPONSE_PARSERS: dict[bytes, Parse] = {
    b"IDS": _parse_ids,
    b"MSG": _parse_msg,
    b"NID": _parse_nid,
    b"NMSG": _parse_nmsg,
    b"END": _no_params(_END),
    b"DELD": _no_params(_DELD),
    b"OK": _no_params(_OK),
    b"PONG": _no_params(_PONG),
    b"INFO": _parse_info,
    b"ERR": _parse_err,
    b"SOKS": _parse_count(SOKS),
    b"ENDS": _parse_count(ENDS),
    b"ALLS": _no_params(_ALLS),
    b"LNK": _parse_lnk,
    b"SOK": _parse_sok,
    b"PKEY": _parse_pkey,
    b"RRES": _parse_tail(RRES),
    b"PRES": _parse_tail(PRES),
}


def decode_response(data: bytes, version: int = versions.LEGACY_VERSION) -> Response:
    """One router message at `version`; `ProtocolError(CMD UNKNOWN / CMD SYNTAX)` if it is not
    one."""
    i = data.find(b" ", 0, 6)
    parse = _RESPONSE_PARSERS.get(data if i < 0 else data[:i])
    if parse is None:
        raise ProtocolError(CMD_UNKNOWN)
    return parse(data, i, version)  # type: ignore[return-value]


def _encode_notifier_ids(n: NID) -> bytes:
    return ss(n.notifier_id) + encode_key(n.srv_ntf_dh_key)


def _encode_ids(r: IDS, v: int) -> bytes:
    head = b"".join((b"IDS ", ss(r.rcv_id), ss(r.snd_id), encode_key(r.srv_dh_key)))
    if versions.has_short_links(v):
        parts = [head, maybe(r.queue_mode, lambda m: m), maybe(r.link_id, ss)]
        if versions.has_service_field(v):
            parts.append(maybe(r.service_id, ss))
        if versions.has_new_notifier(v):
            parts.append(maybe(r.notifier, _encode_notifier_ids))
        return b"".join(parts)
    if versions.has_sender_auth_key(v):
        return head + (b"T" if r.snd_secure else b"F")
    return head


def _encode_sok(r: SOK, v: int) -> bytes:
    # Before v16 a subscription is answered OK: there is no service to name.
    if not versions.has_service_field(v):
        return b"OK"
    return b"SOK " + maybe(r.service_id, ss)


def _encode_err(r: ERR, v: int) -> bytes:
    return b"ERR " + encode_error(r.error, v)


_RESPONSE_ENCODERS: dict[type, Callable[[object, int], bytes]] = {
    IDS: _encode_ids,  # type: ignore[dict-item]
    MSG: lambda r, v: b"".join((b"MSG ", ss_len(len(r.msg_id)), r.msg_id, r.enc_body)),  # type: ignore[attr-defined]
    NID: lambda r, v: b"NID " + ss(r.notifier_id) + encode_key(r.srv_ntf_dh_key),  # type: ignore[attr-defined]
    NMSG: lambda r, v: _encode_nmsg(r),  # type: ignore[arg-type]
    END: lambda r, v: b"END",
    # DELD exists from v10; an older subscriber is told END (docs/protocol.md#end-and-deld).
    DELD: lambda r, v: b"DELD" if versions.has_deleted_event(v) else b"END",
    OK: lambda r, v: b"OK",
    PONG: lambda r, v: b"PONG",
    INFO: lambda r, v: b"INFO " + r.json.encode(),  # type: ignore[attr-defined]
    ERR: _encode_err,  # type: ignore[dict-item]
    SOKS: lambda r, v: _service_answer(b"SOKS", r.count, r.ids_hash, v),  # type: ignore[attr-defined]
    ENDS: lambda r, v: _service_answer(b"ENDS", r.count, r.ids_hash, v),  # type: ignore[attr-defined]
    ALLS: lambda r, v: b"ALLS",
    LNK: lambda r, v: (  # type: ignore[attr-defined]
        b"LNK " + ss(r.sender_id) + large(r.fixed_data) + large(r.user_data)
    ),
    SOK: _encode_sok,  # type: ignore[dict-item]
    PKEY: _encode_pkey,  # type: ignore[dict-item]
    RRES: lambda r, v: b"RRES " + r.enc_fwd_response,  # type: ignore[attr-defined]
    PRES: lambda r, v: b"PRES " + r.enc_response,  # type: ignore[attr-defined]
}


def _encode_nmsg(r: NMSG) -> bytes:
    if len(r.nonce) != 24:
        raise ValueError("NMSG nonce must be 24 bytes")
    return b"NMSG " + r.nonce + ss(r.enc_meta)


def encode_response(resp: Response, version: int = versions.LEGACY_VERSION) -> bytes:
    return _RESPONSE_ENCODERS[type(resp)](resp, version)


def encode_response_transmission(
    corr_id: bytes, entity_id: bytes, resp: Response, version: int = versions.LEGACY_VERSION
) -> bytes:
    """A whole router transmission (empty authorization, so no service field at any
    version: docs/protocol.md#service-signature) in one copy.

    Same bytes as ``encode_transmission(Transmission(b"", corr_id, entity_id,
    encode_response(resp)))``; for a MSG it avoids copying the 16 KB body twice.
    """
    if type(resp) is MSG:
        return b"".join((
            b"\x00", ss_len(len(corr_id)), corr_id, ss_len(len(entity_id)), entity_id,
            b"MSG ", ss_len(len(resp.msg_id)), resp.msg_id, resp.enc_body,
        ))
    return b"".join((
        b"\x00", ss_len(len(corr_id)), corr_id, ss_len(len(entity_id)), entity_id,
        encode_response(resp, version),
    ))


# --- credentials (docs/protocol.md#credentials) ---------------------------------------------------


def check_credentials(cmd: Command, t: Transmission) -> ErrorType | None:
    """The `CMD` error for a command whose entity id / authorization presence is wrong.

    Checked before any queue lookup. PRXY and RFWD must carry neither; PFWD and LGET
    must carry an entity (the proxy session, the link id) and no authorization, as the
    reference checks them (docs/protocol.md#private-message-routing).
    """
    has_auth = bool(t.authorization)
    has_entity = bool(t.entity_id)
    kind = type(cmd)
    if kind is SEND:
        return None if has_entity else CMD_NO_ENTITY
    if kind is NEW:
        if not has_auth:
            return CMD_NO_AUTH
        return CMD_HAS_AUTH if has_entity else None
    if kind is PING or kind is PRXY or kind is RFWD:
        return CMD_HAS_AUTH if has_auth or has_entity else None
    if kind is PFWD or kind is LGET:
        if not has_entity:
            return CMD_NO_ENTITY
        return CMD_HAS_AUTH if has_auth else None
    return None if has_auth and has_entity else CMD_NO_AUTH
