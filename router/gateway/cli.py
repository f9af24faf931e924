"""`smp-router gateway`: the command line of the browser-facing gateway.

    smp-router gateway --port 8080 --store memory
    smp-router gateway --host 0.0.0.0 --port 443 --tls-cert cert.pem --tls-key key.pem \
        --allow-origin https://chat.example

It takes every option of `serve` (store, data directory, quotas, the
listener's limits, `--tls-cert`/`--tls-key` for https:// and wss://) and
these: `--allow-origin ORIGIN` (repeatable; pages of other origins than the
gateway's own are refused, origins.py) and `--web-root DIR` (default: the
repository's web/). Once it accepts it
prints ONE line to stdout, flushed, holding the page's http(s):// URL, the SMP
WebSocket's ws(s):// URL and the router's smp:// address.
"""

from __future__ import annotations

import argparse
import copy
import logging
import signal
from pathlib import Path

import trio

from router.server.settings.config import ConfigError, RouterConfig

from .origins import OriginError, normalize_origin
from .server import DEFAULT_WEB_ROOT, GatewayConfig, GatewayInfo, serve_gateway

log = logging.getLogger("smp-router")
DEFAULT_PORT = 8080


def add_gateway_command(commands: argparse._SubParsersAction, serve: argparse.ArgumentParser):
    """Register `gateway` with `serve`'s options and its own.

    argparse shares a parent's option objects with the child, and changing a
    default changes it for both: the gateway takes a copy of `serve`'s."""
    gateway = commands.add_parser(
        "gateway", parents=[copy.deepcopy(serve)], conflict_handler="resolve",
        help="run the router behind a web gateway: the browser client, a demo chat, "
        "the SMP WebSocket on /smp",
    )
    gateway.set_defaults(port=DEFAULT_PORT)
    gateway.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                         help="a web page origin (scheme://host[:port]) besides the "
                         "gateway's own that may use the SMP WebSocket; repeatable")
    gateway.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                         help="a host name the gateway answers to besides those it was "
                         "started with (--host, --public-host); repeatable. Requests for "
                         "other names get 421 (DNS rebinding)")
    gateway.add_argument("--web-root", type=Path, default=DEFAULT_WEB_ROOT,
                         help="the web client's directory, built (npm ci --prefix DIR): "
                         "the gateway serves DIR/dist/site (default: the repository's web/)")
    return gateway


def gateway_config(args: argparse.Namespace, router: RouterConfig) -> GatewayConfig:
    """The gateway's configuration from its arguments and `serve`'s router config
    (which holds the listener's limits and TLS files); ConfigError (exit code 2)
    for a bad origin."""
    try:
        origins = tuple(normalize_origin(o) for o in args.allow_origin)
    except OriginError as e:
        raise ConfigError(f"--allow-origin: {e}") from e
    return GatewayConfig(router, args.web_root, origins, tuple(args.allow_host))


async def run_gateway(config: GatewayConfig) -> None:
    """Serve until SIGINT or SIGTERM, then stop cleanly."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            info: GatewayInfo = await nursery.start(serve_gateway, config)
            print(info.summary(), flush=True)
            async for signum in signals:
                log.info("stopping on %s", signal.Signals(signum).name)
                break
            nursery.cancel_scope.cancel()
