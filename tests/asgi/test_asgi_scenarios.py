"""The project's end-to-end scenarios, and the protocol page's promises to a
second implementer, against the router mounted in a Starlette application under
Hypercorn's Trio worker, through the mount path (`ws://127.0.0.1:PORT/chat/smp`).

The tests are tests/e2e's own, collected here, where `router`, `router_factory`
and `one_router` (conftest.py) start the router behind the ASGI application
instead of on its own listener; nothing in them changes.
"""

from __future__ import annotations

from test_e2e_errors import *  # noqa: F403
from test_e2e_protocol_page import *  # noqa: F403
from test_e2e_service import *  # noqa: F403
