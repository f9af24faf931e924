"""deploy/: the systemd unit passes `systemd-analyze verify` and says what README says;
the container file is consistent with the package (no container engine runs here, so
its content is what is checked)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from router.server.cli.main import build_parser
from router.server.settings.config import RouterConfig

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "deploy" / "smp-router.service"
CONTAINERFILE = ROOT / "deploy" / "Containerfile"
INSTALLED = "/opt/smp-router/bin/smp-router"
HARDENING = ("NoNewPrivileges", "ProtectSystem", "ProtectHome", "PrivateTmp",
             "PrivateDevices", "RestrictAddressFamilies", "SystemCallFilter",
             "CapabilityBoundingSet", "ProtectKernelTunables", "RestrictNamespaces")


def unit_entries() -> dict[str, list[tuple[str, str]]]:
    """section -> (key, value) in order; a unit may repeat a key."""
    entries: dict[str, list[tuple[str, str]]] = {}
    section = ""
    for line in UNIT.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            entries[section] = []
        else:
            key, _, value = line.partition("=")
            entries[section].append((key, value))
    return entries


def service(key: str) -> list[str]:
    return [v for k, v in unit_entries()["Service"] if k == key]


def test_systemd_analyze_verify_accepts_the_unit_without_a_warning(tmp_path):
    # Part of the test set-up (the `systemd` package): missing means a failure, not a skip.
    analyze = shutil.which("systemd-analyze")
    assert analyze is not None, "systemd-analyze is needed (apt-get install systemd)"
    # verify checks that the programs exist: point them at this installation's.
    unit = tmp_path / "smp-router.service"
    program = Path(sys.executable).with_name("smp-router")
    unit.write_text(UNIT.read_text().replace(
        INSTALLED, str(program if program.exists() else sys.executable)))
    result = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert str(unit) not in result.stderr and unit.name not in result.stderr, result.stderr


def test_the_unit_runs_the_router_as_its_own_user_restarts_it_and_stops_it_with_sigterm():
    assert service("User") == ["smp-router"] and service("Group") == ["smp-router"]
    assert service("Restart") == ["on-failure"]
    assert service("RestartPreventExitStatus") == ["2"]  # a configuration error
    assert service("KillSignal") == ["SIGTERM"]
    assert service("ExecReload") == ["/bin/kill -HUP $MAINPID"]  # lifecycle.RELOAD_SIGNAL
    assert service("StateDirectory") == ["smp-router"]
    for option in HARDENING:
        assert service(option), option


def test_the_unit_commands_are_valid_smp_router_command_lines():
    for key in ("ExecStartPre", "ExecStart"):
        [command] = service(key)
        program, *args = shlex.split(command)
        assert program == INSTALLED
        build_parser().parse_args(args)  # exits 2 on a flag the router does not know
        assert "--data-dir" in args and args[args.index("--data-dir") + 1] == (
            "/var/lib/" + service("StateDirectory")[0])


def containerfile() -> list[tuple[str, str]]:
    text = CONTAINERFILE.read_text().replace("\\\n", " ")
    return [tuple(line.split(None, 1)) for line in text.splitlines()
            if line.strip() and not line.startswith("#")]  # type: ignore[misc]


def instruction(name: str) -> list[str]:
    return [arg for inst, arg in containerfile() if inst == name]


def test_the_container_runs_the_package_entry_point_as_a_non_root_user():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    [entrypoint] = instruction("ENTRYPOINT")
    assert json.loads(entrypoint) == ["smp-router"] and "smp-router" in project["scripts"]
    [user] = instruction("USER")
    assert user not in ("root", "0")
    assert instruction("STOPSIGNAL") == ["SIGTERM"]
    python = re.match(r"python:(\d+)\.(\d+)", instruction("FROM")[0])
    assert python is not None
    minimum = tuple(int(x) for x in project["requires-python"].lstrip(">=").split("."))
    assert (int(python[1]), int(python[2])) >= minimum


def test_the_container_command_serves_the_volume_on_every_interface_at_the_exposed_port():
    [cmd] = instruction("CMD")
    args = json.loads(cmd)
    parsed = build_parser().parse_args(args)
    assert parsed.command == "serve" and parsed.host == "0.0.0.0"
    assert [str(parsed.data_dir)] == instruction("VOLUME")
    assert instruction("EXPOSE") == [str(RouterConfig().port)]


def test_what_the_container_copies_exists_and_holds_the_packages():
    copied = [source for arg in instruction("COPY") for source in arg.split()[:-1]]
    for source in copied:
        assert (ROOT / source).exists(), source
    assert {"router", "store"} <= set(copied)
