"""The SMP router on Trio and WebSockets. Public names are re-exported here."""

from .config import DELIVERY_MODES, PER_QUEUE_TASK, SINGLE_TASK, ConfigError, RouterConfig
from .identity import RouterIdentity, load_or_create_identity
from .router import Router, RouterInfo, handle_websocket, open_router, serve_router
from .stats import RouterStatistics

__all__ = [
    "DELIVERY_MODES",
    "PER_QUEUE_TASK",
    "SINGLE_TASK",
    "ConfigError",
    "Router",
    "RouterConfig",
    "RouterIdentity",
    "RouterInfo",
    "RouterStatistics",
    "handle_websocket",
    "load_or_create_identity",
    "open_router",
    "serve_router",
]
