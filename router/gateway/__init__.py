"""The browser-facing gateway: the router, the JavaScript SMP client, a demo
chat and a health page on one port, in one Trio program.

    from router.gateway import GatewayConfig, serve_gateway
    from router.server import RouterConfig

    config = GatewayConfig(RouterConfig(port=8080, store="memory"),
                           allow_origins=("https://chat.example",))
    info = await nursery.start(serve_gateway, config)
    print(info.page_url, info.smp_url, info.address)

The listener is the router's own (router.server.edge.listener: deadlines, caps, TLS);
`GatewaySite` (site.py) is its request hook: the URL layout, static files,
`/demo/config.json`, `/health`, and the Origin allow-list (origins.py) in front
of the SMP upgrade on `/smp`. `smp-router gateway` (cli.py) is its command.
"""

from .origins import OriginError, OriginPolicy, normalize_origin
from .server import DEFAULT_WEB_ROOT, GatewayConfig, GatewayInfo, serve_gateway
from .site import SMP_PATH, GatewaySite, SiteConfig, client_config

__all__ = [
    "DEFAULT_WEB_ROOT",
    "SMP_PATH",
    "GatewayConfig",
    "GatewayInfo",
    "GatewaySite",
    "OriginError",
    "OriginPolicy",
    "SiteConfig",
    "client_config",
    "normalize_origin",
    "serve_gateway",
]
