"""web/ as the npm package people install: `npm pack` gives a tarball with its
types; a TypeScript program type-checks against them in strict mode (and a
wrong one does not); the program bundled by esbuild for browsers runs in
Chromium against the router; Node imports the package as it is.

Nothing comes from the network: the tarball is unpacked into a scratch
project's node_modules, next to the package's two dependencies taken from
web/node_modules (what `npm install <tarball>` would fetch).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from browser_helpers import Gateway
from playwright.sync_api import Browser, expect

WEB_ROOT = Path(__file__).resolve().parents[2] / "web"
TIMEOUT_MS = 15_000
DEPENDENCIES = ("tweetnacl", "@noble/ed25519")

CONSUMER = """\
import {
  CommandTimeout, SMPAgent, SMPError, connect, fromBase64url, fromUtf8, utf8,
  type ClientEvent, type CommandOptions, type Queue,
} from "smp-router-web";

async function roundTrip(url: string, keyHash: Uint8Array): Promise<string> {
  const client = await connect(url, keyHash, { commandTimeout: 10_000, pingInterval: 20_000 });
  const queue: Queue = await client.createQueue({ sndSecure: false });
  await client.send(queue.senderId, utf8("typed hello"));
  await client.subscribe(queue);
  const event: ClientEvent = await client.nextEvent();
  if (event.type !== "message") throw new Error(`expected a message, got ${event.type}`);
  const text: string = fromUtf8(event.body); // body exists on the "message" event only
  await client.ack(queue, event.msgId);
  let refused = "";
  try {
    await client.send(queue.senderId, new Uint8Array(20_000));
  } catch (e) {
    if (e instanceof SMPError) refused = e.type;
  }
  const options: CommandOptions = { signal: AbortSignal.abort(new Error("aborted here")) };
  const aborted = await client.ping(options).then(() => "not aborted", (e: Error) => e.message);
  client.close();
  const agent = new SMPAgent({ url, keyHash, pingTimeout: 5_000 });
  const statuses: string[] = [];
  agent.onEvent((ev) => {
    if (ev.type === "status") statuses.push(ev.status);
  });
  agent.start();
  await agent.withClient((c) => c.ping());
  await agent.stop();
  return [text, refused, aborted, statuses.join(","), new CommandTimeout("late").name].join(" | ");
}

export async function main(url: string, keyHash: string): Promise<string> {
  return roundTrip(url, fromBase64url(keyHash));
}
"""

BROWSER_ENTRY = """\
import { main } from "./consumer.js";
const params = new URLSearchParams(location.hash.slice(1));
main(params.get("url") ?? "", params.get("key") ?? "").then(
  (result) => { document.getElementById("result")!.textContent = result; },
  (error) => { document.getElementById("result")!.textContent = "failed: " + error; },
);
"""

WRONG = """\
import { connect, fromBase64url } from "smp-router-web";
const client = await connect("ws://127.0.0.1:1/smp", fromBase64url("x"));
const queue = await client.createQueue();
await client.send(queue.senderId, "a string is not bytes");
const event = await client.nextEvent();
console.log(event.body);
"""

PAGE = """<!doctype html><title>bundle</title><pre id="result"></pre>
<script type="module" src="bundle.js"></script>"""


def npm() -> str:
    path = shutil.which("npm")
    if path is None:
        pytest.fail("npm is missing: run scripts/install-test-deps.sh")
    return path


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> Path:
    """The tarball `npm pack` makes of web/."""
    out = tmp_path_factory.mktemp("pack")
    proc = subprocess.run(
        [npm(), "pack", "--json", "--pack-destination", str(out)],
        cwd=WEB_ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # `prepare` (the build) may print before the JSON document.
    name = json.loads(proc.stdout[proc.stdout.index("["):])[0]["filename"]
    return out / Path(name).name


@pytest.fixture(scope="module")
def consumer(packed: Path, tmp_path_factory) -> Path:
    """A TypeScript project with the package installed from the tarball."""
    project = tmp_path_factory.mktemp("consumer")
    modules = project / "node_modules"
    with tarfile.open(packed) as tar:
        tar.extractall(project / "unpacked", filter="data")
    (modules / "@noble").mkdir(parents=True)
    shutil.move(project / "unpacked" / "package", modules / "smp-router-web")
    for dependency in DEPENDENCIES:
        shutil.copytree(WEB_ROOT / "node_modules" / dependency, modules / dependency)
    (project / "package.json").write_text('{"name": "consumer", "private": true, "type": "module"}')
    (project / "tsconfig.json").write_text(json.dumps({"compilerOptions": {
        "strict": True, "noEmit": True, "module": "nodenext", "moduleResolution": "nodenext",
        "target": "es2022", "lib": ["es2022", "dom"], "skipLibCheck": False,
        "allowImportingTsExtensions": False,
    }, "include": ["consumer.ts", "entry.ts"]}))
    (project / "consumer.ts").write_text(CONSUMER)
    (project / "entry.ts").write_text(BROWSER_ENTRY)
    return project


def tsc(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    compiler = WEB_ROOT / "node_modules" / "typescript" / "bin" / "tsc"
    return subprocess.run(["node", str(compiler), "-p", str(project), *args],
                          capture_output=True, text=True, timeout=300, cwd=project)


def test_npm_pack_holds_the_modules_their_types_and_the_bundle_only(packed: Path):
    with tarfile.open(packed) as tar:
        names = set(tar.getnames())
    manifest = json.loads((WEB_ROOT / "package.json").read_text())
    for required in ("package/package.json", "package/smp/index.js", "package/smp/client.js",
                     "package/types/index.d.ts", "package/types/client.d.ts",
                     "package/types/types.d.ts", "package/dist/smp-client.js"):
        assert required in names, required
    assert not any(n.startswith(("package/demo/", "package/test/", "package/node_modules/",
                                 "package/tools/")) for n in names), sorted(names)
    assert manifest["exports"]["."] == {
        "types": "./types/index.d.ts", "browser": "./smp/index.js",
        "node": "./dist/smp-client.node.js", "default": "./smp/index.js"}
    assert "private" not in manifest
    # Every module has its declarations.
    modules = {n.removeprefix("package/smp/").removesuffix(".js") for n in names
               if n.startswith("package/smp/")}
    declared = {n.removeprefix("package/types/").removesuffix(".d.ts") for n in names
                if n.startswith("package/types/")}
    assert modules and modules <= declared, modules - declared
    # The client loads no script at run time: no <script> injection, no fetched vendor path.
    with tarfile.open(packed) as tar:
        client_source = b"".join(tar.extractfile(f"package/smp/{m}.js").read() for m in modules)
    assert b"createElement" not in client_source and b"/vendor/" not in client_source


def test_a_typescript_program_type_checks_in_strict_mode(consumer: Path):
    proc = tsc(consumer)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_wrongly_typed_program_is_refused(consumer: Path, tmp_path: Path):
    """The declarations are not `any`: bytes are bytes, and a union needs narrowing."""
    wrong = consumer / "wrong.ts"
    wrong.write_text(WRONG)
    config = json.loads((consumer / "tsconfig.json").read_text())
    config["include"] = ["wrong.ts"]
    (consumer / "tsconfig.wrong.json").write_text(json.dumps(config))
    try:
        proc = subprocess.run(
            ["node", str(WEB_ROOT / "node_modules" / "typescript" / "bin" / "tsc"),
             "-p", str(consumer / "tsconfig.wrong.json")],
            capture_output=True, text=True, timeout=300, cwd=consumer)
    finally:
        wrong.unlink()
    assert proc.returncode != 0
    assert "'string' is not assignable to parameter of type 'Uint8Array" in proc.stdout, proc.stdout
    assert "Property 'body' does not exist on type" in proc.stdout, proc.stdout


def test_node_imports_the_installed_package(consumer: Path):
    script = ("import * as smp from 'smp-router-web';"
              "import * as b from 'smp-router-web/bundle';"
              "console.log(typeof smp.connect, typeof smp.SMPAgent, typeof b.connect,"
              " smp.toBase64url(await smp.crypto.sign(new Uint8Array(32),"
              " new Uint8Array(1))).length)")
    proc = subprocess.run(["node", "--input-type=module", "-e", script], cwd=consumer,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["function", "function", "function", "86"]


def test_an_esbuild_bundle_of_the_program_runs_in_chromium_against_the_router(
    consumer: Path, browser: Browser, start_gateway, foreign_site, screenshots: Path
):
    url, directory = foreign_site
    esbuild = WEB_ROOT / "node_modules" / ".bin" / "esbuild"
    proc = subprocess.run(
        [str(esbuild), "entry.ts", "--bundle", "--format=esm", "--platform=browser",
         "--minify", f"--outfile={directory / 'bundle.js'}"],
        cwd=consumer, capture_output=True, text=True, timeout=120,
        env={**os.environ, "NODE_PATH": ""},
    )
    assert proc.returncode == 0, proc.stderr
    assert (directory / "bundle.js").stat().st_size > 10_000
    (directory / "index.html").write_text(PAGE)
    gateway: Gateway = start_gateway("--allow-origin", url.rstrip("/"))
    key = gateway.address.removeprefix("smp://").split("@")[0]
    context = browser.new_context()
    try:
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(f"{url}#url={gateway.smp_url}&key={key}")
        expected = ["typed hello", "LARGE_MSG", "aborted here", "connecting,connected,stopped",
                    "CommandTimeout"]
        expect(page.locator("#result")).to_have_text(" | ".join(expected), timeout=TIMEOUT_MS)
        page.screenshot(path=str(screenshots / "package-bundle.png"))
    finally:
        context.close()
