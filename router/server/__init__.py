"""The SMP router on Trio and WebSockets. Public names are re-exported here."""

from .core.counters import RouterStatistics
from .edge.identity import RouterIdentity, load_or_create_identity
from .router import Router, RouterInfo, handle_websocket, open_router, serve_router
from .settings.config import DELIVERY_MODES, PER_QUEUE_TASK, SINGLE_TASK, ConfigError, RouterConfig

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
