"""SMP codec: pure, sans-I/O (bytes in, values out). Public names are re-exported here.

Nothing in this package imports trio, sockets or an event loop; PyNaCl is the
only dependency, for signatures and boxes.
"""

from .block import (
    BATCH_LIMIT,
    BLOCK_SIZE,
    MAX_BATCH,
    MAX_TRANSMISSION_SIZE,
    BatchPacker,
    decode_batch,
    encode_batches,
    pad_block,
    unpad_block,
)
from .codec import (
    MAX_MESSAGE_LENGTH,
    check_credentials,
    decode_command,
    decode_response,
    encode_command,
    encode_response,
    encode_response_transmission,
)
from .crypto import (
    MSG_ENC_SIZE,
    MSG_PADDED_SIZE,
    NTF_META_ENC_SIZE,
    MessageBody,
    authorize,
    box_key,
    decrypt_msg_body,
    decrypt_ntf_meta,
    ed25519_public,
    encrypt_msg_body,
    encrypt_ntf_meta,
    new_ed25519,
    new_x25519,
    prove_service,
    sign,
    verify_authorization,
    verify_service_proof,
    x25519_public,
)
from .encoding import Parser, bool_, encode_key, int64, large, maybe, ss, word16
from .errors import decode_error, encode_error
from .handshake import (
    SERVICE_MARKER,
    SMP_VERSION_MAX,
    SMP_VERSION_MIN,
    ClientHello,
    ServerHello,
    ServiceProof,
    decode_client_hello,
    decode_server_hello,
    encode_client_hello,
    encode_server_hello,
    negotiate_version,
    service_id,
    service_signed_bytes,
)
from .keys import KeyType, ed448_spki, ed25519_spki, key_type, raw_key, x25519_spki
from .transmission import (
    authorized_bytes,
    check_auth_length,
    decode_transmission,
    encode_transmission,
    transmission_authorized,
)
from .types import (
    ACK,
    ALLS,
    AUTH,
    BLOCK,
    CMD_HAS_AUTH,
    CMD_NO_AUTH,
    CMD_NO_ENTITY,
    CMD_PROHIBITED,
    CMD_SYNTAX,
    CMD_UNKNOWN,
    CRYPTO,
    DEL,
    DELD,
    END,
    ENDS,
    ERR,
    EXPIRED,
    GET,
    HANDSHAKE,
    IDS,
    INFO,
    INTERNAL,
    KEY,
    LARGE_MSG,
    MSG,
    NDEL,
    NEW,
    NID,
    NKEY,
    NMSG,
    NO_MSG,
    NSUB,
    NSUBS,
    OFF,
    OK,
    PFWD,
    PING,
    PONG,
    PROXY_BASIC_AUTH,
    PROXY_NO_SESSION,
    PRXY,
    QUE,
    QUOTA,
    SEND,
    SERVICE,
    SESSION,
    SKEY,
    SOKS,
    SUB,
    SUBS,
    CmdErr,
    Command,
    ErrorType,
    ProtocolError,
    Response,
    Transmission,
    store_error,
)

__all__ = [
    # values and errors
    "ACK", "ALLS", "AUTH", "BLOCK", "CMD_HAS_AUTH", "CMD_NO_AUTH", "CMD_NO_ENTITY",
    "CMD_PROHIBITED", "CMD_SYNTAX", "CMD_UNKNOWN", "CRYPTO", "DEL", "DELD", "END", "ENDS",
    "ERR", "EXPIRED", "GET", "HANDSHAKE", "IDS", "INFO", "INTERNAL", "KEY", "LARGE_MSG",
    "MSG", "NDEL", "NEW", "NID", "NKEY", "NMSG", "NO_MSG", "NSUB", "NSUBS", "OFF", "OK",
    "PFWD", "PING", "PONG", "PROXY_BASIC_AUTH", "PROXY_NO_SESSION", "PRXY", "QUE", "QUOTA",
    "SEND", "SERVICE", "SESSION", "SKEY", "SOKS", "SUB", "SUBS", "CmdErr", "Command",
    "ErrorType", "ProtocolError", "Response", "Transmission", "store_error",
    # encoding
    "Parser", "bool_", "encode_key", "int64", "large", "maybe", "ss", "word16",
    # keys
    "KeyType", "ed448_spki", "ed25519_spki", "key_type", "raw_key", "x25519_spki",
    # blocks
    "BATCH_LIMIT", "BLOCK_SIZE", "MAX_BATCH", "MAX_TRANSMISSION_SIZE", "BatchPacker",
    "decode_batch", "encode_batches", "pad_block", "unpad_block",
    # transmissions
    "authorized_bytes", "check_auth_length", "decode_transmission", "encode_transmission",
    "transmission_authorized",
    # commands, responses, errors
    "MAX_MESSAGE_LENGTH", "check_credentials", "decode_command", "decode_error",
    "decode_response", "encode_command", "encode_error", "encode_response",
    "encode_response_transmission",
    # handshake
    "SERVICE_MARKER", "SMP_VERSION_MAX", "SMP_VERSION_MIN", "ClientHello", "ServerHello",
    "ServiceProof", "decode_client_hello", "decode_server_hello", "encode_client_hello",
    "encode_server_hello", "negotiate_version", "service_id", "service_signed_bytes",
    # crypto
    "MSG_ENC_SIZE", "MSG_PADDED_SIZE", "NTF_META_ENC_SIZE", "MessageBody", "authorize",
    "box_key", "decrypt_msg_body", "decrypt_ntf_meta", "ed25519_public", "encrypt_msg_body",
    "encrypt_ntf_meta", "new_ed25519", "new_x25519", "prove_service", "sign",
    "verify_authorization", "verify_service_proof", "x25519_public",
]
