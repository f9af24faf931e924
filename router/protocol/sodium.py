"""libsodium functions that PyNaCl ships but does not bind, called through ctypes on the
library PyNaCl itself loads: the same libsodium build as every other crypto call here."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import nacl._sodium


def unbound(name: str, argtypes: Sequence[type], restype: type = ctypes.c_int
            ) -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    """The function `name` of PyNaCl's libsodium; None where it cannot be reached (each
    caller keeps a way through PyNaCl's own bindings)."""
    try:
        function = getattr(ctypes.CDLL(nacl._sodium.__file__), name)
    except (OSError, AttributeError):
        return None
    function.argtypes = tuple(argtypes)
    function.restype = restype
    return function
