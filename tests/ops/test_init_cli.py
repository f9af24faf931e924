"""`smp-router init` through the real command line: the full smp:// address the router
will have, and the next command to run."""

from __future__ import annotations

import socket

import trio
from ops_helpers import run_cli, serving

from router.server.settings.config_file import CONFIG_FILE_NAME


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def test_init_prints_the_address_serve_will_have_and_the_next_command(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    port = free_port()
    (data / CONFIG_FILE_NAME).write_text(f"[TRANSPORT]\nport = {port}\n")
    with trio.fail_after(60):
        code, out, err = await run_cli("init", "--data-dir", str(data))
        assert code == 0 and err == "", err
        lines = out.splitlines()
        assert lines[1] == f"configuration kept: {data / CONFIG_FILE_NAME}"
        assert lines[2].startswith("address: smp://") and lines[3] == (
            f"next: smp-router serve --data-dir {data}")
        printed = lines[2].split()[1]
        async with serving("--data-dir", str(data), "--log-level", "error") as (_, address):
            assert printed == address
        assert printed.startswith(f"smp://{lines[0].rsplit(' ', 1)[1]}@127.0.0.1:{port}")


async def test_init_of_a_fresh_directory_names_the_default_port_and_public_host(tmp_path):
    with trio.fail_after(60):
        code, out, _ = await run_cli("init", "--data-dir", str(tmp_path / "fresh"))
    fingerprint = out.splitlines()[0].rsplit(" ", 1)[1]
    assert code == 0
    assert f"address: smp://{fingerprint}@127.0.0.1:5224 (public_host and port" in out
