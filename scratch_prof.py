import subprocess, sys, tempfile, time, trio
from pathlib import Path
from bench.workers_router import CliRouter, fill
from bench.harness import WorkerGroup
from bench import workers_costs as wc
from bench.throughput import _window, _sleep_until
def main():
    N = int(sys.argv[1])
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)/"d"
        trio.run(fill, "memory", d, range(200), N)
        with CliRouter(N, "memory", d) as r, WorkerGroup(r.url, 2) as g:
            load = wc._loaded(r, g, 25, 8)
            window = _window(8.0)
            load.start(window)
            _sleep_until(window["t_start"])
            pids = [p.pid for p in r.processes()][1 if N > 1 else 0:]
            c0 = r.cpu_seconds()
            profs = [subprocess.Popen(["/work/main/.venv/bin/py-spy", "record", "-p", str(pid), "-d", "6", "-f", "raw", "-o", f"/tmp/wprof-{N}-{k}.txt", "-r", "50"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for k, pid in enumerate(pids)]
            for p in profs: p.wait()
            _sleep_until(window["t_end"])
            c1 = r.cpu_seconds()
            res = load.finish(8.0)
            print(N, res["msgs_per_s"], (c1-c0)/8.0/res["msgs_per_s"]*1e6, "us/msg")

if __name__ == '__main__':
    main()
