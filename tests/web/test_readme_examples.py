"""README's examples, run as a newcomer runs them, against real routers on 127.0.0.1.

- "A first message": the Python and the Node program README shows are the files
  examples/hello.py and examples/hello-node/hello.mjs, and each gets its message back
  from `smp-router serve` (the Node one on Node 20 with its flag and on Node 22);
- "Two routers": the two `serve` commands README gives (on free ports instead of
  5224 and 5225) and examples/private_routing.py deliver a message through the proxy;
- "In an ASGI application": README's program is examples/asgi_app.py, and under
  README's Hypercorn command the router in it answers the Python example.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from web_helpers import NODE_FLAGS
from worker_count import one_process

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
EXAMPLES = REPO / "examples"
NODE22 = REPO / "tests" / "web" / "node22" / "node_modules" / "node" / "bin" / "node"
SMP_ROUTER = Path(sys.executable).with_name("smp-router")
START_TIMEOUT = 30.0
RUN_TIMEOUT = 60


def readme_blocks(language: str) -> list[str]:
    """README's fenced code blocks of one language, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```", README.read_text(), flags=re.M | re.S)


def after_docstring(path: Path, first_line: str) -> str:
    """The program of an example file from `first_line` on (its docstring or
    comment header says how to run it; README says that in its own words)."""
    text = path.read_text()
    return text[text.index(first_line):]


def run(command: list[str], cwd: Path = REPO, **kwargs) -> str:
    proc = subprocess.run(command, cwd=cwd, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT, **kwargs)
    assert proc.returncode == 0, f"{command}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@contextmanager
def serving(command: list[str], ready: str, cwd: Path = REPO,
            env: dict[str, str] | None = None) -> Iterator[str]:
    """Run a server until the block ends; yields the first line holding `ready`."""
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    timer = threading.Timer(START_TIMEOUT, process.kill)
    timer.start()
    try:
        assert process.stdout is not None
        line = ""
        for line in process.stdout:
            if ready in line:
                break
        timer.cancel()
        if ready not in line:
            pytest.fail(f"{command} did not start: {line!r}")
        # Whatever it writes next (its log) is read, so that it never waits on a full pipe.
        threading.Thread(target=process.stdout.read, daemon=True).start()
        yield line
    finally:
        timer.cancel()
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def address_in(line: str) -> str:
    """The smp:// address in a router's ready line (wherever the line puts it)."""
    return next(word for word in line.split() if word.startswith("smp://"))


def readme_serve(command: str) -> list[str]:
    """A README `smp-router serve` command, run by this venv's smp-router on a free port."""
    words = shlex.split(command.split("#", 1)[0])
    assert words[0].endswith("smp-router") and words[1] == "serve", command
    words[words.index("--port") + 1] = "0"
    return [str(SMP_ROUTER), *one_process(words[1:])]


@pytest.fixture(scope="module")
def router_address() -> Iterator[str]:
    """The router of README's first set-up command, on a free port."""
    setup = readme_blocks("sh")[0]
    command = setup.split("&&")[-1].strip()
    with serving(readme_serve(command), "smp-router listening") as line:
        yield address_in(line)


def test_readme_shows_the_example_files_as_they_are():
    python = readme_blocks("python")
    javascript = readme_blocks("js")
    assert after_docstring(EXAMPLES / "hello.py", "import sys") in python
    assert after_docstring(EXAMPLES / "hello-node" / "hello.mjs", "import {") in javascript
    assert after_docstring(EXAMPLES / "asgi_app.py", "from pathlib import Path") in python


def test_the_first_message_from_python(router_address: str):
    assert run([sys.executable, "examples/hello.py", router_address]).strip() == "hello"


def test_the_first_message_from_node(router_address: str, node: str, tmp_path: Path):
    """README's two npm commands, on a copy of examples/hello-node whose link to web/
    is absolute (so the checkout gets no node_modules of the example's)."""
    project = tmp_path / "hello-node"
    shutil.copytree(EXAMPLES / "hello-node", project)
    manifest = json.loads((project / "package.json").read_text())
    assert manifest["dependencies"]["smp-router-web"] == "file:../../web"
    manifest["dependencies"]["smp-router-web"] = f"file:{REPO / 'web'}"
    (project / "package.json").write_text(json.dumps(manifest))
    npm = shutil.which("npm")
    assert npm is not None, "npm is missing: run scripts/install-test-deps.sh"
    run([npm, "install", "--prefer-offline", "--no-audit", "--no-fund", "--prefix", str(project)])
    assert run([node, *NODE_FLAGS, str(project / "hello.mjs"), router_address]).strip() == "hello"
    if not NODE22.is_file():
        pytest.fail(f"{NODE22} is missing: run `npm ci --prefix tests/web/node22`")
    assert run([str(NODE22), str(project / "hello.mjs"), router_address]).strip() == "hello"


def test_two_routers_route_a_message_privately():
    block = next(b for b in readme_blocks("sh") if "# A, the proxy" in b)
    commands = [line for line in block.splitlines() if " serve " in line]
    assert len(commands) == 2, block
    with serving(readme_serve(commands[0]), "smp-router listening") as proxy_line, \
            serving(readme_serve(commands[1]), "smp-router listening") as destination_line:
        out = run([sys.executable, "examples/private_routing.py", address_in(proxy_line),
                   address_in(destination_line)])
    assert out.strip() == "hello through A"


def test_the_asgi_example_serves_the_router(tmp_path: Path):
    """README's Hypercorn command, on a free port, in a scratch directory (asgi-data)."""
    block = next(b for b in readme_blocks("sh") if "hypercorn" in b)
    words = shlex.split(block.splitlines()[0])
    assert words[0].endswith("hypercorn"), block
    words[words.index("--bind") + 1] = "127.0.0.1:0"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with serving([sys.executable, "-m", "hypercorn", *words[1:]], "Running on", cwd=tmp_path,
                 env=env) as line:
        base = line.split("Running on", 1)[1].split()[0]
        with urllib.request.urlopen(f"{base}/chat/demo/config.json", timeout=10) as answer:
            address = json.load(answer)["address"]
        assert address.endswith("/chat/smp"), address
        assert run([sys.executable, str(REPO / "examples" / "hello.py"), address]).strip() == (
            "hello")
    assert (tmp_path / "asgi-data").is_dir()
