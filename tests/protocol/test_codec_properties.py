"""Property tests: every value round-trips, and no input makes a decoder raise
anything but ProtocolError."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from protocol_strategies import (
    codec_versions,
    commands,
    commands_at,
    errors,
    responses,
    responses_at,
    transmissions,
    transmissions_at,
)

from router.protocol import (
    BATCH_LIMIT,
    BLOCK_SIZE,
    MAX_BATCH,
    MAX_TRANSMISSION_SIZE,
    ProtocolError,
    decode_batch,
    decode_client_hello,
    decode_command,
    decode_error,
    decode_response,
    decode_server_hello,
    decode_transmission,
    decrypt_msg_body,
    decrypt_ntf_meta,
    encode_batches,
    encode_command,
    encode_error,
    encode_response,
    encode_response_transmission,
    encode_transmission,
    key_type,
    pad_block,
    unpad_block,
    verify_authorization,
)
from router.protocol.transmission import entity_and_command_offset

# No deadlines: the machine running the tests may be busy; these check behaviour, not speed.
many = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
relaxed = settings(deadline=None)


@many
@given(commands)
def test_every_command_round_trips(cmd):
    assert decode_command(encode_command(cmd)) == cmd


@many
@given(st.data())
def test_every_command_round_trips_at_every_version(data):
    v = data.draw(codec_versions)
    cmd = data.draw(commands_at(v))
    assert decode_command(encode_command(cmd, v), v) == cmd


def _as_version_carries(resp, v):
    """What a response decodes to after `v` encoded it (docs/protocol.md#version-table)."""
    from router.protocol import DELD, END, ERR, OK, SOK
    from router.protocol.errors import for_version
    from router.protocol.versions import has_deleted_event, has_service_field

    if isinstance(resp, SOK) and not has_service_field(v):
        return OK()
    if isinstance(resp, DELD) and not has_deleted_event(v):
        return END()
    if isinstance(resp, ERR):
        return ERR(for_version(resp.error, v))
    return resp


@many
@given(responses)
def test_every_response_round_trips(resp):
    assert decode_response(encode_response(resp)) == _as_version_carries(resp, 10)


@many
@given(st.data())
def test_every_response_round_trips_at_every_version(data):
    v = data.draw(codec_versions)
    resp = data.draw(responses_at(v))
    assert decode_response(encode_response(resp, v), v) == _as_version_carries(resp, v)


@many
@given(st.data())
def test_every_transmission_round_trips_at_every_version(data):
    v = data.draw(codec_versions)
    t = data.draw(transmissions_at(v))
    assert decode_transmission(encode_transmission(t, v), v) == t


@many
@given(errors)
def test_every_error_round_trips(err):
    assert decode_error(encode_error(err)) == err


@many
@given(transmissions)
def test_every_transmission_round_trips(t):
    assert decode_transmission(encode_transmission(t)) == t


@many
@given(st.data())
def test_entity_and_command_offset_find_what_decode_transmission_finds(data):
    v = data.draw(codec_versions)
    raw = data.draw(st.one_of(transmissions_at(v).map(lambda t: encode_transmission(t, v)),
                              st.binary(max_size=300)))
    try:
        t = decode_transmission(raw, v)
    except ProtocolError:
        with pytest.raises(ProtocolError):
            entity_and_command_offset(raw, v)
    else:
        entity_id, start = entity_and_command_offset(raw, v)
        assert (entity_id, raw[start:]) == (t.entity_id, t.command)


@relaxed
@given(st.binary(max_size=255), st.binary(max_size=255), responses)
def test_response_transmission_matches_the_two_step_encoding(corr_id, entity_id, resp):
    from router.protocol import Transmission

    two_step = encode_transmission(Transmission(b"", corr_id, entity_id, encode_response(resp)))
    assert encode_response_transmission(corr_id, entity_id, resp) == two_step


# --- arbitrary input only ever raises ProtocolError ------------------------------------

DECODERS = [
    decode_command,
    decode_response,
    lambda data: decode_command(data, 19),
    lambda data: decode_response(data, 19),
    lambda data: decode_transmission(data, 19),
    decode_error,
    decode_transmission,
    decode_batch,
    unpad_block,
    decode_server_hello,
    decode_client_hello,
    key_type,
]


def _decodes_or_protocol_error(decode, data: bytes) -> None:
    try:
        decode(data)
    except ProtocolError:
        pass


def _mutations(data: bytes) -> st.SearchStrategy[bytes]:
    """Valid bytes truncated, extended, or with one byte changed."""
    n = len(data)
    return st.one_of(
        st.integers(0, n).map(lambda i: data[:i]),
        st.binary(min_size=1, max_size=8).map(lambda b: data + b),
        st.tuples(st.integers(0, max(n - 1, 0)), st.integers(0, 255)).map(
            lambda ib: data[: ib[0]] + bytes((ib[1],)) + data[ib[0] + 1 :]
        ),
    )


@many
@pytest.mark.parametrize("decode", DECODERS, ids=lambda f: f.__name__)
@given(data=st.binary(max_size=400))
def test_decoding_arbitrary_bytes_raises_only_protocol_error(decode, data):
    _decodes_or_protocol_error(decode, data)


tags = st.sampled_from(
    [b"PING", b"NEW", b"SUB", b"KEY", b"SKEY", b"SEND", b"ACK", b"GET", b"OFF", b"DEL", b"QUE",
     b"NKEY", b"NDEL", b"NSUB", b"SUBS", b"NSUBS", b"PRXY", b"PFWD", b"IDS", b"MSG", b"NID",
     b"NMSG", b"END", b"DELD", b"OK", b"PONG", b"INFO", b"ERR", b"SOKS", b"ENDS", b"ALLS",
     b"RKEY", b"LSET", b"LDEL", b"LKEY", b"LGET", b"LNK", b"SOK"]
)


@many
@given(tag=tags, sep=st.sampled_from([b"", b" "]), params=st.binary(max_size=200), v=codec_versions)
def test_known_tags_with_arbitrary_parameters_raise_only_protocol_error(tag, sep, params, v):
    _decodes_or_protocol_error(lambda d: decode_command(d, v), tag + sep + params)
    _decodes_or_protocol_error(lambda d: decode_response(d, v), tag + sep + params)


@many
@given(st.data())
def test_mutated_commands_raise_only_protocol_error(data):
    v = data.draw(codec_versions)
    encoded = encode_command(data.draw(commands_at(v)), v)
    _decodes_or_protocol_error(lambda d: decode_command(d, v), data.draw(_mutations(encoded)))


@many
@given(st.data())
def test_mutated_responses_and_errors_raise_only_protocol_error(data):
    v = data.draw(codec_versions)
    encoded = encode_response(data.draw(responses_at(v)), v)
    _decodes_or_protocol_error(lambda d: decode_response(d, v), data.draw(_mutations(encoded)))
    err = encode_error(data.draw(errors))
    _decodes_or_protocol_error(decode_error, data.draw(_mutations(err)))


@many
@given(st.binary(max_size=BLOCK_SIZE - 2), st.integers(0, 0xFFFF))
def test_blocks_with_arbitrary_content_or_length_raise_only_protocol_error(content, length):
    block = pad_block(content)
    _decodes_or_protocol_error(decode_batch, block)
    _decodes_or_protocol_error(decode_batch, length.to_bytes(2, "big") + block[2:])


@relaxed
@given(st.binary(max_size=300), st.binary(max_size=300), st.binary(max_size=300))
def test_decrypting_arbitrary_bytes_raises_only_protocol_error(key, nonce, enc):
    _decodes_or_protocol_error(lambda b: decrypt_msg_body(key, nonce, b), enc)
    _decodes_or_protocol_error(lambda b: decrypt_ntf_meta(key, nonce, b), enc)


@relaxed
@given(st.binary(max_size=130), st.none() | st.binary(max_size=80), st.binary(max_size=100))
def test_verifying_arbitrary_bytes_returns_false(auth, key, data):
    assert verify_authorization(auth, key, data) is False
    assert verify_authorization(auth, key, data, corr_id=data[:24],
                                router_dh_private=b"\x07" * 32) is False


# --- block packing ------------------------------------------------------------------------

transmission_sizes = st.one_of(
    st.lists(st.integers(0, MAX_TRANSMISSION_SIZE), max_size=12),
    st.lists(st.integers(0, 60), max_size=700),
    st.lists(st.integers(0, 9000), max_size=20),
)


@settings(max_examples=120, deadline=None)
@given(transmission_sizes)
def test_packing_respects_the_limits_and_keeps_order(sizes):
    ts = [bytes((i % 256,)) * n for i, n in enumerate(sizes)]
    blocks = encode_batches(ts)
    out = []
    for block in blocks:
        assert len(block) == BLOCK_SIZE
        batch = decode_batch(block)
        assert 1 <= len(batch) <= MAX_BATCH
        assert sum(2 + len(t) for t in batch) <= BATCH_LIMIT
        out.extend(batch)
    assert out == ts


@settings(max_examples=60, deadline=None)
@given(transmission_sizes)
def test_packing_uses_a_new_block_only_when_the_next_transmission_does_not_fit(sizes):
    ts = [b"x" * n for n in sizes]
    blocks = [decode_batch(b) for b in encode_batches(ts)]
    for batch, following in zip(blocks, blocks[1:], strict=False):
        used = sum(2 + len(t) for t in batch)
        assert len(batch) == MAX_BATCH or used + 2 + len(following[0]) > BATCH_LIMIT
