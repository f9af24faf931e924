"""The JavaScript client in Chromium: what a page costs to load, to connect, and
to subscribe many queues.

    python -m bench.web_client [--queues 1000] [--repeats 3] [--tree DIR] [--out DIR]

Starts `smp-router gateway --store memory` on a loopback port from `--tree` (a
source tree, by default this checkout, so an older tree can be measured the
same way) and drives Debian's Chromium (/usr/bin/chromium) with Playwright:

- bytes shipped: every response of a first load of /demo/ (a fresh browser
  context, empty cache), body as sent on the wire (compressed if it was) plus
  headers, and how many requests that took;
- time to first connected: navigation start to the demo's status pill showing
  "connected" (the WebSocket open, the handshake and the identity check);
- time to subscribe N queues: a fresh page (empty key caches) imports the
  client from /smp/index.js, connects and sends SUB for N queues made
  beforehand by the Python client, until every answer is in;
- time to create N queues (NEW) in the page, the same way.

`--no-webcrypto` takes `crypto.subtle` away from the pages (as browsers do on
plain-http pages of hosts other than localhost), to time the client's
JavaScript fallback.

Figures are medians over `--repeats` runs; the JSON keeps every run. The
machine is shared, so compare before/after inside one sitting.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import trio

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
REPO = Path(__file__).resolve().parent.parent

# Records when the demo's status pill first says "connected", on the page's clock.
CONNECTED_PROBE = """
new MutationObserver((_, observer) => {
  const pill = document.getElementById("status");
  if (pill && pill.textContent === "connected" && !window.__connectedAt) {
    window.__connectedAt = performance.now();
    observer.disconnect();
  }
}).observe(document, {subtree: true, childList: true, characterData: true});
"""

SUBSCRIBE = """async ([queues, keyHash, smpUrl]) => {
  const smp = await import("/smp/index.js");
  const hex = (h) => smp.fromHex(h);
  const list = queues.map((q) => ({
    recipientId: hex(q.recipientId), senderId: hex(q.senderId), rcvAuthSeed: hex(q.rcvAuthSeed),
    rcvAuthKey: hex(q.rcvAuthKey), rcvDhPriv: hex(q.rcvDhPriv), srvDhKey: hex(q.srvDhKey),
    boxKey: hex(q.boxKey), sndSecure: q.sndSecure,
  }));
  const client = await smp.connect(smpUrl, smp.fromBase64url(keyHash));
  const started = performance.now();
  const errors = await client.subscribeMany(list);
  const elapsed = performance.now() - started;
  client.close();
  return {ms: elapsed, errors: errors.filter(Boolean).length};
}"""

CREATE = """async ([count, keyHash, smpUrl]) => {
  const smp = await import("/smp/index.js");
  const client = await smp.connect(smpUrl, smp.fromBase64url(keyHash));
  const started = performance.now();
  await Promise.all(Array.from({length: count}, () => client.createQueue({sndSecure: true})));
  const elapsed = performance.now() - started;
  client.close();
  return {ms: elapsed};
}"""


def start_gateway(tree: Path, scratch: Path) -> tuple[subprocess.Popen, dict[str, str]]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    config = scratch / "smp-router.ini"  # no NEW rate limit: the page makes N queues at once
    config.write_text("[LIMITS]\nnew_queues_per_second: off\n")
    cmd = [sys.executable, "-m", "router.server", "gateway", "--host", "127.0.0.1",
           "--port", "0", "--store", "memory", "--log-level", "warning", "--config", str(config)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=tree, env=env)
    timer = threading.Timer(30, proc.kill)
    timer.start()
    try:
        assert proc.stdout is not None
        words = proc.stdout.readline().split()
    finally:
        timer.cancel()
    if "serving" not in words:
        proc.kill()
        raise SystemExit(f"the gateway in {tree} did not start")
    address = words[words.index("address") + 1]
    return proc, {
        "page": words[words.index("serving") + 1],
        "smp": words[words.index("at") + 1],
        "keyHash": address.removeprefix("smp://").split("@")[0],
    }


async def _python_queues(smp_url: str, key_hash: str, count: int) -> list[dict[str, object]]:
    import base64

    from router.client import open_client

    async with open_client(smp_url, base64.urlsafe_b64decode(key_hash)) as client:
        queues = []
        for start in range(0, count, 100):
            async with trio.open_nursery() as nursery:
                batch: list = []

                async def one(batch=batch) -> None:
                    batch.append(await client.create_queue())

                for _ in range(min(100, count - start)):
                    nursery.start_soon(one)
            queues += batch
    return [{
        "recipientId": q.recipient_id.hex(), "senderId": q.sender_id.hex(),
        "rcvAuthSeed": q.rcv_auth_seed.hex(), "rcvAuthKey": q.rcv_auth_key.hex(),
        "rcvDhPriv": q.rcv_dh_priv.hex(), "srvDhKey": q.srv_dh_key.hex(),
        "boxKey": q.box_key.hex(), "sndSecure": q.snd_secure,
    } for q in queues]


def first_load(browser, page_url: str) -> dict[str, float]:
    context = browser.new_context()
    page = context.new_page()
    page.add_init_script(CONNECTED_PROBE)
    responses: list = []
    page.on("response", lambda response: responses.append(response))
    page.goto(page_url + "demo/")
    page.wait_for_function("window.__connectedAt !== undefined", timeout=120_000)
    connected_ms = page.evaluate("window.__connectedAt")
    page.wait_for_load_state("networkidle")
    body = headers = 0
    for response in responses:
        if response.url.endswith("config.json"):
            continue  # generated per request, not part of the client
        sizes = response.request.sizes()
        body += sizes["responseBodySize"]
        headers += sizes["responseHeadersSize"]
    requests = sum(1 for r in responses if not r.url.endswith("config.json"))
    context.close()
    return {"connected_ms": connected_ms, "body_bytes": body, "header_bytes": headers,
            "requests": requests}


NO_WEBCRYPTO = "Object.defineProperty(globalThis.crypto, 'subtle', {value: undefined});"


def run(tree: Path, queues: int, repeats: int, create: bool,
        webcrypto: bool = True) -> dict[str, object]:
    from playwright.sync_api import sync_playwright

    scratch = Path(tempfile.mkdtemp(prefix="smp-bench-web-"))
    proc, where = start_gateway(tree, scratch)
    runs: list[dict[str, object]] = []
    try:
        made = trio.run(_python_queues, where["smp"], where["keyHash"], queues)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            for _ in range(repeats):
                result: dict[str, object] = first_load(browser, where["page"])
                context = browser.new_context()
                if not webcrypto:
                    context.add_init_script(NO_WEBCRYPTO)
                page = context.new_page()
                page.goto(where["page"] + "demo/config.json")
                sub = page.evaluate(SUBSCRIBE, [made, where["keyHash"], where["smp"]])
                if sub["errors"]:
                    raise SystemExit(f"{sub['errors']} SUBs failed")
                result["subscribe_ms"] = sub["ms"]
                context.close()
                if create:
                    context = browser.new_context()
                    if not webcrypto:
                        context.add_init_script(NO_WEBCRYPTO)
                    page = context.new_page()
                    page.goto(where["page"] + "demo/config.json")
                    made_in_page = page.evaluate(CREATE, [queues, where["keyHash"], where["smp"]])
                    result["create_ms"] = made_in_page["ms"]
                    context.close()
                runs.append(result)
                print(json.dumps(result), flush=True)
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(scratch, ignore_errors=True)  # the gateway's data directory
    medians = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    return {"tree": str(tree), "queues": queues, "webcrypto": webcrypto, "runs": runs,
            "medians": medians, "load_average": os.getloadavg(),
            "when": time.strftime("%Y-%m-%d %H:%M:%S")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.web_client", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=Path, default=REPO, help="source tree to run")
    parser.add_argument("--queues", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-create", action="store_true", help="skip timing NEW in the page")
    parser.add_argument("--no-webcrypto", action="store_true",
                        help="pages without crypto.subtle: the JavaScript fallback")
    parser.add_argument("--out", type=Path, help="write the JSON here")
    args = parser.parse_args(argv)
    summary = run(args.tree.resolve(), args.queues, args.repeats, not args.no_create,
                  webcrypto=not args.no_webcrypto)
    print(json.dumps(summary["medians"], indent=1))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
