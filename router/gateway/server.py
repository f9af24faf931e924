"""Run the gateway: the router and its site on one listener, in one Trio program."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import trio

from router.server import RouterConfig, open_router
from router.server.edge.identity import host_port
from router.server.edge.listener import EdgeListener, serve_edge
from router.server.router import Router, listener_tls
from router.server.settings.config import WILDCARD_HOSTS

from .origins import HostPolicy, OriginPolicy
from .site import SMP_PATH, GatewaySite, SiteConfig, key_hash_text

log = logging.getLogger(__name__)

# The repository's web/ directory, next to the router package. The gateway
# serves its build, dist/site/, which `npm ci --prefix web` makes (web/build.mjs).
DEFAULT_WEB_ROOT = Path(__file__).resolve().parents[2] / "web"
SITE = Path("dist") / "site"
SITE_FILES = (Path("demo") / "index.html", Path("smp") / "index.js")


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    """The router's configuration (its host, port, stores, limits and TLS files are
    the gateway's) and what the site needs besides."""

    router: RouterConfig
    web_root: Path = DEFAULT_WEB_ROOT
    allow_origins: tuple[str, ...] = ()  # besides the gateway's own (origins.py)
    allow_hosts: tuple[str, ...] = ()  # names answered besides those it started with


@dataclass(frozen=True, slots=True)
class GatewayInfo:
    """Where a running gateway is; `page_url`, `smp_url` and `address` use the
    listening host as the name."""

    host: str
    port: int
    secure: bool
    router: Router
    listener: EdgeListener

    @property
    def page_url(self) -> str:
        return f"{'https' if self.secure else 'http'}://{host_port(self.host, self.port)}/"

    @property
    def smp_url(self) -> str:
        return f"{'wss' if self.secure else 'ws'}://{host_port(self.host, self.port)}{SMP_PATH}"

    @property
    def address(self) -> str:
        return f"smp://{key_hash_text(self.router.key_hash)}@" \
            f"{host_port(self.host, self.port)}{SMP_PATH}"

    @property
    def key_hash(self) -> bytes:
        return self.router.key_hash

    def summary(self) -> str:
        """The one line `smp-router gateway` prints once it accepts."""
        return (f"smp-router gateway serving {self.page_url} "
                f"SMP at {self.smp_url} address {self.address}")


def site_root(web_root: Path) -> Path:
    """Where the web build puts the files the gateway serves."""
    return web_root / SITE


def missing_web_files(web_root: Path) -> list[str]:
    """What the site needs that the build in `web_root` lacks."""
    return [f"{site_root(web_root) / f} (run: npm ci --prefix {web_root}, which builds it)"
            for f in SITE_FILES if not (site_root(web_root) / f).is_file()]


def host_names(config: GatewayConfig) -> HostPolicy:
    """The names the gateway answers to: those it was started with (its host, its
    public host, this machine's name when it listens everywhere, `localhost` when
    it listens on loopback) and `allow_hosts`."""
    rc = config.router
    names = [*config.allow_hosts, rc.advertised_host]
    if rc.host not in WILDCARD_HOSTS:
        names.append(rc.host)
    if rc.host in ("127.0.0.1", "::1", "localhost"):
        names.append("localhost")
    return HostPolicy(names)


def statistics_of(router: Router) -> dict[str, object]:
    return dataclasses.asdict(router.statistics())


async def serve_gateway(
    config: GatewayConfig,
    *,
    task_status: trio.TaskStatus[GatewayInfo] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the gateway until cancelled; reports a `GatewayInfo` once it accepts.

    The router is embedded (`open_router`) and the listener is the router's own
    (`serve_edge`), so the gateway has its deadlines, caps and TLS; the site
    (site.py) is the listener's request hook and the router serves the
    upgrades the hook accepts.
    """
    rc = config.router
    secure = rc.tls_cert is not None
    tls = listener_tls(rc)
    for missing in missing_web_files(config.web_root):
        log.warning("the gateway's web root lacks %s: those pages answer 404", missing)
    policy = OriginPolicy(config.allow_origins, secure=secure)
    async with open_router(rc) as router, trio.open_nursery() as nursery:
        site_config = SiteConfig(
            site_root(config.web_root), router.key_hash, policy, secure,
            fallback_host=host_port(rc.host, rc.port), hosts=host_names(config),
        )
        site = GatewaySite(site_config, partial(statistics_of, router))
        listener: EdgeListener = await nursery.start(partial(
            serve_edge, router.serve_transport, rc.host, rc.port,
            hook=site, limits=rc.edge_limits(), tls=tls,
        ))
        if rc.port == 0:  # config.json for a request without Host names the real port
            site.config = dataclasses.replace(
                site_config, fallback_host=host_port(rc.host, listener.port)
            )
        info = GatewayInfo(rc.host, listener.port, secure, router, listener)
        log.info("gateway on %s, SMP at %s", info.page_url, info.smp_url)
        task_status.started(info)
