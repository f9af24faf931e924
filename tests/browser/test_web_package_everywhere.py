"""The JavaScript package as its users get it, in every form, against a real router.

`npm pack` makes the tarball of web/; a scratch project installs it with `npm ci`
(its lockfile pins the package's two dependencies at web/package-lock.json's
versions and integrity, so they come from npm's cache, filled by
`npm ci --prefix web`, or else from the registry: nothing is resolved anew). The
same program (NEW, SEND, SUB, the pushed MSG, ACK) then runs against
`smp-router serve` on 127.0.0.1 as:

- the Node library (`import ... from "smp-router-web"`), on Node 20 with
  `--experimental-websocket` and on Node 22 with its built-in WebSocket
  (tests/web/node22, installed by `npm ci --prefix tests/web/node22`);
- `smp-router-web/bundle` under Node, and the page bundle itself
  (dist/smp-client.js, which threw "no PRNG" under Node);
- an esbuild bundle for Node (`--platform=node --format=esm`, which threw
  'Dynamic require of "crypto"') and one for browsers, the latter loaded in
  headless Chromium, as the page bundle is by a page that imports it directly,
  and as a page built by Vite (`vite build`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

REPO = Path(__file__).resolve().parents[2]
WEB = REPO / "web"
NODE22 = REPO / "tests" / "web" / "node22" / "node_modules" / "node" / "bin" / "node"
ESBUILD = WEB / "node_modules" / ".bin" / "esbuild"
VITE = WEB / "node_modules" / ".bin" / "vite"
SMP_ROUTER = Path(sys.executable).with_name("smp-router")
DEPENDENCIES = ("tweetnacl", "@noble/ed25519")
INSTALL_SCRIPTS = ("preinstall", "install", "postinstall", "prepare")
START_TIMEOUT = 30.0
RUN_TIMEOUT = 60
TIMEOUT_MS = 15_000

# The README's first message from Node, as a module of the scratch project.
HELLO = """\
import { connect, parseRouterAddress, wsUrl, utf8, fromUtf8 } from "SPECIFIER";

const router = parseRouterAddress(process.argv[2]);
const client = await connect(wsUrl(router), router.keyHash);
const queue = await client.createQueue({ sndSecure: false });
await client.send(queue.senderId, utf8("hello from " + process.argv[3]));
await client.subscribe(queue);
const event = await client.nextEvent();
console.log(fromUtf8(event.body), event.type);
await client.ack(queue, event.msgId);
client.close();
"""

# The same in a page: the router's address comes in the URL's fragment.
PAGE_PROGRAM = """\
import { connect, parseRouterAddress, wsUrl, utf8, fromUtf8 } from "SPECIFIER";

async function hello() {
  const router = parseRouterAddress(decodeURIComponent(location.hash.slice(1)));
  const client = await connect(wsUrl(router), router.keyHash);
  const queue = await client.createQueue({ sndSecure: false });
  await client.send(queue.senderId, utf8("hello from a page"));
  await client.subscribe(queue);
  const event = await client.nextEvent();
  await client.ack(queue, event.msgId);
  client.close();
  return fromUtf8(event.body) + " " + event.type;
}

hello().then(
  (text) => { document.getElementById("result").textContent = text; },
  (error) => { document.getElementById("result").textContent = "failed: " + error; },
);
"""

PAGE = """<!doctype html><title>SCRIPT</title><pre id="result"></pre>
<script type="module" src="SCRIPT"></script>"""


def npm() -> str:
    path = shutil.which("npm")
    if path is None:
        pytest.fail("npm is missing: run scripts/install-test-deps.sh")
    return path


def run(command: list[str], cwd: Path,
        timeout: float = RUN_TIMEOUT) -> subprocess.CompletedProcess[str]:
    # The scratch project resolves from its own node_modules only.
    env = {k: v for k, v in os.environ.items() if k != "NODE_PATH"}
    proc = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=env)
    assert proc.returncode == 0, (
        f"{command} exited with {proc.returncode}:\n{proc.stdout}\n{proc.stderr[-3000:]}")
    return proc


@pytest.fixture(scope="module")
def router_address() -> Iterator[str]:
    """`smp-router serve` on a free loopback port; its smp:// address."""
    process = subprocess.Popen(
        [str(SMP_ROUTER), "serve", "--workers", "1", "--host", "127.0.0.1", "--port", "0",
         "--store", "memory", "--log-level", "warning"],
        stdout=subprocess.PIPE, text=True)
    timer = threading.Timer(START_TIMEOUT, process.kill)
    timer.start()
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
    finally:
        timer.cancel()
    addresses = [word for word in line.split() if word.startswith("smp://")]
    try:
        if not addresses:
            pytest.fail(f"smp-router serve did not start: {line!r}")
        yield addresses[0]
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def tarball(tmp_path_factory) -> Path:
    """The tarball `npm pack` makes of web/ (its `prepack` builds dist/ and types/)."""
    out = tmp_path_factory.mktemp("pack")
    proc = run([npm(), "pack", "--json", "--pack-destination", str(out)], WEB, timeout=300)
    # The build prints before the JSON document.
    name = json.loads(proc.stdout[proc.stdout.index("["):])[0]["filename"]
    return out / Path(name).name


def lockfile(tarball: Path, manifest: dict) -> dict:
    """A lockfile installing the tarball, with its dependencies as web/ pins them."""
    pinned = json.loads((WEB / "package-lock.json").read_text())["packages"]
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(tarball.read_bytes()).digest()).decode()
    packages = {
        "": {"name": "consumer", "dependencies": {"smp-router-web": f"file:{tarball.name}"}},
        "node_modules/smp-router-web": {
            "version": manifest["version"], "resolved": f"file:{tarball.name}",
            "integrity": integrity, "license": manifest["license"],
            "dependencies": manifest["dependencies"],
        },
    }
    for dependency in DEPENDENCIES:
        entry = dict(pinned[f"node_modules/{dependency}"])
        entry.pop("dev", None)
        packages[f"node_modules/{dependency}"] = entry
    return {"name": "consumer", "lockfileVersion": 3, "requires": True, "packages": packages}


@pytest.fixture(scope="module")
def project(tarball: Path, tmp_path_factory) -> Path:
    """A scratch project with the tarball installed by `npm ci`."""
    project = tmp_path_factory.mktemp("consumer")
    shutil.copy(tarball, project / tarball.name)
    with tarfile.open(tarball) as tar:
        member = tar.extractfile("package/package.json")
        assert member is not None
        manifest = json.loads(member.read())
    (project / "package.json").write_text(json.dumps({
        "name": "consumer", "private": True, "type": "module",
        "dependencies": {"smp-router-web": f"file:{tarball.name}"},
    }))
    (project / "package-lock.json").write_text(json.dumps(lockfile(tarball, manifest)))
    proc = run([npm(), "ci", "--prefer-offline", "--no-audit", "--no-fund"], project, timeout=300)
    # npm names a package's install-time scripts in a warning ("install-scripts").
    assert "install-script" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    for form, specifier in (("library", "smp-router-web"), ("bundle", "smp-router-web/bundle"),
                            ("page-bundle", "./node_modules/smp-router-web/dist/smp-client.js")):
        (project / f"hello-{form}.mjs").write_text(HELLO.replace("SPECIFIER", specifier))
    (project / "page.mjs").write_text(PAGE_PROGRAM.replace("SPECIFIER", "smp-router-web"))
    return project


def node20() -> str:
    path = shutil.which("node")
    if path is None:
        pytest.fail("node is missing: run scripts/install-test-deps.sh")
    return path


def node22() -> str:
    if not NODE22.is_file():
        pytest.fail(f"{NODE22} is missing: run `npm ci --prefix tests/web/node22` "
                    "(scripts/install-test-deps.sh does)")
    return str(NODE22)


def hello(node: list[str], project: Path, script: str, address: str, who: str) -> str:
    return run([*node, script, address, who], project).stdout.strip()


def test_the_tarball_has_no_install_time_script_and_gives_node_its_own_entry(tarball: Path):
    with tarfile.open(tarball) as tar:
        names = set(tar.getnames())
        member = tar.extractfile("package/package.json")
        assert member is not None
        manifest = json.loads(member.read())
        node_bundle = tar.extractfile("package/dist/smp-client.node.js")
        assert node_bundle is not None
        node_code = node_bundle.read().decode()
    assert not set(manifest["scripts"]) & set(INSTALL_SCRIPTS), manifest["scripts"]
    assert "package/build.mjs" not in names
    for export in (".", "./bundle"):
        conditions = manifest["exports"][export]
        assert conditions["node"] == "./dist/smp-client.node.js", conditions
        assert f"package/{conditions['browser'].removeprefix('./')}" in names, conditions
    assert 'require("crypto")' not in node_code and "require('crypto')" not in node_code
    readme = " ".join(tar_text(tarball, "package/README.md").split())
    assert "versions 9 to 19" in readme and "9 and 10" not in readme


def tar_text(tarball: Path, name: str) -> str:
    with tarfile.open(tarball) as tar:
        member = tar.extractfile(name)
        assert member is not None
        return member.read().decode()


def test_node_20_runs_the_library_the_bundle_and_the_page_bundle(
    project: Path, router_address: str
):
    node = [node20(), "--experimental-websocket", "--no-warnings"]
    for form in ("library", "bundle", "page-bundle"):
        assert hello(node, project, f"hello-{form}.mjs", router_address, form) == (
            f"hello from {form} message")


def test_node_22_runs_the_library_with_its_own_websocket(project: Path, router_address: str):
    version = run([node22(), "--version"], project).stdout.strip()
    assert version.startswith("v22."), version
    for form in ("library", "bundle"):
        assert hello([node22()], project, f"hello-{form}.mjs", router_address, form) == (
            f"hello from {form} message")


def test_an_esbuild_bundle_for_node_runs(project: Path, router_address: str):
    run([str(ESBUILD), "hello-library.mjs", "--bundle", "--platform=node", "--format=esm",
         "--outfile=node-bundle.mjs", "--log-level=warning"], project)
    code = (project / "node-bundle.mjs").read_text()
    assert "node_modules/smp-router-web/dist/smp-client.node.js" in code  # the "node" condition
    node = [node20(), "--experimental-websocket", "--no-warnings"]
    assert hello(node, project, "node-bundle.mjs", router_address, "esbuild") == (
        "hello from esbuild message")
    assert hello([node22()], project, "node-bundle.mjs", router_address, "esbuild") == (
        "hello from esbuild message")


@pytest.fixture
def site(project: Path) -> Iterator[str]:
    """The scratch project served over http on a loopback port."""
    class Quiet(SimpleHTTPRequestHandler):
        extensions_map = {**SimpleHTTPRequestHandler.extensions_map, ".mjs": "text/javascript"}

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(project)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def run_page(browser: Browser, url: str, router_address: str) -> None:
    context = browser.new_context()
    try:
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(f"{url}#{router_address}")
        try:
            expect(page.locator("#result")).to_have_text("hello from a page message",
                                                         timeout=TIMEOUT_MS)
        except AssertionError as failure:
            raise AssertionError(f"{failure}\npage errors: {errors}") from None
    finally:
        context.close()


def test_an_esbuild_bundle_for_browsers_runs_in_chromium(
    project: Path, site: str, browser: Browser, router_address: str
):
    run([str(ESBUILD), "page.mjs", "--bundle", "--platform=browser", "--format=esm", "--minify",
         "--outfile=browser-bundle.js", "--log-level=warning"], project)
    (project / "browser.html").write_text(PAGE.replace("SCRIPT", "browser-bundle.js"))
    run_page(browser, f"{site}browser.html", router_address)


def test_the_page_bundle_imported_by_a_page_runs_in_chromium(
    project: Path, site: str, browser: Browser, router_address: str
):
    """A page without a bundler imports dist/smp-client.js by its path."""
    program = PAGE_PROGRAM.replace("SPECIFIER", "./node_modules/smp-router-web/dist/smp-client.js")
    (project / "page-bundle.mjs").write_text(program)
    (project / "page-bundle.html").write_text(PAGE.replace("SCRIPT", "page-bundle.mjs"))
    run_page(browser, f"{site}page-bundle.html", router_address)



def test_a_vite_build_runs_in_chromium(
    project: Path, site: str, browser: Browser, router_address: str
):
    vite_root = project / "vite-app"
    vite_root.mkdir(exist_ok=True)
    (vite_root / "main.js").write_text(PAGE_PROGRAM.replace("SPECIFIER", "smp-router-web"))
    (vite_root / "index.html").write_text(PAGE.replace("SCRIPT", "./main.js"))
    run([str(VITE), "build", str(vite_root), "--base", "./", "--outDir", "dist",
         "--emptyOutDir", "--logLevel", "warn"], project, timeout=120)
    assert list((vite_root / "dist" / "assets").glob("*.js")), "vite wrote no script"
    run_page(browser, f"{site}vite-app/dist/index.html", router_address)
