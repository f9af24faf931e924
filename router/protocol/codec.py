"""Commands and responses (docs/protocol.md#command-table) and the credential rules
(docs/protocol.md#credentials).

A command or response is ``TAG`` or ``TAG SP params``. Decoding splits off the
tag, looks up its parser and requires the parameters to be consumed exactly:
an unknown tag is `CMD UNKNOWN`, anything else that does not parse is
`CMD SYNTAX`. Parameter-less values are shared singletons, so the hot path
(SEND, ACK, SUB in; MSG, OK out) allocates little beyond the bytes it returns.
"""

from __future__ import annotations

from collections.abc import Callable

from .encoding import Parser, encode_key, int64, ss, ss_len, utf8
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
    PONG,
    PRXY,
    QUE,
    SEND,
    SKEY,
    SOKS,
    SUB,
    SUBS,
    Command,
    ErrorType,
    ProtocolError,
    Response,
    Transmission,
)

MAX_MESSAGE_LENGTH = 16064  # SEND body limit at v8..v10 (docs/protocol.md#limits); a router rule
MAX_SEND_FLAGS = 7  # 'T'/'F' plus up to 6 reserved bytes before the SP

# --- parameter-less singletons ------------------------------------------------

_PING, _SUB, _GET, _OFF, _DEL, _QUE, _NDEL, _NSUB, _SUBS, _NSUBS = (
    PING(), SUB(), GET(), OFF(), DEL(), QUE(), NDEL(), NSUB(), SUBS(), NSUBS()
)
_END, _DELD, _OK, _PONG, _ALLS = END(), DELD(), OK(), PONG(), ALLS()

# --- helpers ---------------------------------------------------------------------


def _params(data: bytes, space_at: int) -> Parser:
    """A parser over the parameters after ``TAG SP``; `CMD SYNTAX` if there is no SP."""
    if space_at < 0:
        raise ProtocolError(CMD_SYNTAX, "missing parameters")
    return Parser(data, space_at + 1)


def _no_params(value: object) -> Callable[[bytes, int], object]:
    def parse(data: bytes, space_at: int) -> object:
        if space_at >= 0:
            raise ProtocolError(CMD_SYNTAX, "unexpected parameters")
        return value

    return parse


def _raw_params(data: bytes, space_at: int) -> bytes:
    return b"" if space_at < 0 else data[space_at + 1 :]


def _with_raw(tag: bytes, raw: bytes) -> bytes:
    return tag + b" " + raw if raw else tag


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


def _parse_new(data: bytes, i: int) -> NEW:
    p = _params(data, i)
    rcv_auth_key = p.key()
    rcv_dh_key = p.dh_key()
    basic_auth = p.maybe(lambda: _password(p))
    subscribe = _sub_mode(p)
    snd_secure = p.bool_()
    p.end()
    return NEW(rcv_auth_key, rcv_dh_key, basic_auth, subscribe, snd_secure)


def _parse_key_cmd(cls: type) -> Callable[[bytes, int], object]:
    def parse(data: bytes, i: int) -> object:
        p = _params(data, i)
        key = p.key()
        p.end()
        return cls(key)

    return parse


def _parse_send(data: bytes, i: int) -> SEND:
    # flags: 'T'/'F' then reserved non-space bytes, at most MAX_SEND_FLAGS before the SP.
    if i < 0:
        raise ProtocolError(CMD_SYNTAX, "missing parameters")
    start = i + 1
    j = data.find(b" ", start, start + MAX_SEND_FLAGS + 1)
    if j <= start or data[start] not in b"TF":
        raise ProtocolError(CMD_SYNTAX, "bad SEND flags")
    return SEND(data[start:j], data[j + 1 :])


def _parse_ack(data: bytes, i: int) -> ACK:
    # Lean path: "ACK " ss(msgId) and nothing else.
    if i < 0 or i + 1 >= len(data):
        raise ProtocolError(CMD_SYNTAX, "bad ACK")
    end = i + 2 + data[i + 1]
    if end != len(data):
        raise ProtocolError(CMD_SYNTAX, "bad ACK")
    return ACK(data[i + 2 : end])


def _parse_nkey(data: bytes, i: int) -> NKEY:
    p = _params(data, i)
    notifier_key = p.key()
    dh_key = p.dh_key()
    p.end()
    return NKEY(notifier_key, dh_key)


_COMMAND_PARSERS: dict[bytes, Callable[[bytes, int], object]] = {
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
    b"SUBS": _no_params(_SUBS),
    b"NSUBS": _no_params(_NSUBS),
    b"PRXY": lambda data, i: PRXY(_raw_params(data, i)),
    b"PFWD": lambda data, i: PFWD(_raw_params(data, i)),
}


def decode_command(data: bytes) -> Command:
    """One command; `ProtocolError(CMD UNKNOWN)` for an unknown tag, `CMD SYNTAX` otherwise."""
    # Tags are at most 5 bytes: look for the SP only there, not through a SEND body.
    i = data.find(b" ", 0, 6)
    parse = _COMMAND_PARSERS.get(data if i < 0 else data[:i])
    if parse is None:
        raise ProtocolError(CMD_UNKNOWN)
    return parse(data, i)  # type: ignore[return-value]


def _encode_new(c: NEW) -> bytes:
    auth = b"0" if c.basic_auth is None else b"1" + ss(c.basic_auth)
    return b"".join((
        b"NEW ", encode_key(c.rcv_auth_key), encode_key(c.rcv_dh_key), auth,
        b"S" if c.subscribe else b"C", b"T" if c.snd_secure else b"F",
    ))


_COMMAND_ENCODERS: dict[type, Callable[[object], bytes]] = {
    PING: lambda c: b"PING",
    NEW: _encode_new,  # type: ignore[dict-item]
    SUB: lambda c: b"SUB",
    KEY: lambda c: b"KEY " + encode_key(c.sender_key),  # type: ignore[attr-defined]
    SKEY: lambda c: b"SKEY " + encode_key(c.sender_key),  # type: ignore[attr-defined]
    SEND: lambda c: b"".join((b"SEND ", c.flags, b" ", c.body)),  # type: ignore[attr-defined]
    ACK: lambda c: b"ACK " + ss(c.msg_id),  # type: ignore[attr-defined]
    GET: lambda c: b"GET",
    OFF: lambda c: b"OFF",
    DEL: lambda c: b"DEL",
    QUE: lambda c: b"QUE",
    NKEY: lambda c: (  # type: ignore[attr-defined]
        b"NKEY " + encode_key(c.notifier_key) + encode_key(c.rcv_ntf_dh_key)
    ),
    NDEL: lambda c: b"NDEL",
    NSUB: lambda c: b"NSUB",
    SUBS: lambda c: b"SUBS",
    NSUBS: lambda c: b"NSUBS",
    PRXY: lambda c: _with_raw(b"PRXY", c.raw),  # type: ignore[attr-defined]
    PFWD: lambda c: _with_raw(b"PFWD", c.raw),  # type: ignore[attr-defined]
}


def encode_command(cmd: Command) -> bytes:
    return _COMMAND_ENCODERS[type(cmd)](cmd)


# --- responses -------------------------------------------------------------------------


def _parse_ids(data: bytes, i: int) -> IDS:
    p = _params(data, i)
    rcv_id = p.short_string()
    snd_id = p.short_string()
    dh = p.dh_key()
    snd_secure = p.bool_()
    p.end()
    return IDS(rcv_id, snd_id, dh, snd_secure)


def _parse_msg(data: bytes, i: int) -> MSG:
    p = _params(data, i)
    msg_id = p.short_string()
    return MSG(msg_id, p.rest())


def _parse_nid(data: bytes, i: int) -> NID:
    p = _params(data, i)
    notifier_id = p.short_string()
    dh = p.dh_key()
    p.end()
    return NID(notifier_id, dh)


def _parse_nmsg(data: bytes, i: int) -> NMSG:
    p = _params(data, i)
    nonce = p.take(24)
    enc_meta = p.short_string()
    p.end()
    return NMSG(nonce, enc_meta)


def _parse_count(cls: type) -> Callable[[bytes, int], object]:
    def parse(data: bytes, i: int) -> object:
        p = _params(data, i)
        n = p.int64()
        p.end()
        return cls(n)

    return parse


def _parse_info(data: bytes, i: int) -> INFO:
    return INFO(utf8(_params(data, i).rest()))


def _parse_err(data: bytes, i: int) -> ERR:
    if i < 0:
        raise ProtocolError(CMD_SYNTAX, "missing error")
    return ERR(decode_error(data[i + 1 :]))


_RESPONSE_PARSERS: dict[bytes, Callable[[bytes, int], object]] = {
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
}


def decode_response(data: bytes) -> Response:
    """One router message; `ProtocolError(CMD UNKNOWN / CMD SYNTAX)` if it is not one."""
    i = data.find(b" ", 0, 6)
    parse = _RESPONSE_PARSERS.get(data if i < 0 else data[:i])
    if parse is None:
        raise ProtocolError(CMD_UNKNOWN)
    return parse(data, i)  # type: ignore[return-value]


_RESPONSE_ENCODERS: dict[type, Callable[[object], bytes]] = {
    IDS: lambda r: b"".join((  # type: ignore[attr-defined]
        b"IDS ", ss(r.rcv_id), ss(r.snd_id), encode_key(r.srv_dh_key),
        b"T" if r.snd_secure else b"F",
    )),
    MSG: lambda r: b"".join((b"MSG ", ss_len(len(r.msg_id)), r.msg_id, r.enc_body)),  # type: ignore[attr-defined]
    NID: lambda r: b"NID " + ss(r.notifier_id) + encode_key(r.srv_ntf_dh_key),  # type: ignore[attr-defined]
    NMSG: lambda r: _encode_nmsg(r),  # type: ignore[arg-type]
    END: lambda r: b"END",
    DELD: lambda r: b"DELD",
    OK: lambda r: b"OK",
    PONG: lambda r: b"PONG",
    INFO: lambda r: b"INFO " + r.json.encode(),  # type: ignore[attr-defined]
    ERR: lambda r: b"ERR " + encode_error(r.error),  # type: ignore[attr-defined]
    SOKS: lambda r: b"SOKS " + int64(r.count),  # type: ignore[attr-defined]
    ENDS: lambda r: b"ENDS " + int64(r.count),  # type: ignore[attr-defined]
    ALLS: lambda r: b"ALLS",
}


def _encode_nmsg(r: NMSG) -> bytes:
    if len(r.nonce) != 24:
        raise ValueError("NMSG nonce must be 24 bytes")
    return b"NMSG " + r.nonce + ss(r.enc_meta)


def encode_response(resp: Response) -> bytes:
    return _RESPONSE_ENCODERS[type(resp)](resp)


def encode_response_transmission(corr_id: bytes, entity_id: bytes, resp: Response) -> bytes:
    """A whole router transmission (empty authorization) in one copy.

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
        encode_response(resp),
    ))


# --- credentials (docs/protocol.md#credentials) ---------------------------------------------------


def check_credentials(cmd: Command, t: Transmission) -> ErrorType | None:
    """The `CMD` error for a command whose entity id / authorization presence is wrong.

    Checked before any queue lookup. PRXY must carry neither; PFWD must carry an
    entity (the proxy session) and no authorization, as the reference checks them.
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
    if kind is PING or kind is PRXY:
        return CMD_HAS_AUTH if has_auth or has_entity else None
    if kind is PFWD:
        if not has_entity:
            return CMD_NO_ENTITY
        return CMD_HAS_AUTH if has_auth else None
    return None if has_auth and has_entity else CMD_NO_AUTH
