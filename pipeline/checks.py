"""Checks made before Spark starts, so that a mistake costs one line, not a JVM start-up.

Each check raises `UsageError` (a bad argument or input: exit code 2) or
`EnvironmentProblem` (the machine or the cluster: exit code 1) with a message
that names what is wrong and where.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

MIN_JAVA = 17
CONNECT_TIMEOUT = 5.0

# The master URLs Spark accepts (docs: "Master URLs" of spark-submit).
_LOCAL = re.compile(r"local(\[(\*|[1-9]\d*)(,[1-9]\d*)?\])?")
_LOCAL_CLUSTER = re.compile(r"local-cluster\[[1-9]\d*,[1-9]\d*,[1-9]\d*\]")
_HOST_PORT = re.compile(r"(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):(\d{1,5})")
MASTER_FORMS = "local, local[N], local[*], spark://HOST:PORT[,HOST:PORT...], yarn, k8s://URL"


class UsageError(ValueError):
    """A bad argument or input (exit code 2)."""


class EnvironmentProblem(RuntimeError):
    """Java missing, a master that cannot be reached, ... (exit code 1)."""


def master_url(text: str) -> str:
    """`text` if it is a master URL Spark accepts, else `UsageError` naming the forms."""
    if _LOCAL.fullmatch(text) or _LOCAL_CLUSTER.fullmatch(text) or text == "yarn":
        return text
    if text.startswith("spark://") and spark_master_addresses(text):
        return text
    if text.startswith("k8s://") and _k8s_address(text) is not None:
        return text
    raise UsageError(f"{text!r} is not a Spark master URL ({MASTER_FORMS})")


def spark_master_addresses(url: str) -> list[tuple[str, int]]:
    """The (host, port) pairs of a standalone master URL; [] when one is malformed."""
    addresses = []
    for part in url.removeprefix("spark://").split(","):
        match = _HOST_PORT.fullmatch(part)
        if match is None or not 0 < int(match.group(2)) < 65536:
            return []
        addresses.append((match.group(1).strip("[]"), int(match.group(2))))
    return addresses


def _k8s_address(url: str) -> tuple[str, int] | None:
    rest = url.removeprefix("k8s://")
    if "://" not in rest:
        rest = "https://" + rest  # Spark's default scheme for the API server
    parts = urlsplit(rest)
    try:
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return parts.hostname, port or (443 if parts.scheme == "https" else 80)


def check_master_reachable(master: str | None, timeout: float = CONNECT_TIMEOUT) -> None:
    """A TCP connection to a standalone master or Kubernetes API server, before Spark
    spends a minute retrying one that is not there. Local and YARN masters pass."""
    if master is None:
        return
    if master.startswith("spark://"):
        addresses = spark_master_addresses(master)
    elif master.startswith("k8s://"):
        addresses = [a for a in [_k8s_address(master)] if a]
    else:
        return
    failures = []
    for host, port in addresses:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            return  # one live master of a high-availability list is enough
        except OSError as exc:
            failures.append(f"{host}:{port} ({exc.strerror or exc})")
    raise EnvironmentProblem(f"cannot reach the Spark master {master}: " + ", ".join(failures))


def check_java() -> None:
    """The `java` Spark will start (JAVA_HOME's, else the PATH's) exists and is 17 or later."""
    home = os.environ.get("JAVA_HOME")
    if home:
        java = Path(home) / "bin" / "java"
        if not os.access(java, os.X_OK):
            raise EnvironmentProblem(f"JAVA_HOME is {home}, but {java} is not a program")
        where = f"{java} (JAVA_HOME)"
    else:
        found = shutil.which("java")
        if found is None:
            raise EnvironmentProblem(
                f"Java not found: Spark needs Java {MIN_JAVA} or later "
                "(install it, or set JAVA_HOME)"
            )
        java, where = Path(found), found
    major = java_major_version(str(java))
    if major is not None and major < MIN_JAVA:
        raise EnvironmentProblem(f"{where} is Java {major}; Spark needs Java {MIN_JAVA} or later")


def java_major_version(java: str) -> int | None:
    """17 for `version "17.0.15"`, 8 for `version "1.8.0_392"`; None if it cannot tell."""
    try:
        result = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvironmentProblem(f"cannot run {java}: {exc}") from None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', result.stderr + result.stdout)
    if match is None:
        return None
    first = int(match.group(1))
    return int(match.group(2) or 0) if first == 1 else first


def is_local_path(path: str) -> bool:
    """A path on this machine (no URI scheme, or file:); others are Spark's to resolve."""
    scheme = urlsplit(path).scheme
    return scheme in ("", "file") or len(scheme) == 1  # a Windows drive letter is no scheme


def check_inputs_exist(paths: Iterable[str], what: str) -> None:
    """Every local input exists (remote ones are checked by Spark when it reads them)."""
    for path in paths:
        if is_local_path(path) and not Path(urlsplit(path).path or path).exists():
            raise UsageError(f"no {what} at {path}")


def check_output_dir(path: str) -> None:
    """An output directory (`stats --out`, `synth --stats --out`) is made if it is
    missing, as `mkdir` would: its parent must exist (a mistyped path is refused rather
    than created), and it must not be a file. Local outputs only."""
    check_writable_parent(path)
    if is_local_path(path) and Path(urlsplit(path).path or path).is_file():
        raise UsageError(f"cannot write into {path}: it is a file, not a directory")


def check_writable_parent(path: str) -> None:
    """The directory an output goes into exists, for local outputs: the one rule of
    `--out` (docs/pipeline.md#errors-and-exit-codes)."""
    if not is_local_path(path):
        return
    parent = Path(urlsplit(path).path or path).absolute().parent
    if not parent.is_dir():
        raise UsageError(f"cannot write {path}: {parent} is not a directory")
