"""`smp-router init`: a router identity and a commented configuration file;
`smp-router renew-online-cert`: a new online certificate for the same identity.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..edge.identity import load_or_create_identity, renew_online_certificate
from ..settings.config import (
    ConfigError,
    RouterConfig,
)
from ..settings.config_file import (
    CONFIG_FILE_NAME,
    DEFAULTS,
    read_config_file,
    template,
)


def init_data_dir(data_dir: Path) -> None:
    """Create the identity and, unless there is one already, a commented configuration."""
    if data_dir.exists() and not data_dir.is_dir():
        raise ConfigError(f"data directory {data_dir} is not a directory")
    identity = load_or_create_identity(data_dir)
    print(f"router identity in {data_dir}: {identity.fingerprint}", flush=True)
    config_file = data_dir / CONFIG_FILE_NAME
    if config_file.exists():
        print(f"configuration kept: {config_file}", flush=True)
    else:
        _write_new_file(config_file, template())
        print(f"configuration written: {config_file}", flush=True)
    settings = {**DEFAULTS, **read_config_file(config_file)}
    where = RouterConfig(host=settings["host"], port=settings["port"],  # type: ignore[arg-type]
                         public_host=settings["public_host"])  # type: ignore[arg-type]
    if where.port == 0:
        print(f"address: smp://{identity.fingerprint}@{where.advertised_host}:PORT, the port "
              "picked when the router starts (port is 0)", flush=True)
    else:
        print(f"address: {identity.address(where.advertised_host, where.port)} (public_host "
              "and port in the configuration change it)", flush=True)
    print(f"next: smp-router serve --data-dir {data_dir}", flush=True)


def renew_online_cert(data_dir: Path) -> None:
    """A new online key and certificate (docs/protocol.md#server-hello-identity). No data
    directory lock: a running router keeps the one it read at its start."""
    identity = renew_online_certificate(data_dir)
    print(f"online certificate renewed in {data_dir}; the address is still "
          f"{identity.fingerprint} (used from the router's next start)", flush=True)


def _write_new_file(path: Path, text: str) -> None:
    """Owner-only (it may hold passwords), and never over an existing file."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
