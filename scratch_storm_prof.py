import subprocess, sys, tempfile, json, trio, os
from pathlib import Path
from bench import workers_storm as ws, workers_router as wr
from bench.fairness import _lines, _stop
N = int(sys.argv[1]); Q = 40000; C = 400
async def main():
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)/"d"
        await wr.fill("memory", d, range(Q), N)
        with wr.CliRouter(N, "memory", d, max_connections=C+64) as r:
            load = await trio.lowlevel.open_process([sys.executable, "-m", "bench.storm", "load", r.address, "0", str(Q), str(C), "0"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            lines = _lines(load.stdout)
            assert await lines.__anext__() == "ready"
            pids = [p.pid for p in r.processes()][1 if N > 1 else 0:]
            profs = [subprocess.Popen(["/work/main/.venv/bin/py-spy", "record", "-p", str(pid), "-d", "30", "-f", "raw", "-o", f"/tmp/sprof-{N}-{k}.txt", "-r", "100"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for k, pid in enumerate(pids)]
            await trio.sleep(1)
            c0 = r.cpu_seconds()
            await load.stdin.send_all(b"go\n")
            res = json.loads(await lines.__anext__())
            c1 = r.cpu_seconds()
            for p in profs: p.send_signal(2)
            for p in profs: p.wait()
            print(N, res["seconds"], (c1-c0)/Q*1e6, "us/SUB", res["errors"])
            await _stop(load)
trio.run(main)
